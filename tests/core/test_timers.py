"""Timers in a heap: the next deadline is the earliest of the peers' own, and a peer with
nothing new costs nothing per pass."""

from __future__ import annotations

import random

import pytest

from btlcore import Config
from btlcore.protocol.engine import Engine
from btlcore.protocol.recovery import Recovery
from btlcore.protocol.timers import DeadlineHeap


def test_deadline_heap() -> None:
    h: DeadlineHeap[str] = DeadlineHeap()
    assert h.first() is None and h.pop_due(1e9) == []
    h.set("a", 5.0)
    h.set("b", 3.0)
    h.set("c", 4.0)
    assert h.first() == 3.0 and len(h) == 3
    h.set("b", 6.0)  # moved later: its old entry is stale
    assert h.first() == 4.0 and h.get("b") == 6.0
    h.set("c", None)
    assert h.first() == 5.0 and "c" not in h
    h.discard("a")
    assert h.first() == 6.0
    h.set("d", 6.0)
    assert h.pop_due(5.9) == [] and h.pop_due(6.0) == ["b", "d"]  # ties: in the order set
    assert h.first() is None and len(h) == 0


def test_a_live_deadline_is_one_object_shared_with_the_heap() -> None:
    """An idle peer's keepalive is one heap entry: ``live`` holds that very entry, not a
    second one (memory per idle peer, docs/benchmarks.md; a fixed-length tuple type would
    let the compiled build box a copy for each container, and every entry would look stale)."""
    h: DeadlineHeap[int] = DeadlineHeap()
    for i in range(50):
        h.set(i, float(100 - i))
    for i in range(0, 50, 3):
        h.set(i, float(200 + i))  # moved: older entries stale
    heap_ids = {id(e) for e in h._heap}
    assert all(id(e) in heap_ids for e in h.live.values())
    assert h.first() == 51.0 and len(h) == 50


def test_deadline_heap_stays_bounded_under_churn() -> None:
    h: DeadlineHeap[int] = DeadlineHeap()
    rng = random.Random(1)
    want: dict[int, float] = {}
    for _ in range(20000):
        k, t = rng.randrange(50), rng.random()
        h.set(k, t)
        want[k] = t
    assert len(h._heap) <= 2 * len(want) + 64
    assert h.first() == min(want.values())
    assert h.pop_due(2.0) == sorted(want, key=want.__getitem__) and len(h) == 0


def _hub(n: int) -> tuple[Engine, list[Engine]]:
    """A hub engine and ``n`` engines it handshook with, handed datagrams directly."""
    now = 0.0

    def make(i: int) -> Engine:
        return Engine(Config(), address=i.to_bytes(4, "big"), resolve=bytes, data_mtu=1500, priority_mtu=768,
                      crc=True, rng=random.Random(i), now=now, incarnation=(i + 1) << 10)

    hub = make(0)
    others = [make(i + 1) for i in range(n)]
    by_addr = {e.address: e for e in others}
    by_addr[hub.address] = hub
    for other in others:
        hub.connect(other.address, now)
        for _ in range(6):
            for src in (hub, other):
                for _, dest, buf in src.datagrams_to_send(now):
                    by_addr[dest].receive_datagram(bytes(buf), None, now)
                src.take_events()
    assert all(p.state.value == "established" for p in hub.peers_by_addr.values())
    return hub, others


def _count_timer_work(hub: Engine, passes: int) -> int:
    """How many peers' timer times were computed in ``passes`` passes (the recovery part is
    slotted: its method is wrapped on the class for the while)."""
    calls = 0
    real = Recovery._timer_times

    def counting(self, peer):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        return real(self, peer)

    Recovery._timer_times = counting  # type: ignore[method-assign]
    try:
        for _ in range(passes):
            t = hub.next_deadline()
            if t is not None and t <= hub.state.now:
                hub.handle_timer(hub.state.now)
    finally:
        Recovery._timer_times = real  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize("idle", [1, 1000])
def test_idle_peers_cost_nothing_per_pass(idle: int) -> None:
    hub, others = _hub(idle)
    now = 1.0
    hub.ack_now()
    for _ in range(3):  # settle: owed ACKs sent, every peer idle
        for _, _, _ in hub.datagrams_to_send(now):
            pass
        hub.next_deadline()
    # each idle peer's one deadline is its keepalive PING (a third of peer_timeout after
    # it was last heard from), kept in the heap: nothing is recomputed per pass
    keepalive = min(p.last_heard for p in hub.peers_by_addr.values()) + hub.config.peer_timeout / 3
    assert hub.next_deadline() == keepalive
    assert _count_timer_work(hub, 100) == 0  # a thousand idle peers: not one looked at
    busy = hub.peers_by_addr[others[0].address]
    hub.send(busy, 1, b"x" * 100, None, now)
    hub.datagrams_to_send(now)
    deadline = hub.next_deadline()
    assert deadline is not None and deadline > now  # its retransmit timer
    assert _count_timer_work(hub, 100) == 0  # nothing changed since: nothing recomputed


def test_next_deadline_is_the_earliest_of_many_peers() -> None:
    hub, others = _hub(50)
    rng = random.Random(7)
    now = 1.0
    hub.ack_now()
    hub.datagrams_to_send(now)
    sent_at = {}
    for other in rng.sample(others, 20):
        now += rng.random() * 0.01
        peer = hub.peers_by_addr[other.address]
        hub.send(peer, 1, b"y", None, now)
        hub.datagrams_to_send(now)
        sent_at[peer] = now
    want = min(max(t, p.rto_base) + p.timer.rto for p, t in sent_at.items())
    want = min(want, min(p.last_progress for p in sent_at) + hub.config.peer_timeout)
    assert hub.next_deadline() == want
    # the first of them times out; only it is handled, and it is due again later
    first = min(sent_at, key=lambda p: max(sent_at[p], p.rto_base) + p.timer.rto)
    hub.handle_timer(want)
    assert [p for p in sent_at if p.resend] == [first]
    assert hub.next_deadline() == want  # (its probe is queued: a send pass is due now)
