"""The pacer's schedule (pacing.py): each release jittered inside its own slot, the rate kept."""

from __future__ import annotations

import pytest
from cclink import FakePeer

from btlcore.protocol.pacing import Pacer
from btlcore.protocol.peers import Peer
from btlcore.protocol.timers import DeadlineHeap

SEG = 9000
RATE = 12.5e6  # bytes/s (100 Mb/s): a slot of 720 us per datagram
GAP = SEG / RATE


def _releases(pacer: Pacer, peer: Peer, n: int, start: float = 0.0) -> list[float]:
    """Release ``n`` datagrams as a busy sender does, each the moment the bucket allows."""
    times = []
    now = start
    for _ in range(n):
        now = max(now, peer.pace_next)
        times.append(now)
        pacer.spent(peer, SEG, now, RATE)
    return times


def _pacer() -> Pacer:
    deadlines: DeadlineHeap[Peer] = DeadlineHeap()
    return Pacer(SEG, {}, deadlines)


def test_each_release_is_jittered_within_its_own_slot_and_the_rate_is_kept() -> None:
    peer = FakePeer(SEG, isn=12345)
    times = _releases(_pacer(), peer, 2000)
    for k, t in enumerate(times[1:], 1):  # datagram k leaves within slot k: never early, never a slot late
        assert k * GAP - 1e-12 <= t < (k + 1) * GAP
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    # the spacing varies (a fixed spacing is what phase-locks flows sharing a drop-tail queue) ...
    assert max(gaps) - min(gaps) > GAP
    # ... about uniformly over the slot, and the long-run rate is the pacing rate exactly
    offsets = [t / GAP - k for k, t in enumerate(times[1:], 1)]
    assert 0.45 < sum(offsets) / len(offsets) < 0.55
    assert (times[-1] - times[0]) / (len(times) - 1) == pytest.approx(GAP, rel=1e-3)


def test_flows_draw_their_jitter_independently() -> None:
    a = _releases(_pacer(), FakePeer(SEG, isn=1), 50)
    b = _releases(_pacer(), FakePeer(SEG, isn=2), 50)
    assert sum(abs(x - y) > 0.05 * GAP for x, y in zip(a[1:], b[1:], strict=True)) > 40


def test_a_sender_back_from_idle_starts_a_slot_from_now() -> None:
    pacer, peer = _pacer(), FakePeer(SEG, isn=7)
    _releases(pacer, peer, 10)
    t = _releases(pacer, peer, 3, start=1.0)  # idle for about a second: no credit saved up
    assert t[0] == 1.0
    assert 1.0 < t[1] < 1.0 + 2 * GAP and t[1] < t[2] < 1.0 + 3 * GAP
