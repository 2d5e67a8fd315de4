"""guard.py on virtual time: unknown-connection notices (a restart learnt at once, forged
ones ignored, rate-limited, never answering a notice), restart HELLOs challenged at the known
address, source checks on both receive paths, and ICMP that only hastens a silent peer's end."""

from __future__ import annotations

import random
from typing import Any

import pytest

from btlcore import Config, PeerRestarted
from btlcore.protocol import wire
from btlcore.protocol.engine import Engine
from btlcore.protocol.events import PeerFailed
from btlcore.protocol.events import PeerRestarted as Restarted
from btlcore.protocol.guard import NOTICE_BURST
from btlcore.protocol.peers import PeerState
from btlcore.testing.enginepair import DROP, EnginePair


def _pair(config: Config | None = None, **kw: Any) -> EnginePair:
    p = EnginePair(config or Config(peer_timeout=30.0), **kw)
    p.handshake()
    return p


def _down(p: EnginePair, i: int) -> list[bool]:
    """Engine ``i`` unreachable while the returned flag's first item is True."""
    flag = [True]
    p.add_hook(lambda s, d, data, k: DROP if flag[0] and i in (s, d) else None)
    return flag


def _inject(p: EnginePair, dst: int, data: bytes, source: bytes) -> None:
    p.engines[dst].receive_datagram(data, source, p.now)


# ------------------------------------------------------------------ restart, learnt by a notice

@pytest.mark.parametrize("batch", [False, True])
def test_a_restarted_peer_is_learnt_within_one_round_trip_of_its_first_datagram(batch: bool) -> None:
    p = _pair(batch_receive=batch)
    down = _down(p, 1)
    for i in range(5):
        p.send(0, 1, 1, b"old life %d" % i * 300, key=i)  # some chunked
    p.advance(p.now + 3.0)  # b is dead: a's sends wait, retransmitted with backoff
    assert not any(p.completions[i] for i in range(5))
    before = len(p.delivered[1])
    p.restart(1)
    down[0] = False
    arrivals = len(p.arrivals)
    p.run(lambda: all(p.completions[i] for i in range(5)), max_time=20)
    first = next(t for t, _s, d, _data in p.arrivals[arrivals:] if d == 1)
    took = p.now - first
    print(f"new life's first datagram at {first:.3f}, a's sends complete {took * 1000:.1f} ms later")
    assert took < 0.1  # one round trip (2 ms) in this net; the issue asks for 1.5 s
    assert all(isinstance(p.completions[i][0], PeerRestarted) for i in range(5))
    assert p.delivered[1][before:] == []  # nothing of the old life reached the new one
    assert p.a.counters.num_peer_restarts == 1 and p.b.counters.num_notice_sends >= 1
    assert any(type(ev) is Restarted for ev in p.other_events[0])
    # the next send is a new connection with the new life
    p.send(0, 1, 2, b"new life", key="new")
    p.run(lambda: p.completions.get("new") == [None], max_time=10)
    assert p.delivered[1][before:] == [(b"A", 2, b"new life")]


def test_notices_that_echo_nothing_of_ours_tear_nothing_down() -> None:
    p = _pair()
    pa = p.pa
    down = _down(p, 1)  # keep data unacknowledged, so a notice could name it
    p.send(0, 1, 1, b"pending", key="m")
    p.advance(p.now + 0.01)
    seg_seq = next(iter(pa.unacked))
    rng = random.Random(3)
    forged = [
        # the right conn id and incarnation, a made-up digest
        wire.Datagram(wire.T_UNKNOWN_CONN, 0, pa.remote_conn, 99, seg_seq,
                      payload=wire.Notice(p.a.incarnation, rng.getrandbits(32), wire.T_DATA).encode()),
        # guessed conn id
        wire.Datagram(wire.T_UNKNOWN_CONN, 0, rng.getrandbits(32), 99, seg_seq,
                      payload=wire.Notice(p.a.incarnation, 0, wire.T_DATA).encode()),
        # echoing an ACK (nothing of ours to check it against)
        wire.Datagram(wire.T_UNKNOWN_CONN, 0, pa.remote_conn, 99, 0,
                      payload=wire.Notice(p.a.incarnation, 0, wire.T_ACK).encode()),
    ]
    for dg in forged:
        for source in (b"B", b"Z"):  # spoofing b's source, and from elsewhere
            _inject(p, 0, dg.encode(), source)
    assert pa.state is PeerState.ESTABLISHED and p.a.counters.num_peer_restarts == 0
    assert p.a.counters.num_forged_drops == 6
    down[0] = False
    p.run(lambda: p.completions.get("m") == [None], max_time=10)


def test_a_notice_echoing_an_acknowledged_datagram_is_ignored_an_unacknowledged_one_counts() -> None:
    p = _pair()
    pa = p.pa
    sent: list[bytes] = []
    p.add_hook(lambda s, d, data, k: sent.append(data) if s == 0 and wire.decode(data).type == wire.T_DATA
               else None)
    p.send(0, 1, 1, b"delivered" * 4, key="done")  # (a notice is never larger than what provoked it)
    p.run(lambda: p.completions.get("done") == [None], max_time=5)
    late = wire.notice_for(sent[-1], 99)  # a datagram we did send, but it was acknowledged
    assert late is not None
    _inject(p, 0, late, b"B")
    assert p.a.counters.num_peer_restarts == 0 and p.a.counters.num_forged_drops == 1
    down = _down(p, 1)
    p.send(0, 1, 1, b"pending" * 4, key="m")
    p.advance(p.now + 2.0)  # retransmitted since (the same bytes: the ACK point did not move)
    fresh = wire.notice_for(sent[-1], 99)
    assert fresh is not None
    _inject(p, 0, fresh, b"B")
    p._collect()
    assert p.a.counters.num_peer_restarts == 1 and isinstance(p.completions["m"][0], PeerRestarted)
    assert pa.state is PeerState.CONNECTING
    down[0] = False


def test_notices_are_rate_limited_never_larger_than_what_provoked_them_and_never_answer_a_notice() -> None:
    p = _pair()
    e = p.a
    dg = wire.Datagram(wire.T_DATA, 0, 0xDEAD, 7, 1, payload=b"x" * 20).encode()
    for _ in range(1000):
        e.receive_datagram(dg, b"Z", p.now)
    out = [buf for _c, dest, buf in e.datagrams_to_send(p.now) if dest == b"Z"]
    assert len(out) == NOTICE_BURST and e.counters.num_replies_limited == 1000 - NOTICE_BURST
    assert all(len(b) <= len(dg) and wire.decode(b).type == wire.T_UNKNOWN_CONN for b in out)
    p.advance(p.now + 1.0)
    e.receive_datagram(out[0], b"Z", p.now)  # a notice for an unknown connection
    small = wire.Datagram(wire.T_ACK, 0, 0xDEAD, 7, payload=b"").encode()  # 36 B < a notice
    e.receive_datagram(small, b"Z", p.now)
    assert [b for _c, dest, b in e.datagrams_to_send(p.now) if dest == b"Z"] == []


def test_no_notice_without_a_source_to_answer() -> None:
    e = Engine(Config(), address=b"A", resolve=bytes, data_mtu=1500, priority_mtu=768, crc=True,
               rng=random.Random(1), now=0.0)  # no reply_dest: the device cannot answer sources
    e.receive_datagram(wire.Datagram(wire.T_DATA, 0, 0xDEAD, 7, 1, payload=b"x" * 20).encode(), b"Z", 0.0)
    assert e.datagrams_to_send(0.0) == [] and e.counters.num_unk_recvs == 1


# ------------------------------------------------------------------ restart HELLO, challenged

def _forged_hello(p: EnginePair, inc: int, conn: int = 0x4242) -> bytes:
    body = wire.Hello(inc, conn, 12345, p.a.incarnation, 64, b"B", 1000, wire.TransportParameters())
    # padded as a real one is, so that it is no smaller than the HELLO_ACK it could provoke
    return wire.Datagram(wire.T_HELLO, 0, 0, inc, payload=body.encode() + wire.padding_param(64)).encode()


@pytest.mark.parametrize("source", [b"B", b"Z"])
def test_a_forged_hello_of_a_new_incarnation_does_not_reset_a_live_peer(source: bytes) -> None:
    p = _pair()
    pa = p.pa
    for k in range(3):
        _inject(p, 0, _forged_hello(p, pa.remote_inc + 5000 + k), source)
        p.send(0, 1, 1, b"still here %d" % k, key=k)
        p.run(lambda k=k: p.completions.get(k) == [None], max_time=5)
    assert pa.state is PeerState.ESTABLISHED and p.a.counters.num_peer_restarts == 0
    assert p.a.counters.num_challenge_sends >= 1
    challenges = p.sent(0, wire.T_CHALLENGE)
    assert challenges and all(dg.dst_conn == 0x4242 for _t, dg in challenges)
    # the challenges went to b's known address; b has no such connection: no response
    assert p.sent(1, wire.T_RESPONSE) == [] and p.b.counters.num_unk_recvs >= 1
    assert [d for _t, _s, d, data in p.log if wire.decode(data).type == wire.T_CHALLENGE] == [1] * len(challenges)


def test_a_real_restart_that_initiates_is_proven_by_the_challenge() -> None:
    p = _pair()
    down = _down(p, 1)
    p.send(0, 1, 1, b"to the old life", key="old")
    p.advance(p.now + 0.5)
    p.restart(1)
    down[0] = False
    p.connect(1, 0)  # the new life speaks first: a HELLO with a new incarnation
    p.run(lambda: bool(p.completions.get("old")), max_time=5)
    assert isinstance(p.completions["old"][0], PeerRestarted)
    assert p.a.counters.num_challenge_sends >= 1 and p.a.counters.num_peer_restarts == 1
    assert p.sent(1, wire.T_RESPONSE)
    p.send(1, 0, 3, b"hello from the new life", key="new")
    p.run(lambda: p.completions.get("new") == [None], max_time=5)
    assert p.delivered[0][-1] == (b"B", 3, b"hello from the new life")


# ------------------------------------------------------------------ source checks

@pytest.mark.parametrize("batch", [False, True])
def test_datagrams_from_a_third_source_are_dropped_and_counted(batch: bool) -> None:
    p = _pair(batch_receive=batch)
    pb = p.pb
    captured: list[bytes] = []
    p.add_hook(lambda s, d, data, k: captured.append(data) if s == 0 and wire.decode(data).type == wire.T_DATA
               else None)
    p.send(0, 1, 1, b"one", key=1)
    p.run(lambda: p.completions.get(1) == [None], max_time=5)
    assert pb.sources == (b"A",)
    dup = captured[0]
    # a second source is learnt (a udp peer sends from two sockets) ...
    p.b.receive_datagrams([dup], p.now, [b"A2"])
    assert pb.sources == (b"A", b"A2") and pb.counters.num_source_drops == 0
    # ... a third is not, on the fast path (a batch) and the general one alike
    p.b.receive_datagrams([dup, dup, dup], p.now, [b"A", b"Z", b"A"])
    p.b.receive_datagram(dup, b"Y", p.now)
    assert pb.counters.num_source_drops == 2
    assert pb.counters.num_dup_recvs == 3  # the others were taken (as duplicates)
    p.send(0, 1, 1, b"two", key=2)
    p.run(lambda: p.completions.get(2) == [None], max_time=5)


def test_a_new_segment_from_an_unexpected_source_is_not_delivered() -> None:
    p = _pair(batch_receive=True)
    pa, pb = p.pa, p.pb
    p.b.receive_datagrams([], p.now, [])
    pb.sources = (b"A", b"A2")  # both channels known
    seg = wire.Datagram(wire.T_DATA, wire.F_ACK, pa.remote_conn, p.a.incarnation, pa.next_seq,
                        pb.window.cum, 9, payload=b"spoofed").encode()
    before = len(p.delivered[1])
    p.b.receive_datagrams([seg], p.now, [b"Z"])
    p._collect()
    assert p.delivered[1][before:] == [] and pb.counters.num_source_drops == 1


# ------------------------------------------------------------------ ICMP

def test_icmp_alone_never_fails_a_live_peer_but_hastens_a_silent_ones_end() -> None:
    p = _pair(Config(peer_timeout=30.0))  # (so that only ICMP can fail it)
    pa = p.pa
    assert p.a.path_error(b"B", p.now) is False  # nothing outstanding, heard just now
    p.send(0, 1, 1, b"x", key=1)
    assert p.a.path_error(b"B", p.now) is False  # a live peer
    p.run(lambda: p.completions.get(1) == [None], max_time=5)
    _down(p, 1)
    p.send(0, 1, 1, b"y", key=2)
    p.advance(p.now + 5.0)  # silent, but for less than half of peer_timeout (30 s)
    assert p.a.path_error(b"B", p.now) is False and pa.state is PeerState.ESTABLISHED
    p.advance(p.now + 12.0)
    assert p.a.path_error(b"B", p.now) is True
    p._collect()
    assert pa.state is PeerState.FAILED and p.completions[2] and p.completions[2][0] is not None
    assert any(type(ev) is PeerFailed for ev in p.other_events[0])
    assert p.a.counters.num_icmp_errors == 4
    assert p.a.path_error(b"nobody", p.now) is False


# ------------------------------------------------------------------ CLOSE (for its handler)

def test_a_close_counts_only_if_it_names_the_connection_by_its_random_ids() -> None:
    p = _pair()
    pa, guard = p.pa, p.a.guard

    def close(dst: int, inc: int, conn: int, echo: int) -> bytes:
        return wire.Datagram(wire.T_CLOSE, 0, dst, inc, payload=wire.Close(conn, echo).encode()).encode()

    good = close(pa.local_conn, pa.remote_inc, pa.remote_conn, p.a.incarnation)
    assert guard.close_peer(good, pa.local_conn, pa.remote_inc, b"B") is pa
    for dg in (close(pa.local_conn ^ 1, pa.remote_inc, pa.remote_conn, p.a.incarnation),
               close(pa.local_conn, pa.remote_inc, pa.remote_conn ^ 1, p.a.incarnation),
               close(pa.local_conn, pa.remote_inc, pa.remote_conn, p.a.incarnation ^ 1)):
        d = wire.decode(dg)
        assert guard.close_peer(dg, d.dst_conn, d.src_incarnation, b"B") is None
    assert p.a.counters.num_forged_drops == 3
    # the right ids from a third source (both of b's known): dropped too
    pa.sources = (b"B", b"B2")
    assert guard.close_peer(good, pa.local_conn, pa.remote_inc, b"Z") is None
    assert pa.counters.num_source_drops == 1


@pytest.mark.parametrize("typ", [wire.T_CLOSE, wire.T_CLOSE_ACK])
def test_a_close_with_the_right_ids_from_another_source_closes_nothing(typ: int) -> None:
    p = _pair()
    pa = p.pa
    pa.sources = (b"B", b"B2")  # both of b's channels known
    dg = wire.Datagram(typ, 0, pa.local_conn, pa.remote_inc,
                       payload=wire.Close(pa.remote_conn, p.a.incarnation).encode()).encode()
    heard = pa.last_heard
    p.now += 1.0
    _inject(p, 0, dg, b"Z")
    assert pa.state is PeerState.ESTABLISHED and pa.counters.num_source_drops == 1 and pa.last_heard == heard
    p.send(0, 1, 1, b"still up", key=1)
    p.run(lambda: p.completions.get(1) == [None], max_time=p.now + 5)
    if typ == wire.T_CLOSE:  # from b's own source it counts
        _inject(p, 0, dg, b"B")
        assert pa.state is PeerState.CLOSED


@pytest.mark.parametrize("exact", [False, True])
def test_a_notice_echoing_a_pending_datagram_counts_only_from_the_peers_source(exact: bool) -> None:
    """An observer who saw our datagram can compute its echo; from its own socket the notice
    is dropped (and nothing is learnt from it); from the peer's it counts."""
    p = EnginePair(Config(peer_timeout=30.0))
    if exact:
        for eng in p.engines:
            eng.guard.peer_sources = lambda dest: (bytes(dest),)
    p.handshake()
    sent: list[bytes] = []
    p.add_hook(lambda s, d, data, k: sent.append(data) if s == 0 and wire.decode(data).type == wire.T_DATA
               else None)
    _down(p, 1)
    p.send(0, 1, 1, b"pending" * 4, key="m")
    p.advance(p.now + 0.5)
    notice = wire.notice_for(sent[-1], 99)
    assert notice is not None
    _inject(p, 0, notice, b"Z")
    assert p.a.counters.num_peer_restarts == 0 and p.pa.counters.num_source_drops == 1
    assert b"Z" not in p.pa.sources
    _inject(p, 0, notice, b"B")
    p._collect()
    assert p.a.counters.num_peer_restarts == 1 and isinstance(p.completions["m"][0], PeerRestarted)
