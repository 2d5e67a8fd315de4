"""Interrupt coalescing: frames due within ``coalesce`` of the next arrival land together,
the clock never passes the caller's deadline, and runs stay deterministic."""

from __future__ import annotations

import pytest

import btlcore
from btlcore.device import Channel
from btlcore.errors import ConfigError
from btlcore.protocol import wire
from btlcore_sim import Fabric, LinkModel


def _frames(n: int) -> list[bytes]:
    return [wire.Datagram(wire.T_DATA, seq=i, payload=bytes(10)).encode() for i in range(n)]


@pytest.mark.parametrize("coalesce,batches", [(0.0, 5), (25e-6, 2), (1e-3, 1)])
def test_frames_within_the_window_land_together(coalesce: float, batches: int) -> None:
    fab = Fabric(seed=1, coalesce=coalesce)
    a, b = fab.open_device(name="a"), fab.open_device(name="b")
    for ops in (a, b):
        ops.create_channel(Channel.DATA, 1500)
        ops.create_channel(Channel.PRIORITY, 1500)
    link = a.resolve(b.local_address())
    fab.set_link("a", "b", LinkModel(delay=100e-6))
    sent_at = [0.0, 10e-6, 20e-6, 50e-6, 70e-6]
    for t, frame in zip(sent_at, _frames(5), strict=True):
        fab.advance(t)
        assert a.post_send(Channel.DATA, link, frame)
    seen: list[tuple[float, int]] = []  # (clock, frames) per wake-up
    for _ in range(20):
        if sum(n for _t, n in seen) == 5:
            break
        b.wait(None)
        got = b.poll_recv(100)
        if got:
            seen.append((fab.now, len(got)))
    # arrivals at 100, 110, 120, 150, 170 us
    assert sum(n for _t, n in seen) == 5
    assert len(seen) == batches
    # the clock stops at the last frame landed, never beyond it
    assert seen[-1][0] == pytest.approx(70e-6 + 100e-6)


def test_deadline_caps_the_window() -> None:
    fab = Fabric(seed=1, coalesce=1.0)
    a, b = fab.open_device(name="a"), fab.open_device(name="b")
    for ops in (a, b):
        ops.create_channel(Channel.DATA, 1500)
    fab.set_link("a", "b", LinkModel(delay=1e-3))
    link = a.resolve(b.local_address())
    f1, f2 = _frames(2)
    a.post_send(Channel.DATA, link, f1)  # lands at 1.0 ms
    fab.advance(0.5e-3)
    a.post_send(Channel.DATA, link, f2)  # lands at 1.5 ms
    b.wait(1.2e-3)  # a whole second of coalescing, but the caller's deadline comes first
    assert len(b.poll_recv(10)) == 1 and fab.now <= 1.2e-3
    b.wait(None)
    assert len(b.poll_recv(10)) == 1 and fab.now == pytest.approx(1.5e-3)


def test_coalesced_transfer_is_deterministic_and_verified() -> None:
    def run() -> tuple[dict, float]:
        fab = Fabric(seed=3, default=LinkModel(loss=0.02, delay=2e-4, jitter=2e-5), coalesce=20e-6)
        a = btlcore.open("sim", fabric=fab)
        b = btlcore.open("sim", fabric=fab)
        got = []
        b.on(1, lambda p, t, d: got.append(bytes(d)))
        peer = a.connect(b.address)
        msgs = [bytes([i]) * (i * 997) for i in range(60)]
        for m in msgs:
            a.send(peer, 1, m)
        btlcore.run_until([a, b], lambda: len(got) == 60, timeout=30)
        assert got == msgs
        return a.stats(), fab.now

    assert run() == run()


def test_bad_coalesce_value() -> None:
    with pytest.raises(ConfigError, match="coalesce"):
        Fabric(coalesce=-1)
