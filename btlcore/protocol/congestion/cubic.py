"""CUBIC (RFC 9438): after a loss the window follows a cubic curve of the time since, centred
on where the loss happened, so it returns there fast, lingers near it, then probes beyond.

* ``W_cubic(t) = C (t - K)^3 + W_max`` with ``K = cbrt((W_max - cwnd_epoch) / C)``, ``C = 0.4``
  segments/s^3, ``t`` the time since the congestion-avoidance epoch began; each ACK moves the
  window toward ``W_cubic(t + RTT)`` (never more than half again per round).
* A loss multiplies the window by ``beta = 0.7``; with **fast convergence**, a loss below the
  previous ``W_max`` sets ``W_max`` lower still (``cwnd (1 + beta) / 2``), yielding room to a
  newer flow.
* **The Reno-friendly region**: ``W_est`` grows as AIMD with the same ``beta`` would
  (``3 (1 - beta) / (1 + beta)`` segments per round, 1 once past the window of the last loss),
  and the window is never below it: on short paths CUBIC is never slower than Reno.
* **HyStart++** (RFC 9406, on unless ``hystart`` is False): slow start leaves for a
  conservative slow start (growth / 4) when a round's min RTT rose by an eighth (4 to 16 ms),
  and for congestion avoidance after 5 such rounds, before a queue overflows.
* An undo (``on_spurious``) restores the window, ``ssthresh`` and ``W_max`` of before the
  decrease (RFC 9438 section 4.9).

The window grows per ACK datagram (:meth:`Cubic.on_rate_sample`, by the bytes acknowledged
over the mean segment size), never per segment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Final

from mypy_extensions import mypyc_attr

from .base import RateSampled
from .model import INF, PathModel

if TYPE_CHECKING:
    from ...config import Config
    from ..peers import Peer
    from .rate import RateSample

C: Final = 0.4  # segments / s^3
BETA: Final = 0.7  # window after a loss, as a fraction of before
ALPHA: Final = 3.0 * (1.0 - BETA) / (1.0 + BETA)  # Reno-friendly increase per round, segments
MIN_CWND: Final = 2.0
# HyStart++ (RFC 9406)
HS_MIN_RTT_THRESH, HS_MAX_RTT_THRESH = 0.004, 0.016  # seconds
HS_MIN_RTT_DIVISOR: Final = 8
HS_RTT_SAMPLES: Final = 8  # RTT samples a round needs before its min RTT is compared
CSS_GROWTH_DIVISOR: Final = 4
CSS_ROUNDS: Final = 5


class CubicState(PathModel):
    """One connection's CUBIC state (``peer.cc_state``); windows in segments."""

    __slots__ = ("w_max", "k", "epoch_at", "cwnd_epoch", "w_est", "cwnd_prior", "undo",
                 "last_round_rtt", "round_rtt", "rtt_count", "css_baseline", "css_rounds")

    def __init__(self, peer: Peer) -> None:
        super().__init__(peer)
        self.w_max = 0.0  # the window when the last loss came (after fast convergence)
        self.k = 0.0  # seconds from the epoch's start until W_cubic is back at w_max
        self.epoch_at: float | None = None  # when congestion avoidance (re)started
        self.cwnd_epoch = 0.0
        self.w_est = 0.0  # the window an AIMD flow would have (Reno-friendly region)
        self.cwnd_prior = 0.0  # the window just before the last decrease
        self.undo: tuple[float, float, float, float] | None = None  # cwnd, ssthresh, w_max, prior
        inf = INF
        self.last_round_rtt = self.round_rtt = inf  # HyStart++: min RTT of last / this round
        self.rtt_count = 0
        self.css_baseline = 0.0  # > 0: in conservative slow start, from this round min RTT
        self.css_rounds = 0

    def w_cubic(self, t: float) -> float:
        """The cubic curve, ``t`` seconds into the epoch (segments)."""
        d = t - self.k
        return C * d * d * d + self.w_max


# subclassed by pure Python (third parties, tests): allowed when compiled
@mypyc_attr(allow_interpreted_subclasses=True)
class Cubic(RateSampled):
    """The ``cubic`` algorithm (``Config.cwnd_initial``, ``Config.cwnd_max``: ``0``, no cap
    but the send window)."""

    __slots__ = ()

    hystart: ClassVar[bool] = True  # HyStart++ in slow start (a subclass may turn it off)

    def __init__(self, config: Config) -> None:
        self.cwnd_max = float(config.cwnd_max) if config.cwnd_max else INF
        self.cwnd_initial = float(min(config.cwnd_initial, self.cwnd_max))

    def on_new_peer(self, peer: Peer) -> None:
        peer.cc_state = CubicState(peer)
        peer.cwnd = self.cwnd_initial
        peer.ssthresh = INF
        peer.cwnd_cap = self.cwnd_max  # (the engine's auto-tuning may move it: autotune.py)

    def on_ack(self, peer: Peer) -> None:
        """Nothing per segment: the window grows per ACK datagram (on_rate_sample)."""

    def on_rate_sample(self, peer: Peer, s: RateSample) -> None:
        st: CubicState = peer.cc_state
        ended = st.update(peer, s)
        cwnd = peer.cwnd
        if cwnd < peer.ssthresh:
            css = self._hystart(peer, st, s, ended) if self.hystart else False
            if s.app_limited:
                return  # (the window was not what limited the sender: no evidence to grow on)
            acked = s.newly_acked / st.seg
            cwnd += acked / CSS_GROWTH_DIVISOR if css else acked
        else:
            if s.app_limited:
                return
            cwnd = self._avoid(peer, st, s, cwnd)
        cap = peer.cwnd_cap
        peer.cwnd = cwnd if cwnd < cap else cap

    def _avoid(self, peer: Peer, st: CubicState, s: RateSample, cwnd: float) -> float:
        """Congestion avoidance: toward W_cubic(t + RTT), never below the Reno estimate."""
        now = s.now
        if st.epoch_at is None:
            st.epoch_at, st.cwnd_epoch, st.w_est = now, cwnd, cwnd
            if st.w_max < cwnd:
                st.w_max = cwnd  # (no loss yet, or past the last one: the convex part at once)
            st.k = ((st.w_max - cwnd) / C) ** (1.0 / 3.0)
        t = now - st.epoch_at
        rtt = peer.timer.srtt or st.min_rtt
        acked = s.newly_acked / st.seg
        st.w_est += (1.0 if st.w_est >= st.cwnd_prior else ALPHA) * acked / cwnd
        if st.w_cubic(t) < st.w_est:
            return st.w_est  # the Reno-friendly region
        target = st.w_cubic(t + rtt)
        if target < cwnd:
            target = cwnd
        elif target > 1.5 * cwnd:
            target = 1.5 * cwnd
        return cwnd + (target - cwnd) / cwnd * acked

    def _hystart(self, peer: Peer, st: CubicState, s: RateSample, ended: bool) -> bool:
        """HyStart++'s per-ACK step; True while in conservative slow start."""
        if ended:
            if st.css_baseline:
                st.css_rounds += 1
                if st.css_rounds >= CSS_ROUNDS:  # the queue is real: congestion avoidance
                    peer.ssthresh = peer.cwnd
                    st.css_baseline = 0.0
                    return False
            st.last_round_rtt, st.round_rtt, st.rtt_count = st.round_rtt, INF, 0
        if s.rtt > 0.0:
            st.rtt_count += 1
            if s.rtt < st.round_rtt:
                st.round_rtt = s.rtt
        if st.css_baseline:
            if st.round_rtt < st.css_baseline:  # the delay went away: a false alarm
                st.css_baseline, st.css_rounds = 0.0, 0
            return bool(st.css_baseline)
        last = st.last_round_rtt
        if st.rtt_count >= HS_RTT_SAMPLES and last != INF:
            thresh = min(max(last / HS_MIN_RTT_DIVISOR, HS_MIN_RTT_THRESH), HS_MAX_RTT_THRESH)
            if st.round_rtt >= last + thresh:
                st.css_baseline, st.css_rounds = st.round_rtt, 0
                return True
        return False

    def _save(self, peer: Peer, st: CubicState) -> None:
        st.undo = (peer.cwnd, peer.ssthresh, st.w_max, st.cwnd_prior)

    def on_loss_episode(self, peer: Peer) -> None:
        """Multiply by beta, with fast convergence (once per loss episode)."""
        st: CubicState = peer.cc_state
        self._save(peer, st)
        cwnd = peer.cwnd
        st.w_max = cwnd * (1.0 + BETA) / 2.0 if cwnd < st.w_max else cwnd
        st.cwnd_prior = cwnd
        peer.ssthresh = peer.cwnd = max(cwnd * BETA, MIN_CWND)
        st.epoch_at = None
        st.css_baseline = 0.0

    def on_persistent_congestion(self, peer: Peer) -> None:
        """Timeouts in a row: slow start again from the initial window (RFC 9438 4.8)."""
        st: CubicState = peer.cc_state
        self._save(peer, st)
        cwnd = peer.cwnd
        st.w_max, st.cwnd_prior = cwnd, cwnd
        peer.ssthresh = max(cwnd * BETA, MIN_CWND)
        peer.cwnd = min(self.cwnd_initial, peer.ssthresh)
        st.epoch_at = None

    def on_spurious(self, peer: Peer) -> None:
        """The last decrease was for nothing: restore what it changed (RFC 9438 4.9)."""
        st: CubicState = peer.cc_state
        if st.undo is None:
            return
        cwnd, ssthresh, st.w_max, st.cwnd_prior = st.undo
        st.undo = None
        if cwnd > peer.cwnd:
            peer.cwnd = cwnd
        peer.ssthresh = max(peer.ssthresh, ssthresh)
        st.epoch_at = None
