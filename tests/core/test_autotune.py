"""Window auto-tuning (#12 item 7) on virtual time: on a long fat path the window grows past
``cwnd_max``'s default to cover the measured bandwidth-delay product, within the send window
and the memory budgets; a bound the user set, or a path that shows a queue, holds it; and
nothing a peer claims makes this end hold more than its budgets."""

from __future__ import annotations

import attrs
import pytest

from btlcore import Config
from btlcore.protocol import autotune
from btlcore.protocol.peers import Peer
from btlcore.testing.enginepair import EnginePair

MIB = 1 << 20
BIG = Config(send_buffer=32 * MIB)  # (a sender whose own buffer is not what limits it)


def bulk(p: EnginePair, n: int, size: int = MIB) -> list[int]:
    """Send ``n`` messages of ``size`` from a to b; return a's flight depth at each datagram."""
    depths: list[int] = []
    p.add_hook(lambda s, d, data, k: depths.append(p.pa.next_seq - 1 - p.pa.snd_una) if s == 0 else None)
    sent = 0
    while sent < n:  # 24 MiB queued: more than the path takes (BIG's send buffer)
        while sent < n and sent - sum(1 for i in range(sent) if p.completions[i]) < 24:
            p.send(0, 1, 1, bytes([sent]) * size, key=sent)
            sent += 1
        p.run(lambda k=sent: any(p.completions[i] for i in range(max(0, k - 24), k)), max_time=60)
    p.run(lambda: all(p.completions[i] == [None] for i in range(n)), max_time=60)
    assert [m for _s, _t, m in p.delivered[1]] == [bytes([i]) * size for i in range(n)]
    return depths


def test_on_a_long_fat_path_the_window_grows_past_cwnd_max_to_the_send_window() -> None:
    # a 40 ms round trip with no rate limit: the BDP is more than any window, so the cap
    # (cwnd_max's default, 1024) doubles per round trip up to the send window: what the
    # receiver's byte window (16 MiB) holds in 8950 B chunks, 1874 segments
    p = EnginePair(BIG, config_b=Config(), delay=0.02, mtu=9000)
    p.handshake()
    peer = p.pa
    assert peer.cwnd_cap == Config().cwnd_max == 1024 < peer.window_cap == (16 * MIB) // peer.chunk_cap
    depths = bulk(p, 48)
    assert peer.cwnd_cap == peer.window_cap
    assert 1024 < max(depths) <= peer.window_cap  # the flight went past the old cap, never past the window


@pytest.mark.parametrize("cc", ["aimd", "bbr", "cubic"])
def test_every_algorithm_s_window_grows_within_the_receiver_s_budget(cc: str) -> None:
    # the receiver's budget (recv_buffer 12 MiB: 1405 segments of 8950 B) bounds the growth
    p = EnginePair(attrs.evolve(BIG, cc=cc), config_b=Config(cc=cc, recv_buffer=12 * MIB), delay=0.02, mtu=9000)
    p.handshake()
    budget = (12 * MIB) // p.pa.chunk_cap
    assert p.pa.window_cap == budget < 4096
    depths = bulk(p, 40)
    assert p.pa.cwnd_cap <= budget and max(depths) <= budget
    assert max(depths) > 1024  # past cwnd_max's default: grown


def test_a_cwnd_max_the_user_set_is_never_raised() -> None:
    p = EnginePair(attrs.evolve(BIG, cwnd_max=200), delay=0.02, mtu=9000)
    p.handshake()
    depths = bulk(p, 8)
    assert p.pa.cwnd_cap == 200 and max(depths) <= 200


def test_a_claimed_huge_byte_window_raises_nothing_past_our_own_bounds() -> None:
    # b claims a receive window of 2^60 bytes: a's send window stays within its own
    # `window` (4096), the cap within that, and what a holds within its send_buffer (4 MiB:
    # a send beyond it is refused; the flight is cut from messages already held)
    p = EnginePair(Config(send_buffer=4 * MIB), delay=0.02, mtu=9000)
    p.b.packetizer.params = attrs.evolve(p.b.packetizer.params, window_bytes=1 << 60)
    p.handshake()
    assert p.pa.window_cap == Config().window
    held: list[int] = []
    p.add_hook(lambda s, d, data, k: held.append(p.pa.send_queued) if s == 0 else None)
    for i in range(3):
        p.send(0, 1, 1, bytes([i]) * MIB, key=i)
    p.run(lambda: all(p.completions[i] == [None] for i in range(3)), max_time=60)
    assert max(held) <= 4 * MIB and p.pa.cwnd_cap <= p.pa.window_cap
    # and b's receive window is its own: nothing a sends can make it advertise more
    assert p.pb.adv_window <= Config().window


def fake(cwnd: float, srtt: float, min_rtt: float, window_cap: int = 4096, rate: float = 0.0) -> Peer:
    """A peer in the state a test sets (a real one: compiled, grow takes nothing else)."""
    p = EnginePair(Config(cc="aimd"))
    p.handshake()
    peer: Peer = p.pa
    peer.timer.srtt, peer.timer.min_rtt = srtt, min_rtt
    peer.cwnd = peer.cwnd_cap = cwnd
    peer.window_cap, peer.tune_at, peer.resend = window_cap, 0.0, ()
    peer.unacked = {i: None for i in range(int(cwnd))}  # type: ignore[misc]  # (only counted)
    peer.delivery_rate, peer.inflight_bytes = rate, int(cwnd) * 1000
    return peer


def test_grow_doubles_without_a_queue_holds_with_one_and_once_per_round_trip() -> None:
    peer = fake(1024.0, srtt=0.010, min_rtt=0.010)
    autotune.grow(peer, 1.0)
    assert peer.cwnd_cap == 2048.0 and peer.tune_at == pytest.approx(1.010)
    peer.cwnd = 2048.0
    autotune.grow(peer, 1.005)
    assert peer.cwnd_cap == 2048.0  # not twice in one round trip
    autotune.grow(peer, 1.011)
    assert peer.cwnd_cap == 4096.0  # (the send window: no further)
    queued = fake(1024.0, srtt=0.020, min_rtt=0.010)  # the flight is twice what the path holds
    autotune.grow(queued, 1.0)
    assert queued.cwnd_cap == 1024.0


def test_grow_takes_the_algorithm_s_delivery_rate_when_it_is_more() -> None:
    # 1000 B segments delivered at 40 MB/s over a 10 ms min RTT: 400 segments a round trip
    peer = fake(100.0, srtt=0.020, min_rtt=0.010, rate=40e6)
    autotune.grow(peer, 1.0)
    assert peer.cwnd_cap == pytest.approx(800.0)
    none = fake(100.0, srtt=0.010, min_rtt=None)  # type: ignore[arg-type]  # no RTT yet: no news
    autotune.grow(none, 1.0)
    assert none.cwnd_cap == 100.0
