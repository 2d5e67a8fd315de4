"""Fixtures for the verbs tests.  Tests that need an RDMA device skip with the backend's own
probe reason (no pyverbs for this Python, no RDMA device...), as rdma-core's tests skip."""

from __future__ import annotations

import pytest

from btlcore_verbs import plugin


@pytest.fixture(scope="session")
def verbs_probe():
    return plugin.probe({})


@pytest.fixture
def need_verbs(verbs_probe):
    if not verbs_probe.usable:
        pytest.skip(f"verbs unavailable: {verbs_probe.reason}")
    return verbs_probe


@pytest.fixture
def open_verbs(need_verbs):
    """open_verbs(**options) -> an open VerbsDevice, closed at teardown."""
    from btlcore_verbs import VerbsDevice
    from btlcore_verbs._options import parse

    devices = []

    def make(**options):
        dev = VerbsDevice(parse(options, environ={}))
        devices.append(dev)
        return dev

    yield make
    for dev in devices:
        dev.close()
