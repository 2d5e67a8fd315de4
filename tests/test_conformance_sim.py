"""The backend conformance suite on the simulator (all transports on one fabric)."""

from __future__ import annotations

from typing import Any

from btlcore import Config, Transport
from btlcore.testing.conformance import BackendHarness, ConformanceTests
from btlcore_sim import Fabric, LinkModel


class SimHarness(BackendHarness):
    backend = "sim"
    supports_restart = hasattr(Fabric, "reopen")
    max_transports = 17
    link = LinkModel(delay=50e-6)

    def __init__(self) -> None:
        super().__init__()
        self.fabric = Fabric(seed=11, default=self.link)

    def open(self, config: Config, **options: Any) -> Transport:
        return super().open(config, fabric=self.fabric, **options)

    def reopen(self, address: bytes, config: Config) -> Transport:
        return super().open(config, fabric=self.fabric, address=address)


class LossySimHarness(SimHarness):
    """The same suite again over a fabric that also loses, reorders and duplicates."""

    link = LinkModel(delay=200e-6, jitter=50e-6, loss=0.02, duplicate=0.01, reorder=0.01, corrupt=0.005)


class TestSimConformance(ConformanceTests):
    harness_class = SimHarness


class TestLossySimConformance(ConformanceTests):
    harness_class = LossySimHarness
