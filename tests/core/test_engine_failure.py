"""Peer death (peer_timeout, max_retries), restarts (new incarnation), close()."""

from __future__ import annotations

from collections import Counter

import pytest

from btlcore import Config
from btlcore.errors import BtlDeprecationWarning, PeerRestarted, PeerUnreachable, TransportClosed
from btlcore.protocol.events import PeerFailed
from btlcore.protocol.events import PeerRestarted as PeerRestartedEvent
from btlcore.protocol.peers import PeerState
from btlcore.protocol.wire import T_ACK, T_DATA, T_HELLO
from btlcore.testing.enginepair import EnginePair, safe_decode

SIZES = [0, 1, 1464, 1465, 20000, 100]


def pair(**cfg: object) -> EnginePair:
    p = EnginePair(Config(**cfg))  # type: ignore[arg-type]
    p.handshake()
    return p


def assert_all_failed_once(p: EnginePair, keys, exc_type) -> None:
    for k in keys:
        got = p.completions[k]
        assert len(got) == 1, (k, got)
        assert isinstance(got[0], exc_type), (k, got)


def test_peer_timeout_fails_every_pending_callback_once() -> None:
    p = pair(peer_timeout=0.5, window=8, cc="none")
    p.faults.partition(p.now, None, [1])
    t0 = p.now
    for i, n in enumerate(SIZES):  # more than the window: some never left the queue
        p.send(0, 1, 1, bytes(n), key=i)
    assert p.pa.queue  # not everything could be sent
    p.run_idle(5)
    assert_all_failed_once(p, range(len(SIZES)), PeerUnreachable)
    assert "nothing heard from it for 0.5 s" in str(p.completions[0][0])
    assert p.now == t0 + 0.5
    assert p.pa.state is PeerState.FAILED
    assert [type(e) for e in p.other_events[0]] == [PeerFailed]
    st = p.a.stats()
    assert st["num_peer_failures"] == 1 and st["num_send_errors"] == len(SIZES)
    assert st["num_msgs_completed"] == 0
    assert p.a.next_deadline() is None and not p.a.has_outstanding()
    with pytest.raises(PeerUnreachable):
        p.a.send(p.pa, 1, b"more", p.cb("late"), p.now)
    assert p.completions["late"] == []  # raising, not calling back


def test_peer_timeout_counts_from_last_progress() -> None:
    p = pair(peer_timeout=0.5, window=8, cc="none")
    for i in range(40):
        p.send(0, 1, 1, b"x", key=i)
    # b answers the first flight, then vanishes
    p.run(lambda: p.completions[0])
    p.faults.partition(p.now, None, [1])
    p.run_idle(5)
    done = [i for i in range(40) if p.completions[i] == [None]]
    failed = [i for i in range(40) if p.completions[i] and isinstance(p.completions[i][0], PeerUnreachable)]
    assert done and failed and sorted(done + failed) == list(range(40))
    assert all(len(p.completions[i]) == 1 for i in range(40))
    assert p.now == p.pa.last_progress + 0.5


def test_max_retries_is_deprecated_and_kills_no_peer() -> None:
    """Issue #11: liveness is peer_timeout's alone; max_retries warns and does nothing."""
    with pytest.warns(BtlDeprecationWarning, match="max_retries is deprecated"):
        p = pair(max_retries=3, rto_max=0.05, peer_timeout=100.0)
    p.faults.partition(p.now, None, [1])
    for i in range(3):
        p.send(0, 1, 1, bytes([i]), key=i)
    p.run_idle(5)
    assert all(p.completions[i] == [] for i in range(3))  # still trying, not failed
    tx = Counter(dg.seq for _t, dg in p.sent(0, T_DATA))
    assert max(tx.values()) > 3  # resent beyond max_retries
    assert p.a.stats()["num_peer_failures"] == 0 and p.pa.state is PeerState.ESTABLISHED


def test_both_sides_fail_when_link_dies_mid_transfer() -> None:
    p = pair(peer_timeout=0.3)
    msgs = [i.to_bytes(2, "big") * 1500 for i in range(20)]
    for i in range(20):
        p.send(0, 1, 1, msgs[i], key=("a", i))
        p.send(1, 0, 1, msgs[i], key=("b", i))
    p.add_hook(lambda s, d, raw, k: "drop" if p.now > 0.004 else None)
    p.run_idle(5)
    for k, got in p.completions.items():
        assert len(got) == 1, k
    assert p.pa.state is PeerState.FAILED and p.pb.state is PeerState.FAILED
    # ordered delivery stopped at a prefix; a message completed only if it was delivered
    for side, key in ((0, "b"), (1, "a")):
        got = [d for _a, _t, d in p.delivered[side]]
        assert got == msgs[:len(got)]
        ok = [i for i in range(20) if p.completions[(key, i)] == [None]]
        assert ok == list(range(len(ok))) and len(ok) <= len(got)
    assert any(isinstance(p.completions[("a", i)][0], PeerUnreachable) for i in range(20))


def test_peer_timeout_at_awkward_time() -> None:
    p = EnginePair(Config(peer_timeout=0.5), max_steps=5000)
    p.handshake()
    p.faults.partition(p.now, None, [1])
    p.now = 0.8313106312458897  # (t + 0.5) - t < 0.5 in binary floating point
    p.send(0, 1, 1, b"x", key=1)
    p.run_idle(5)
    assert len(p.completions[1]) == 1


# ------------------------------------------------------------------------- restarts

def restarted_pair(pending: int = 3) -> EnginePair:
    p = pair()
    for i in range(pending):
        p.send(0, 1, 1, b"old%d" % i, key=("old", i))
    silent = p.faults.partition(p.now, None, [1])  # b dies before it sees them
    p.step()
    p.faults.remove(silent)
    nb = p.restart(1)
    assert nb.address == b"B" and nb.incarnation != p.a.peers_by_addr[b"B"].remote_inc
    return p


def test_restart_fails_pending_with_peer_restarted() -> None:
    p = restarted_pair()
    p.b.connect(b"A", p.now)
    p.run(lambda: p.established(0, 1))
    p.run_idle()
    assert_all_failed_once(p, [("old", i) for i in range(3)], PeerRestarted)
    assert p.a.stats()["num_peer_restarts"] == 1
    assert [type(e) for e in p.other_events[0]] == [PeerRestartedEvent]
    assert p.delivered[1] == []  # nothing meant for the old incarnation reaches the new one
    # the same peer handle works with the new incarnation
    assert p.pa.remote_inc == p.b.incarnation
    p.send(0, 1, 2, b"new", key="new")
    p.send(1, 0, 3, b"hi", key="hi")
    p.run(lambda: p.completions["new"] and p.completions["hi"])
    assert p.delivered[1] == [(b"A", 2, b"new")] and p.delivered[0] == [(b"B", 3, b"hi")]
    assert p.completions["new"] == [None]


def test_restart_stale_segments_dropped_and_counted() -> None:
    p = pair()
    # b sends 3 messages that linger in the network
    p.add_hook(lambda s, d, raw, k: ("delay", 0.05) if s == 1 and safe_decode(raw).type == T_DATA else None)
    for i in range(3):
        p.send(1, 0, 7, b"stale%d" % i, key=("stale", i))
    p.advance(p.now + 0.01)  # (sent, not arrived: they land at +50 ms)
    p.hooks.clear()
    nb = p.restart(1)
    nb.connect(b"A", p.now)
    p.run(lambda: p.established(0, 1))
    p.run_idle(0.2)
    assert p.delivered[0] == []  # the old incarnation's segments arrived after the restart
    # dropped and counted: the restart gave the peer a new connection id, so the old
    # incarnation's segments (addressed to the old one) count as unknown, not as stale
    assert p.pa.counters.num_stale_recvs + p.a.stats()["num_unk_recvs"] == 3
    assert p.pa.counters.num_total_recvs == 0
    nb.send(p.pb, 8, b"fresh", p.cb("fresh"), p.now)
    p.run(lambda: p.completions["fresh"])
    assert p.delivered[0] == [(b"B", 8, b"fresh")]


def test_restart_old_segments_to_new_incarnation_are_unknown() -> None:
    p = restarted_pair(pending=2)
    p.run_idle(0.1)  # a retransmits toward the old connection id
    assert p.b.stats()["num_unk_recvs"] >= 1
    assert p.delivered[1] == [] and p.b.peers_by_addr == {}


def test_restart_detected_from_data_side_hello_of_new_incarnation_sending_first() -> None:
    p = restarted_pair(pending=1)
    p.b.send(p.b.connect(b"A", p.now), 5, b"first words", p.cb("nb"), p.now)
    p.run(lambda: p.completions["nb"] and p.completions[("old", 0)])
    assert isinstance(p.completions[("old", 0)][0], PeerRestarted)
    assert p.delivered[0] == [(b"B", 5, b"first words")]


def test_hello_of_old_incarnation_after_restart_is_ignored() -> None:
    p = pair()
    old_hello = [raw for _t, s, _d, raw in p.log if s == 0 and safe_decode(raw).type == T_HELLO][0]
    p.restart(0)
    p.a.connect(b"B", p.now)
    p.run(lambda: p.established(0, 1))
    p.run_idle()
    assert p.b.stats()["num_peer_restarts"] == 1
    p.send(1, 0, 1, b"pending", key="pending")
    p.b.receive_datagram(old_hello, None, p.now)  # the network delivers a late copy of an old HELLO
    p.send(0, 1, 2, b"x", key="x")
    p.send(1, 0, 3, b"y", key="y")
    p.run(lambda: all(p.completions[k] for k in ("pending", "x", "y")), max_time=p.now + 30)
    assert p.completions == {"pending": [None], "x": [None], "y": [None]}
    assert p.b.stats()["num_peer_restarts"] == 1


# ------------------------------------------------------------------------- close

def test_close_fails_pending_and_refuses_work() -> None:
    p = pair()
    p.faults.partition(p.now, None, [1])
    for i in range(3):
        p.send(0, 1, 1, b"x", key=i)
    p.step()
    p.a.close()
    p._collect()
    assert_all_failed_once(p, range(3), TransportClosed)
    with pytest.raises(TransportClosed):
        p.a.send(p.pa, 1, b"x", None, p.now)
    with pytest.raises(TransportClosed):
        p.a.connect(b"C", p.now)
    assert p.a.next_deadline() is None and p.a.datagrams_to_send(p.now) == []
    p.a.close()  # idempotent
    p._collect()
    assert all(len(p.completions[i]) == 1 for i in range(3))


def test_close_after_flush_has_nothing_to_fail() -> None:
    p = pair()
    p.send(0, 1, 1, b"x", key=0)
    p.run(lambda: not p.a.has_outstanding())
    p.a.close()
    p._collect()
    assert p.completions[0] == [None]
    assert p.a.stats()["num_send_errors"] == 0


def test_segments_for_a_failed_peer_are_stale() -> None:
    p = pair(peer_timeout=0.2)
    # a -> b is cut: a declares b dead while b still talks (b waits longer before it
    # declares a dead: its per-peer timeout, as a handshake could have set it)
    p.pb.peer_timeout = 100.0
    p.add_hook(lambda s, d, raw, k: "drop" if s == 0 else None)
    p.send(0, 1, 1, b"lost", key="lost")
    p.run(lambda: p.completions["lost"])
    assert p.pa.state is PeerState.FAILED
    p.send(1, 0, 2, b"late", key="late")
    p.run(lambda: p.pa.counters.num_stale_recvs >= 1, max_time=p.now + 1)
    ack = [raw for _t, s, _d, raw in p.log if s == 1 and safe_decode(raw).type == T_ACK]
    assert p.delivered[0] == []
    before = p.pa.counters.num_stale_recvs
    if ack:
        p.a.receive_datagram(ack[-1], None, p.now)
        assert p.pa.counters.num_stale_recvs == before + 1


def test_restart_racing_old_handshake() -> None:
    p = EnginePair()
    p.connect(1, 0)  # the old b starts a handshake with a
    p.step()  # its HELLO reaches a at t=0.001
    p.restart(1)  # b restarts at once
    p.send(1, 0, 2, b"hello from the new b", key="n0")
    p.send(0, 1, 1, b"to b", key="a1")  # a answers the old b's HELLO, has something for b
    p.run_idle(2)
    assert len(p.completions["a1"]) == 1  # meant for the old b: PeerRestarted is fine
    assert p.completions["n0"] == [None]
    assert p.delivered[0] == [(b"B", 2, b"hello from the new b")]
    p.send(1, 0, 3, b"again", key="n1")
    p.send(0, 1, 4, b"a again", key="a2")
    p.run(lambda: p.completions["n1"] and p.completions["a2"], max_time=p.now + 30)
    assert p.completions["n1"] == [None] and p.completions["a2"] == [None]


def test_closed_engine_neither_delivers_nor_acknowledges() -> None:
    p = pair()
    p.a.close()
    mark = len(p.log)
    p.send(1, 0, 1, b"after close", key="x")
    p.run_idle(p.now + 1.0)
    assert p.delivered[0] == []
    assert [raw for _t, s, _d, raw in p.log[mark:] if s == 0] == []  # a closed engine sends nothing
    assert p.completions["x"] != [None]


@pytest.mark.parametrize("b_timeout", [0.3, 100.0])
def test_reconnect_after_partition(b_timeout: float) -> None:
    """Both sides (or only a) declared the other dead during a partition; once it heals,
    connect() starts a new connection, every old callback fired exactly once, traffic flows
    both ways, and a segment of the old connection replayed later is not delivered."""
    p = EnginePair(Config(peer_timeout=0.3),
                   config_b=Config(peer_timeout=b_timeout))
    p.handshake()
    p.send(0, 1, 1, b"before", key="b0")
    p.run(lambda: p.completions["b0"])
    old = [raw for _t, s, _d, raw in p.log if s == 0 and safe_decode(raw).type == T_DATA][0]
    cut = [True]
    p.add_hook(lambda s, d, raw, k: "drop" if cut[0] else None)
    p.send(0, 1, 1, b"lost a", key="la")
    p.send(1, 0, 1, b"lost b", key="lb")
    p.run_idle(p.now + 1.0)
    assert p.pa.state is PeerState.FAILED
    assert isinstance(p.completions["la"][0], PeerUnreachable)
    cut[0] = False
    assert p.connect(0, 1) is p.pa and p.pa.state is PeerState.CONNECTING
    p.send(0, 1, 2, b"again a", key="a2")
    p.run(lambda: p.completions["a2"], max_time=p.now + 5)
    p.send(1, 0, 3, b"again b", key="b2")
    p.run(lambda: p.completions["b2"], max_time=p.now + 5)
    for k in ("la", "lb"):
        assert len(p.completions[k]) == 1 and isinstance(p.completions[k][0], PeerUnreachable), k
    assert p.completions["a2"] == [None] and p.completions["b2"] == [None]
    p.b.receive_datagram(old, None, p.now)
    p.run_idle()
    assert p.delivered[1] == [(b"A", 1, b"before"), (b"A", 2, b"again a")]
    assert p.delivered[0] == [(b"B", 3, b"again b")]


def test_restart_after_peer_declared_dead() -> None:
    p = pair(peer_timeout=0.2)
    silent = p.faults.partition(p.now, None, [1])
    p.send(0, 1, 1, b"x", key="x")
    p.run_idle(p.now + 1.0)
    assert p.pa.state is PeerState.FAILED
    p.faults.remove(silent)
    p.restart(1)
    p.send(1, 0, 2, b"i am back", key="back")
    p.run(lambda: p.completions["back"], max_time=p.now + 5)
    assert p.completions["back"] == [None] and p.delivered[0] == [(b"B", 2, b"i am back")]
    p.send(0, 1, 3, b"welcome", key="w")
    p.run(lambda: p.completions["w"], max_time=p.now + 5)
    assert p.delivered[1] == [(b"A", 3, b"welcome")]
    assert len(p.completions["x"]) == 1


def test_delayed_hello_of_never_seen_older_incarnation() -> None:
    p = EnginePair()
    p.add_hook(lambda s, d, raw, k: ("delay", 0.0032) if (s, k) == (1, 0) else None)  # the old b's HELLO
    p.send(0, 1, 0, b"for b", key="a0")
    p.send(1, 0, 1, b"from the old b", key="old-b")
    p.step()  # t=0: both HELLOs leave; a's reaches the old b at t=0.001
    p.restart(1)
    p.send(1, 0, 1000, b"from the new b", key="n0")
    p.run_idle(5)
    assert p.completions["n0"] == [None]
    delivered_at_b = [(t, d) for _a, t, d in p.delivered[1]]
    if p.completions["a0"] != [None]:
        assert (0, b"for b") not in delivered_at_b, "reported failed, yet delivered"
    assert p.a.stats()["num_peer_restarts"] <= 1
    p.send(0, 1, 2, b"still there?", key="a2")
    p.run(lambda: p.completions["a2"], max_time=p.now + 30)
    assert p.completions["a2"] == [None]


def test_restart_detected_by_hello_ack_keeps_talking() -> None:
    p = EnginePair()
    # b's datagrams: 0 old b's HELLO (delivered), 1 new b's HELLO (lost), 2 new b's HELLO_ACK to
    # a's retried HELLO (delivered), 3 new b's retried HELLO (lost)
    p.add_hook(lambda s, d, raw, k: "drop" if s == 1 and k in (1, 3) else None)
    p.send(0, 1, 0, b"for the old b", key="a0")
    p.send(1, 0, 1, b"from the old b", key="old-b")
    p.step()
    p.restart(1)
    p.send(1, 0, 1000, b"from the new b", key="n0")
    p.run(lambda: p.completions["n0"], max_time=p.now + 5)
    assert p.completions["n0"] == [None]
    assert (b"B", 1000, b"from the new b") in p.delivered[0]


def test_a_peer_that_starts_afresh_gives_back_what_its_old_messages_held() -> None:
    """b holds part of a's chunked message when a, having declared b dead, starts a new
    connection; b sent nothing on the old one, so it follows the new one: the old message's
    chunks are dropped, and the bytes they held go back to the budgets (else every such
    restart would leave them counted for the transport's life)."""
    p = EnginePair(Config(peer_timeout=0.3), config_b=Config(peer_timeout=100.0))
    p.handshake()
    data_seen = [0]

    def hook(s: int, d: int, raw: bytes, k: int) -> str | None:
        if s == 1:
            return "drop"  # b's ACKs never reach a: a declares b dead
        dg = safe_decode(raw)
        if dg is not None and dg.type == T_DATA:
            data_seen[0] += 1
            return None if data_seen[0] == 2 else "drop"  # one chunk of the message arrives
        return None  # a's other datagrams arrive: b still hears a, and keeps it

    p.add_hook(hook)
    p.send(0, 1, 1, bytes(range(256)) * 20, key="big")  # four chunks at 1500 B
    p.run(lambda: p.pa.state is PeerState.FAILED, max_time=p.now + 5)
    held = p.b.peers_by_addr[b"A"]
    assert held.state is PeerState.ESTABLISHED
    assert held.rx_held > 0 and p.b.state.rx_held == held.rx_held
    p.hooks.clear()
    p.connect(0, 1)
    p.send(0, 1, 2, b"again", key="a2")
    p.run(lambda: p.completions["a2"], max_time=p.now + 5)
    assert p.completions["a2"] == [None] and p.delivered[1] == [(b"A", 2, b"again")]
    peer_b = p.b.peers_by_addr[b"A"]
    assert peer_b.rx_held == 0 and p.b.state.rx_held == 0 and not peer_b.reassembly
