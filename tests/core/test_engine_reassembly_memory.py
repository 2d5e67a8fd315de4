"""Reassembly memory grows with the bytes that arrived, never with a header's claim, and
stays within the per-peer (``recv_buffer``) and per-transport (``reassembly_limit``)
budgets; what exceeds them is dropped and counted, never allocated."""

from __future__ import annotations

import tracemalloc
from typing import Any

from btlcore import Config
from btlcore.protocol.wire import F_ACK, T_DATA, Datagram
from btlcore.testing.enginepair import EngineNet, EnginePair

CLAIM = 64 << 20  # what each forged chunk says its message is


def forged(net: EngineNet, victim: int, as_: int, seq: int, msg_id: int, off: int = 0,
           size: int = 1024, msg_len: int = CLAIM) -> bytes:
    """A chunk that ``victim`` takes as coming from engine ``as_`` (its ids spoofed)."""
    peer = net.peer(victim, as_)
    return Datagram(T_DATA, F_ACK, peer.local_conn, net.engines[as_].incarnation, seq, 0, 9,
                    msg_id=msg_id, msg_len=msg_len, offset=off, payload=bytes([msg_id & 0xFF]) * size).encode()


def test_forged_chunks_claiming_64_mib_each_cost_the_bytes_that_arrived() -> None:
    """40 chunks of 1 KB, each claiming a 64 MiB message (the +2,560 MB of issue #11), beside a
    live transfer from a third engine that verifies."""
    net = EngineNet(3, Config(max_message_size=CLAIM), mtu=1500)
    net.connect(0, 1)
    net.connect(2, 1)
    net.run(lambda: net.established(0, 1) and net.established(2, 1), max_time=5)
    net.run_idle()
    victim = net.engines[1]
    pa = net.peer(1, 0)
    cum = pa.window.cum
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(40):  # half in order, half out of order, at offsets anywhere
            seq = cum + 1 + i if i < 20 else cum + 100 + i
            off = 0 if i % 2 else (i * 7919 * 1024) % (CLAIM - 1024)
            victim.receive_datagram(forged(net, 1, 0, seq, 1000 + i, off=off), None, net.now)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(pa.reassembly) == 40
    assert pa.rx_held == 40 * 1024 and victim.state.rx_held == 40 * 1024
    assert peak - base < 1 << 20, f"{(peak - base) >> 10} KiB for 40 KiB of chunks"
    # the live transfer beside it
    message = bytes(range(256)) * 2000
    net.send(2, 1, 5, message, key="live")
    net.run(lambda: net.completions["live"], max_time=net.now + 10)
    assert net.completions["live"] == [None]
    assert (b"C", 5, message) in [(a, t, bytes(d)) for a, t, d in net.delivered[1]]


def test_out_of_order_chunks_beyond_the_peer_budget_are_dropped_and_counted() -> None:
    p = EnginePair(Config(recv_buffer=64 * 1024, max_message_size=CLAIM), mtu=1500)
    p.handshake()
    p.run_idle()
    cum = p.pb.window.cum
    for i in range(200):  # out of order (cum + 1 never comes): all held, as far as the budget
        p.b.receive_datagram(forged(p, 1, 0, cum + 2 + i, 5000 + i), None, p.now)
    assert p.pb.rx_held <= 64 * 1024
    assert p.pb.counters.num_rx_budget_drops == 200 - 64
    assert p.b.stats()["num_rx_budget_drops"] == 136
    assert len(p.pb.reassembly) == 64
    # dropped means not accepted: not in the window, so not acknowledged
    assert not p.pb.window.holds(cum + 2 + 100)


def _victim_of(n: int, cfg: Config) -> tuple[EngineNet, Any]:
    """``n`` engines, every other one connected to engine 0 (the victim), all settled."""
    net = EngineNet(n, cfg, mtu=1500)
    for i in range(1, n):
        net.connect(i, 0)
    net.run(lambda: all(net.established(i, 0) for i in range(1, n)), max_time=5)
    net.run_idle()
    return net, net.engines[0]


def test_the_transport_budget_holds_across_peers() -> None:
    n = 4
    cfg = Config(recv_buffer=1 << 20, reassembly_limit=100 * 1024, max_message_size=100 * 1024)
    net, victim = _victim_of(n, cfg)
    for i in range(1, n):
        cum = net.peer(0, i).window.cum
        for k in range(50):
            victim.receive_datagram(forged(net, 0, i, cum + 2 + k, 7000 + k, msg_len=100 * 1024), None, net.now)
    assert victim.state.rx_held <= 100 * 1024
    assert victim.stats()["num_rx_memory_drops"] == 3 * 50 - 100
    held = sum(net.peer(0, i).rx_held for i in range(1, n))
    assert held == victim.state.rx_held


def test_a_message_larger_than_the_peer_budget_still_arrives_under_loss() -> None:
    cfg = Config(recv_buffer=16 * 1024, window=64)
    p = EnginePair(cfg, mtu=1500)
    p.handshake()
    message = bytes(i * 13 & 0xFF for i in range(300_000))
    for n in (5, 17, 40, 41, 90):
        p.faults.drop(src=0, dst=1, nth=n + 1)
    p.send(0, 1, 3, message, key="big")
    p.run(lambda: p.completions["big"], max_time=60)
    assert p.completions["big"] == [None]
    assert bytes(p.delivered[1][-1][2]) == message
    assert p.pb.rx_held == 0 and p.b.state.rx_held == 0


def test_budgets_are_given_back_when_a_peer_fails_or_restarts() -> None:
    p = EnginePair(Config(max_message_size=CLAIM, peer_timeout=0.2), mtu=1500)
    p.handshake()
    p.run_idle()
    cum = p.pb.window.cum
    for i in range(10):
        p.b.receive_datagram(forged(p, 1, 0, cum + 2 + i, 100 + i), None, p.now)
    assert p.b.state.rx_held == 10 * 1024
    p.b.handshake.reset_peer(p.pb)
    assert p.b.state.rx_held == 0 and p.pb.rx_held == 0 and not p.pb.reassembly


def test_overlapping_chunks_that_do_not_tile_the_message_are_not_delivered() -> None:
    p = EnginePair(Config(), mtu=1500)
    p.handshake()
    p.run_idle()
    cum = p.pb.window.cum
    # a liar: 3 chunks of 1000 at offsets 0, 0, 1000 for a 3000-byte message
    for k, off in enumerate((0, 0, 1000)):
        p.b.receive_datagram(forged(p, 1, 0, cum + 1 + k, 77, off=off, size=1000, msg_len=3000), None, p.now)
    p._collect()
    assert p.delivered[1] == []
    assert p.pb.counters.num_badfrag_recvs == 1
    assert p.pb.rx_held == 0 and not p.pb.reassembly


def _spread(peer_reassembly: dict[int, object]) -> int:
    return sum(1 for ras in peer_reassembly.values() if getattr(ras, "filled", -1) >= 0)


def test_a_peer_spreading_messages_at_their_claimed_extent_stays_within_its_budget() -> None:
    """Each forged message claims 128 KiB and sends 1 KB at its very end, above a gap: the
    receiver writes a chunk above a gap to its place in the message's buffer, so the buffer
    reaches the claimed extent. Such a message counts at its whole extent, and only while
    the peer's holdings stay within half of recv_buffer; the rest wait as copies, within the
    budget, and beyond it are dropped: memory stays within recv_buffer."""
    budget, claim = 1 << 20, 128 << 10
    p = EnginePair(Config(recv_buffer=budget, max_message_size=CLAIM), mtu=1500)
    p.handshake()
    p.run_idle()
    cum = p.pb.window.cum
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(600):
            p.b.receive_datagram(forged(p, 1, 0, cum + 2 + i, 9000 + i, off=claim - 1024, msg_len=claim),
                                 None, p.now)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert _spread(p.pb.reassembly) == budget // 2 // claim  # 4 spread, at 128 KiB each
    held = sum(ras.held for ras in p.pb.reassembly.values())
    assert p.pb.rx_held == held == p.b.state.rx_held
    assert budget - 1024 < p.pb.rx_held <= budget
    assert p.pb.counters.num_rx_budget_drops > 0
    # (beyond the bytes counted, each message in reassembly costs its bookkeeping: < 1 KiB)
    bound = budget + 1024 * len(p.pb.reassembly)
    assert peak - base < bound, f"{(peak - base) >> 10} KiB for a {budget >> 10} KiB budget"


def test_spread_messages_stay_within_half_the_transport_budget_across_peers() -> None:
    n, limit, claim = 4, 1 << 20, 256 << 10
    cfg = Config(recv_buffer=16 << 20, reassembly_limit=limit, max_message_size=claim)
    net, victim = _victim_of(n, cfg)
    for i in range(1, n):
        cum = net.peer(0, i).window.cum
        for k in range(400):
            victim.receive_datagram(forged(net, 0, i, cum + 2 + k, 7000 + k, off=claim - 1024, msg_len=claim),
                                    None, net.now)
    spread = sum(_spread(net.peer(0, i).reassembly) for i in range(1, n))
    assert spread == limit // 2 // claim  # (2: half of the transport's budget)
    assert victim.state.rx_held <= limit
    assert victim.stats()["num_rx_memory_drops"] > 0
    assert sum(net.peer(0, i).rx_held for i in range(1, n)) == victim.state.rx_held


def test_a_spread_message_arrives_whole_and_gives_its_budget_back() -> None:
    """Real loss: a chunk lost, those after it written to their places, the resend fills
    the gap; while the gap is open the message counts at its whole extent."""
    p = EnginePair(Config(), mtu=1500)
    p.handshake()
    message = bytes(i * 7 & 0xFF for i in range(200_000))
    for nth in (3, 60):
        p.faults.drop(src=0, dst=1, nth=nth + 1)
    seen: list[int] = []

    def spread_now() -> bool:
        seen.extend(ras.held for ras in p.pb.reassembly.values() if ras.filled >= 0)
        return bool(p.completions.get("m"))

    p.send(0, 1, 4, message, key="m")
    p.run(spread_now, max_time=10)
    assert p.completions["m"] == [None]
    assert bytes(p.delivered[1][-1][2]) == message
    assert seen and set(seen) == {len(message)}  # it was spread, counted at its extent
    assert p.pb.rx_held == 0 and p.b.state.rx_held == 0 and not p.pb.reassembly


def test_a_spread_message_whose_bytes_an_overlapping_chunk_wrote_over_is_not_delivered() -> None:
    """A liar's chunk inside a run above the gap writes over bytes already placed; the
    prefix still reaches msg_len, but the bytes received add up to more: dropped."""
    p = EnginePair(Config(), mtu=1500)
    p.handshake()
    p.run_idle()
    cum = p.pb.window.cum
    for k, (off, size) in ((3, (2000, 1000)), (4, (2500, 100)), (1, (0, 1000)), (2, (1000, 1000))):
        p.b.receive_datagram(forged(p, 1, 0, cum + k, 78, off=off, size=size, msg_len=3000), None, p.now)
        if k == 3:
            assert p.pb.reassembly[78].filled == 0  # spread by the chunk above the gap
    p._collect()
    assert p.delivered[1] == []
    assert p.pb.counters.num_badfrag_recvs == 1
    assert p.pb.rx_held == 0 and not p.pb.reassembly
