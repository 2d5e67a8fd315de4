"""A connection's life (issue #11, items 1 and 2), on virtual time: graceful close,
disconnect and quarantine; the one death rule, keepalive and zero-window probes."""

from __future__ import annotations

import sys
from collections import deque

import pytest

import btlcore
from btlcore import Config, PeerClosed, PeerState, PeerUnreachable, TransportClosed
from btlcore.protocol.events import PeerClosed as PeerClosedEvent
from btlcore.protocol.events import PeerFailed
from btlcore.protocol.wire import (
    F_CRC,
    HEADER_LEN,
    T_ACK,
    T_CLOSE,
    T_CLOSE_ACK,
    T_DATA,
    T_PING,
    Close,
    Datagram,
    seal,
)
from btlcore.testing.enginepair import EnginePair, safe_decode


def pair(**cfg: object) -> EnginePair:
    p = EnginePair(Config(**cfg))  # type: ignore[arg-type]
    p.handshake()
    return p


def closed_events(p: EnginePair, i: int) -> list[PeerClosedEvent]:
    return [e for e in p.other_events[i] if type(e) is PeerClosedEvent]


def failed_events(p: EnginePair, i: int) -> list[PeerFailed]:
    return [e for e in p.other_events[i] if type(e) is PeerFailed]


# ------------------------------------------------------------------------------ close


def test_close_is_seen_within_one_round_trip_and_fails_the_peers_pending_sends() -> None:
    p = pair()
    p.send(1, 0, 1, b"from b", key="b0")
    silent = p.faults.partition(p.now, None, [0])  # b's message stays pending: a never acknowledges it ...
    p.run_idle(p.now + 0.05)
    p.faults.remove(silent)  # ... until a closes
    t0 = p.now
    p.a.start_close(p.now)
    assert p.pa.state is PeerState.CLOSING
    p.run(lambda: bool(closed_events(p, 1)), max_time=t0 + 1)
    assert p.now - t0 <= 2 * p.delay  # one round trip at most (one way, here)
    assert closed_events(p, 1) == [PeerClosedEvent(p.pb, None)]
    assert p.pb.state is PeerState.CLOSED
    (exc,) = p.completions["b0"]
    assert isinstance(exc, PeerClosed) and isinstance(exc, btlcore.PeerError) and "closed" in str(exc)
    with pytest.raises(PeerClosed):
        p.b.send(p.pb, 1, b"more", None, p.now)
    # b's CLOSE_ACK ends a's closing
    p.run(lambda: not p.a.closing(), max_time=t0 + 1)
    assert p.pa.state is PeerState.CLOSED and p.now - t0 <= 3 * p.delay
    assert [dg.type for _t, dg in p.sent(0) if dg.type in (T_CLOSE, T_CLOSE_ACK)] == [T_CLOSE]
    assert [dg.type for _t, dg in p.sent(1) if dg.type in (T_CLOSE, T_CLOSE_ACK)] == [T_CLOSE_ACK]
    p.a.close()
    assert closed_events(p, 0) == []  # a closed it: no event for a


def test_close_is_resent_until_acknowledged() -> None:
    p = pair()
    p.faults.drop(type=T_CLOSE, count=2)
    p.a.start_close(p.now)
    p.run(lambda: not p.a.closing(), max_time=p.now + 1)
    assert p.pa.state is PeerState.CLOSED and closed_events(p, 1)
    assert len([1 for _t, dg in p.sent(0) if dg.type == T_CLOSE]) == 3


def test_every_close_lost_bounded_then_the_death_rule() -> None:
    p = pair(peer_timeout=0.5)
    p.faults.drop(type=T_CLOSE)
    t0 = p.now
    p.a.start_close(p.now)
    p.run(lambda: not p.a.closing(), max_time=t0 + 5)
    assert p.now - t0 <= Config().close_timeout  # bounded: a gave up
    assert p.pa.state is PeerState.CLOSED
    p.a.close()  # a is gone: b hears nothing more
    p.run(lambda: bool(failed_events(p, 1)), max_time=t0 + 5)
    (when,) = [t for t, i, e in p.timeline if i == 1 and type(e) is PeerFailed]
    assert when == p.pb.last_heard + 0.5
    assert isinstance(failed_events(p, 1)[0].error, PeerUnreachable)
    assert closed_events(p, 1) == []


def test_late_datagrams_of_a_closing_connection_are_answered_only_with_close() -> None:
    p = pair()
    p.faults.drop(type=T_CLOSE, count=1)
    p.a.start_close(p.now)
    p.step()
    p.send(1, 0, 1, b"late", key="late")  # b does not know yet: it sends data
    p.run(lambda: not p.a.closing(), max_time=p.now + 1)
    assert p.delivered[0] == []  # never delivered, never acknowledged
    assert not [dg for _t, dg in p.sent(0) if dg.type in (T_ACK, T_DATA) and _t > 0.05]
    assert isinstance(p.completions["late"][0], PeerClosed)


def test_a_forged_close_without_the_connection_ids_is_ignored() -> None:
    p = pair()
    for conn_id, echo in ((p.pa.local_conn ^ 1, p.b.incarnation), (p.pa.local_conn, 12345)):
        forged = Datagram(T_CLOSE, dst_conn=p.pb.local_conn, src_incarnation=p.a.incarnation,
                          payload=Close(conn_id, echo).encode()).encode()
        p.b.receive_datagram(forged, None, p.now)
    wrong_inc = Datagram(T_CLOSE, dst_conn=p.pb.local_conn, src_incarnation=p.a.incarnation + 1,
                         payload=Close(p.pa.local_conn, p.b.incarnation).encode()).encode()
    p.b.receive_datagram(wrong_inc, None, p.now)
    assert p.pb.state is PeerState.ESTABLISHED and p.b.take_events() == []
    p.send(0, 1, 1, b"still up", key="up")
    p.run(lambda: p.completions["up"] == [None])


def test_close_acknowledges_every_copy_of_close() -> None:
    p = pair()
    p.faults.drop(type=T_CLOSE_ACK, count=1)
    p.a.start_close(p.now)
    p.run(lambda: not p.a.closing(), max_time=p.now + 1)
    assert len(closed_events(p, 1)) == 1  # reported once
    assert len([1 for _t, dg in p.sent(1) if dg.type == T_CLOSE_ACK]) == 2


# ------------------------------------------------------------------------------ disconnect, quarantine


def test_disconnect_one_peer_then_a_new_connection_and_the_old_one_quarantined() -> None:
    p = EnginePair(Config())
    p.handshake()
    p.send(0, 1, 1, b"old", key="old")
    p.run(lambda: p.completions["old"] == [None])
    old_data = [raw for _t, s, _d, raw in p.log if s == 0 and safe_decode(raw).type == T_DATA]
    old_b_conn, old_a_conn = p.pb.local_conn, p.pa.local_conn
    p.a.start_close(p.now, p.pa)
    p.run(lambda: not p.a.closing(p.pa), max_time=p.now + 1)
    assert p.pa.state is PeerState.CLOSED and closed_events(p, 1)
    assert not p.a.closed  # only that peer
    # a new connection to the same address: new ids, and it carries data
    p.send(0, 1, 2, b"new", key="new")
    p.run(lambda: p.completions["new"] == [None], max_time=p.now + 2)
    assert p.pa.local_conn != old_a_conn and p.pb.local_conn != old_b_conn
    assert old_a_conn in p.a.state.quarantine
    assert p.delivered[1] == [(b"A", 1, b"old"), (b"A", 2, b"new")]
    # late segments of the old connection: never delivered to the new one
    for raw in old_data:
        p.b.receive_datagram(raw, None, p.now)
    p.run_idle(p.now + 0.1)
    assert p.delivered[1] == [(b"A", 1, b"old"), (b"A", 2, b"new")]


def test_quarantined_ids_are_not_reused() -> None:
    class Draws:  # the ids the random source proposes, in order
        def __init__(self, values: list[int]) -> None:
            self.values = values

        def randrange(self, _lo: int, _hi: int) -> int:
            return self.values.pop(0)

    p = pair()
    p.a.state.quarantine.update({5: 1e9, 7: 1e9})
    p.a.handshake._rng = Draws([5, 7, 5, 300])  # type: ignore[assignment]
    assert p.a.handshake._fresh_conn_id() == 300


# ------------------------------------------------------------------------------ death rule, keepalive


def test_a_vanished_idle_peer_is_reported_failed_within_peer_timeout() -> None:
    p = pair(peer_timeout=1.0)
    assert not p.pa.has_outstanding()
    p.faults.partition(p.now, None, [1])
    heard = p.pa.last_heard
    p.run(lambda: bool(failed_events(p, 0)), max_time=heard + 5)
    (when,) = [t for t, i, e in p.timeline if i == 0 and type(e) is PeerFailed]
    assert when == heard + 1.0
    assert p.pa.state is PeerState.FAILED
    assert "nothing heard from it for 1 s" in str(failed_events(p, 0)[0].error)
    pings = [t for t, dg in p.sent(0, T_PING) if t > heard]
    assert len(pings) == 2 and pings[0] == pytest.approx(heard + 1 / 3)  # a third, two thirds


def test_keepalive_keeps_a_live_idle_peer_for_ten_peer_timeouts() -> None:
    p = pair(peer_timeout=0.3)
    start = p.now
    p.run_idle(start + 3.0)
    assert p.now >= start + 2.7
    assert failed_events(p, 0) == [] and failed_events(p, 1) == []
    assert p.pa.state is PeerState.ESTABLISHED and p.pb.state is PeerState.ESTABLISHED
    assert len(p.sent(0, T_PING)) >= 9  # about one per third of peer_timeout, from either end
    p.send(0, 1, 1, b"still", key="s")
    p.run(lambda: p.completions["s"] == [None], max_time=p.now + 1)


def test_an_idle_peer_gives_back_its_buffers_at_the_keepalive_and_still_sends() -> None:
    """A used deque keeps its 64-slot block and a dict its grown table once emptied: both ends
    of an idle connection drop them once a third of peer_timeout passes in silence (the one
    that PINGs and the one PINGed), and the next send and put make them again."""
    p = pair(peer_timeout=0.3)
    p.send(0, 1, 1, b"x" * 100_000, key="m")  # chunked: queue, unacked, reassembly all used
    p.send(1, 0, 1, b"y", key="r")
    p.run(lambda: p.completions["m"] == [None] and p.completions["r"] == [None], max_time=p.now + 1)
    for peer in (p.pa, p.pb):
        assert type(peer.queue) is deque and not peer.queue
    p.run_idle(p.now + 0.3 / 3 * 1.5)
    for peer in (p.pa, p.pb):
        assert peer.queue == () and peer.resend == () and peer.puts is None
        assert sys.getsizeof(peer.unacked) == sys.getsizeof({}) == sys.getsizeof(peer.reassembly)
    assert p.pa.state is PeerState.ESTABLISHED and p.pb.state is PeerState.ESTABLISHED
    p.send(0, 1, 2, b"z" * 50_000, key="again")
    p.run(lambda: p.completions["again"] == [None], max_time=p.now + 1)
    assert [d for (_, tag, d) in p.delivered[1] if tag == 2] == [b"z" * 50_000]


def test_no_keepalive_lets_an_idle_peer_die() -> None:
    p = pair(peer_timeout=0.3, keepalive=False)
    p.run(lambda: bool(failed_events(p, 0)), max_time=p.now + 1)
    assert p.sent(0, T_PING) == []


def test_a_peer_that_keeps_answering_is_never_declared_dead_however_slow() -> None:
    """Data outstanding and no ACK progress for longer than peer_timeout, yet the peer
    answers PINGs: alive (the old rule counted from the last progress and killed it)."""
    p = pair(peer_timeout=0.3, rto_max=0.05)
    p.faults.drop(type=T_DATA, src=0)  # a's data never gets through
    p.send(0, 1, 1, b"x", key="x")
    p.run_idle(p.now + 3.0)
    assert p.pa.state is PeerState.ESTABLISHED and p.completions["x"] == []
    assert p.now - p.pa.last_progress > 10 * 0.3


# ------------------------------------------------------------------------------ zero window


def zero_window(p: EnginePair, src: int) -> list[bool]:
    """Make the standalone ACKs engine ``src`` sends advertise a zero window while ``on[0]``:
    rewritten on the link (a hook), so the engine itself is untouched (compiled or not)."""
    on = [False]

    def hook(s: int, d: int, data: bytes, k: int) -> object:
        if not on[0] or s != src or len(data) < HEADER_LEN + 4 or data[1] != T_ACK:
            return None
        buf = bytearray(data)
        buf[HEADER_LEN:HEADER_LEN + 4] = b"\0\0\0\0"
        if buf[2] & F_CRC:
            seal(buf)
        return ("replace", bytes(buf))

    p.add_hook(hook)
    return on


def test_zero_window_stops_the_sender_probes_and_never_declares_it_dead() -> None:
    p = pair(peer_timeout=0.3)
    on = zero_window(p, 1)
    on[0] = True
    p.send(0, 1, 1, b"first", key=0)
    p.run(lambda: p.completions[0] == [None])
    assert p.pa.remote_window == 0
    for i in range(1, 4):
        p.send(0, 1, 1, b"queued %d" % i, key=i)
    t0 = p.now
    p.run_idle(t0 + 3.0)  # ten peer_timeouts at a zero window
    assert p.pa.state is PeerState.ESTABLISHED and failed_events(p, 0) == []
    assert [p.completions[i] for i in range(1, 4)] == [[], [], []]
    assert not [dg for t, dg in p.sent(0, T_DATA) if t > t0]  # the sender stopped
    probes = [t for t, _dg in p.sent(0, T_PING) if t > t0]
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    assert len(probes) >= 9 and gaps[0] < gaps[-1] <= 0.3 / 3 + 1e-9  # backing off, up to keepalive pace
    on[0] = False  # the receiver consumes: the next probe's ACK reopens the window
    p.run(lambda: all(p.completions[i] == [None] for i in range(1, 4)), max_time=p.now + 1)
    assert [d for _a, _t, d in p.delivered[1]] == [b"first", b"queued 1", b"queued 2", b"queued 3"]


# ------------------------------------------------------------------------------ transports (sim)


def test_transport_close_and_disconnect_report_closed_on_the_other_side() -> None:
    from btlcore_sim import Fabric

    fab = Fabric(seed=1)
    a, b, c = (btlcore.open("sim", fabric=fab) for _ in range(3))
    seen: list[tuple[str, bytes]] = []
    for t in (a, b, c):
        t.on_peer(lambda ev, peer, exc, t=t: seen.append((ev, t.address)))
    pb, pc = a.connect(b.address), a.connect(c.address)
    a.send(pb, 1, b"to b")
    a.send(pc, 1, b"to c")
    btlcore.run_until([a, b, c], lambda: not a.engine.has_outstanding())
    a.disconnect(pb)
    btlcore.run_until([a, b, c], lambda: ("closed", b.address) in seen, timeout=1.0)
    assert pb.state is PeerState.CLOSED and pc.state is PeerState.ESTABLISHED
    assert ("closed", c.address) not in seen
    with pytest.raises(PeerClosed):
        a.send(pb, 1, b"after disconnect")
    a.close()
    btlcore.run_until([b, c], lambda: ("closed", c.address) in seen, timeout=1.0)
    assert [e for e in seen if e[0] != "closed"] == []
    with pytest.raises(TransportClosed):
        a.send(pc, 1, b"after close")
    b.close()
    c.close()


def test_a_slow_link_with_a_long_queue_never_declares_a_live_peer_dead() -> None:
    """10 Mb/s, a queue holding seconds of data (longer than peer_timeout): the sender hears
    the receiver's ACKs all along, so it is never declared dead however long data waits."""
    from btlcore_sim import Fabric, LinkModel

    fab = Fabric(seed=2, default=LinkModel(rate_mbps=10.0, queue_limit=4 << 20, delay=0.001))
    cfg = Config(peer_timeout=0.5)
    a, b = btlcore.open("sim", fabric=fab, config=cfg), btlcore.open("sim", fabric=fab, config=cfg)
    events: list[str] = []
    a.on_peer(lambda ev, peer, exc: events.append(ev))
    b.on_peer(lambda ev, peer, exc: events.append(ev))
    done: list[BaseException | None] = []
    peer = a.connect(b.address)
    chunk = bytes(256 << 10)
    for _ in range(24):  # 6 MiB: about 5 s at 10 Mb/s, ten peer_timeouts
        a.send(peer, 1, chunk, done.append)
    start = a.now()
    btlcore.run_until([a, b], lambda: len(done) == 24, timeout=60.0)
    assert done == [None] * 24 and events == []
    assert a.now() - start > 8 * 0.5  # it did take many peer_timeouts
    a.close()
    b.close()


def test_a_hello_of_a_new_life_while_closing_is_stale_not_a_crash() -> None:
    p = pair()
    p.faults.drop(where=lambda dg: dg.type in (T_CLOSE, T_CLOSE_ACK))
    p.a.start_close(p.now)
    p.restart(1)
    p.connect(1, 0)  # the new b says HELLO while a is still closing the old connection
    p.run(lambda: not p.a.closing(), max_time=p.now + 2)
    assert p.pa.state is PeerState.CLOSED and p.pa.counters.num_stale_recvs >= 1
