"""A transport bound to ``[::]`` serves IPv4 peers too (dual stack): an IPv4 address given to
it, or written in an IPv4 peer's HELLO, is reached as ``::ffff:a.b.c.d`` (issue #11, item 9)."""

from __future__ import annotations

import socket

import pytest

import btlcore
from btlcore_udp import _address

pytestmark = pytest.mark.timeout(60)


def _exchange(a: btlcore.Transport, b: btlcore.Transport, address: bytes) -> None:
    got: list[bytes] = []
    back: list[bytes] = []
    b.on(3, lambda peer, tag, data: (got.append(bytes(data)), b.send(peer, 4, b"pong")))
    a.on(4, lambda peer, tag, data: back.append(bytes(data)))
    peer = a.connect(address)
    a.send(peer, 3, b"ping" * 5000)
    btlcore.run_until([a, b], lambda: bool(got and back), timeout=20)
    assert got == [b"ping" * 5000] and back == [b"pong"]


def test_ipv4_client_to_dual_stack_server():
    server = btlcore.open("udp", bind="[::]:0")
    client = btlcore.open("udp", bind="127.0.0.1:0")
    try:
        port = server.device.device.local_sockaddrs[0][1]
        _exchange(client, server, _address.encode(socket.AF_INET, "127.0.0.1", port, port + 1))
    finally:
        client.close(flush=False)
        server.close(flush=False)


def test_dual_stack_device_resolves_ipv4_addresses_as_mapped():
    # (a full exchange started from the [::] side needs the IPv4 peer to answer the HELLO's
    # observed source rather than the IPv6 address written in it: the protocol's part)
    server = btlcore.open("udp", bind="[::]:0")
    v4 = btlcore.open("udp", bind="127.0.0.1:0")
    try:
        prio, data = server.device.resolve(v4.address)
        port = v4.device.device.local_sockaddrs[0][1]
        assert prio == ("::ffff:127.0.0.1", port, 0, 0) and data == ("::ffff:127.0.0.1", port + 1, 0, 0)
        # and an IPv4 device takes a mapped address as the IPv4 one
        mapped = _address.encode(socket.AF_INET6, "::ffff:127.0.0.1", port, port + 1)
        assert v4.device.resolve(mapped)[0] == ("127.0.0.1", port)
    finally:
        v4.close(flush=False)
        server.close(flush=False)
