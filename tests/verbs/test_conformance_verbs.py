"""The backend conformance suite (btlcore.testing.conformance) on verbs: Soft-RoCE in the VM, or any
RDMA port.  Skips with the probe's reason where verbs cannot run."""

from __future__ import annotations

import pytest

from btlcore.testing.conformance import BackendHarness, ConformanceTests
from btlcore_verbs import plugin

_probe = plugin.probe({})
pytestmark = pytest.mark.skipif(not _probe.usable, reason=f"verbs unavailable: {_probe.reason}")


class VerbsHarness(BackendHarness):
    backend = "verbs"
    options = {}
    # A restarted process gets new QP numbers from the device, hence a new address: the same
    # address cannot come back as a new incarnation on verbs.
    supports_restart = False
    max_transports = 9
    timeout = 60.0


class TestVerbsConformance(ConformanceTests):
    harness_class = VerbsHarness
