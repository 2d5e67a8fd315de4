"""The UDP device reports where each datagram came from: the sending socket's address, so a
peer's priority and data channels are told apart, on every receive path."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import btlcore
from btlcore.device import Channel, DeviceOps


def _receive(ops: DeviceOps, count: int, timeout: float = 5.0) -> list[tuple[bytes, Any]]:
    """``count`` datagrams from ``ops.poll_recv_from``, each with its source."""
    assert ops.poll_recv_from is not None
    got: list[tuple[bytes, Any]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} datagrams arrived"
        datagrams, sources = ops.poll_recv_from(count - len(got))
        assert len(datagrams) == len(sources)
        got += [(bytes(d), s) for d, s in zip(datagrams, sources, strict=True)]
        if len(got) < count:
            ops.wait(time.monotonic() + 0.01)
    return got


@pytest.mark.parametrize("gro", [False, True], ids=["plain", "gro"])
def test_sources_are_the_sending_sockets(open_udp: Callable[..., DeviceOps], host: str,
                                          gro: bool) -> None:
    a, b, c = open_udp(host=host), open_udp(host=host), open_udp(host=host, gro=gro)
    assert c.capabilities().reports_source
    dest = {id(x): x.resolve(c.local_address()) for x in (a, b)}
    expected = {}
    for name, x in ((b"a", a), (b"b", b)):
        for channel in Channel:
            for i in range(5):
                payload = b"%s %d %d" % (name, channel, i) + bytes(100 * channel)
                assert x.post_send(channel, dest[id(x)], payload)
                expected[payload] = x.device.local_sockaddrs[channel]
    got = _receive(c, len(expected))
    assert sorted(p for p, _ in got) == sorted(expected)
    for payload, source in got:
        assert source == expected[payload], payload
    assert len(set(expected.values())) == 4  # two peers, two sockets each


def test_gso_run_read_glued_gives_each_datagram_its_source(open_udp: Callable[..., DeviceOps]) -> None:
    # a GSO send arrives as one GRO read on the receiver: each datagram cut from it, and those
    # left for the next poll (the budget), carry the sender's data socket
    a, c = open_udp(host="127.0.0.1"), open_udp(host="127.0.0.1", gro=True)
    dest = a.resolve(c.local_address())
    assert a.post_send_many is not None
    frames = [bytes([i]) * 1000 for i in range(20)]
    assert a.post_send_many([(Channel.DATA, dest, f) for f in frames]) == 20
    got = _receive(c, 7) + _receive(c, 13)
    if a.device.tx_gso_sends:  # (a kernel without GSO sends them one by one)
        assert c.device.rx_gro_reads == 1
    assert [p for p, _ in got] == frames
    assert {s for _, s in got} == {a.device.local_sockaddrs[Channel.DATA]}


def test_oversize_datagrams_drop_with_their_sources(open_udp: Callable[..., DeviceOps]) -> None:
    a, c = open_udp(host="127.0.0.1", mtu=9000), open_udp(host="127.0.0.1", mtu=1000)
    dest = a.resolve(c.local_address())
    for i in range(7):
        assert a.post_send(Channel.DATA, dest, bytes([i]) * (2000 if i % 2 else 500))
    got = _receive(c, 4)
    assert [p[0] for p, _ in got] == [0, 2, 4, 6]
    assert {s for _, s in got} == {a.device.local_sockaddrs[Channel.DATA]}
    assert c.device.rx_oversize == 3


def test_poll_recv_is_poll_recv_from_without_sources(open_udp: Callable[..., DeviceOps]) -> None:
    a, c = open_udp(host="127.0.0.1"), open_udp(host="127.0.0.1")
    dest = a.resolve(c.local_address())
    a.post_send(Channel.PRIORITY, dest, b"one")
    a.post_send(Channel.DATA, dest, b"two")
    got: list[bytes] = []
    deadline = time.monotonic() + 5
    while len(got) < 2 and time.monotonic() < deadline:
        got += [bytes(d) for d in c.poll_recv(8)]
        c.wait(time.monotonic() + 0.01)
    assert got == [b"one", b"two"]


def test_transport_polls_with_sources(recv_mode: str) -> None:
    # the transport reads through poll_recv_from: the sources reach the receive seam, one
    # per channel of the sending transport
    a = btlcore.open("udp", host="127.0.0.1", recvmmsg=recv_mode)
    b = btlcore.open("udp", host="127.0.0.1", recvmmsg=recv_mode)
    try:
        assert b._poll_from is not None
        seen: set[Any] = set()
        poll_from = b._poll_from

        def spy(budget: int) -> tuple[Any, Any]:
            datagrams, sources = poll_from(budget)
            assert len(sources) == len(datagrams)
            seen.update(sources)
            return datagrams, sources

        b._poll_from = spy
        got: list[bytes] = []
        b.on(3, lambda peer, tag, data: got.append(data))
        a.send(a.connect(b.address), 3, bytes(200_000))
        btlcore.run_until([a, b], lambda: len(got) == 1 and a.stats()["num_msgs_completed"] == 1)
        assert seen == set(a.device.device.local_sockaddrs)
    finally:
        a.close()
        b.close()
