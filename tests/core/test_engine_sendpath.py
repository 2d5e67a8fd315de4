"""The send path's caches and inlined timer: the bytes sent and the deadlines reported must be
exactly what the plain computation gives.

* Engine._prefixes keeps each data header's first 12 bytes (version, type, flags, the peer's
  connection id, our incarnation) and their CRC by connection and flags: a stale or shared
  entry would put the wrong connection id or CRC on the wire.
* Engine.next_deadline keeps the peers' deadlines in a heap, recomputed only for the peers that
  changed: it is checked against the straightforward computation over every timed peer at every
  step of lossy runs.
"""

from __future__ import annotations

import random

import pytest

import btlcore.protocol.packetizer as packetizer_mod
from btlcore.protocol.engine import Engine
from btlcore.protocol.peers import Peer, PeerState, Segment
from btlcore.protocol.wire import CRC_OFFSET, HEAD_PREFIX, T_DATA, WIRE_VERSION, crc32c, decode
from btlcore.testing.enginepair import DROP, EngineNet


def _reference_timer(eng: Engine) -> float | None:
    """The next deadline as first written: every timed peer, one helper per question."""
    if eng.state.resending or eng.state.sending or eng.state.control:
        return eng.state.now
    best = None
    cfg = eng.config
    for peer in [p for p in eng.peers_by_addr.values() if p.timed or p in eng.state.timed]:
        t = None
        if peer.unacked:
            front: Segment | None = next((s for s in peer.unacked.values() if not s.lost), None)
            if front is not None:
                t = max(front.sent_at, peer.rto_base) + peer.timer.rto
                if front.tx_serial <= peer.acked_serial[front.channel] - cfg.fast_retransmit_threshold \
                        and (peer.loss_seq_limit is None or front.seq <= peer.loss_seq_limit):
                    t = min(t, front.sent_at + eng.recovery._reorder_time(peer))
                newest = list(peer.unacked.values())[-1]  # the tail-loss probe (RFC 8985), once per tail
                srtt = peer.timer.srtt
                if cfg.tlp and peer.tlp_progress != peer.last_progress and srtt is not None and not peer.resend \
                        and peer.probe_seq is None and peer.timer.adaptive and peer.snd_una != peer.isn:
                    wait = max(2 * srtt, srtt + 4 * peer.timer.rttvar)
                    t = min(t, max(newest.sent_at, peer.rto_base) + wait + peer.timer.max_ack_delay)
        if peer.state is PeerState.ESTABLISHED:  # the death rule, keepalive, zero-window probe
            heard = peer.last_heard
            live = heard + peer.peer_timeout
            if cfg.keepalive:
                live = min(live, max(heard, peer.ping_at) + peer.peer_timeout / 3)
            if peer.remote_window == 0 and peer.queue and not peer.unacked:
                live = min(live, peer.ping_at + (peer.persist or peer.timer.rto))
            t = live if t is None else min(t, live)
        if peer.pace_wait:  # sends held back by pacing
            t = peer.pace_next if t is None else min(t, peer.pace_next)
        if peer.ack_now or peer.hello_reply:
            t = eng.state.now
        elif peer.ack_deadline is not None and (t is None or peer.ack_deadline < t):
            t = peer.ack_deadline
        if peer.hello_next is not None:
            t = peer.hello_next if t is None else min(t, peer.hello_next)
            if peer.hello_started is not None:
                t = min(t, peer.hello_started + cfg.handshake_timeout)
        if t is not None and (best is None or t < best):
            best = t
    return best


class CheckedNet(EngineNet):
    """Asserts, before every step, that each engine's timer is the reference one."""

    checks = 0

    def step(self, cap: float | None = None) -> bool:
        for eng in self.engines:
            want = _reference_timer(eng)
            assert eng.next_deadline() == want
            self.checks += 1
        return super().step(cap)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_next_deadline_matches_the_reference_under_loss(seed: int) -> None:
    net = CheckedNet(3, seed=seed, mtu=1500)
    rng = random.Random(seed)
    net.handshake(0, 1)
    net.handshake(0, 2)
    net.add_hook(lambda s, d, data, k: DROP if rng.random() < 0.15 else None)
    for i in range(30):
        net.send(0, 1 + i % 2, 1, rng.randbytes(rng.choice([10, 3000, 9000])), key=i)
        if i % 3 == 0:
            net.send(1 + i % 2, 0, 2, b"reply", key=("r", i))
    net.run(lambda: all(net.completions.values()), max_time=120)
    assert all(v == [None] for v in net.completions.values())
    assert net.checks > 50
    stats = net.engines[0].stats()
    assert stats["num_fast_retrans"] + stats["num_timeout_retrans"] > 0  # the loss branches ran


def _check_prefixes(net: EngineNet, src: int, conns: dict[int, set[int]]) -> int:
    """Every data datagram ``src`` sent carries a connection id the peer it went to had
    (``conns``, by destination index), our incarnation, and a CRC over the whole datagram.
    Returns how many."""
    eng = net.engines[src]
    n = 0
    for _t, s, dst, data in net.log:
        if s != src:
            continue
        dg = decode(data)
        if dg.type != T_DATA:
            continue
        n += 1
        version, typ, flags, _r, conn, inc = HEAD_PREFIX.unpack_from(data)
        assert (version, typ, inc) == (WIRE_VERSION, T_DATA, eng.incarnation)
        assert conn in conns[dst]
        view = memoryview(data)
        want = crc32c(view[CRC_OFFSET + 4:], crc32c(view[:CRC_OFFSET]))
        assert int.from_bytes(data[CRC_OFFSET:CRC_OFFSET + 4], "big") == want
    return n


def test_prefix_cache_follows_a_restarted_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packetizer_mod, "_PREFIXES_MAX", 1)  # clear on every new entry
    net = EngineNet(3, seed=4)
    net.handshake(0, 1)
    net.handshake(0, 2)
    a = net.engines[0]
    conns = {net.peer(0, 1).remote_conn, net.peer(0, 2).remote_conn}
    assert len(conns) == 2
    for i in range(6):
        net.send(0, 1 + i % 2, 1, b"x" * (10 + 5000 * (i % 2)), key=i)
    net.run(lambda: all(net.completions.values()))
    assert len(a.state.prefixes) <= 1
    # engine 1 restarts: a new connection id, which the next data must carry
    old = net.peer(0, 1).remote_conn
    net.restart(1).connect(b"A", net.now)
    net.run(lambda: net.established(0, 1) and net.peer(0, 1).remote_conn != old, max_time=10)
    net.send(0, 1, 1, b"after restart", key="after")
    net.run(lambda: net.completions.get("after") == [None], max_time=20)
    assert net.delivered[1][-1][2] == b"after restart"
    new = net.peer(0, 1).remote_conn
    assert _check_prefixes(net, 0, {1: {old, new}, 2: {net.peer(0, 2).remote_conn}}) >= 8
    last = [d for _t, s, dst, d in net.log if s == 0 and dst == 1 and decode(d).type == T_DATA][-1]
    assert HEAD_PREFIX.unpack_from(last)[4] == new


def test_prefix_cache_entries_are_per_connection_and_flags() -> None:
    net = EngineNet(2, seed=6)
    net.handshake()
    a = net.engines[0]
    peer: Peer = net.peer(0, 1)
    net.send(0, 1, 1, b"small", key=1)
    net.send(0, 1, 1, bytes(20000), key=2)  # chunked: other flags, another entry
    net.run(lambda: all(net.completions.values()))
    keys = set(a.state.prefixes)
    assert {k >> 8 for k in keys} == {peer.remote_conn}
    assert len(keys) == 2
    for key, (head, head_crc) in a.state.prefixes.items():
        assert head == HEAD_PREFIX.pack(WIRE_VERSION, T_DATA, key & 0xFF, 0, key >> 8, a.incarnation)
        assert head_crc == crc32c(head)
    assert _check_prefixes(net, 0, {1: {peer.remote_conn}}) >= 3


def _resend_of_first_data(ack_moves: bool) -> tuple[Segment, object, list[bytes]]:
    """A's first DATA datagram to B lost once; if ``ack_moves``, B's message to A arrives
    before A resends it (A's ACK point moves).  The segment, its buffer as first sent, and
    every copy of that segment A put on the wire."""
    from btlcore import Config
    from btlcore.testing.enginepair import EnginePair

    p = EnginePair(Config(tlp=False))
    p.handshake()
    seen: list[tuple[Segment, object]] = []

    def first_data(dg: object) -> bool:
        seg = p.pa.unacked[dg.seq]  # type: ignore[attr-defined]
        seen.append((seg, seg.buf))
        return True

    p.faults.drop(where=lambda d: d.type == T_DATA and not seen and first_data(d), src=0, count=1)
    mark = len(p.log)
    p.send(0, 1, 1, b"a" * 100, key="a")
    if ack_moves:
        p.send(1, 0, 2, b"b" * 100, key="b")
    p.run(lambda: p.completions.get("a") == [None], max_time=p.now + 5)
    seg, first = seen[0]
    copies = [d for _t, s, _dst, d in p.log[mark:] if s == 0 and decode(d).type == T_DATA and decode(d).seq == seg.seq]
    assert [dl for dl in p.delivered[1] if dl[1] == 1] == [(p.a.address, 1, b"a" * 100)]
    return seg, first, copies


def test_a_resend_goes_as_it_was_while_the_ack_point_stands() -> None:
    """Packetizer.stamp: nothing to change, so no copy and no CRC over the payload again."""
    seg, first, copies = _resend_of_first_data(ack_moves=False)
    assert seg.tx_count == 2 and seg.buf is first
    assert len(copies) == 2 and copies[0] == copies[1]


def test_a_resend_carries_the_ack_point_that_moved_with_its_crc() -> None:
    seg, first, copies = _resend_of_first_data(ack_moves=True)
    assert seg.tx_count == 2 and seg.buf is not first
    old, new = decode(copies[0]), decode(copies[1])
    assert new.ack > old.ack and new.crc == crc32c(copies[1][CRC_OFFSET + 4:], crc32c(copies[1][:CRC_OFFSET]))
