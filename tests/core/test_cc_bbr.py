"""bbr's state machine on a simulated bottleneck (tests/core/cclink.py) and on hand-made samples."""

from __future__ import annotations

import math

import pytest
from cclink import FakePeer, Link, Run, jain, share

from btlcore import Config
from btlcore.protocol.congestion import bbr
from btlcore.protocol.congestion.bbr import DRAIN, PROBE_BW, PROBE_RTT, STARTUP, Bbr
from btlcore.protocol.congestion.rate import RateSample
from btlcore.protocol.peers import Peer

MBPS = 1e6 / 8
SEG = 1500


class Modes:
    """Records each mode change: (time, mode, queue in BDPs, bandwidth estimate)."""

    def __init__(self) -> None:
        self.changes: list[tuple[float, int, float, float]] = []
        self.gains: list[tuple[float, float, float, float]] = []  # PROBE_BW: (t, gain, pacing, bw)

    def __call__(self, run: Run, s: RateSample) -> None:
        st = run.peer.cc_state
        if not self.changes or self.changes[-1][1] != st.mode:
            queue = max(0.0, run.link_free - run.now) * run.link.rate / run.link.bdp
            self.changes.append((s.now, st.mode, queue, st.bw))
        if st.mode == PROBE_BW and (not self.gains or self.gains[-1][1] != st.pacing_gain):
            self.gains.append((s.now, st.pacing_gain, run.peer.pacing_rate, st.bw))

    def modes(self) -> list[int]:
        return [m for _, m, _, _ in self.changes]

    def first(self, mode: int) -> tuple[float, int, float, float]:
        return next(c for c in self.changes if c[1] == mode)


def test_startup_exits_when_the_bandwidth_plateaus_then_drain_empties_the_queue() -> None:
    link = Link(50 * MBPS, 0.010, queue=8 * 50 * MBPS * 0.020)  # a deep queue: no loss to exit on
    rec = Modes()
    run = Run("bbr", link, seg=SEG, on_sample=rec).run(1.0)
    assert rec.modes()[:3] == [STARTUP, DRAIN, PROBE_BW]
    assert run.lost_total == 0  # left STARTUP on the plateau, not on loss
    t_drain, _, queue_at_drain, bw_at_drain = rec.first(DRAIN)
    assert bw_at_drain == pytest.approx(link.rate, rel=0.05)
    assert queue_at_drain > 0.5  # STARTUP's 2.77 gain had built a queue ...
    assert t_drain < 30 * 2 * link.delay  # ... within a few doublings and three flat rounds
    _, _, queue_at_probe_bw, _ = rec.first(PROBE_BW)
    assert queue_at_probe_bw < 0.1  # ... which DRAIN emptied
    assert run.goodput(since=0.5) >= 0.95 * link.rate


def test_probe_bw_cycles_its_pacing_gain_one_phase_per_min_rtt() -> None:
    link = Link(50 * MBPS, 0.010)
    rec = Modes()
    run = Run("bbr", link, seg=SEG, on_sample=rec).run(2.0)
    gains = [(t, g, pacing, bw) for t, g, pacing, bw in rec.gains if t > 0.5]
    for _t, g, pacing, bw in gains:
        assert pacing == pytest.approx(g * bw)
    seq = [g for _, g, _, _ in gains]
    i = seq.index(1.25)
    assert seq[i:i + 3] == [1.25, 0.75, 1.0]  # probe, drain what it queued, cruise
    # a full cycle (1.25, 0.75, six rounds at 1 collapsed into one entry) lasts 8 min RTTs
    ups = [t for t, g, _, _ in gains if g == 1.25]
    period = (ups[-1] - ups[0]) / (len(ups) - 1)
    min_rtt = run.peer.cc_state.min_rtt
    assert 7.5 * min_rtt < period < 9.5 * min_rtt
    # the probes keep the queue small: at most the 1.25 phase's quarter BDP (plus a few segments)
    assert run.max_queue <= link.queue


def test_no_window_cut_on_one_percent_random_loss() -> None:
    link = Link(50 * MBPS, 0.010, loss=0.01)
    run = Run("bbr", link, seg=SEG).run(0.5)
    st = run.peer.cc_state
    assert st.mode == PROBE_BW
    before = run.peer.cwnd
    n = len(run.trace)
    run.run(2.0)
    assert run.lost_total > 100  # losses did come ...
    cwnds = [c for _, c, _ in run.trace[n:]]
    assert min(cwnds) >= 0.95 * before  # ... and never cut the window
    assert st.inflight_hi == float("inf")
    bdp_segs = link.bdp / SEG
    assert before >= bbr.CWND_GAIN * bdp_segs
    assert run.goodput(since=0.5) >= 0.95 * link.rate * (1 - link.loss)
    run.cc.on_loss_episode(run.peer)  # a loss episode as the engine reports it: nothing changes
    assert run.peer.cwnd == cwnds[-1]


@pytest.mark.parametrize("loss, floor", [(0.05, 0.9), (0.10, 0.75)])
def test_heavy_random_loss_keeps_the_link_busy(loss: float, floor: float) -> None:
    """(At 10%, a round of 80 segments loses more than LOSS_THRESH about every other round:
    the flight is then bounded, never below a BDP, which costs some of the link.)"""
    link = Link(50 * MBPS, 0.010, loss=loss)
    run = Run("bbr", link, seg=SEG).run(2.5)
    assert run.goodput(since=0.5) >= floor * link.rate * (1 - loss)


def test_startup_finds_the_bandwidth_through_heavy_random_loss() -> None:
    """At 10% random loss about every other round loses more than LOSS_THRESH; on an empty
    path (no queue in the RTT) that is no overflow, and STARTUP goes on until the bandwidth
    stops growing.  (Ending it there left 1 Gb/s at 10 ms at 120 Mb/s, and PROBE_BW took
    seconds to find the rest.)"""
    link = Link(200 * MBPS, 0.020, loss=0.10)  # a BDP of 667 segments: 5 doublings from 32
    rec = Modes()
    run = Run("bbr", link, seg=SEG, on_sample=rec).run(1.5)
    assert run.lost_total > 100  # the losses came ...
    _, _, _, bw_at_drain = rec.first(DRAIN)
    assert bw_at_drain >= 0.8 * link.rate * (1 - link.loss)  # ... and STARTUP found the bandwidth
    assert run.goodput(since=0.75) >= 0.85 * link.rate * (1 - link.loss)


def _startup_peer() -> tuple[Bbr, Peer]:
    """A flow in STARTUP over a 10 ms path, its bandwidth still growing."""
    peer = FakePeer(SEG, 1)
    cc = Bbr(Config())
    cc.on_new_peer(peer)  # type: ignore[arg-type]
    st = peer.cc_state
    st.bw, st.min_rtt, st.min_rtt_at = 1e6, 0.01, 0.0
    return cc, peer


@pytest.mark.parametrize("lost, rtt, ends", [
    (5, 0.0101, False),  # 20% lost, the RTT at its min: random loss, STARTUP goes on
    (5, 0.02, True),  # the same with a queue standing: overflow
    (12, 0.0101, True),  # 38% lost (> HEAVY_LOSS): overflow of a queue too shallow to show
    (1, 0.02, False),  # 5%: below LOSS_THRESH, whatever the RTT
])
def test_startup_ends_on_loss_only_where_a_queue_overflows(lost: int, rtt: float, ends: bool) -> None:
    cc, peer = _startup_peer()
    st = peer.cc_state
    st.full_bw = st.bw  # (the bandwidth grew this round: the plateau test does not end it)
    _round(cc, peer, 1.0, 20 * SEG, lost * SEG, rtt)
    assert st.filled is ends
    assert (st.mode != STARTUP) is ends  # (DRAIN, or past it: the flight is small)
    assert st.loss_exit is ends


def test_probe_rtt_after_ten_seconds_without_a_new_min_rtt() -> None:
    link = Link(20 * MBPS, 0.005)
    rec = Modes()
    run = Run("bbr", link, seg=SEG, on_sample=rec).run(1.0)
    assert PROBE_RTT not in rec.modes()
    st = run.peer.cc_state
    link.delay = 0.010  # the path got longer: no RTT as short as the min RTT any more
    stamp = st.min_rtt_at  # the last one
    assert stamp <= run.now
    run.run(stamp + 9.9 - run.now)
    assert PROBE_RTT not in rec.modes()
    run.run(2.0)
    t_enter = rec.first(PROBE_RTT)[0]
    assert 10.0 < t_enter - stamp < 10.05
    assert st.min_rtt >= 0.020  # the stale min RTT was replaced by the path's
    # it held a window of half a BDP for 200 ms at least, then went back to PROBE_BW
    window = [(t, c) for t, c, _ in run.trace if t >= t_enter]
    exit_t = next(t for t, m, _, _ in rec.changes if t > t_enter and m != PROBE_RTT)
    assert exit_t - t_enter >= bbr.PROBE_RTT_TIME
    small = [c for t, c in window if t < exit_t]
    assert max(small[len(small) // 2:]) <= bbr.PROBE_RTT_GAIN * st.bw * st.min_rtt / SEG + 1
    assert rec.modes()[-1] == PROBE_BW
    assert run.peer.cwnd >= bbr.CWND_GAIN * link.bdp / SEG * 0.95  # the window as before


def test_a_shallow_queue_overflowing_bounds_the_flight_and_an_undo_restores_it() -> None:
    link = Link(50 * MBPS, 0.010, queue=0.15 * 50 * MBPS * 0.020)
    run = Run("bbr", link, seg=SEG).run(2.0)
    st = run.peer.cc_state
    assert run.dropped_queue > 0
    # STARTUP overflowed the queue: a high-loss round that set a bound (never below a BDP)
    assert st.filled
    assert run.goodput(since=1.0) >= 0.9 * link.rate
    peer = FakePeer(SEG, 1)
    cc = Bbr(Config())
    cc.on_new_peer(peer)  # type: ignore[arg-type]
    st = peer.cc_state
    st.bw, st.min_rtt, st.filled, st.mode = 1e6, 0.01, True, PROBE_BW
    st.cwnd_bytes = 40000.0
    acked = 30 * SEG
    # a round that lost 40%: the bound is set, at most the flight times LOSS_BETA, at least a BDP
    cc.on_rate_sample(peer, RateSample(1.0, 1e6, 0.01, st.round_end + 10, acked, acked, 20000, 0.01, False))  # type: ignore[arg-type]
    assert st.bdp() <= st.inflight_hi <= 40000.0 * bbr.LOSS_BETA + cc.ack_allowance * st.seg
    assert peer.cwnd * st.seg <= st.inflight_hi + 1
    cc.on_spurious(peer)  # type: ignore[arg-type]
    assert st.inflight_hi == float("inf")


def _probing_peer() -> tuple[Bbr, Peer]:
    """A PROBE_BW flow of 10 MB/s over a 10 ms path (a BDP of about 65 segments), cruising."""
    peer = FakePeer(SEG, 1)
    cc = Bbr(Config())
    cc.on_new_peer(peer)  # type: ignore[arg-type]
    st = peer.cc_state
    st.bw, st.min_rtt, st.min_rtt_at, st.filled, st.mode = 1e7, 0.01, 0.0, True, PROBE_BW
    st.cycle, st.pacing_gain = 2, 1.0
    return cc, peer


def _round(cc: Bbr, peer: Peer, now: float, acked: int, lost: int, rtt: float) -> None:
    """One ACK that ends a round (acknowledging ``acked`` bytes, declaring ``lost``)."""
    st = peer.cc_state
    cc.on_rate_sample(peer, RateSample(now, 0.0, 0.0, st.round_end + acked, acked, lost, 4 * SEG, rtt,  # type: ignore[arg-type]
                                       False, st.round_end + 1))


def test_loss_while_a_queue_stands_cuts_the_pace_and_equal_steps_regrow_it() -> None:
    """A shared queue overflowing (losses > LOSS_THRESH, every RTT well above the min) cuts
    the rate the flow paces at by LOSS_BETA; the cap then grows by the same step per round
    for every flow on the path (one segment per min RTT), the step doubling once the queue
    is gone, until it no longer binds; an undo gives it back."""
    cc, peer = _probing_peer()
    st = peer.cc_state
    _round(cc, peer, 1.0, 20 * SEG, 5 * SEG, 0.02)  # 20% lost, the RTT twice the min
    assert st.bw_cap == pytest.approx(bbr.LOSS_BETA * 1e7)
    assert peer.pacing_rate == pytest.approx(bbr.LOSS_BETA * 1e7)
    step = st.seg / st.min_rtt
    _round(cc, peer, 1.02, 20 * SEG, 0, 0.02)  # no loss, the queue still there: a step
    assert st.bw_cap == pytest.approx(bbr.LOSS_BETA * 1e7 + step)
    _round(cc, peer, 1.04, 20 * SEG, 0, 0.02)  # ... and the same step again
    assert st.bw_cap == pytest.approx(bbr.LOSS_BETA * 1e7 + 2 * step)
    _round(cc, peer, 1.06, 20 * SEG, 0, 0.01)  # the queue drained: the steps double
    _round(cc, peer, 1.08, 20 * SEG, 0, 0.01)
    assert st.bw_cap == pytest.approx(bbr.LOSS_BETA * 1e7 + 5 * step)
    for k in range(5):
        _round(cc, peer, 1.1 + 0.02 * k, 20 * SEG, 0, 0.01)
    assert st.bw_cap == st.bw  # grown back to the model's bandwidth, no further
    assert peer.pacing_rate == pytest.approx(st.pacing_gain * st.bw)
    _round(cc, peer, 2.0, 20 * SEG, 5 * SEG, 0.02)
    assert st.bw_cap < st.bw
    cc.on_spurious(peer)  # type: ignore[arg-type]
    assert st.bw_cap == st.bw


def _queued_round(cc: Bbr, peer: Peer, now: float, in_flight: float, rtt: float) -> None:
    """One ACK that ends a round without loss (20 segments acknowledged), ``in_flight`` left."""
    st = peer.cc_state
    cc.on_rate_sample(peer, RateSample(now, 0.0, 0.0, st.round_end + 20 * SEG, 20 * SEG, 0,  # type: ignore[arg-type]
                                       int(in_flight), rtt, False, st.round_end + 1))


def test_a_queue_the_flow_holds_for_two_rounds_cuts_its_pace_before_any_loss() -> None:
    """Flows sharing a queue each measure their share of it, which follows their pace, so
    any split is an equilibrium: a queue standing QUEUE_ROUNDS rounds with QUEUE_SEGMENTS or
    more of this flow's segments in it (by the queue's delay times its pace, and by its flight
    beyond its BDP) cuts the pace by what it holds there beyond QUEUE_SEGMENTS, drained in a
    min RTT, with no loss at all, and never below LOSS_BETA of it; the same queue with the
    flow's flight within a couple of segments of its BDP (it holds little of it) does not."""
    cc, peer = _probing_peer()
    st = peer.cc_state
    bdp = st.bdp()
    _queued_round(cc, peer, 1.0, bdp + 10 * st.seg, 0.013)  # 3 ms of queue at 10 MB/s: 30 kB of it
    assert st.bw_cap == float("inf")  # (one round is not a standing queue)
    _queued_round(cc, peer, 1.02, bdp + 10 * st.seg, 0.013)
    cut = 1e7 - (0.003 * 1e7 - bbr.QUEUE_SEGMENTS * st.seg) / 0.01
    assert st.bw_cap == pytest.approx(cut) and bbr.LOSS_BETA * 1e7 < cut < 0.8 * 1e7
    assert peer.pacing_rate == pytest.approx(st.pacing_gain * cut)
    cc, peer = _probing_peer()
    st = peer.cc_state
    for k in range(2):  # a queue as long as the min RTT: 100 kB of the flow's, cut no further than a loss
        _queued_round(cc, peer, 1.0 + 0.02 * k, bdp + 10 * st.seg, 0.02)
    assert st.bw_cap == pytest.approx(bbr.LOSS_BETA * 1e7)
    cc, peer = _probing_peer()
    st = peer.cc_state
    for k in range(4):
        _queued_round(cc, peer, 1.0 + 0.02 * k, bdp + 2 * st.seg, 0.02)
    assert st.bw_cap == float("inf")
    cc, peer = _probing_peer()
    st = peer.cc_state
    for k in range(4):  # a short queue: 2.4 ms of the flow's 10 MB/s is 16 segments, but ...
        _queued_round(cc, peer, 1.0 + 0.02 * k, bdp + 10 * st.seg, 0.0124)
    assert st.bw_cap == float("inf")  # ... below CAP_RTT x the min RTT: no queue is read


def test_of_flows_sharing_a_standing_queue_the_faster_is_cut_by_more_than_its_share() -> None:
    """Two flows paced 2:1 behind the same standing queue (the same delay): a FIFO queue holds
    each one's segments in proportion to its pace, and each drains what it holds beyond the
    same QUEUE_SEGMENTS, so the faster gives up more than twice what the slower does and the
    split narrows (a cut by a common factor kept it at 2:1 however often it came: 100 Mb/s,
    10 ms, 2 flows held 61/39 through the sweep's window)."""
    paces = []
    for bw in (1e7, 5e6):
        cc, peer = _probing_peer()
        st = peer.cc_state
        st.bw = bw
        for k in range(2):
            _queued_round(cc, peer, 1.0 + 0.02 * k, st.bdp() + 10 * st.seg, 0.013)
        paces.append(st.bw_cap)
    assert paces[0] < 1e7 and paces[1] < 5e6
    assert 1e7 - paces[0] > 2 * (5e6 - paces[1])
    assert paces[0] / paces[1] < 1.9


def test_heavy_loss_cuts_the_pace_even_with_no_rtt_above_the_min() -> None:
    """A queue that never drains leaves no RTT well above a min RTT it inflated itself, so a
    loss rate beyond any random loss's (OVERFLOW_LOSS) is congestion without one: it cuts
    the pace; a rate below it, with every RTT at the min, does not."""
    cc, peer = _probing_peer()
    st = peer.cc_state
    _round(cc, peer, 1.0, 20 * SEG, 12 * SEG, 0.0101)  # 37% lost, no queue seen: random loss
    assert st.bw_cap == float("inf")
    _round(cc, peer, 1.02, 20 * SEG, 24 * SEG, 0.0101)  # 55% lost
    assert st.bw_cap == pytest.approx(bbr.LOSS_BETA * 1e7)
    assert peer.pacing_rate == pytest.approx(bbr.LOSS_BETA * 1e7)


def test_the_pace_stays_above_a_fraction_of_a_segment_per_rtt() -> None:
    """A bandwidth estimate of one segment acknowledged over 1.5 s (a first window lost whole
    to a full queue) would pace the repairs at one segment a second and more: the pace is at
    least PACING_FLOOR segments per smoothed RTT; above that floor it follows the model."""
    cc, peer = _probing_peer()
    st = peer.cc_state
    peer.timer.srtt = 0.004
    st.bw = st.seg / 1.5
    delivered = st.round_end - 2 * SEG  # (samples that end no round)
    sample = RateSample(1.0, 0.0, 0.0, delivered, SEG, 0, SEG, 0.0, False, delivered)
    cc.on_rate_sample(peer, sample)  # type: ignore[arg-type]
    assert st.mode == PROBE_BW and st.bw == pytest.approx(st.seg / 1.5)
    assert peer.pacing_rate == pytest.approx(bbr.PACING_FLOOR * st.seg / 0.004)
    st.bw = 1e7
    cc.on_rate_sample(peer, sample)  # type: ignore[arg-type]
    assert peer.pacing_rate == pytest.approx(st.pacing_gain * 1e7)


def test_random_loss_on_an_empty_path_leaves_the_pace_alone() -> None:
    """The same loss rate with RTTs at the min (no queue: losses the path makes, not a
    queue overflowing) does not cut the pace; nor does it before the flow left STARTUP."""
    cc, peer = _probing_peer()
    st = peer.cc_state
    for k in range(5):
        _round(cc, peer, 1.0 + 0.01 * k, 20 * SEG, 5 * SEG, 0.0101)
    assert st.bw_cap == float("inf") and peer.pacing_rate == pytest.approx(1e7)
    st.mode, st.filled = STARTUP, False
    _round(cc, peer, 2.0, 20 * SEG, 5 * SEG, 0.02)
    assert st.bw_cap == float("inf")


def test_losses_are_counted_over_enough_segments() -> None:
    """A round of three segments losing one is not yet a rate: losses add up over rounds
    until LOSS_WINDOW segments, then the window's rate decides."""
    cc, peer = _probing_peer()
    st = peer.cc_state
    for k in range(bbr.LOSS_WINDOW // 4 - 1):
        _round(cc, peer, 1.0 + 0.02 * k, 3 * SEG, SEG, 0.02)
        assert st.bw_cap == float("inf")
    _round(cc, peer, 2.0, 3 * SEG, SEG, 0.02)  # LOSS_WINDOW segments, a quarter lost
    assert st.bw_cap == pytest.approx(bbr.LOSS_BETA * 1e7)


def test_persistent_congestion_drops_the_window_and_the_model_regrows_it() -> None:
    link = Link(50 * MBPS, 0.010)
    run = Run("bbr", link, seg=SEG).run(1.0)
    full = run.peer.cwnd
    run.cc.on_persistent_congestion(run.peer)
    assert run.peer.cwnd == 4.0
    run.run(0.3)
    assert run.peer.cwnd == pytest.approx(full, rel=0.05)


def test_cwnd_max_caps_the_window() -> None:
    link = Link(50 * MBPS, 0.010)  # a BDP of 83 segments
    run = Run("bbr", link, seg=SEG, cwnd_max=20).run(1.0)
    assert max(c for _, c, _ in run.trace) <= 20
    assert run.goodput(since=0.5) == pytest.approx(20 * SEG / (2 * link.delay), rel=0.1)


def test_small_segments_make_a_window_of_more_segments() -> None:
    """The window is a BDP in bytes over the size of the segments actually in flight."""
    link = Link(20 * MBPS, 0.010)
    small = Run("bbr", link, seg=300, chunk_cap=8968).run(1.0)  # an MTU of 9000, messages of 300
    st = small.peer.cc_state
    assert st.seg == pytest.approx(300, rel=0.01)
    assert small.peer.cwnd >= bbr.CWND_GAIN * link.bdp / 300
    assert small.goodput(since=0.5) >= 0.9 * link.rate


def test_an_application_pause_does_not_age_the_bandwidth_estimate() -> None:
    """Rounds in which the application, not the path, set the pace (request/response, a
    trickle) do not age the filter: the next burst starts at the path's rate."""
    link = Link(50 * MBPS, 0.010)
    run = Run("bbr", link, seg=SEG).run(1.0)
    st = run.peer.cc_state
    assert st.bw == pytest.approx(link.rate, rel=0.05)
    run.app_rate = 0.02 * link.rate  # a trickle for 3 s: 150 rounds
    rounds = st.rounds
    run.run(3.0)
    assert st.rounds > rounds + 100
    assert st.bw == pytest.approx(link.rate, rel=0.05)
    assert run.peer.pacing_rate >= 0.7 * link.rate
    run.app_rate = None  # bulk again: at the path's rate from the first round
    n = len(run.trace)
    run.run(0.1)
    assert (len(run.trace) - n) * SEG / 0.1 >= 0.7 * link.rate  # (the first RTT delivers nothing)


@pytest.mark.parametrize("flows", [2, 8])
def test_flows_sharing_a_queue_converge_to_equal_shares(flows: int) -> None:
    """A round's loss rate above LOSS_THRESH bounds the flight: without that, the flow that
    got ahead in STARTUP keeps its lead (at a 20% threshold one of 8 kept 27% of the link)."""
    link = Link(20 * MBPS, 0.010)  # a queue of one BDP
    runs = [Run("bbr", link, seg=SEG, isn=1000 + 17 * i) for i in range(flows)]
    share(runs, 10.0)
    rates = [r.goodput(since=5.0) for r in runs]
    assert sum(rates) >= 0.95 * link.rate
    assert jain(rates) >= 0.95


def test_the_engine_paces_the_first_window_over_the_handshake_rtt() -> None:
    """The congestion state is made before the handshake (no RTT yet); the handshake's sample
    then paces the first window (STARTUP's gain over one round trip), so many flows starting
    together do not land their first windows in a shared queue at once."""
    from btlcore.protocol.wire import T_DATA
    from btlcore.testing.enginepair import EnginePair, safe_decode

    p = EnginePair(Config(cc="bbr", cwnd_initial=16), delay=0.004)
    p.handshake()
    peer = p.pa
    st = peer.cc_state
    assert st.min_rtt == pytest.approx(0.008) and st.bw == 0.0
    first_rate = bbr.STARTUP_GAIN * st.cwnd_bytes / 0.008
    assert peer.pacing_rate == pytest.approx(first_rate)
    mark = len(p.log)
    for i in range(16):
        p.send(0, 1, 1, bytes(1400), key=i)
    p.run(lambda: all(p.completions[i] for i in range(16)), max_time=p.now + 1)
    sent = [(t, len(raw)) for t, s, _d, raw in p.log[mark:]
            if s == 0 and (d := safe_decode(raw)) is not None and d.type == T_DATA]
    assert len(sent) == 16
    # at that rate, not at once: each datagram leaves after the bytes before it were paced out
    paced = sum(n for _t, n in sent[:-1]) / first_rate
    assert sent[-1][0] - sent[0][0] == pytest.approx(paced, rel=0.05)


def _first_pace(delay: float, lost_hellos: int = 0, **cfg: object) -> tuple[object, float]:
    from btlcore.protocol.wire import T_HELLO
    from btlcore.testing.enginepair import EnginePair

    p = EnginePair(Config(cc="bbr", **cfg), delay=delay)  # type: ignore[arg-type]
    if lost_hellos:
        p.faults.drop(where=lambda d: d.type == T_HELLO, count=lost_hellos)
    p.handshake()
    return p.pa, bbr.STARTUP_GAIN * p.pa.cc_state.cwnd_bytes


def test_a_retried_hello_paces_the_first_window_by_the_bound_it_gives() -> None:
    # a 16 ms round trip is longer than the first HELLO retry (10 ms): two HELLOs left before
    # the answer.  Ambiguous, so no timer sample (Karn) -- but the answer came 16 ms after the
    # first HELLO, at most the round trip: the first window is paced over that
    peer, window = _first_pace(0.008)
    assert peer.hello_count == 2 and peer.timer.srtt is None
    assert peer.pacing_rate == pytest.approx(window / 0.016)


def test_a_lost_hello_paces_the_first_window_no_faster_than_the_path() -> None:
    # the first HELLO lost: the answer to the second comes 18 ms after the first, more than
    # the 8 ms round trip -- a pace slower than the path's, never faster
    peer, window = _first_pace(0.004, lost_hellos=1)
    assert peer.timer.srtt is None
    assert peer.pacing_rate == pytest.approx(window / 0.018)
    assert peer.pacing_rate < window / 0.008


def test_hellos_retried_past_the_initial_rtt_leave_the_first_window_unpaced() -> None:
    # three HELLOs lost: 70 ms after the first (10 + 20 + 40 ms of retries), above the initial
    # RTT guess (rto_initial / 3 = 50 ms): no news, as before
    peer, _window = _first_pace(0.0005, lost_hellos=3, rto_initial=0.15)
    assert peer.hello_count == 4 and peer.pacing_rate == 0.0


def test_in_startup_the_pace_only_rises() -> None:
    """The first rate samples (a segment or two over a whole round trip) are far below the
    path's rate: until STARTUP has found the bandwidth the pace never falls to them (on a
    100 ms round trip, a pace set by them held 1 Gb/s to 0.86 of the link over 2 s)."""
    from btlcore.testing.enginepair import EnginePair

    p = EnginePair(Config(cc="bbr"), delay=0.05, mtu=9000)
    p.handshake()
    peer = p.pa
    first = peer.pacing_rate
    assert first == pytest.approx(bbr.STARTUP_GAIN * 32 * (peer.chunk_cap + 32) / 0.1)  # its real segments
    paces: list[float] = []
    p.add_hook(lambda s, d, data, k: paces.append(peer.pacing_rate) if s == 0 and not peer.cc_state.filled else None)
    for i in range(4):
        p.send(0, 1, 1, bytes(1 << 20), key=i)
    p.run(lambda: all(p.completions[i] for i in range(4)), max_time=p.now + 5)
    assert len(paces) > 100 and paces == sorted(paces) and paces[0] == first


def _acks(cc: Bbr, peer: Peer, now: float, n: int, each: int) -> None:
    """``n`` ACKs at ``now``, each acknowledging ``each`` bytes (no rate sample in them)."""
    st = peer.cc_state
    for _ in range(n):
        cc.on_rate_sample(peer, RateSample(now, 0.0, 0.0, st.round_end, each, 0, 40 * SEG, 0.0,  # type: ignore[arg-type]
                                           False, -1))


def test_acks_that_come_in_batches_widen_the_window_by_the_batch() -> None:
    """A receiver that ACKs late and in batches (a busy host, a descheduled process) must not
    leave the window full and the link idle: beyond the ACK-frequency allowance, the window
    takes the bytes acknowledged above what the bandwidth explains (the drafts' extra_acked),
    and lets it go again once no batch came for 2 x AGG_ROUNDS rounds (and 2 x AGG_MIN_TIME)."""
    cc, peer = _probing_peer()
    st = peer.cc_state
    bdp = st.bdp()
    smooth = st.cwnd_gain * bdp + cc.ack_allowance * st.seg
    t = 1.0
    for _ in range(100):  # ACKs at the bandwidth, 1 ms apart: the window settles at the target
        t += 0.001
        _acks(cc, peer, t, 1, int(1e7 * 0.001))
    assert st.cwnd_bytes == pytest.approx(smooth)
    t += 0.006  # the receiver was away 6 ms, then ACKs what came meanwhile, 60 kB at once
    _acks(cc, peer, t, 6, int(1e7 * 0.001))
    assert st.extra_acked() == pytest.approx(6e4)
    for _ in range(20):
        t += 0.001
        _acks(cc, peer, t, 1, int(1e7 * 0.001))
    assert st.cwnd_bytes == pytest.approx(st.cwnd_gain * bdp + 6e4)
    rounds = max(2 * bbr.AGG_ROUNDS, math.ceil(2 * bbr.AGG_MIN_TIME / 0.01)) + 1
    for _ in range(rounds):  # rounds of smooth ACKs: the batch is forgotten
        t += 0.01
        _round(cc, peer, t, int(1e7 * 0.001), 0, 0.01)
    assert st.extra_acked() < cc.ack_allowance * st.seg
    _acks(cc, peer, t + 0.001, 1, 0)
    assert st.cwnd_bytes == pytest.approx(smooth)


def test_a_batch_is_remembered_for_a_time_however_short_the_rounds() -> None:
    """On a host path a round lasts 0.1 ms, so 2 x AGG_ROUNDS rounds forget a descheduled
    receiver's batch within a millisecond, and it comes back every few hundred: the window
    then keeps a batch for AGG_MIN_TIME at least (veth at 1 Gb/s, 5% loss: 623-682 Mb/s
    forgetting it after 10 rounds, 724-726 keeping it)."""
    cc, peer = _probing_peer()
    st = peer.cc_state
    t = 1.0
    for _ in range(100):
        t += 0.001
        _acks(cc, peer, t, 1, int(1e7 * 0.001))
    t += 0.006
    _acks(cc, peer, t, 6, int(1e7 * 0.001))
    assert st.extra_acked() == pytest.approx(6e4)
    for _ in range(4 * bbr.AGG_ROUNDS):  # short rounds, far less than AGG_MIN_TIME in all
        t += 1e-4  # (ACKs below the bandwidth: the interval of the batch ends)
        _round(cc, peer, t, int(1e7 * 1e-4 / 2), 0, 1e-4)
    assert st.extra_acked() == pytest.approx(6e4)  # still held
    for _ in range(math.ceil(2 * bbr.AGG_MIN_TIME / 1e-4) + 2 * bbr.AGG_ROUNDS):
        t += 1e-4
        _round(cc, peer, t, int(1e7 * 1e-4 / 2), 0, 1e-4)
    assert st.extra_acked() < 6e4 / 2  # forgotten once the time passed too


def _phase_after_cruise(bdp_segments: float, heavy: bool = True) -> tuple[int, float]:
    """The PROBE_BW phase (and gain) a cruising flow of ``bdp_segments`` a min RTT moves to
    after the last cruise phase, the one before the probe; ``heavy``: its last loss window
    lost more than HEAVY_LOSS."""
    cc, peer = _probing_peer()
    st = peer.cc_state
    st.bw = bdp_segments * st.seg / st.min_rtt
    st.heavy_loss = heavy
    st.cycle, st.cycle_at, st.pacing_gain = len(bbr.CYCLE) - 1, 0.0, 1.0
    delivered = st.round_end - 2 * SEG  # (a sample that ends no round)
    cc.on_rate_sample(peer, RateSample(1.0, 0.0, 0.0, delivered, SEG, 0, SEG, 0.0, False, delivered))  # type: ignore[arg-type]
    assert st.bw == pytest.approx(bdp_segments * st.seg / st.min_rtt)
    return st.cycle, st.pacing_gain


def test_no_bandwidth_probe_after_heavy_loss_while_the_bdp_is_a_few_segments() -> None:
    """A probe sends a quarter of a BDP more; under PROBE_MIN_SEGMENTS segments a round trip
    that is one whole segment more, whose samples read 1.5-2x the rate: after a loss window
    that lost more than HEAVY_LOSS (a queue overflowing), the 1.25 phase is left out there
    (the cycle goes on to its 0.75 phase); it is kept above it, or without such loss."""
    assert _phase_after_cruise(2.0) == (1, bbr.CYCLE[1])  # 0.75: no probe
    assert _phase_after_cruise(0.5) == (1, bbr.CYCLE[1])
    assert _phase_after_cruise(bbr.PROBE_MIN_SEGMENTS + 0.5) == (0, 1.25)
    assert _phase_after_cruise(65.0) == (0, 1.25)
    assert _phase_after_cruise(2.0, heavy=False) == (0, 1.25)


def test_a_flow_entering_probe_bw_at_the_probe_phase_skips_it_after_heavy_loss() -> None:
    """PROBE_BW's first phase comes from the ISN; where that is the probe, the last loss
    window lost more than HEAVY_LOSS and the BDP is under PROBE_MIN_SEGMENTS segments, the
    flow begins at the next phase instead."""
    for bdp_segments, heavy, phase in ((1.0, True, 1), (65.0, True, 0), (1.0, False, 0)):
        peer = FakePeer(SEG, 7 * 5)  # (an ISN whose phase is the probe: isn % 7 == 0)
        cc = Bbr(Config())
        cc.on_new_peer(peer)  # type: ignore[arg-type]
        st = peer.cc_state
        st.min_rtt, st.min_rtt_at, st.filled = 0.01, 0.0, True
        st.bw = bdp_segments * st.seg / st.min_rtt
        st.heavy_loss = heavy
        cc._enter_probe_bw(peer, st, 1.0)  # type: ignore[arg-type]
        assert (st.cycle, st.pacing_gain) == (phase, bbr.CYCLE[phase])


def test_a_lone_flow_of_one_segment_a_round_trip_keeps_probing_and_fills_its_link() -> None:
    """On a path whose BDP is about one segment (9000 B on 10 Mb/s: 7.2 ms a segment) a lone
    flow sees no heavy loss, so it keeps its probe, which refills what the 0.75
    phase drained: it fills the link."""
    link = Link(10 * MBPS, 0.0005, queue=3 * 9000)  # (a queue of 3 segments)
    rec = Modes()
    run = Run("bbr", link, seg=9000, on_sample=rec).run(3.0)
    assert run.peer.cc_state.bdp() < bbr.PROBE_MIN_SEGMENTS * 9000
    assert 1.25 in [g for t, g, _, _ in rec.gains if t > 0.5]
    assert run.goodput(since=1.0) >= 0.98 * link.rate


def test_a_loss_window_that_lost_heavily_is_remembered_until_the_next_one() -> None:
    """The flag the probe rule reads is the last loss window's: set by one that lost more
    than HEAVY_LOSS of its bytes, cleared by the next that did not."""
    cc, peer = _probing_peer()
    st = peer.cc_state
    _round(cc, peer, 1.0, 20 * SEG, 12 * SEG, 0.0101)  # 37% lost
    assert st.heavy_loss
    _round(cc, peer, 1.02, 4 * SEG, 0, 0.0101)  # (a round too short to close a window)
    assert st.heavy_loss
    _round(cc, peer, 1.04, 20 * SEG, 2 * SEG, 0.0101)  # 9% lost
    assert not st.heavy_loss
