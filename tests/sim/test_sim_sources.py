"""The simulator reports each frame's source, ``(sending NIC's address, channel)``, on every
path a frame takes to a receive queue: the ideal link's short cut, the plain path through
the event heap, and the lossy path."""

from __future__ import annotations

from typing import Any

import pytest

import btlcore
from btlcore.device import Channel, DeviceOps
from btlcore.registry import open_device
from btlcore_sim import Fabric, LinkModel


def _drain(fabric: Fabric, ops: DeviceOps, budget: int = 256) -> list[tuple[bytes, Any]]:
    assert ops.poll_recv_from is not None
    fabric.run(fabric.now + 1.0)
    got: list[tuple[bytes, Any]] = []
    while True:
        datagrams, sources = ops.poll_recv_from(budget)
        assert len(datagrams) == len(sources)
        if not datagrams:
            return got
        got += [(bytes(d), s) for d, s in zip(datagrams, sources, strict=True)]


@pytest.mark.parametrize("link", [LinkModel(), LinkModel(delay=1e-3), LinkModel(delay=1e-3, rate_mbps=100),
                                  LinkModel(delay=1e-3, jitter=1e-4, duplicate=0.2)],
                         ids=["ideal", "delay", "rate", "jitter-duplicate"])
@pytest.mark.parametrize("budget", [256, 3])
def test_sources_name_the_sending_nic_and_channel(link: LinkModel, budget: int) -> None:
    fabric = Fabric(seed=4, default=link)
    a, b, c = (open_device("sim", {"fabric": fabric}) for _ in range(3))
    assert c.capabilities().reports_source
    expected = {}
    for name, x in ((b"a", a), (b"b", b)):
        dest = x.resolve(c.local_address())
        for i in range(6):
            channel = Channel(i % 2)
            payload = b"%s %d" % (name, i)
            assert x.post_send(channel, dest, payload)
            expected[payload] = (x.local_address(), channel)
    got = _drain(fabric, c, budget)
    assert {p for p, _ in got} == set(expected)
    for payload, source in got:
        assert source == expected[payload]
    # every frame taken, and the source queues emptied with them
    assert c.device.rx == [[], []] and c.device.rx_from == [[], []]


def test_poll_recv_keeps_the_source_queues_in_step() -> None:
    fabric = Fabric(seed=5)
    a, c = open_device("sim", {"fabric": fabric}), open_device("sim", {"fabric": fabric})
    dest = a.resolve(c.local_address())
    for i in range(5):
        a.post_send(Channel(i % 2), dest, b"%d" % i)
    assert [bytes(d) for d in c.poll_recv(3)] == [b"0", b"2", b"4"]
    assert [len(q) for q in c.device.rx_from] == [len(q) for q in c.device.rx]
    datagrams, sources = c.poll_recv_from(8)
    assert [bytes(d) for d in datagrams] == [b"1", b"3"]
    assert sources == [(a.local_address(), Channel.DATA)] * 2


def test_reopened_nic_sends_from_the_same_source() -> None:
    # a restarted node at its old address: the same source, as a restarted process bound to
    # the same port
    fabric = Fabric(seed=6)
    a, c = open_device("sim", {"fabric": fabric}), open_device("sim", {"fabric": fabric})
    address = a.local_address()
    c_dest = c.resolve(address)
    a.close()
    a2 = open_device("sim", {"fabric": fabric, "address": address})
    a2.post_send(Channel.DATA, a2.resolve(c.local_address()), b"again")
    c.post_send(Channel.DATA, c_dest, b"to the new life")
    assert _drain(fabric, c) == [(b"again", (address, Channel.DATA))]
    assert _drain(fabric, a2) == [(b"to the new life", (c.local_address(), Channel.DATA))]


def test_transport_polls_with_sources() -> None:
    fabric = Fabric(seed=7, default=LinkModel(delay=1e-4))
    a, b = btlcore.open("sim", fabric=fabric), btlcore.open("sim", fabric=fabric)
    assert b._poll_from is not None
    seen: set[Any] = set()
    poll_from = b._poll_from

    def spy(budget: int) -> tuple[Any, Any]:
        datagrams, sources = poll_from(budget)
        seen.update(sources)
        return datagrams, sources

    b._poll_from = spy
    got: list[bytes] = []
    b.on(3, lambda peer, tag, data: got.append(data))
    a.send(a.connect(b.address), 3, bytes(100_000))
    btlcore.run_until([a, b], lambda: len(got) == 1 and a.stats()["num_msgs_completed"] == 1)
    assert seen == {(a.address, Channel.PRIORITY), (a.address, Channel.DATA)}
