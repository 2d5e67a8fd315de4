"""The driver surface of a Transport (btlcore/driving.py): what an event loop calls instead
of blocking in progress(timeout).  Driven by hand here on the simulator, as a loop would."""

from __future__ import annotations

import pytest

import btlcore
from btlcore import Config
from btlcore_sim import Fabric


def _pair(**params: object) -> tuple[Fabric, btlcore.Transport, btlcore.Transport]:
    fab = Fabric(seed=5)
    cfg = Config.build(params) if params else None
    return fab, btlcore.open("sim", fabric=fab, config=cfg), btlcore.open("sim", fabric=fab, config=cfg)


def _drive(fab: Fabric, ts: list[btlcore.Transport], until: object, rounds: int = 10000) -> None:
    """A loop's driving, by hand: a pass of each; when none is due, the clock to the
    earliest timer_deadline()."""
    for _ in range(rounds):
        if until():  # type: ignore[operator]
            return
        for t in ts:
            t.run_pass()
        if not any(t.pass_due() for t in ts):
            due = [d for t in ts if (d := t.timer_deadline()) is not None]
            fab.advance(min(due) if due else None)
    raise AssertionError("not reached")


def test_a_round_trip_driven_by_run_pass_and_timer_deadline() -> None:
    fab, a, b = _pair()
    b.on(1, lambda peer, tag, data: b.send(peer, 1, bytes(data[::-1])))
    peer = a.connect(b.address)
    done: list[BaseException | None] = []
    a.send(peer, 1, b"abc", done.append)
    first = a.timer_deadline()
    assert first is not None and first <= a.now()  # the handshake's HELLO is due at once
    _drive(fab, [a, b], lambda: a.queued == 1 and done == [None])
    msg = a.recv_nowait()
    assert msg is not None and msg.data == b"cba" and a.queued == 0
    assert a.recv_nowait() is None


def test_timer_deadline_is_next_deadline_when_no_pass_is_due() -> None:
    fab, a, b = _pair()
    peer = a.connect(b.address)
    _drive(fab, [a, b], lambda: peer.state is btlcore.PeerState.ESTABLISHED)
    _drive(fab, [a, b], lambda: not a.pass_due() and not b.pass_due())
    assert a.timer_deadline() == a.next_deadline()  # (idle: the keepalive)
    assert a.timer_deadline() is not None and a.timer_deadline() > a.now()  # type: ignore[operator]
    a.send(peer, 1, b"x")
    assert a.pass_due() and a.next_deadline() == a.now()  # a send is due at once


def test_post_sends_sends_without_a_pass() -> None:
    fab, a, b = _pair()
    peer = a.connect(b.address)
    _drive(fab, [a, b], lambda: peer.state is btlcore.PeerState.ESTABLISHED)
    got: list[bytes] = []
    b.on(2, lambda p, t, d: got.append(bytes(d)))
    a.send(peer, 2, b"now")
    assert a.engine.has_work()
    a.post_sends()
    assert not a.engine.has_work() and not a.backlogged  # posted, nothing received or dispatched
    fab.advance(None)  # the datagram lands
    b.run_pass()
    assert got == [b"now"]


def test_run_pass_with_a_known_timer_skips_nothing_due() -> None:
    """A stale timer (later than the real one) only delays the due work to the next pass:
    the driver reads timer_deadline() after the pass and finds it due."""
    fab, a, b = _pair(rto_initial=0.05)
    peer = a.connect(b.address)
    _drive(fab, [a, b], lambda: peer.state is btlcore.PeerState.ESTABLISHED)
    deadline = a.timer_deadline()
    assert deadline is not None
    fab.advance(deadline)  # a timer (the keepalive) is due now
    a.run_pass(float("inf"))  # told (wrongly) nothing is due
    d2 = a.timer_deadline()
    assert d2 is not None and d2 <= a.now()  # still due: not lost
    a.run_pass()
    d3 = a.timer_deadline()
    assert d3 is None or d3 > a.now()  # done once the pass reads the timers itself


def test_recv_nowait_by_tag_and_requeue_keep_the_window_count() -> None:
    fab, a, b = _pair()
    peer = a.connect(b.address)
    for tag, data in ((3, b"three"), (4, b"four!!"), (3, b"again")):
        a.send(peer, tag, data)
    _drive(fab, [a, b], lambda: b.queued == 3)
    (pa,) = b.peers
    held = pa.unconsumed
    assert held == len(b"three") + len(b"four!!") + len(b"again")
    m = b.recv_nowait(4)
    assert m is not None and m.data == b"four!!" and pa.unconsumed == held - 6
    assert b.recv_nowait(9) is None  # no message of that tag: nothing taken
    b.requeue(m)
    assert pa.unconsumed == held and b.queued == 3
    assert [b.recv_nowait().data for _ in range(3)] == [b"four!!", b"three", b"again"]  # type: ignore[union-attr]
    assert pa.unconsumed == 0
    with pytest.raises(ValueError, match="tag"):
        b.recv_nowait(70000)
