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
