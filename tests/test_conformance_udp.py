"""The backend conformance suite on real UDP sockets over loopback (transports in one process,
driven together through their file descriptors).  Two-process and two-host runs live in
tests/udp/."""

from __future__ import annotations

from btlcore import Config, Transport
from btlcore.testing.conformance import BackendHarness, ConformanceTests
from btlcore_udp import _address


class UdpHarness(BackendHarness):
    backend = "udp"
    options = {"host": "127.0.0.1", "port": 0}
    timeout = 60.0

    def reopen(self, address: bytes, config: Config) -> Transport:
        _family, ip, pport, dport, _scope = _address.decode(address)
        return self.open(config, host=ip, port=pport, data_port=dport)


class TestUdpConformance(ConformanceTests):
    harness_class = UdpHarness


class UdpBusyHarness(UdpHarness):
    """The same sockets busy-polled: the wait spins reading them (they are out of epoll's set),
    and a pass without a wait reads both."""

    options = {**UdpHarness.options, "busy_poll": True}


class TestUdpBusyConformance(ConformanceTests):
    harness_class = UdpBusyHarness
