"""cubic (RFC 9438): the cubic curve, beta, fast convergence, the Reno-friendly region,
HyStart++ and the undo, on hand-made samples and on a simulated bottleneck (cclink.py)."""

from __future__ import annotations

import pytest
from cclink import FakePeer, Link, Run

from btlcore import Config
from btlcore.protocol.congestion import cubic
from btlcore.protocol.congestion.cubic import Cubic
from btlcore.protocol.congestion.rate import RateSample

SEG = 1500
MBPS = 1e6 / 8


class Driver:
    """One peer fed a whole window per round trip (one sample per round), as a path with no
    queue and no loss would: the window's growth is the algorithm's alone."""

    def __init__(self, rtt: float, cwnd: float, **config: object) -> None:
        self.cc = Cubic(Config(cc="cubic", **config))  # type: ignore[arg-type]
        self.peer = FakePeer(SEG, 7)
        self.cc.on_new_peer(self.peer)  # type: ignore[arg-type]
        self.peer.timer.srtt = self.peer.timer.min_rtt = self.rtt = rtt
        self.peer.cwnd = cwnd
        self.peer.ssthresh = cwnd  # congestion avoidance
        self.now, self.delivered = 0.0, 0

    def rounds(self, n: int) -> list[tuple[float, float]]:
        out = []
        for _ in range(n):
            self.now += self.rtt
            acked = int(self.peer.cwnd * SEG)
            self.delivered += acked
            self.cc.on_rate_sample(self.peer, RateSample(  # type: ignore[arg-type]
                self.now, acked / self.rtt, self.rtt, self.delivered, acked, 0, 0, self.rtt, False))
            out.append((self.now, self.peer.cwnd))
        return out


def test_a_loss_multiplies_by_beta_and_the_window_follows_the_cubic_curve() -> None:
    d = Driver(rtt=0.2, cwnd=100.0)  # (a long path: the Reno estimate stays behind the curve)
    d.cc.on_loss_episode(d.peer)  # type: ignore[arg-type]
    assert d.peer.cwnd == d.peer.ssthresh == pytest.approx(100 * cubic.BETA)
    st = d.peer.cc_state
    assert st.w_max == 100.0
    trace = d.rounds(60)  # 12 s
    k = ((100.0 - 70.0) / cubic.C) ** (1 / 3)
    assert st.k == pytest.approx(k)  # 4.2 s
    epoch = st.epoch_at
    assert trace[0][1] == pytest.approx(70 + cubic.ALPHA)  # (at t = 0 the Reno estimate leads)
    for t, w in trace[1:]:
        # a round that acknowledged a whole window moves it to the RFC's target, the curve
        # one RTT ahead: W_cubic(t + RTT)
        assert w == pytest.approx(st.w_cubic(t - epoch + d.rtt))
    assert st.w_est < trace[-1][1] / 2

    def at(t: float) -> float:  # the window ``t`` seconds into the epoch
        return min(trace, key=lambda tw: abs(tw[0] - epoch - t))[1]

    # concave up to K (fast at first, flat near W_max), convex after
    assert at(1) - at(0) > at(k) - at(k - 1) > 0
    assert at(k - d.rtt) == pytest.approx(100.0, abs=0.5)
    assert at(k + 3) - at(k + 2) > at(k + 1) - at(k) > 0


def test_fast_convergence_lowers_w_max_when_a_loss_comes_below_it() -> None:
    d = Driver(rtt=0.1, cwnd=100.0)
    d.cc.on_loss_episode(d.peer)  # type: ignore[arg-type]
    d.rounds(10)
    w = d.peer.cwnd
    assert w < 100.0
    d.cc.on_loss_episode(d.peer)  # type: ignore[arg-type]
    st = d.peer.cc_state
    assert st.w_max == pytest.approx(w * (1 + cubic.BETA) / 2)  # below where this loss came
    assert d.peer.cwnd == pytest.approx(w * cubic.BETA)
    d.rounds(60)  # grown past it: the next loss sets W_max where it happened
    w = d.peer.cwnd
    assert w > st.w_max
    d.cc.on_loss_episode(d.peer)  # type: ignore[arg-type]
    assert st.w_max == w


def test_the_reno_friendly_region_on_a_short_path() -> None:
    """At 1 ms the cubic curve is slower than AIMD: the window grows as AIMD with beta 0.7
    would, ALPHA segments per round (then one per round once past the last loss's window)."""
    d = Driver(rtt=0.001, cwnd=100.0)
    d.cc.on_loss_episode(d.peer)  # type: ignore[arg-type]
    st = d.peer.cc_state
    trace = d.rounds(40)
    for t, w in trace[1:]:
        assert w >= st.w_cubic(t - st.epoch_at)  # never below the curve ...
    assert trace[-1][1] == pytest.approx(70 + 40 * cubic.ALPHA, abs=1.0)  # ... and at Reno's
    assert st.w_cubic(trace[-1][0] - st.epoch_at) < trace[-1][1] - 10  # far above the curve
    d.rounds(80)  # past the previous window: one segment per round, as Reno
    before = d.peer.cwnd
    d.rounds(10)
    assert d.peer.cwnd - before == pytest.approx(10, abs=0.5)


def test_hystart_leaves_slow_start_before_the_queue_overflows() -> None:
    """HyStart++ sees the RTT rise as the queue builds, slows down (CSS), then leaves slow
    start: far fewer drops than slow start running into the queue's end."""
    css_at: list[tuple[float, int]] = []

    def watch(run: Run, s: RateSample) -> None:
        if run.peer.cc_state.css_baseline and not css_at:
            css_at.append((s.now, run.dropped_queue))

    class NoHystart(Cubic):
        hystart = False

    def link() -> Link:
        return Link(50 * MBPS, 0.010, queue=4 * 50 * MBPS * 0.020)

    hs = Run("cubic", link(), seg=SEG, on_sample=watch).run(1.0)
    plain = Run("cubic", link(), seg=SEG, algorithm=NoHystart(Config(cc="cubic"))).run(1.0)
    assert css_at and css_at[0][1] == 0  # the rise was seen before anything was dropped
    assert hs.peer.ssthresh < float("inf")  # then slow start ended
    assert plain.dropped_queue > 0
    assert hs.dropped_queue < 0.3 * plain.dropped_queue


def test_an_undo_restores_the_window_ssthresh_and_w_max() -> None:
    d = Driver(rtt=0.01, cwnd=100.0)
    st = d.peer.cc_state
    st.w_max = 120.0
    d.cc.on_loss_episode(d.peer)  # type: ignore[arg-type]
    assert (d.peer.cwnd, st.w_max) == (pytest.approx(70.0), pytest.approx(85.0))  # fast convergence
    d.cc.on_spurious(d.peer)  # type: ignore[arg-type]
    assert (d.peer.cwnd, d.peer.ssthresh, st.w_max) == (100.0, 100.0, 120.0)
    d.cc.on_persistent_congestion(d.peer)  # type: ignore[arg-type]
    assert d.peer.cwnd == 32.0 and d.peer.ssthresh == 70.0  # slow start from the initial window
    d.cc.on_spurious(d.peer)  # type: ignore[arg-type]
    assert d.peer.cwnd == 100.0


def test_cwnd_max_caps_the_window_and_the_link_is_filled_without_loss() -> None:
    run = Run("cubic", Link(50 * MBPS, 0.010), seg=SEG, cwnd_max=30).run(1.0)
    assert max(c for _, c, _ in run.trace) == 30
    full = Run("cubic", Link(50 * MBPS, 0.010), seg=SEG).run(3.0)
    assert full.goodput(since=1.0) >= 0.9 * full.link.rate
