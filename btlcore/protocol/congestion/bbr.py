"""BBR-like congestion control: steer by a model of the path, not by losses.

The model (:class:`~.model.PathModel`) holds the bottleneck bandwidth (max delivery rate of
the last 10 rounds) and the propagation delay (min RTT of the last 10 s).  Sends are paced at
``pacing_gain x bandwidth`` and the window is ``cwnd_gain x bandwidth x min RTT`` (the BDP)
plus room for ACKs that arrive in batches.  A state machine moves the gains:

=========  ============================  ==========================================
mode       pacing gain                   leaves when
=========  ============================  ==========================================
STARTUP    2.77 (doubles per round)      the bandwidth grew < 25% in 3 rounds, or a
                                         round lost more than LOSS_THRESH of its bytes
                                         while a queue stood (or HEAVY_LOSS of them)
DRAIN      1/2.77 (empties the queue)    in flight <= BDP
PROBE_BW   1.25, 0.75, then 1 x 6        (stays: one phase per min RTT)
           (no 1.25 after heavy loss while
           the BDP is a few segments)
PROBE_RTT  1, window 1/2 BDP             200 ms and a round at that window
=========  ============================  ==========================================

PROBE_RTT is entered from any mode when no RTT as short as the min RTT was seen for 10 s.

Losses.  A random loss says nothing about the path's capacity, and a loss-based cut on every
one is what makes ``aimd`` crawl on a lossy long path.  So losses are read per round, as a
rate (BBRv2/v3's idea): only a round that lost more than :data:`LOSS_THRESH` (10%) of its
bytes (a queue overflowing, above the random loss of lossy paths) bounds the flight
(``inflight_hi``, never below the BDP) and ends a bandwidth probe.  It ends STARTUP only if
the RTT showed a queue meanwhile, or the round lost more than :data:`HEAVY_LOSS`: random
loss at 10% loses more than LOSS_THRESH in about every other round, and STARTUP then ended
at a fraction of the bandwidth (1 Gb/s at 10 ms: at 120 Mb/s, 0.20 of the link over the
sweep's run; 0.88 now).  Loss episodes and single losses change nothing; persistent congestion (timeouts in a
row) drops the window to the minimum, regrown from the model as ACKs come back.  Losses are
counted over a round, or longer until :data:`LOSS_WINDOW` segments: a flow of a few segments
per round would otherwise never see a rate, only single losses.

Sharing a queue.  Each flow's bandwidth estimate is its own best delivery rate; on a full
path a few lucky samples give one flow the whole link, and pacing at it, that flow keeps
the queue full and the others' packets are the ones dropped (Jain 0.76 for 2 flows at
100 Mb/s, 1 ms).  So high loss while a queue stood (no RTT of the window below
:data:`CAP_RTT` x the min RTT: random loss on an empty path is not this) cuts the rate the
flow paces at, ``bw_cap``, to :data:`LOSS_BETA` of it (BBRv2's ``bw_lo``, in PROBE_BW
only).  The cap regrows once a round by the same step for every flow on the path, one
segment per min RTT, doubling per round while no queue stands (so a lone flow has its
bandwidth back in a few rounds): flows sharing a queue converge, as under AIMD.  A queue
that never drains hides itself (every min RTT is measured with it full), so a window that
lost more than :data:`OVERFLOW_LOSS` (half) of its bytes cuts the cap whatever the RTTs
show.  And a queue that stood :data:`QUEUE_ROUNDS` rounds in a row holding at least
:data:`QUEUE_SEGMENTS` of the flow's own segments cuts the cap before it overflows, by
what the flow holds there beyond those (drained within a min RTT; Vegas's rule): the
estimates of flows sharing a queue follow their paces (each flow's delivery rate is its share
of the queue's service), so any split of the link is an equilibrium and the shares wander; a
FIFO queue holds each flow's segments in proportion to its rate, so this cut falls on the
flows above their share, more than in proportion (a cut by a common factor kept any split),
and pulls the shares together without the losses (its price: beside ``cubic``, which keeps
a queue standing, a ``bbr`` flow keeps about a quarter of the link, where it took a third to
three quarters before).  And
the pace never falls below :data:`PACING_FLOOR` segments per smoothed RTT: where
a fair share is under a datagram per round trip (8 flows on 100 Mb/s at 1 ms, 9000 B), a
flow whose first window was lost whole would otherwise pace its repairs at its estimate of
a segment over a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from mypy_extensions import mypyc_attr

from .base import RateSampled
from .model import INF, MIN_SEGMENTS, PathModel, segments

if TYPE_CHECKING:
    from ...config import Config
    from ..peers import Peer
    from .rate import RateSample

# (Finals: compiled, a plain module global is a dict lookup and an unboxing per use)
STARTUP: Final = 0
DRAIN: Final = 1
PROBE_BW: Final = 2
PROBE_RTT: Final = 3
MODE_NAMES = ("startup", "drain", "probe_bw", "probe_rtt")

STARTUP_GAIN: Final = 2.77  # pacing gain in STARTUP (BBRv3's; 2/ln 2 doubles the rate per round)
DRAIN_GAIN: Final = 1.0 / 2.77  # pacing gain in DRAIN: the queue STARTUP built drains in a round
CWND_GAIN: Final = 2.0  # window, in BDPs (room for delayed and batched ACKs, and for probing)
CYCLE = (1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # PROBE_BW's pacing gains, one per min RTT
FULL_BW_GROWTH: Final = 1.25  # STARTUP goes on while the bandwidth grows this much ...
FULL_BW_ROUNDS: Final = 3  # ... within this many rounds
DRAIN_ROUNDS: Final = 3  # DRAIN ends after this many rounds even if the flight is still above a BDP
PROBE_RTT_TIME: Final = 0.2  # seconds PROBE_RTT holds its small window
PROBE_RTT_GAIN: Final = 0.5  # PROBE_RTT's window, in BDPs (BBRv2's: keeps half the throughput)
# a round losing more than this fraction of its bytes saw congestion.  A compromise between
# flows sharing a queue and random loss: at 20% one of 8 flows kept 27% of the link (Jain
# 0.83 on tests/core/cclink.py); at 5% (2% is BBRv2's) 8 flows on the engine reach Jain 0.96
# but random loss above it bounds every round, the bound (a BDP) shrinks with the delivery
# rate, and 1 Gb/s at 10 ms with 10% loss fell to 0.31 of the link; at 10%, 0.76 there, and
# Jain 0.93 for 8 flows (16 s on the engine's sim, 1 BDP queue), 0.96-0.99 on cclink
LOSS_THRESH: Final = 0.1
LOSS_MIN_SEGMENTS: Final = 3  # ... and at least this many segments' worth
LOSS_BETA: Final = 0.7  # inflight_hi after such a round: the flight then, times this
HI_GROWTH: Final = 2.0  # inflight_hi per round without high loss (it lets go fast, then is dropped)
LOSS_WINDOW: Final = 20  # losses are counted over a round, or more until this many segments
CAP_RTT: Final = 1.25  # ... and the bandwidth is cut only if no RTT then was below this x min RTT
# STARTUP ends on a high-loss round only if a queue stood meanwhile (as the cap's cut), or the
# round lost more than this: random loss on an empty path does not end it (at 10% random loss
# every other round loses more than LOSS_THRESH, and STARTUP ended in its first rounds: 1 Gb/s
# at 10 ms left it at 120 Mb/s, and PROBE_BW's probes, 25% a cycle, took seconds to find the
# rest).  A round of 20 segments at 10% random loss loses more than 30% once in 400.
HEAVY_LOSS: Final = 0.3
# losses above this share of a window are congestion whatever the RTTs show: with 8 flows on
# 100 Mb/s at 1 ms (a path and queue of 7 datagrams of 9000 B) the queue never drained, every
# flow's min RTT was measured with it full, no RTT stood 1.25 x above it, and the flows lost
# half of what they sent for the whole run without a cut.  Random loss at 10% (or 5% in bursts
# of 4) loses half of a 20-segment window about never; at HEAVY_LOSS it cut the cap of lone
# flows on burst loss (100 Mb/s at 10 ms: goodput 1.05 -> 0.98)
OVERFLOW_LOSS: Final = 0.5
CAP_STEP0: Final = 1.0  # bw_cap's first step after a cut, segments per min RTT (doubles per round)
# a queue standing this many rounds in a row (no RTT below CAP_RTT x the min RTT), holding at
# least QUEUE_SEGMENTS of the flow's own segments (_standing), cuts the flow's pace (in
# PROBE_BW) by the bytes it holds there beyond QUEUE_SEGMENTS over a min RTT (never below
# LOSS_BETA of it).  Traced at 100 Mb/s, 10 ms, 1 BDP: the estimates summed to
# 1.1-1.3 x the link, each flow's the share its own probes took, the 8-flow queue never
# drained (16-17% of sends resent) and the shares wandered (Jain 0.90-0.99 per 40 round
# trips, 0.898 and 0.921 in the sweep's window); with this cut, seeds 1-3, 2 flows
# 0.958-0.992 and 8 flows 0.977-0.983 there, with fewer resends (3-4%, 14%).  Fewer than 3
# of its segments in the queue: on a 100 Mb/s, 1 ms path with 9000-byte datagrams a whole
# window is 3-5 of them, and cutting such a flow cannot drain the queue, only unbalance the
# flows (2 flows there, counting by delay alone: Jain 0.968 -> 0.950 at 2).  The cut was by
# a common factor (0.85) before: every flow's pace by the same fraction, so the split held
# (2 flows there, 30 seeds: 5 runs below Jain 0.95, a mean of 0.982; 1 and 0.990 with the
# excess drained)
QUEUE_ROUNDS: Final = 2
QUEUE_SEGMENTS: Final = 3.0
# ... and only a queue of at least this many seconds of delay: on a host path (veth, 1 Gb/s,
# min RTT 30 us) the RTT of a CPU-bound receiver stands at 3-10 x the min RTT with no
# network queue behind it, and cutting the pace there cut the goodput at 10% loss from
# 686 to 400 Mb/s; the queues the cut is for (flows sharing a bottleneck) stand for
# milliseconds
QUEUE_DELAY_MIN: Final = 1e-3
# no pace below this many segments per smoothed RTT (a window-based protocol's smallest window
# is one).  A flow whose first window was lost whole to a full queue (1 segment of 42
# acknowledged) has a bandwidth estimate of a segment over a long interval, and paced at it
# (times DRAIN's gain) it sent its repairs a datagram every second or two: flows that stalled
# for the whole run (8 flows on 100 Mb/s at 1 ms, two of them at 0.0 of the link).  Half a
# segment: 8 flows at a whole segment per RTT (about 5 ms with the queue full) fill that path
PACING_FLOOR: Final = 0.5
AGG_ROUNDS: Final = 5  # the ACK-aggregation max filter keeps two buckets of this many rounds
AGG_MAX_TIME: Final = 0.1  # ... and never more than this many seconds of the bandwidth
AGG_MIN_TIME: Final = 0.1  # ... a bucket lasting at least this long (a host path's rounds last 0.1-1 ms)
# after a loss window that lost more than HEAVY_LOSS of its bytes (a queue overflowing, not
# random loss: at 10% a window of 20 segments loses that much once in 400), PROBE_BW leaves
# out its probe (the 1.25 phase) while the BDP is under this many segments: a probe sends a
# quarter of a BDP more, under 4 segments a round trip less than a segment, so the sender
# sends either nothing more or a whole segment more.  Delivery rates are counted in whole
# segments a round trip too, so its samples read (n + 1) / n of the rate, not 1.25 of it: a
# flow of 1 or 2 segments a round trip doubled or raised by half its estimate, the max filter
# kept that 10 rounds, and the faster pace refreshed it.  Traced at 100 Mb/s, 1 ms, 8 flows
# (9000 B, a fair share of 0.35 datagram per min RTT): estimates at such levels (16, 35, 50
# Mb/s) summing to 2.2 x the link, half of all sends lost, and the flows a probe lifted a
# level kept it (Jain 0.909 and 0.935 at seeds 6 and 3; over seeds 1-30, 7 runs below 0.95
# at a 1-BDP queue and 13 at 2 BDP; 4 and 8 with this).  The cycle goes on to its 0.75 phase:
# a phase below the estimate is when a level held up by the flow's own pace can lapse
# (going on to a 1.0 phase instead left 2 of the 27 fairness runs below 0.95).  Only after
# heavy loss: a lone flow on a path of a segment or two (10 Mb/s, 0.05 ms) needs its probe
# to refill what the 0.75 phase drained (without it 0.995 -> 0.965 of the link, and
# spurious resends above 1% on burst loss; gated by a congestion cut instead, a lone flow
# on burst loss was cut, stopped probing and fell to 0.52).  At 3, not 4: 8 flows on
# 100 Mb/s at 10 ms or 1 Gb/s at 1 ms hold 3-4 segments a round trip and converge by
# probing (with 4, Jain 0.99 -> 0.96-0.97 there)
PROBE_MIN_SEGMENTS: Final = 3.0


class BbrState(PathModel):
    """One connection's BBR state (``peer.cc_state``)."""

    __slots__ = ("mode", "pacing_gain", "cwnd_bytes", "filled", "full_bw",
                 "full_bw_rounds", "cycle", "cycle_at", "probe_rtt_until", "mode_round",
                 "prior_cwnd", "inflight_hi", "undo_hi", "loss_exit", "heavy_loss", "bw_cap",
                 "cap_step", "undo_cap", "win_rtt", "agg_start", "agg_acked", "agg_max", "agg_prev", "agg_bucket_at",
                 "queued_rounds")

    def __init__(self, peer: Peer, cwnd_initial: float) -> None:
        super().__init__(peer)
        self.mode = STARTUP
        self.pacing_gain = STARTUP_GAIN
        self.cwnd_bytes = cwnd_initial * self.seg
        self.filled = False  # STARTUP found the bandwidth
        self.full_bw = 0.0  # the bandwidth when it last grew by FULL_BW_GROWTH
        self.full_bw_rounds = 0  # rounds since
        self.cycle = 0  # PROBE_BW's phase (index in CYCLE) and when it began
        self.cycle_at = 0.0
        self.probe_rtt_until: float | None = None  # PROBE_RTT's end, once its window is reached
        #: the round the current mode counts its rounds from: DRAIN's first, PROBE_RTT's first
        #: after its small window was reached (one slot: PROBE_RTT, entered from DRAIN, never
        #: goes back to it)
        self.mode_round = 0
        self.prior_cwnd = 0.0  # the window before PROBE_RTT or persistent congestion, bytes
        self.inflight_hi = INF  # upper bound on the flight, bytes (set by high loss)
        self.undo_hi = INF  # inflight_hi before the last cut (on_spurious restores it)
        self.loss_exit = False  # STARTUP ended on a high-loss round (on_spurious resumes it)
        #: the last loss window lost more than HEAVY_LOSS (PROBE_MIN_SEGMENTS; a bool beside
        #: loss_exit: they share one word, no memory per peer more)
        self.heavy_loss = False
        #: upper bound on the bandwidth the flow paces at, bytes/s (inf: none): cut by
        #: LOSS_BETA on a high-loss round, regrown by steps of the same size for every flow
        self.bw_cap = INF
        self.cap_step = CAP_STEP0  # the next step, segments per min RTT
        self.undo_cap = INF  # bw_cap before the last cut (on_spurious restores it)
        self.win_rtt = INF  # the shortest RTT sample since losses were last counted
        #: ACK aggregation (the BBR drafts' extra_acked): an interval's start and the bytes
        #: acknowledged since, and the most acknowledged beyond what the bandwidth explains,
        #: in this bucket of AGG_ROUNDS rounds and the last one
        self.agg_start = 0.0
        self.agg_acked = 0.0
        self.agg_max = 0.0
        self.agg_prev = 0.0
        self.agg_bucket_at = 0.0  # when this bucket began
        self.queued_rounds = 0  # rounds in a row a queue stood (QUEUE_ROUNDS)

    def aggregate(self, now: float, acked: int, cwnd: float) -> None:
        """Per ACK: the bytes acknowledged beyond what the bandwidth estimate delivers since
        the interval began (a receiver that ACKs late and in batches: a busy host's receive
        pass, a descheduled process, ACK thinning).  An interval ends when the ACKs fall
        behind the estimate."""
        expected = self.bw * (now - self.agg_start)
        if self.agg_acked <= expected:
            self.agg_start, self.agg_acked, expected = now, 0.0, 0.0
        self.agg_acked += acked
        extra = self.agg_acked - expected
        if extra > cwnd:
            extra = cwnd
        if extra > self.agg_max:
            self.agg_max = extra

    def extra_acked(self) -> float:
        """The ACK aggregation of the last AGG_ROUNDS to 2 x AGG_ROUNDS rounds (and at least
        AGG_MIN_TIME to twice that: on a host path, where a round lasts 0.1 ms, ten rounds
        forget a descheduled receiver's batch within a millisecond, and it comes back every
        few hundred), bytes, within AGG_MAX_TIME of the bandwidth."""
        extra = self.agg_max if self.agg_max > self.agg_prev else self.agg_prev
        most = self.bw * AGG_MAX_TIME
        return extra if extra < most else most

    @property
    def cwnd_gain(self) -> float:
        """The window's gain in BDPs: STARTUP's until the pipe was filled, CWND_GAIN after
        (derived, not kept: a slot less per peer)."""
        return CWND_GAIN if self.filled else STARTUP_GAIN

    def pacing_bw(self) -> float:
        """The bandwidth the flow paces at and sizes its window by: the model's, within the cap."""
        return self.bw if self.bw < self.bw_cap else self.bw_cap

    @property
    def mode_name(self) -> str:
        return MODE_NAMES[self.mode]


# subclassed by pure Python (third parties, tests): allowed when compiled
@mypyc_attr(allow_interpreted_subclasses=True)
class Bbr(RateSampled):
    """The ``bbr`` algorithm (``Config.cwnd_initial`` is STARTUP's first window;
    ``Config.cwnd_max`` caps the window, ``0``: no cap but the send window)."""

    __slots__ = ("ack_allowance",)

    probe_rtt = True  # PROBE_RTT when the min RTT is 10 s old (``none``, windowless, has none)

    def __init__(self, config: Config) -> None:
        self.cwnd_max = float(config.cwnd_max) if config.cwnd_max else INF
        self.cwnd_initial = float(min(config.cwnd_initial, self.cwnd_max))
        # segments the receiver may hold before it ACKs (its ACK frequency), twice: the
        # window needs them above the BDP or ACK batching alone would stall the flow
        self.ack_allowance = 2.0 * config.ack_frequency

    def on_new_peer(self, peer: Peer) -> None:
        st = peer.cc_state = BbrState(peer, self.cwnd_initial)
        peer.cwnd = self.cwnd_initial
        peer.cwnd_cap = self.cwnd_max  # (the engine's auto-tuning may move it: autotune.py)
        # before any rate sample, pace the first window over the handshake's RTT (STARTUP's
        # gain); unpaced when there is none
        peer.pacing_rate = STARTUP_GAIN * st.cwnd_bytes / st.min_rtt if st.min_rtt else 0.0

    def on_handshake_rtt(self, peer: Peer, rtt: float) -> None:
        """The handshake took ``rtt`` (the round trip, or an upper bound of it), before any
        data: pace the first window over it, at STARTUP's gain.  Unpaced, the first windows
        of flows starting together land in a shared queue at once, and the latecomers lose
        theirs (and, with no RTT sample yet, wait the 1 s initial timeout)."""
        st: BbrState = peer.cc_state
        if rtt <= 0.0:  # (a clock that did not move: nothing to spread the window over)
            return
        if st.bw == 0.0:
            if st.min_rtt_at < 0.0:
                st.min_rtt = rtt  # (replaced by the first sample: min_rtt_at < 0)
            if peer.chunk_cap and st.rounds == 0:  # (its largest segments, now known)
                st.seg = float(peer.chunk_cap + 32)
                st.cwnd_bytes = self.cwnd_initial * st.seg
            peer.pacing_rate = STARTUP_GAIN * st.cwnd_bytes / rtt

    def on_timeout(self, peer: Peer) -> None:
        """A retransmit timeout before any rate sample: the pace is still the first window's
        (over the handshake's RTT, at STARTUP's gain), so the timeout's probes would leave
        microseconds apart, and back to back they meet a full drop-tail queue as one (the
        second finds it as the first did).  One datagram per smoothed RTT instead (the pace of
        RFC 6298's and Linux's window of one segment after a timeout; RFC 9002 paces
        ``cwnd / srtt``), until the first sample sets the pace from the model again.  Without
        it, a flow whose first window was lost whole lost every probe pair while its timer
        backed off: 8 flows at 100 Mb/s, 1 ms, seed 22, probes at 9, 22, 48 ... 830 ms, each
        pair dropped with the queue 3.2-3.8 datagrams full, no byte delivered all run."""
        st: BbrState = peer.cc_state
        srtt = peer.timer.srtt
        if st.bw == 0.0 and srtt and peer.pacing_rate > st.seg / srtt:
            peer.pacing_rate = st.seg / srtt

    def on_ack(self, peer: Peer) -> None:
        """Nothing per segment: the window follows the model, per ACK datagram."""

    def on_loss_episode(self, peer: Peer) -> None:
        """Nothing: losses are read as a rate, per round (see the module docstring)."""

    def on_persistent_congestion(self, peer: Peer) -> None:
        st: BbrState = peer.cc_state
        st.prior_cwnd = max(st.prior_cwnd, st.cwnd_bytes)
        st.cwnd_bytes = MIN_SEGMENTS * st.seg
        peer.cwnd = min(MIN_SEGMENTS, peer.cwnd_cap)

    def on_spurious(self, peer: Peer) -> None:
        """The last loss response was a mistake: give back the bound and the window."""
        st: BbrState = peer.cc_state
        if st.undo_hi > st.inflight_hi:
            st.inflight_hi = st.undo_hi
        if st.undo_cap > st.bw_cap:
            st.bw_cap = st.undo_cap
        if st.loss_exit and st.mode != PROBE_RTT:  # the losses that ended STARTUP were not
            st.loss_exit = st.filled = False
            st.full_bw_rounds = 0
            st.mode, st.pacing_gain = STARTUP, STARTUP_GAIN
        if st.prior_cwnd > st.cwnd_bytes and st.mode != PROBE_RTT:
            st.cwnd_bytes, st.prior_cwnd = st.prior_cwnd, 0.0
        peer.cwnd = segments(st.cwnd_bytes, st, peer.cwnd_cap)

    def on_rate_sample(self, peer: Peer, s: RateSample) -> None:
        """Per ACK datagram: update the model, move the state machine, set pacing and window."""
        st: BbrState = peer.cc_state
        if st.update(peer, s):
            self._round(peer, st, s)
        if st.bw > 0.0 and s.newly_acked:
            st.aggregate(s.now, s.newly_acked, st.cwnd_bytes)
        mode = st.mode
        if mode == PROBE_BW:
            self._cycle(peer, st, s)
        elif mode == DRAIN:
            # (a flight that stays up, losses not yet declared, must not hold DRAIN's low pace
            # for long: the rates it delivers would pull the bandwidth estimate down with it)
            if s.in_flight <= st.bdp() or st.rounds - st.mode_round >= DRAIN_ROUNDS:
                self._enter_probe_bw(peer, st, s.now)
        if st.rtt_expired and mode != PROBE_RTT and self.probe_rtt:
            st.mode, st.pacing_gain = PROBE_RTT, 1.0
            st.prior_cwnd = max(st.prior_cwnd, st.cwnd_bytes)
            st.probe_rtt_until = None
        if st.mode == PROBE_RTT:
            self._probe_rtt(peer, st, s)
        bw = st.pacing_bw()
        if bw > 0.0:
            rate = st.pacing_gain * bw
            srtt = peer.timer.srtt
            if srtt and rate * srtt < PACING_FLOOR * st.seg:
                rate = PACING_FLOOR * st.seg / srtt
            # (until STARTUP has found the bandwidth, the pace only rises: the first samples,
            # a segment or two acknowledged over a whole round trip, are far below the path's
            # rate, and a pace set by them would hold the first rounds back: the draft's rule)
            if st.filled or rate > peer.pacing_rate:
                peer.pacing_rate = rate
        self._set_cwnd(peer, st, s)

    def _set_cwnd(self, peer: Peer, st: BbrState, s: RateSample) -> None:
        """The window: toward cwnd_gain x BDP (+ the ACK allowance), by what was acknowledged."""
        bdp = st.bdp()
        cwnd = st.cwnd_bytes + s.newly_acked
        if bdp > 0.0:
            # room for ACKs that come in batches: the receiver's ACK frequency, or the
            # aggregation measured once STARTUP is over, whichever is more (a receiver
            # descheduled for a few ms must not leave the window full and the link idle)
            allowance = self.ack_allowance * st.seg
            if st.filled:
                extra = st.extra_acked()
                if extra > allowance:
                    allowance = extra
            target = st.cwnd_gain * bdp + allowance
            if st.filled:
                cwnd = min(cwnd, target)
            elif st.cwnd_bytes >= target:  # STARTUP grows only while below the target
                cwnd = st.cwnd_bytes
        if not st.filled and cwnd < self.cwnd_initial * st.seg:
            cwnd = self.cwnd_initial * st.seg  # (STARTUP: never below the initial window)
        if bdp > 0.0:
            if cwnd > st.inflight_hi:  # (a cut applies at once; it is never below the BDP)
                cwnd = st.inflight_hi
            if st.mode == PROBE_RTT:
                cwnd = min(cwnd, PROBE_RTT_GAIN * bdp)
        st.cwnd_bytes = cwnd
        peer.cwnd = segments(cwnd, st, peer.cwnd_cap)

    def _round(self, peer: Peer, st: BbrState, s: RateSample) -> None:
        """Once a round: STARTUP's full-bandwidth test and the loss-rate response."""
        high_loss = startup_exit = False
        if st.rounds % AGG_ROUNDS == 0 and s.now - st.agg_bucket_at >= AGG_MIN_TIME:
            st.agg_prev, st.agg_max, st.agg_bucket_at = st.agg_max, 0.0, s.now
        # a queue stood all round (no RTT near the min): the path is full.  (A round without
        # any RTT sample, only resent segments acknowledged, Karn's rule, counts as one: it
        # comes of heavy loss.)
        queued = st.prev_round_min_rtt >= CAP_RTT * st.min_rtt
        st.queued_rounds = st.queued_rounds + 1 if queued else 0
        if st.prev_round_min_rtt < st.win_rtt:
            st.win_rtt = st.prev_round_min_rtt
        if st.round_acked + st.round_lost >= LOSS_WINDOW * st.seg:
            acked, lost = st.new_round()
            # (losses before any RTT was measured are the retransmit timer's guesses, not a
            # queue's overflow: an initial timeout shorter than the path's round trip)
            high_loss = (lost >= LOSS_MIN_SEGMENTS * st.seg and lost > LOSS_THRESH * (acked + lost)
                         and st.min_rtt > 0.0)
            # congestion: overflow while a queue stood, or more loss than any random loss
            # (OVERFLOW_LOSS: a queue that never drains leaves no RTT near the true min RTT,
            # and the min RTT measured is inflated by it, so "a queue stood" is not seen)
            congested = high_loss and (st.win_rtt >= CAP_RTT * st.min_rtt
                                       or lost > OVERFLOW_LOSS * (acked + lost))
            # (STARTUP's exit: overflow, not the random loss of a lossy path: HEAVY_LOSS)
            st.heavy_loss = heavy = lost > HEAVY_LOSS * (acked + lost)
            startup_exit = congested or (high_loss and heavy)
            st.win_rtt = INF
        else:
            congested = False
        bdp_floor = st.bdp() + self.ack_allowance * st.seg
        if st.mode == PROBE_BW and not congested and self._standing(st, s.in_flight):
            # drain what the flow holds in the queue beyond QUEUE_SEGMENTS within a min RTT
            # (its share of a FIFO queue: the queue's delay times its pace), never by more
            # than a loss would cut (not undone: no loss to find spurious)
            bw = st.pacing_bw()
            excess = (st.prev_round_min_rtt - st.min_rtt) * bw - QUEUE_SEGMENTS * st.seg
            cut = bw - excess / st.min_rtt
            st.bw_cap = cut if cut > LOSS_BETA * bw else LOSS_BETA * bw
            st.cap_step = CAP_STEP0
            st.queued_rounds = 0
        else:
            self._cap(st, congested and st.mode == PROBE_BW, queued)
        if high_loss:
            st.undo_hi = st.inflight_hi
            st.inflight_hi = max(bdp_floor, min(st.inflight_hi, st.cwnd_bytes) * LOSS_BETA)
        elif st.inflight_hi != INF:
            st.inflight_hi *= HI_GROWTH
            if st.inflight_hi > CWND_GAIN * 2.0 * bdp_floor:
                st.inflight_hi = INF  # far above any use: drop the bound
        if st.mode == STARTUP and not st.filled:
            if not s.app_limited and st.bw > 0.0:
                if st.bw >= st.full_bw * FULL_BW_GROWTH:
                    st.full_bw, st.full_bw_rounds = st.bw, 0
                else:
                    st.full_bw_rounds += 1
            if st.full_bw_rounds >= FULL_BW_ROUNDS or startup_exit:
                st.filled, st.loss_exit = True, startup_exit
                st.mode_round = st.rounds
                st.mode, st.pacing_gain = DRAIN, DRAIN_GAIN
        elif high_loss and st.mode == PROBE_BW and CYCLE[st.cycle] > 1.0:
            st.cycle, st.cycle_at = 1, s.now  # stop probing: go to the phase that drains
            st.pacing_gain = CYCLE[1]

    @staticmethod
    def _standing(st: BbrState, in_flight: int) -> bool:
        """The flow's pace holds a queue: one stood QUEUE_ROUNDS rounds in a row with at
        least QUEUE_SEGMENTS of its segments in it, by both counts: the queue's delay (the
        last round's shortest RTT above the min) times its pace, a FIFO queue's share of each
        flow; and its flight beyond its BDP (a flight of a few segments, a flow that barely
        sends, holds no more than that however long the queue)."""
        if (st.queued_rounds < QUEUE_ROUNDS or st.prev_round_min_rtt == INF
                or st.prev_round_min_rtt - st.min_rtt < QUEUE_DELAY_MIN):
            return False
        bw, least = st.pacing_bw(), QUEUE_SEGMENTS * st.seg
        return ((st.prev_round_min_rtt - st.min_rtt) * bw >= least
                and in_flight - bw * st.min_rtt >= least)

    @staticmethod
    def _cap(st: BbrState, high_loss: bool, queued: bool) -> None:
        """Once a round: the bandwidth cap's multiplicative cut (a high-loss round) or its
        additive growth (steps of the same size for every flow on the path, doubling per
        round: flows sharing a queue converge, as under AIMD, and a lone flow soon has
        its whole bandwidth back)."""
        if high_loss:
            st.undo_cap = st.bw_cap
            st.bw_cap = LOSS_BETA * st.pacing_bw()
            st.cap_step = CAP_STEP0
        elif st.bw_cap != INF:
            st.bw_cap += st.cap_step * st.seg / st.min_rtt
            if not queued:  # (while a queue stands, the steps stay small)
                st.cap_step *= 2.0
            if st.bw_cap >= st.bw:
                st.bw_cap = st.bw

    def _enter_probe_bw(self, peer: Peer, st: BbrState, now: float) -> None:
        st.mode = PROBE_BW
        # a phase other than the draining one, chosen from the (seeded, random) ISN so that
        # flows sharing a link do not probe in step
        c = peer.isn % (len(CYCLE) - 1)
        st.cycle = self._phase(st, c + 1 if c >= 1 else 0)
        st.cycle_at = now
        st.pacing_gain = CYCLE[st.cycle]

    def _cycle(self, peer: Peer, st: BbrState, s: RateSample) -> None:
        """PROBE_BW's next phase after a min RTT: probing (1.25) goes on until the flight
        reached 1.25 BDP or losses came; draining (0.75) ends early once the queue is gone."""
        gain = CYCLE[st.cycle]
        full = s.now - st.cycle_at > st.min_rtt
        if gain > 1.0:
            advance = full and (s.newly_lost > 0 or s.in_flight >= gain * st.bdp())
        elif gain < 1.0:
            advance = full or s.in_flight <= st.bdp()
        else:
            advance = full
        if advance:
            st.cycle = self._phase(st, (st.cycle + 1) % len(CYCLE))
            st.cycle_at = s.now
            st.pacing_gain = CYCLE[st.cycle]

    @staticmethod
    def _phase(st: BbrState, c: int) -> int:
        """PROBE_BW's phase ``c``, or the next one where ``c`` probes, the last loss window
        lost more than HEAVY_LOSS and the BDP is under :data:`PROBE_MIN_SEGMENTS` segments (a
        probe there is coarser than it means)."""
        if CYCLE[c] > 1.0 and st.heavy_loss and st.bdp() < PROBE_MIN_SEGMENTS * st.seg:
            return c + 1
        return c

    def _probe_rtt(self, peer: Peer, st: BbrState, s: RateSample) -> None:
        """Hold the small window PROBE_RTT_TIME and a round, so the queue empties and the
        true min RTT is seen; then go back with the window as it was."""
        if st.probe_rtt_until is None:
            if s.in_flight <= max(PROBE_RTT_GAIN * st.bdp(), MIN_SEGMENTS * st.seg):
                st.probe_rtt_until = s.now + PROBE_RTT_TIME
                st.mode_round = st.rounds + 1
            return
        if s.now >= st.probe_rtt_until and st.rounds >= st.mode_round:
            st.min_rtt_at = s.now  # (the min RTT is fresh again: measured with an empty queue)
            st.cwnd_bytes = max(st.cwnd_bytes, st.prior_cwnd)
            st.prior_cwnd = 0.0
            st.probe_rtt_until = None
            if st.filled:
                self._enter_probe_bw(peer, st, s.now)
            else:
                st.mode, st.pacing_gain = STARTUP, STARTUP_GAIN
