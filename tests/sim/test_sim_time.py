"""Virtual time: what wait() advances to, and loops that drive several devices."""

from __future__ import annotations

import heapq
import time

import pytest

from btlcore.device import Channel
from btlcore_sim import Fabric, LinkModel

from simkit import Pair, frame, seq_of  # type: ignore[import-not-found]


def test_wait_with_nothing_pending_and_no_deadline_returns_at_once(make_pair) -> None:
    pair = make_pair()
    pair.a.wait(None)
    assert pair.fabric.now == 0.0


def test_wait_with_nothing_pending_moves_to_the_deadline(make_pair) -> None:
    pair = make_pair()
    pair.a.wait(2.5)
    assert pair.a.clock()() == 2.5
    pair.a.wait(1.0)  # a deadline in the past never moves time backwards
    assert pair.fabric.now == 2.5


def test_wait_stops_at_the_next_event_before_the_deadline(make_pair) -> None:
    pair = make_pair(LinkModel(delay=0.010))
    pair.send(1)
    pair.a.wait(1.0)
    assert pair.fabric.now == pytest.approx(0.010)
    assert [seq_of(f) for f in pair.b.poll_recv(8)] == [0]


def test_wait_stops_at_the_deadline_before_the_next_event(make_pair) -> None:
    pair = make_pair(LinkModel(delay=0.010))
    pair.send(1)
    pair.a.wait(0.004)
    assert pair.fabric.now == 0.004
    assert list(pair.b.poll_recv(8)) == []
    pair.a.wait(0.004)  # deadline == now: nothing due yet, no movement
    assert pair.fabric.now == 0.004
    pair.b.wait(None)  # any device of the fabric moves the shared clock
    assert pair.fabric.now == pytest.approx(0.010)
    assert len(pair.b.poll_recv(8)) == 1


def test_wait_processes_only_the_events_due_at_the_time_it_stops(make_pair) -> None:
    pair = make_pair(LinkModel(delay=0.001))
    pair.send(2)  # both land at 1 ms
    pair.a.wait(5.0)
    pair.fabric.set_link("a", "b", LinkModel(delay=0.002))
    pair.send(1, start=2)  # lands at 3 ms
    assert [seq_of(f) for f in pair.b.poll_recv(8)] == [0, 1]
    assert pair.fabric.now == pytest.approx(0.001)
    pair.a.wait(5.0)
    assert pair.fabric.now == pytest.approx(0.003)
    assert [seq_of(f) for f in pair.b.poll_recv(8)] == [2]


def test_wait_returns_without_advancing_after_an_immediate_delivery(make_pair) -> None:
    """A frame landed by a zero-delay post must be polled before time jumps to a timer."""
    pair = make_pair()
    pair.send(1)
    pair.b.wait(10.0)
    assert pair.fabric.now == 0.0
    assert len(pair.b.poll_recv(8)) == 1
    pair.b.wait(10.0)
    assert pair.fabric.now == 10.0


def _ping_pong_loop(fabric: Fabric, pairs: list[Pair], duration: float, period: float) -> int:
    """Each pair's ``a`` sends a frame every ``period``; ``b`` echoes it back; one thread
    progresses every device and then waits for the earliest deadline, as transports do."""
    devices = [dev for p in pairs for dev in (p.a, p.b)]
    timers = [(period * (i + 1) / (len(pairs) + 1), i) for i in range(len(pairs))]
    heapq.heapify(timers)
    echoed = 0
    seq = 0
    while fabric.now < duration:
        while timers and timers[0][0] <= fabric.now:
            _, i = heapq.heappop(timers)
            seq += 1
            assert pairs[i].a.post_send(Channel.PRIORITY, pairs[i].ab, frame(seq, 64))
            heapq.heappush(timers, (fabric.now + period, i))
        for p in pairs:
            for f in p.b.poll_recv(64):
                assert p.b.post_send(Channel.PRIORITY, p.ba, f)
            echoed += len(p.a.poll_recv(64))
        deadline = min(t for t, _ in timers) if timers else None
        devices[echoed % len(devices)].wait(deadline)
    return echoed


def test_several_transports_in_one_thread_share_the_clock() -> None:
    fabric = Fabric(seed=2, default=LinkModel(delay=50e-6, jitter=10e-6))
    pairs = [Pair(fabric, f"a{i}", f"b{i}") for i in range(3)]
    echoed = _ping_pong_loop(fabric, pairs, duration=0.1, period=0.001)
    # 100 periods per pair, minus the last round trip still in flight at the end
    assert 3 * 98 <= echoed <= 3 * 100
    for i in range(3):
        assert fabric.stats()[f"a{i}->b{i}"]["delivered"] >= 99


def test_thirty_virtual_seconds_run_fast() -> None:
    """A 30 s scenario (a frame every ms each way over a lossy, jittery link): virtual time
    must really reach 30 s.  Wall time is reported, not asserted (speed lives in the
    benchmarks), beyond a generous bound that only a broken scheduler would exceed."""
    fabric = Fabric(seed=3, default=LinkModel(delay=200e-6, jitter=50e-6, loss=0.01))
    pair = Pair(fabric)
    start = time.perf_counter()
    echoed = _ping_pong_loop(fabric, [pair], duration=30.0, period=0.001)
    wall = time.perf_counter() - start
    assert fabric.now >= 30.0
    # about 30000 pings, 1% lost each way
    assert 0.96 * 30000 < echoed < 0.995 * 30000
    assert wall < 10.0, f"30 s of virtual time took {wall:.2f} s of wall time"
