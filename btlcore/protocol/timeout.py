"""The retransmit timeout: what it sends, and what it is taken to mean.

A timeout says only that nothing was heard for an RTO: the data may be lost, or only its
ACKs.  Where the ACK path loses in bursts longer than the RTO, resending the oldest
segments sends again what had arrived.  In the sweep's 10 Mb/s · 5% burst cells (9000 B
datagrams, 7.2 ms each, a 12 ms round trip) every spurious retransmission was a timeout's
probe whose original had arrived: a burst of four ACKs is 29 ms of silence, and the
longest seen was 60 ms.

So the first timeout in a row probes with new data where some may go: RFC 9002's PTO (a
probe timeout declares nothing lost; its probes are new data when there is some) and
F-RTO (RFC 5682).  New segments leave past the congestion window (as many as the pacing
lets go at once, at most :data:`TIMEOUT_PROBES`; within the flow-control window), and the
timer backs off.  Their ACK settles it: it acknowledges the old segments too (only ACKs
were lost: nothing resent), or it leaves them out and the loss rule declares them lost at
once (:meth:`.recovery.Recovery.detect_losses`: the probe counts as its threshold of sends
after them; they had an RTO to arrive), a round trip later than a resend would have gone.
The probe stands for the tail-loss probe of this flight too (tlp.py: not armed again until
an ACK with news).  Only where the timeout met silence over two ACKs at least, and not
while a loss is being repaired (F-RTO's rule): ACKs still coming for later segments mean
the path answers and the front is lost, a tail drop at a full queue (and a flow with one
segment in flight loses it so); a timeout in recovery has resends lost again.  The holes
at the ACK point then want their resends first, and new data would only add to a full
queue (flows sharing 100 Mb/s behind a queue of three datagrams: Jain's index 0.999 fell
to 0.79 for 2 flows, 0.965 to 0.90 for 8, with new-data probes there).

A timeout with nothing new to send (or no room in the flow-control window), with ACKs
coming, in recovery, on a timer fixed by ``rto_mode`` (usnic's), and every later timeout in
a row resend the oldest segments (probes), not the whole window: their ACK lets the
loss rule find the rest without a storm.  Two, not one: on a link losing in bursts, a lone
probe per timeout can stay inside the burst for many timeouts in a row.  And twice as many
at each timeout in a row from the third (2, 2, 4, 8, 8 ... :data:`PROBES_MAX`): a burst
counted in frames (a flaky link; the simulator's Gilbert-Elliott model) is left only by
frames, and two ACKs per timeout while the timer doubles made the stall grow without bound
(the sweep's 5% burst cells, seeds 1-10: goodput 0.0 in 4 of 60 runs, a 31-frame burst on
the ACK path costing 7 timeouts and 1.3 s).  The probes stop growing at eight while the timer
goes on doubling, so their rate decays as congestion wants; the receiver answers each
duplicate probe (receive.py's ``_on_not_new``).  These probes are judged when acknowledged
(:meth:`.recovery.Recovery._progress`, undo.py); only several timeouts in a row, nothing
acknowledged, mean persistent congestion and restart slow start (QUIC's PTO and persistent
congestion, RFC 9002).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import Final

from .congestion.base import Algorithm
from .peers import Peer, PeerState
from .state import EngineState
from .undo import Undo

LOST_TIMEOUT: Final = 2  # Segment.lost: declared lost by the retransmit timeout
TIMEOUT_PROBES: Final = 2  # segments a retransmit timeout resends
PROBE_DOUBLINGS: Final = 2  # ... doubled at each timeout in a row from the third, this many times
PROBES_MAX: Final = TIMEOUT_PROBES << PROBE_DOUBLINGS  # (8)
PERSISTENT_TIMEOUTS: Final = 3  # timeouts in a row that mean persistent congestion: slow start again

_ESTABLISHED: Final = PeerState.ESTABLISHED


class Timeout:
    """Fires the retransmit timeouts of one engine's peers (state on the peers)."""

    __slots__ = ("_resending", "_probing", "_sampler", "_cc", "_undo", "_threshold", "_on_timeout")

    def __init__(self, state: EngineState, cc: Algorithm, undo: Undo) -> None:
        self._resending = state.resending
        self._probing = state.probing  # peers whose probe is new data (Recovery.resend_pass)
        self._sampler = state.sampler
        self._cc = cc
        self._undo = undo
        self._threshold: int = state.config.fast_retransmit_threshold
        # the algorithm's optional hook, looked up once (congestion/__init__.py)
        self._on_timeout: Callable[[Peer], None] | None = getattr(state.cc, "on_timeout", None)

    def fire(self, peer: Peer, now: float) -> None:
        """``peer``'s retransmit timer fired: its probes are queued for the resend pass."""
        if self._on_timeout is not None:
            self._on_timeout(peer)
        if peer.timeouts == 0 and self.new_data(peer):
            peer.timer.expired()
            peer.rto_base = now
            peer.timeouts = 1
            peer.tlp_progress = peer.last_progress  # (the flight's tail probe: tlp.py)
            # the probe counts as the loss rule's threshold of sends after everything before
            # it: an ACK of it that leaves one of those out declares it lost (it had an RTO
            # to arrive: RACK's time rule), without waiting for another timeout
            peer.tx_serial += self._threshold
            self._probing[peer] = None
            self._resending[peer] = None
            return
        # 2, 2, 4, 8, 8 ... probes: doubled once per timeout in a row before this one past the first
        n = TIMEOUT_PROBES << min(max(peer.timeouts - 1, 0), PROBE_DOUBLINGS)
        probes = list(islice((g for g in peer.unacked.values() if not g.lost), n))
        peer.probe_sent = probes[0].sent_at  # (its original's send: undo.py's RTT sample)
        resend = peer.resend or peer.new_resend()
        for seg in probes:
            seg.lost = LOST_TIMEOUT
            peer.to_end(seg)
            resend.append(seg)
            if self._sampler is not None:
                self._sampler.lost(peer, seg)
        peer.timer.expired()
        peer.rto_base = now  # the next timeout counts from this one
        peer.timeouts += 1
        if peer.timeouts >= PERSISTENT_TIMEOUTS:
            if peer.tx_serial >= peer.recovery_serial:
                self._undo.arm(peer)
                self._cc.on_persistent_congestion(peer)
                peer.recovery_serial = peer.tx_serial + 1
            peer.probe_seq = None
        elif peer.probe_seq is None:
            peer.probe_seq = max(seg.seq for seg in probes)
            peer.probe_serial = probes[0].tx_serial
            peer.probe_dup = False
        self._resending[peer] = None

    @staticmethod
    def new_data(peer: Peer) -> bool:
        """Whether a probe of ``peer`` may be new data: some is queued, the flow-control
        window has room (as the send pass counts it), the timer is adaptive, no loss is
        being repaired (nothing outstanding was resent or is queued for a resend: F-RTO's
        rule, RFC 5682), and nothing was heard since the ACKs of the two oldest segments
        were due, by the time the timer fired (silence over two ACKs at least: what lost
        ACKs look like; one segment alone in flight and lost is a plain loss)."""
        if not peer.queue or peer.state is not _ESTABLISHED or not peer.timer.adaptive or peer.resend \
                or peer.next_seq > peer.snd_una + min(peer.remote_window, peer.window_cap):
            return False
        second = None
        n = 0
        for seg in peer.unacked.values():
            if seg.tx_count != 1:
                return False
            n += 1
            if n == 2:
                second = seg
        srtt = peer.timer.srtt
        if second is None or srtt is None:
            return False
        due = second.sent_at + srtt  # (its ACK: overdue by the time the timer fired, nothing heard since)
        return peer.last_heard < due <= peer.rto_base + peer.timer.rto
