"""The retransmit timeout: what it sends, and what it is taken to mean.

A timeout says only that nothing was heard for an RTO: the data may be lost, or only its
ACKs.  It resends the two oldest segments (probes), not the whole window: their ACK lets
the loss rule find the rest without a storm.  Two, not one: on a link losing in bursts, a
lone probe per timeout can stay inside the burst for many timeouts in a row.

The first one's probes are judged when acknowledged (:meth:`.recovery.Recovery._progress`,
undo.py); only several in a row, nothing acknowledged, mean persistent congestion and
restart slow start (QUIC's PTO and persistent congestion, RFC 9002).
"""

from __future__ import annotations

from itertools import islice
from typing import Final

from .congestion.base import Algorithm
from .peers import Peer
from .state import EngineState
from .undo import Undo

LOST_TIMEOUT: Final = 2  # Segment.lost: declared lost by the retransmit timeout
TIMEOUT_PROBES: Final = 2  # segments a retransmit timeout resends
PERSISTENT_TIMEOUTS: Final = 3  # timeouts in a row that mean persistent congestion: slow start again


class Timeout:
    """Fires the retransmit timeouts of one engine's peers (state on the peers)."""

    __slots__ = ("_resending", "_sampler", "_cc", "_undo")

    def __init__(self, state: EngineState, cc: Algorithm, undo: Undo) -> None:
        self._resending = state.resending
        self._sampler = state.sampler
        self._cc = cc
        self._undo = undo

    def fire(self, peer: Peer, now: float) -> None:
        """``peer``'s retransmit timer fired: its probes are queued for the resend pass."""
        probes = [seg for seg in islice(
            (g for g in peer.unacked.values() if not g.lost), TIMEOUT_PROBES)]
        peer.probe_sent = probes[0].sent_at  # (its original's send: undo.py's RTT sample)
        resend = peer.resend or peer.new_resend()
        for seg in probes:
            seg.lost = LOST_TIMEOUT
            del peer.unacked[seg.seq]  # (to the end: transmission order)
            peer.unacked[seg.seq] = seg
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
