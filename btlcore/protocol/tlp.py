"""The tail-loss probe (RFC 8985 §7): a lost tail found in about two round trips, not one
retransmit timeout.

The fast-retransmit rule needs later segments acknowledged; when the last segments of a
flight are lost there are none, and only the retransmit timeout was left (at least
``rto_min``, 5 ms, where the round trip may be 0.1 ms).  So, ``max(2 srtt, srtt + 4 rttvar)``
plus the peer's ``max_ack_delay`` (the longest its ACK may be held back) after the last
transmission or the last ACK with news, with nothing heard, the newest segment is sent
again, once per flight: its ACK reports what is missing (SACK), and the loss rule takes
over.  RFC 8985's ``2 srtt`` alone fired spuriously where the RTT varies (large datagrams on
a slow link, held behind the NIC's queue): the RTO's variance term, without its ``rto_min``
floor, keeps the probe from coming before the path's RTT may be over.  Disarmed on a
connection's first flight (its only RTT sample is the handshake's, of small datagrams),
while resends are queued, while a timeout's probes are out, in ``rto_mode=fixed`` (usnic's
timer), and once a probe went until new data is acknowledged.

The probe is judged as a timeout's probes are (:meth:`.recovery.Recovery._progress`): its
original was lost -- a loss episode -- unless the receiver reports a duplicate or the ACK
came too soon to be the probe's (undo.py); it counts as a timer retransmission
(``num_timeout_retrans``) and in ``num_tail_probes``.
"""

from __future__ import annotations

from typing import Any

from .peers import Peer, Segment
from .state import EngineState


def newest_unacked(peer: Peer) -> Segment:
    """The last segment of ``peer.unacked`` (not empty), in transmission order: ``peer.newest``
    while it is still there (every move to the end sets it), else found by a walk from the end
    (its newest was acknowledged ahead of older ones: SACK).  The walk, compiled, is a builtins
    lookup and generic calls, about 1,000 instructions; the look, a dict get."""
    unacked = peer.unacked
    seg = peer.newest
    if seg is not None and unacked.get(seg.seq) is seg:
        return seg
    for seg in unacked.values() if len(unacked) == 1 else reversed(unacked.values()):
        return seg
    raise ValueError("no unacknowledged segment")


def tlp_at(peer: Peer, lone: Segment | None = None) -> float | None:
    """When ``peer``'s tail-loss probe is due (None: not armed); ``peer.unacked`` is not
    empty.  The one expression, for the deadline and for the timer alike.  ``lone``: the
    caller's knowledge that this is the one segment in ``unacked`` (a round trip's), which
    spares the walk to it."""
    t = peer.timer
    srtt = t.srtt
    if peer.tlp_progress == peer.last_progress or srtt is None or peer.resend or peer.probe_seq is not None \
            or not t.adaptive or peer.snd_una == peer.isn:
        return None
    # the newest segment (transmission order); a lone one (a round trip's) is the first too
    sent_at = lone.sent_at if lone is not None else newest_unacked(peer).sent_at
    base = sent_at if sent_at > peer.rto_base else peer.rto_base
    var = srtt + 4 * t.rttvar  # (the RTO's, unfloored: never earlier on a path whose RTT varies)
    return base + (var if var > 2 * srtt else 2 * srtt) + t.max_ack_delay


class TailLossProbe:
    """Arms and sends the probes of one engine's peers (state on the peers)."""

    __slots__ = ("_resending", "_stamp", "_sampler")

    def __init__(self, state: EngineState, stamp: Any) -> None:
        self._resending = state.resending
        self._stamp = stamp  # Packetizer.stamp
        self._sampler = state.sampler

    def fire(self, peer: Peer) -> None:
        """The probe is due: the newest segment goes again at the next resend pass."""
        peer.tlp_progress = peer.last_progress  # (one per tail: the next ACK with news re-arms)
        newest = newest_unacked(peer)
        if newest.lost:
            return
        peer.tlp_seg = newest
        # judged as a timeout's probe (recovery._progress, undo.py)
        peer.probe_seq, peer.probe_serial, peer.probe_dup = newest.seq, newest.tx_serial, False
        peer.probe_sent = newest.sent_at
        self._resending[peer] = None

    def send(self, peer: Peer, now: float, out: list[Any]) -> int:
        """Send ``peer``'s probe if it is still unacknowledged; how many datagrams went."""
        seg: Segment | None = peer.tlp_seg
        peer.tlp_seg = None
        if seg is None or seg.lost or peer.unacked.get(seg.seq) is not seg:
            return 0
        c = peer.counters
        c.num_tail_probes += 1
        c.num_timeout_retrans += 1
        c.num_resends += 1
        c.num_total_sends += 1
        peer.to_end(seg)
        self._stamp(peer, seg, now, out)
        if self._sampler is not None:
            seg.rs = self._sampler.stamp(peer, now)
        return 1
