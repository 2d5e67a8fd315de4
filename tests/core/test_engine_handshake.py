"""The handshake: HELLO / HELLO_ACK / ACK, retries, simultaneous open, give-up."""

from __future__ import annotations

import random

import pytest

from btlcore import Config
from btlcore.errors import PeerUnreachable
from btlcore.protocol.engine import Engine
from btlcore.protocol.events import PeerFailed
from btlcore.protocol.peers import PeerState
from btlcore.protocol.wire import F_ACK, T_ACK, T_DATA, T_HELLO, T_HELLO_ACK, Hello
from btlcore.testing.enginepair import EnginePair


def kinds(p: EnginePair) -> list[tuple[float, int, int]]:
    return [(t, s, dg.type) for t, dg in p.sent() for s in [0 if dg.src_incarnation == p.a.incarnation else 1]]


def test_three_way_handshake_exact_timeline() -> None:
    p = EnginePair()
    peer = p.connect(0, 1)
    assert peer.state is PeerState.CONNECTING
    p.handshake()
    assert kinds(p) == [(0.0, 0, T_HELLO), (0.001, 1, T_HELLO_ACK), (0.002, 0, T_ACK)]
    assert p.pa.state is PeerState.ESTABLISHED and p.pb.state is PeerState.ESTABLISHED
    # the HELLO carries no echo, and as dst_conn a's own conn id (version 2: a VERSION
    # reply echoes it); the HELLO_ACK echoes a's incarnation
    (_, h1), (_, h2), (_, ack) = p.sent()
    assert h1.dst_conn == p.pa.local_conn and Hello.decode(h1.payload).echo_incarnation == 0
    assert Hello.decode(h1.payload).address == b"A"
    assert h2.dst_conn == p.pa.local_conn and Hello.decode(h2.payload).echo_incarnation == p.a.incarnation
    assert ack.dst_conn == p.pb.local_conn and ack.flags & F_ACK
    # each side learned the other's ISN and connection id
    assert p.pa.remote_conn == p.pb.local_conn and p.pb.remote_conn == p.pa.local_conn
    assert p.pa.window.cum == p.pb.isn and p.pb.window.cum == p.pa.isn
    # one HELLO, one answer: an RTT sample of exactly one round trip
    assert p.pa.timer.srtt == 0.002
    assert p.pa.counters.num_hello_sends == 1 and p.pb.counters.num_hello_recvs == 1


def test_both_sides_connect_at_once() -> None:
    p = EnginePair()
    p.connect(0, 1)
    p.connect(1, 0)
    p.run(lambda: p.established(0, 1))
    p.run_idle()
    assert sorted(kinds(p)) == sorted([(0.0, 0, T_HELLO), (0.0, 1, T_HELLO), (0.001, 0, T_HELLO_ACK),
                                       (0.001, 1, T_HELLO_ACK), (0.002, 0, T_ACK), (0.002, 1, T_ACK)])
    assert len(p.a.peers_by_addr) == 1 and len(p.b.peers_by_addr) == 1
    p.send(0, 1, 1, b"ab", key="a")
    p.send(1, 0, 2, b"ba", key="b")
    p.run(lambda: p.completions["a"] and p.completions["b"])
    assert p.delivered[1] == [(b"A", 1, b"ab")] and p.delivered[0] == [(b"B", 2, b"ba")]


def test_passive_side_can_send_back() -> None:
    p = EnginePair()
    p.send(0, 1, 3, b"ping", key="ping")  # send before any handshake: queued, then sent
    p.run(lambda: p.delivered[1])
    assert p.delivered[1] == [(b"A", 3, b"ping")]
    peer_b = p.b.connect(b"A", p.now)  # b never called connect before: the peer exists
    assert peer_b is p.pb and p.pb.state is PeerState.ESTABLISHED
    p.b.send(peer_b, 4, b"pong", p.cb("pong"), p.now)
    p.run(lambda: p.completions["pong"] and p.completions["ping"])
    assert p.delivered[0] == [(b"B", 4, b"pong")]
    assert p.completions == {"ping": [None], "pong": [None]}
    # no second handshake was needed
    assert [dg.type for _, dg in p.sent()].count(T_HELLO) == 1


def test_hello_lost_retried_after_handshake_interval() -> None:
    p = EnginePair(Config(handshake_interval=0.01))
    p.faults.drop(type=T_HELLO, count=1)
    p.handshake()
    assert kinds(p) == [(0.0, 0, T_HELLO), (0.01, 0, T_HELLO), (0.011, 1, T_HELLO_ACK), (0.012, 0, T_ACK)]
    assert p.pa.timer.srtt is None  # two HELLOs, one answer: ambiguous, no sample (Karn)


def test_hello_ack_lost() -> None:
    p = EnginePair(Config(handshake_interval=0.01))
    p.faults.drop(type=T_HELLO_ACK, count=1)
    p.handshake()
    assert kinds(p) == [(0.0, 0, T_HELLO), (0.001, 1, T_HELLO_ACK), (0.01, 0, T_HELLO),
                        (0.011, 1, T_HELLO_ACK), (0.012, 0, T_ACK)]
    assert p.pb.counters.num_hello_recvs == 2
    assert len(p.b.peers_by_addr) == 1  # the second HELLO did not make a second peer


def test_final_ack_lost_first_data_confirms() -> None:
    p = EnginePair()
    p.faults.drop(type=T_ACK, count=1)
    p.connect(0, 1)
    p.run(lambda: p.pa.state is PeerState.ESTABLISHED)
    p.run_idle()
    assert p.pb.state is PeerState.CONNECTING  # b does not know a knows it
    p.send(0, 1, 1, b"x", key=1)
    p.run(lambda: p.completions[1])
    assert p.pb.state is PeerState.ESTABLISHED and p.delivered[1] == [(b"A", 1, b"x")]


def test_hello_retry_interval_doubles_to_one_second() -> None:
    p = EnginePair(Config(handshake_interval=0.1, handshake_timeout=5.0))
    p.faults.partition(p.now, None, [1])
    p.connect(0, 1)
    p.run_idle(10)
    times = [t for t, dg in p.sent(0, T_HELLO)]
    assert times == pytest.approx([0.0, 0.1, 0.3, 0.7, 1.5, 2.5, 3.5, 4.5])


def test_handshake_timeout_fails_every_pending_send() -> None:
    p = EnginePair(Config(handshake_timeout=0.5))
    p.faults.partition(p.now, None, [1])
    for i in range(5):
        p.send(0, 1, i, b"x" * (i * 1000), key=i)
    p.run_idle(5)
    assert p.pa.state is PeerState.FAILED
    for i in range(5):
        assert len(p.completions[i]) == 1 and isinstance(p.completions[i][0], PeerUnreachable)
    assert "handshake" in str(p.completions[0][0])
    assert p.now == 0.5  # given up at exactly handshake_timeout
    evs = [e for e in p.other_events[0] if type(e) is PeerFailed]
    assert len(evs) == 1 and evs[0].peer is p.pa
    assert p.a.stats()["num_peer_failures"] == 1 and p.a.stats()["num_send_errors"] == 5
    with pytest.raises(PeerUnreachable):
        p.a.send(p.pa, 1, b"late", None, p.now)
    assert p.a.next_deadline() is None  # nothing left to do


def test_handshake_timeout_at_awkward_start_time() -> None:
    t0 = 0.8313106312458897  # (t0 + 0.5) - t0 < 0.5 in binary floating point
    p = EnginePair(Config(handshake_timeout=0.5), max_steps=5000)
    p.faults.partition(p.now, None, [1])
    p.now = t0
    p.send(0, 1, 1, b"x", key=1)
    p.run_idle(5)
    assert len(p.completions[1]) == 1


def test_accept_peers_false_ignores_unknown_hello() -> None:
    p = EnginePair(Config(handshake_timeout=0.2), config_b=Config(accept_peers=False))
    p.send(0, 1, 1, b"x", key=1)
    p.run_idle(1)
    assert p.b.peers_by_addr == {}
    assert p.b.stats()["num_unk_recvs"] == len(p.sent(0, T_HELLO)) > 1
    assert p.pa.state is PeerState.FAILED and isinstance(p.completions[1][0], PeerUnreachable)


def test_connect_is_idempotent() -> None:
    e = Engine(Config(), address=b"A", resolve=lambda a: a, data_mtu=1500, priority_mtu=768, crc=True,
               rng=random.Random(1), now=0.0)
    p1 = e.connect(b"B", 0.0)
    p2 = e.connect(b"B", 0.0)
    assert p1 is p2
    out = e.datagrams_to_send(0.0)
    assert len(out) == 1  # one HELLO
    assert e.next_deadline() == Config().handshake_interval


def test_hello_with_mismatched_incarnation_is_malformed() -> None:
    p = EnginePair()
    h = Hello(5, 7, 9, 0, 64, b"Z")
    from btlcore.protocol.wire import Datagram
    raw = Datagram(T_HELLO, 0, 0, 6, payload=h.encode()).encode()
    p.b.receive_datagram(raw, None, 0.0)
    assert p.b.stats()["num_malformed_recvs"] == 1 and p.b.peers_by_addr == {}
    raw0 = Datagram(T_HELLO, 0, 0, 0, payload=Hello(0, 7, 9, 0, 64, b"Z").encode()).encode()
    p.b.receive_datagram(raw0, None, 0.0)
    assert p.b.stats()["num_malformed_recvs"] == 2 and p.b.peers_by_addr == {}


def test_hello_ack_with_wrong_echo_is_ignored() -> None:
    p = EnginePair()
    p.connect(0, 1)
    p.step()  # the HELLO leaves
    from btlcore.protocol.wire import Datagram
    bogus = Datagram(T_HELLO_ACK, 0, p.pa.local_conn, 77,
                     payload=Hello(77, 5, 100, p.a.incarnation ^ 1, 64, b"B").encode()).encode()
    p.a.receive_datagram(bogus, None, p.now)
    assert p.a.stats()["num_unk_recvs"] == 1 and not p.pa.remote_known
    p.handshake()
    assert p.pa.remote_inc == p.b.incarnation


def test_data_type_unused_in_handshake() -> None:
    p = EnginePair()
    p.handshake()
    assert not p.sent(type=T_DATA)


def test_hello_carries_ack_delay_and_rto_uses_the_peers() -> None:
    p = EnginePair(Config(ack_delay=0.0002), config_b=Config(ack_delay=0.02))
    p.handshake()
    hellos = {dg.src_incarnation: Hello.decode(dg.payload) for _t, dg in p.sent()
              if dg.type in (T_HELLO, T_HELLO_ACK)}
    assert hellos[p.a.incarnation].max_ack_delay_us == 200
    assert hellos[p.b.incarnation].max_ack_delay_us == 20000
    assert p.pa.timer.max_ack_delay == pytest.approx(0.02) and p.pb.timer.max_ack_delay == pytest.approx(0.0002)


def test_peer_that_never_answered_can_connect_later() -> None:
    """a gave up on b's handshake (b was down); b comes up and connects: accepted."""
    from btlcore import Config as _Config
    from btlcore import PeerState as _State
    from btlcore.testing.enginepair import EnginePair as _Pair
    p = _Pair(_Config(handshake_timeout=0.05))
    p.add_hook(lambda s, d, raw, k: "drop" if s == 0 else None)  # b hears nothing of a
    p.send(0, 1, 1, b"nobody", key="early")
    p.run(lambda: p.completions["early"], max_time=1.0)
    assert p.pa.state is _State.FAILED
    p.hooks.clear()  # b is up now
    p.send(1, 0, 2, b"I am here", key="b")
    p.run(lambda: p.completions["b"], max_time=p.now + 5)
    assert p.completions["b"] == [None]
    assert [(t, d) for _a, t, d in p.delivered[0]] == [(2, b"I am here")]
    p.send(0, 1, 3, b"welcome", key="a")
    p.run(lambda: p.completions["a"], max_time=p.now + 5)
    assert p.completions["a"] == [None] and p.pa.state is _State.ESTABLISHED


def _engine(address: bytes, **cfg: object) -> Engine:
    return Engine(Config(**cfg), address=address, resolve=lambda a: a, data_mtu=1500, priority_mtu=768,
                  crc=True, rng=random.Random(address), now=0.0)


def _hello_from(address: bytes, to: bytes) -> bytes:
    """A first HELLO from ``address``, as a forger would send it (nobody answers there)."""
    e = _engine(address)
    e.connect(to, 0.0)
    [(_ch, _dest, buf)] = e.datagrams_to_send(0.0)
    return bytes(buf)


def test_peer_cap_refuses_handshakes_and_sweeps_ones_never_confirmed() -> None:
    b = _engine(b"B", max_peers=4, handshake_timeout=1.0)
    held = b.connect(b"H", 0.0)  # the application's own peer: never swept
    for i in range(3):
        b.receive_datagram(_hello_from(b"F%d" % i, b"B"), None, 0.1)
    assert len(b.peers_by_addr) == 4
    b.receive_datagram(_hello_from(b"X", b"B"), None, 0.5)  # at the cap, none old enough to forget
    assert b"X" not in b.peers_by_addr and b.stats()["num_refused_peers"] == 1
    # later, a real peer: the three HELLO-made peers that never confirmed are forgotten
    a = _engine(b"A")
    pa = a.connect(b"B", 2.0)
    now = 2.0
    for _ in range(4):
        for _ch, _dest, buf in a.datagrams_to_send(now):
            b.receive_datagram(bytes(buf), None, now)
        for _ch, dest, buf in b.datagrams_to_send(now):
            if dest == b"A":
                a.receive_datagram(bytes(buf), None, now)
        now += 0.001
    assert set(b.peers_by_addr) == {b"H", b"A"}
    assert pa.state is PeerState.ESTABLISHED and b.peers_by_addr[b"A"].state is PeerState.ESTABLISHED
    assert b.peers_by_addr[b"H"] is held and b.stats()["num_refused_peers"] == 1


def test_the_source_of_a_handshake_is_kept_on_the_peer() -> None:
    from btlcore.testing.enginepair import EnginePair as _Pair

    p = _Pair(Config())
    p.a.connect(p.b.address, p.now)
    hello = [bytes(d) for _, _, d in p.a.datagrams_to_send(p.now)]
    # as the pair's "device" reports sources (its sender's address; the HELLO_ACK goes to
    # it, through the pair's reply_dest): a source it cannot answer gets no reply
    p.b.receive_datagram(hello[0], ("10.0.0.1", 7471), p.now)
    assert p.b.datagrams_to_send(p.now) == [] and p.b.stats()["num_malformed_recvs"] == 1
    p.b.receive_datagram(hello[0], b"A", p.now)
    peer = p.b.peers_by_addr[p.a.address]
    assert peer.source == b"A"
    replies = [bytes(d) for _, _, d in p.b.datagrams_to_send(p.now)]
    assert replies
    p.a.receive_datagrams(replies, p.now, sources=[b"B"] * len(replies))
    assert p.a.peers_by_addr[p.b.address].source == b"B"
