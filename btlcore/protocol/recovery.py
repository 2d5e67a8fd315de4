"""Loss recovery: what the sender learns from acknowledgements.

* RTT samples fed to each peer's :class:`~.rtt.RetransmitTimer` (its own module);
* ACK processing (:meth:`Recovery.on_ack`, :meth:`Recovery.on_cum_ack`): completions, RTT
  samples, SACK ranges;
* loss detection, RACK-style (:meth:`Recovery.detect_losses`: fast retransmit) and the
  retransmit timeout (:meth:`Recovery.handle_timer`; what it sends: :mod:`.timeout`), the
  resend cap per pass, peer death;
* the timers: each peer's deadline recomputed when it changed, kept in the shared heaps
  (:meth:`Recovery.next_deadline`).

From the other parts it gets :meth:`Packetizer.stamp <.packetizer.Packetizer.stamp>` (a
resend re-stamps a segment) at construction, and the handshake's ``confirm`` (an ACK
confirms a connection) from :meth:`Recovery.wire`, called by the engine once the handshake
exists (the handshake in turn uses :meth:`Recovery.fail_messages`).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Final

from ..errors import PeerUnreachable, PutError
from .autotune import grow as grow_cap
from .autotune import tunes_cwnd
from .congestion.base import Algorithm, native
from .delivery import frame_size
from .events import PeerFailed, PeerWritable, SendCompleted, _new
from .packetizer import Packetizer
from .peers import OutMessage, Peer, PeerEvent, PeerState, Segment
from .rtt import GRANULARITY, RetransmitTimer  # noqa: F401  (re-exported: their old home)
from .state import EngineState
from .timeout import TIMEOUT_PROBES, Timeout
from .tlp import TailLossProbe, tlp_at
from .undo import Undo
from .window import SEQ_HALF as _HALF
from .window import SEQ_WRAP as _WRAP
from .wire import (
    ACK_BODY,
    AF_DUPLICATE,
    AF_TRUNCATED,
    HEADER_LEN,
    MAX_SACK_RANGES,
    PS_LANDED,
    PUT_STATUS_NAMES,
    SACK_RANGE,
    SEQ_MASK,
    SEQ_SHORT,
    U32_MASK,
)

if TYPE_CHECKING:
    from .lifecycle import Lifecycle

_ESTABLISHED: Final = PeerState.ESTABLISHED
_ACK_BODY_LEN: Final = ACK_BODY.size
_SACK_RANGE_LEN: Final = SACK_RANGE.size
_CONNECTING: Final = PeerState.CONNECTING
_CLOSING: Final = PeerState.CLOSING
_timed_order: Final = attrgetter("timed_order")  # (Final: a static, compiled; handle_timer sorts by it)

LOST_FAST: Final = 1  # Segment.lost: declared lost by the fast-retransmit rule (timeout.py: LOST_TIMEOUT)
REO_PERSIST: Final = 16  # loss episodes a widened reordering allowance lasts (RFC 8985's reo_wnd_persist)
KEEPALIVE_FRACTION: Final = 3  # a keepalive PING after peer_timeout / this of silence (lifecycle.py)


#: what the per-ACK paths build events with (events._new), read by compiled code from statics
#: rather than from the module's dict (events.py is pure Python)
_NEW_EVENT: Final = _new
_SEND_COMPLETED: Final = SendCompleted
#: dict.pop called as a function: compiled, ``d.pop(k, None)`` looks the method up by name
#: at every call (mypyc has no primitive for it); this is one vectorcall of a static
_DICT_POP: Final = dict.pop


def _unwired(peer: Peer, now: float) -> None:
    raise RuntimeError("Recovery.wire() was not called")


class Recovery:
    """What the sender learns from ACKs: completions, RTT samples, losses (fast retransmit and
    the retransmit timeout), peer death."""

    _lifecycle: Lifecycle  # (wire(): its timers, called directly -- compiled, C calls)
    __slots__ = ("_state", "config", "events", "counters", "_cc", "_autotune",
                 "_granularity", "_resending", "_sending", "_touched", "_timed", "_deadlines",
                 "_actions", "_timed_order", "_stamp", "_unschedule", "_confirm", "_lifecycle",
                 "_control", "_sampler", "_pacer", "_undo", "_tlp", "_tlp_on", "_fr_threshold", "_timeout",
                 "_probing", "_probe")

    def __init__(self, state: EngineState, packetizer: Packetizer) -> None:
        self._state = state  # for now
        self.config = state.config
        self.events = state.events
        self.counters = state.counters
        # (a native class: compiled, its on_ack, called per ACKed segment, is a C call)
        self._cc: Algorithm = native(state.cc)
        self._autotune = tunes_cwnd(state.config)  # (autotune.py: cwnd_max at its default)
        self._granularity = state.granularity
        self._fr_threshold: int = state.config.fast_retransmit_threshold  # (Config: a dict lookup per read)
        self._resending = state.resending
        self._sending = state.sending
        self._touched = state.touched
        self._timed = state.timed
        self._deadlines = state.deadlines
        self._actions = state.actions
        self._timed_order = 0  # peers are served in the order they became timed
        self._stamp = packetizer.stamp
        self._unschedule = state.unschedule
        self._confirm: Callable[[Peer, float], None] = _unwired
        self._control = state.control
        self._sampler = state.sampler  # (None: the algorithm takes no rate samples)
        self._pacer = state.pacer
        self._undo = Undo(getattr(state.cc, "on_spurious", None))  # (undo.py)
        self._timeout = Timeout(state, self._cc, self._undo)  # (timeout.py)
        self._probing = state.probing  # (a timeout's probe of new data: timeout.py, sent here)
        self._probe = packetizer.probe
        self._tlp = TailLossProbe(state, packetizer.stamp)  # (tlp.py; Config.tlp off: never due)
        self._tlp_on: bool = state.config.tlp  # (tlp_at called directly: compiled, a C call)

    def wire(self, confirm: Callable[[Peer, float], None], lifecycle: Lifecycle) -> None:
        """The handshake's ``confirm`` (an ACK confirms); the lifecycle's timers (lifecycle.py:
        ``live_at``, ``liveness``, ``close_timer``)."""
        self._confirm, self._lifecycle = confirm, lifecycle

    def on_cum_ack(self, peer: Peer, ack_w: int, now: float) -> Segment | None:
        """Apply a cumulative ACK (piggy-backed or standalone).  Returns the segment at the
        new ACK point if this ACK acknowledged it (None if nothing new was acked)."""
        una = peer.snd_una
        d = ack_w - una  # how far it moves the ACK point, mod 2**64
        if not 0 < d <= SEQ_SHORT:  # (compiled, the masking is a boxed long operation)
            d &= SEQ_MASK
            if d >= _HALF or d == 0:
                return None  # old or duplicate
        cum = una + d
        if cum >= peer.next_seq:
            cum = peer.next_seq - 1  # ACKs for what we never sent: ignore the excess
            if cum <= una:
                return None
        if cum == una + 1:  # one segment (each ping-pong reply): no loop to set up
            top = _DICT_POP(peer.unacked, cum, None)
            if top is not None:
                self._acked(peer, top)
        else:
            pop = peer.unacked.pop  # (once per ACK: the loop runs per segment)
            top = None
            for s in range(una + 1, cum + 1):
                seg = pop(s, None)
                if seg is not None:
                    self._acked(peer, seg)  # (compiled: a C call; a bound method would be a Python call)
                    top = seg
        if not peer.unacked:
            peer.newest = None  # (an idle peer keeps no acknowledged datagram alive)
        peer.snd_una = cum
        if peer.scoreboard._starts:  # (no SACK ranges recorded: nothing to forget)
            peer.scoreboard.prune(cum)
        if peer.loss_seq_limit is not None and peer.loss_seq_limit < cum:
            peer.loss_seq_limit = cum
        self._progress(peer, now)
        if top is None or top.seq != cum:
            return None
        return top

    def _acked(self, peer: Peer, seg: Segment) -> None:
        """``seg`` is acknowledged: count it against its message, complete the message."""
        if seg.channel:
            if seg.tx_serial > peer.acked_priority:
                peer.acked_priority = seg.tx_serial
        elif seg.tx_serial > peer.acked_data:
            peer.acked_data = seg.tx_serial
        if seg.tx_count > 1:
            # Acked sooner after the retransmission than any round trip takes: the original
            # arrived, it was only late.  Widen the reordering allowance (RACK's reo_wnd_mult).
            min_rtt = peer.timer.min_rtt
            if min_rtt is not None and self._state.now - seg.sent_at < min_rtt * 0.5 and peer.reo_mult < 16:
                peer.reo_mult += 1
                peer.reo_persist = REO_PERSIST
            self._undo.resend_acked(peer, seg, self._state.now)  # spurious? then undo (undo.py)
        if peer.cwnd < peer.cwnd_cap:  # (below the cap: the congestion controller's on_ack)
            self._cc.on_ack(peer)
        msg = seg.msg
        msg.outstanding -= 1
        if msg.cut_all and msg.outstanding == 0 and not msg.done:
            if msg.put_key is not None:
                if msg.put_status is not None:  # (else its put status, still to come, completes it)
                    self.put_done(peer, msg)
                return
            msg.done = True
            if msg.flags:
                return  # a put status of ours: no application message, not counted as one
            peer.counters.num_msgs_completed += 1
            if msg.callback is not None:
                self.events.append(_NEW_EVENT(_SEND_COMPLETED, (msg.callback, None)))
            peer.send_queued -= msg.length  # self.release, inline (once per message)
            if peer.send_blocked:
                self.release(peer, 0)

    def put_done(self, peer: Peer, msg: OutMessage) -> None:
        """A put is acknowledged and its status is in: its callback gets None if it landed,
        else a PutError."""
        msg.done = True
        c = peer.counters
        status = msg.put_status
        exc = None
        if status == PS_LANDED:
            c.num_msgs_completed += 1
        else:
            c.num_puts_refused += 1
            reason = PUT_STATUS_NAMES.get(status, f"refused (put status {status})")  # type: ignore[arg-type]
            exc = PutError(msg.put_key, msg.put_offset, msg.length, reason,  # type: ignore[arg-type]
                           peer.address.hex())
        if msg.callback is not None:
            self.events.append(SendCompleted(msg.callback, exc))
        self.release(peer, msg.length)

    def release(self, peer: Peer, nbytes: int) -> None:
        """A message of ``nbytes`` completed: its bytes leave the peer's send buffer (once per
        message, never per segment).  A send refused for want of room is told when the
        buffer has drained to half (a low-water mark: one event per refusal, not per ACK)."""
        queued = peer.send_queued = peer.send_queued - nbytes
        if peer.send_blocked and queued <= self.config.send_buffer >> 1:
            peer.send_blocked = False
            self.events.append(_new(PeerWritable, (peer,)))

    def _progress(self, peer: Peer, now: float) -> None:
        """Something new was acknowledged: restart the death clock and the retransmit
        timer, end the backoff, reopen the window."""
        peer.last_progress = now
        peer.rto_base = now
        if peer.timer.backoff != 1:  # (the look spares a call per ACK: nearly always 1)
            peer.timer.progress()
        peer.timeouts = 0
        if peer.probe_seq is not None and peer.snd_una >= peer.probe_seq:
            # A timeout's probes are acknowledged.  Had the originals arrived, the receiver
            # would have reported a duplicate (AF_DUPLICATE): without one, they were lost,
            # which is a loss episode like any other (RFC 8985's TLP rule).
            if not peer.probe_dup and peer.probe_serial >= peer.recovery_serial:
                self._loss_episode(peer)
            peer.probe_seq = None
        if peer.queue and peer.state is _ESTABLISHED:
            self._sending[peer] = None
            if peer.cwnd >= peer.cwnd_cap and peer.cwnd_cap < peer.window_cap and self._autotune:
                grow_cap(peer, now)  # more to send, the window at its cap: cover the measured BDP (autotune.py)
        self._touched[peer] = None

    def on_ack(self, peer: Peer, data: memoryview, n: int, ack_w: int, plen: int, now: float) -> None:
        c = peer.counters
        if n != HEADER_LEN + plen or plen < _ACK_BODY_LEN:
            self.counters.num_malformed_recvs += 1
            return
        window: int
        nranges: int
        ack_flags: int
        ack_delay: int  # (typed: compiled, every test on them is a C comparison)
        window, nranges, ack_flags, ack_delay = ACK_BODY.unpack_from(data, HEADER_LEN)
        if nranges > MAX_SACK_RANGES or plen != _ACK_BODY_LEN + nranges * _SACK_RANGE_LEN:
            self.counters.num_malformed_recvs += 1
            return
        c.num_ack_recvs += 1
        if not peer.confirmed:
            self._confirm(peer, now)
        if window > peer.remote_window and peer.queue and peer.state is _ESTABLISHED:
            self._sending[peer] = None  # the window opened (a window update acknowledges nothing new)
        if (window == 0) is not (peer.remote_window == 0):
            peer.persist = 0.0  # the zero-window probe's timer starts or stops (lifecycle.py)
            self._timed[peer] = None
        peer.remote_window = window  # (zero: the receiver's application is not reading)
        if ack_flags & AF_DUPLICATE:
            peer.probe_dup = True  # (only read while a timeout's probes are out)
            if peer.reo_mult < 16 and peer.counters.num_resends:
                peer.reo_mult += 1  # a resend was not needed: allow more reordering (RACK)
                peer.reo_persist = REO_PERSIST
        una = peer.snd_una
        d = ack_w - una  # how far it moves the ACK point, mod 2**64 the nearer way
        if not 0 <= d <= SEQ_SHORT:  # (compiled, the masking is a boxed long operation)
            d &= SEQ_MASK
            if d >= _HALF:
                d -= _WRAP
                c.num_old_dup_acks += 1
        cum = una + d
        at_cum = self.on_cum_ack(peer, ack_w, now)
        largest = cum  # the largest sequence number this ACK acknowledges
        sample = at_cum
        sacked_new = False
        if nranges:
            unacked = peer.unacked
            top = peer.next_seq - 1
            base = HEADER_LEN + ACK_BODY.size
            start: int
            length: int
            for i in range(nranges):
                start, length = SACK_RANGE.unpack_from(data, base + i * SACK_RANGE.size)
                lo = max(cum + start, peer.snd_una + 1)
                hi = min(cum + start + length - 1, top)
                if ack_flags & AF_TRUNCATED and i == nranges - 1:
                    # ranges were left out below this one: what lies between is unknown,
                    # so no loss may be declared there
                    peer.loss_seq_limit = largest
                elif i == nranges - 1:
                    peer.loss_seq_limit = None
                largest = hi
                for a, b in peer.scoreboard.add(lo, hi):
                    for s in range(a, b + 1):
                        seg = unacked.pop(s, None)
                        if seg is not None:
                            self._acked(peer, seg)
                            sacked_new = True
                            sample = seg
            if sacked_new and at_cum is None:
                self._progress(peer, now)
        if sample is not None and sample.seq == largest and ack_delay != U32_MASK:
            self.sample_rtt(peer, sample, now, ack_delay * 1e-6)  # (the largest newly acknowledged)
        if at_cum is None and not sacked_new and cum == una:
            c.num_dup_acks += 1
        if peer.unacked:  # (with nothing unacked it has nothing to do)
            self.detect_losses(peer)
        self._touched[peer] = None

    def sample_rtt(self, peer: Peer, seg: Segment, now: float, ack_delay: float) -> None:
        """The RTT sample of an ACK that acknowledged ``seg`` (the largest it acknowledged,
        standalone; the last we sent, piggy-backed), ``ack_delay`` the receiver's hold (0.0
        when it does not say): the rule every ACK path calls.  Karn: a segment sent once is
        a sample, less the hold; a resent one bounds the RTT from below (whichever copy
        arrived was sent at or before its last sending), taken whole where above srtt, so
        that srtt can learn a path slower than the handshake showed (where every ACK may be
        of a resend)."""
        rtt = now - seg.sent_at
        if seg.tx_count == 1:
            peer.timer.sample(rtt, ack_delay)
        elif (srtt := peer.timer.srtt) is not None and rtt > srtt:
            peer.timer.sample(rtt)

    def detect_losses(self, peer: Peer) -> None:
        """Fast retransmit, RACK-style (RFC 8985): a segment is lost once a transmission made
        on its channel ``fast_retransmit_threshold`` or more sends after it was acknowledged
        (counted in transmission serials, so a retransmission is judged against what was sent
        after it)
        *and* it was sent longer ago than an RTT plus a reordering allowance.  The time
        condition keeps reordering from looking like loss; :meth:`_timer_times` times the check
        for a segment that meets only the first."""
        thr = self._fr_threshold
        lim0, lim1 = peer.acked_data - thr, peer.acked_priority - thr
        top = lim0 if lim0 > lim1 else lim1
        if top < 0 or not peer.unacked:
            return
        reo = self._reorder_time(peer)
        now = self._state.now
        seq_limit = peer.loss_seq_limit
        lost = []
        for seg in peer.unacked.values():
            # (the expression _timer_times times, so that the check it arms
            # always finds the segment due: no float rounding between the two)
            if seg.tx_serial > top or seg.sent_at + reo > now:
                break
            # judged only against its own channel: a tiny message on the priority channel
            # overtaking bulk queued on the data channel is not a loss
            if not seg.lost and seg.tx_serial <= (lim1 if seg.channel else lim0) \
                    and (seq_limit is None or seg.seq <= seq_limit):
                lost.append(seg)
        if lost:
            if lost[-1].tx_serial >= peer.recovery_serial:
                # a new loss episode: decrease once (losses of what was sent before now
                # count against this same episode)
                self._loss_episode(peer)
            resend = peer.resend or peer.new_resend()
            sampler = self._sampler
            for seg in lost:
                seg.lost = LOST_FAST
                peer.to_end(seg)
                resend.append(seg)
                if sampler is not None:
                    sampler.lost(peer, seg)
            self._resending[peer] = None
            self._touched[peer] = None

    def _loss_episode(self, peer: Peer) -> None:
        """A loss episode begins: the congestion controller decreases, once; losses of what
        was sent before now count against this same episode."""
        self._undo.arm(peer)  # (what the decrease replaces, should it prove spurious)
        self._cc.on_loss_episode(peer)
        peer.recovery_serial = peer.tx_serial + 1
        if peer.reo_persist:
            # a widened reordering allowance lasts REO_PERSIST loss episodes without a new
            # spurious resend, then goes back to a quarter RTT (RACK): a network that
            # reordered or duplicated once does not slow loss detection for good
            peer.reo_persist -= 1
            if not peer.reo_persist:
                peer.reo_mult = 1

    def _reorder_time(self, peer: Peer) -> float:
        """How long after its send a segment may still arrive late rather than be lost."""
        srtt = peer.timer.srtt
        if srtt is None:  # the initial RTT (RFC 9002's 333 ms, a third of rto_initial), and a quarter
            return self.config.rto_initial * (1 / 3 + 1 / 12 * peer.reo_mult) + self._granularity
        return srtt + srtt * 0.25 * peer.reo_mult + self._granularity

    def fail_messages(self, peer: Peer, exc: BaseException) -> None:
        """Complete every pending operation toward ``peer`` with ``exc``, exactly once."""
        msgs: dict[int, OutMessage] = {}
        for seg in peer.unacked.values():
            msgs[id(seg.msg)] = seg.msg
        for msg in peer.queue:
            msgs[id(msg)] = msg
        for msg in (peer.puts or {}).values():  # acknowledged, waiting for their put status
            msgs[id(msg)] = msg
        for msg in msgs.values():
            if not msg.done:
                msg.done = True
                if msg.flags:
                    continue  # a put status of ours: nobody waits on it
                peer.counters.num_send_errors += 1
                if msg.callback is not None:
                    self.events.append(SendCompleted(msg.callback, exc))
        peer.unacked.clear()
        peer.newest = None
        peer.inflight_bytes = peer.rs_acked = peer.rs_lost = 0
        peer.rs_seg = None
        peer.queue = ()
        peer.puts = None
        peer.resend = ()
        peer.send_queued = 0  # (nobody to tell that it has room: the sends failed)
        peer.send_blocked = False
        self._state.drop_reassembly(peer)
        peer.ready.clear()

    def fail_peer(self, peer: Peer, exc: BaseException) -> None:
        """The peer is gone (public: the guard and version negotiation fail peers too)."""
        self.counters.num_peer_failures += 1
        self.fail_messages(peer, exc)
        peer.transition(PeerEvent.FAILED)
        peer.error = exc
        peer.hello_next = None
        self._unschedule(peer)
        self.events.append(PeerFailed(peer, exc))

    # -- timers: each peer's times are recomputed only when something about it changed (it is
    # in _timed, added by whatever changed it, or _touched); both are kept in heaps

    def _rto_at(self, peer: Peer, front: Segment) -> float:
        """When the retransmit timer of ``front`` (the oldest segment not queued for a
        resend) fires: the one expression, for the deadline and for handle_timer alike (a sum
        compared with ``<= now``, never a difference: rounding must agree)."""
        sent_at = front.sent_at
        return (sent_at if sent_at > peer.rto_base else peer.rto_base) + peer.timer.rto

    def _timed_segments(self, peer: Peer) -> tuple[Segment | None, Segment | None]:
        """``(front, candidate)``, found in one walk from the oldest: the oldest segment not
        queued for a resend (its retransmit timer runs), and the first segment
        :meth:`detect_losses` could declare lost without a new ACK once enough time has
        passed (it meets the serial rule, not yet the time rule).  ``unacked`` is in
        transmission order, so the walk stops at the first segment sent after the newest
        ACKed serial allows."""
        thr = self._fr_threshold
        lim0, lim1 = peer.acked_data - thr, peer.acked_priority - thr
        top = lim0 if lim0 > lim1 else lim1
        seq_limit = peer.loss_seq_limit
        front = None
        for seg in peer.unacked.values():
            if seg.lost:
                continue
            if front is None:
                front = seg
            serial = seg.tx_serial
            if serial > top:
                return front, None
            if serial <= (lim1 if seg.channel else lim0) and (seq_limit is None or seg.seq <= seq_limit):
                return front, seg
        return front, None

    def _timer_times(self, peer: Peer) -> tuple[float | None, float | None]:
        """``(deadline, act_at)`` of ``peer``: when the driver must call us again for it
        (the earliest of its retransmit timer, the loss check of its oldest segment, its death
        clock, a due ACK, its handshake), and when :meth:`handle_timer` would act on it (the
        same, or earlier when a later segment than the oldest may be declared lost)."""
        state = peer.state
        if state is _CLOSING:  # the CLOSE's resend and give-up (lifecycle.close_timer)
            until = peer.close_until
            if peer.close_next is not None and peer.close_next < until:
                until = peer.close_next
            return until, until
        t: float | None = None
        act: float | None = None
        if peer.unacked:
            # the loss check: the candidate's send time plus the reordering time, the very
            # expression detect_losses compares (no float rounding between the two)
            front, candidate = self._timed_segments(peer)
            if candidate is not None:
                act = candidate.sent_at + self._reorder_time(peer)
            if front is not None:
                t = self._rto_at(peer, front)
                if candidate is front and act is not None and act < t:
                    t = act  # the oldest segment's loss check comes first
                if self._tlp_on and (tlp := tlp_at(peer, front if len(peer.unacked) == 1 else None)) is not None \
                        and tlp < t:
                    t = tlp  # the tail-loss probe (tlp.py)
        if state is _ESTABLISHED:
            live = self._lifecycle.live_at(peer)
            if t is None or live < t:
                t = live
        if peer.pace_wait and (t is None or peer.pace_next < t):
            t = peer.pace_next  # sends wait for the pacing bucket (pacing.py)
        if peer.ack_now or peer.hello_reply:
            t = self._state.now
        else:
            ack_at = peer.ack_deadline
            if ack_at is not None and (t is None or ack_at < t):
                t = ack_at
        if peer.hello_next is not None or peer.hello_started is not None:
            t, act = self._handshake_times(peer, t, act)
        if t is not None and (act is None or t < act):
            act = t
        return t, act

    def _handshake_times(self, peer: Peer, t: float | None,
                         act: float | None) -> tuple[float | None, float | None]:
        """:meth:`_timer_times`'s ``(t, act)`` with a handshake's times folded in: the next
        HELLO and the give-up."""
        hello_next = peer.hello_next
        give_up = None if peer.hello_started is None else peer.hello_started + self.config.handshake_timeout
        if hello_next is not None:
            if t is None or hello_next < t:
                t = hello_next
            if give_up is not None and give_up < t:
                t = give_up
        if give_up is not None and peer.state is _CONNECTING and (act is None or give_up < act):
            act = give_up
        return t, act

    def _refresh_timers(self, forget_idle: bool) -> None:
        """Recompute the times of the peers that changed since the last call (and only
        those): the ones in ``timed`` (made timed here), then the others ``touched``.
        ``forget_idle``: a peer left with nothing to wait for stops being timed."""
        timed, touched = self._timed, self._touched
        if timed:
            order = self._timed_order
            for peer in timed:
                if not peer.timed:
                    peer.timed = True
                    order += 1
                    peer.timed_order = order
                self._refresh(peer, forget_idle)
            self._timed_order = order
            if touched:
                for peer in touched:
                    if peer.timed and peer not in timed:
                        self._refresh(peer, forget_idle)
                touched.clear()
            timed.clear()
        elif touched:
            for peer in touched:
                if peer.timed:
                    self._refresh(peer, forget_idle)
            touched.clear()

    def _refresh(self, peer: Peer, forget_idle: bool) -> None:
        """One timed peer's times, recomputed into the heaps."""
        t, act = self._timer_times(peer)
        if t is None and forget_idle:
            peer.timed = False
        self._deadlines.set(peer, t)  # (compiled: a C call; a bound method would not be)
        # only the rare peer that handle_timer acts on before its deadline is in
        # ``actions`` (the look first spares the call for every other one)
        actions = self._actions
        if act is not None and (t is None or act < t):
            actions.set(peer, act)
        elif peer in actions.live:
            actions.discard(peer)

    def next_deadline(self, pending_work: bool = True) -> float | None:
        """The next time :meth:`handle_timer` or a send pass has something to do.  With
        ``pending_work=False``, timers only: a driver whose device refuses sends for now
        must not be told that queued sends are due.  The earliest of the peers' deadlines,
        kept in a heap: a peer with nothing new costs nothing here."""
        if pending_work and (self._resending or self._sending or self._control):
            return self._state.now
        self._refresh_timers(True)
        return self._deadlines.first()

    def cached_deadline(self) -> float | None:
        """The earliest deadline as of the last refresh (:meth:`next_deadline` or
        :meth:`handle_timer`), recomputing nothing.  Datagrams taken in since never make a
        timer due at once (``on_ack`` declares lost what already is; the death clock and the
        RTO base move later), so a busy driver may look here between refreshes; a deadline
        that input brought forward waits for the next refresh (Transport's TIMER_SLACK)."""
        return self._deadlines.first()

    def handle_timer(self, now: float) -> None:
        """Retransmit timeouts, peer death, handshake give-ups: for the peers due by ``now``
        only, in the order they became timed."""
        self._state.now = now
        self._refresh_timers(False)
        due = self._deadlines.pop_due(now)
        early = self._actions.pop_due(now) if self._actions else None
        if early:
            due = list(dict.fromkeys(due + early))
        if len(due) > 1:
            due.sort(key=_timed_order)
        touched = self._touched
        for peer in due:
            touched[peer] = None  # (recomputed at the next look)
            self._peer_timer(peer, now)

    def _peer_timer(self, peer: Peer, now: float) -> None:
        """``peer`` is due: fail it (the death rule), probe it, declare losses, or fire its
        retransmit timer; a closing peer's timer is the lifecycle's."""
        cfg = self.config
        state = peer.state
        if peer.pace_wait and peer.pace_next <= now:  # the pacing bucket lets it send again
            peer.pace_wait = False
            if peer.resend or peer.tlp_seg is not None or peer in self._probing:
                self._resending[peer] = None
            if peer.queue and state is _ESTABLISHED:
                self._sending[peer] = None
        if state is _CLOSING:
            self._lifecycle.close_timer(peer, now)
            return
        if state is _ESTABLISHED and self._lifecycle.liveness(peer, now):
            return
        if peer.unacked:
            self.detect_losses(peer)
            front = self._rto_front(peer)
            if front is not None and self._rto_at(peer, front) <= now:
                self._timeout.fire(peer, now)  # (timeout.py)
            elif front is not None and self._tlp_on and (tlp := tlp_at(peer)) is not None and tlp <= now:
                self._tlp.fire(peer)
        if peer.hello_started is not None and peer.state is _CONNECTING \
                and peer.hello_started + cfg.handshake_timeout <= now:
            self.fail_peer(peer, PeerUnreachable(
                f"peer {peer.address.hex()} did not answer the handshake within "
                f"{cfg.handshake_timeout:g} s"))

    @staticmethod
    def _rto_front(peer: Peer) -> Segment | None:
        for seg in peer.unacked.values():
            if not seg.lost:
                return seg
        return None

    def resend_pass(self, out: list[Any], now: float, cap: int) -> None:
        """Resend what was declared lost, up to ``cap`` datagrams, paced like new sends."""
        sent = 0
        sampler, pacer, probing = self._sampler, self._pacer, self._probing
        for peer in list(self._resending):
            resend = peer.resend
            c = peer.counters
            room = cap - sent
            rate = peer.pacing_rate
            if rate:
                paced = pacer.room(peer, now, rate)
                if paced < room:
                    room = paced
                start = len(out)
            if peer.tlp_seg is not None and room > 0:  # a tail-loss probe (tlp.py)
                n = self._tlp.send(peer, now, out)
                room, sent = room - n, sent + n
            if probing and room > 0 and peer in probing:  # a timeout's probe of new data (timeout.py)
                del probing[peer]
                n = self._probe(peer, now, out, room if room < TIMEOUT_PROBES else TIMEOUT_PROBES)
                room, sent = room - n, sent + n
            while resend and room > 0:
                seg = resend.popleft()
                if not seg.lost or peer.unacked.get(seg.seq) is not seg:
                    continue  # acknowledged meanwhile
                if seg.lost == LOST_FAST:
                    c.num_fast_retrans += 1
                else:
                    c.num_timeout_retrans += 1
                seg.lost = 0
                peer.to_end(seg)
                self._stamp(peer, seg, now, out)
                if sampler is not None:
                    sampler.resent(peer, seg, now)
                c.num_resends += 1
                c.num_total_sends += 1
                sent += 1
                room -= 1
                if peer.undo_cwnd:
                    peer.undo_retrans += 1  # (a retransmission of the episode undo.py may undo)
            self._touched[peer] = None
            if rate:
                if len(out) > start:
                    pacer.spent(peer, sum(frame_size(d[2]) for d in out[start:]), now, rate)
                if (resend or peer.tlp_seg is not None or peer in probing) and peer.pace_next > now:
                    del self._resending[peer]  # back when the bucket allows (the timer heap)
                    pacer.wait(peer)
                    continue
            if not resend and peer not in probing:
                self._resending.pop(peer, None)
            if sent >= cap:
                break
