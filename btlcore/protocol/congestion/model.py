"""What the rate-driven algorithms (``bbr``, ``none``, and ``cubic``'s growth) share: a model of
the path built from :class:`~.rate.RateSample` s.

* **Round trips counted in data**, not time (the BBR drafts' round counting): a round ends
  when everything in flight at its start has been delivered, so it stretches with the queue
  and needs no clock.
* **A windowed max filter** of the delivery rate over the last :data:`BW_ROUNDS` rounds that
  used the path (not application-limited): the bottleneck bandwidth is the best rate recently
  seen, since a sample can only underestimate it (a loss, a pause, an ACK held back).
* **A windowed min filter** of the RTT over :data:`MIN_RTT_WINDOW` seconds: the propagation
  delay is the best round trip recently seen, since a queue can only add to it.
* **The mean segment size**: windows are counted in segments (what the send pass compares
  with the segments in flight) and rates in bytes; a connection of small messages has small
  segments, so a bandwidth-delay product in bytes becomes segments through the size actually
  in flight, never through the MTU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ..peers import Peer
    from .rate import RateSample

INF: Final = float("inf")  # (a Final: compiled, float("inf") would be parsed at every use)
BW_ROUNDS: Final = 10  # rounds the bandwidth filter remembers (BBR's)
MIN_RTT_WINDOW: Final = 10.0  # seconds the min RTT filter remembers (BBR's)
SEGMENT_GUESS: Final = 1200  # bytes per segment before the engine told its payload size
MIN_SEGMENTS: Final = 4.0  # no window below this: a loss must still be detectable by later ACKs
_SEG_EWMA: Final = 0.25  # weight of a new mean-segment-size observation
#: the rate filter of a model that never had a rate sample (an idle peer's, one that only
#: receives): shared, never written -- the first sample gives the model a ring of its own
_NO_RING: list[float] = []


class PathModel:
    """One connection's path as the samples show it (kept in ``peer.cc_state``, or inside
    an algorithm's state)."""

    __slots__ = ("seg", "rounds", "round_end", "round_at", "round_acked", "round_lost", "round_min_rtt",
                 "prev_round_min_rtt", "bw", "_bw_ring", "_bw_round", "_bw_full",
                 "min_rtt", "min_rtt_at", "rtt_expired")

    def __init__(self, peer: Peer) -> None:
        #: bytes per segment (as the device sends them: header included), mean of those in flight
        self.seg = float((peer.chunk_cap or SEGMENT_GUESS) + 32)
        self.rounds = 0  # round trips completed
        self.round_end = 0  # the ``delivered`` mark that ends the current round
        self.round_at = 0.0  # when it began
        self.round_acked = self.round_lost = 0  # bytes acknowledged / declared lost this round
        self.round_min_rtt = INF  # the shortest RTT sample of the current round ...
        self.prev_round_min_rtt = INF  # ... and of the last one (inf: none)
        self.bw = 0.0  # bottleneck bandwidth estimate, bytes/s (0.0: no sample yet)
        self._bw_ring: list[float] = _NO_RING  # best rate of each of the last rounds
        self._bw_round = 0  # rounds that used the path (had a sample not application-limited)
        self._bw_full = False  # this round has one
        t = peer.timer
        self.min_rtt = float(t.min_rtt) if t.min_rtt else 0.0  # (the handshake's sample, if any)
        self.min_rtt_at = -1.0  # when it was measured (< 0: not by a sample yet)
        #: the last sample found the min RTT older than MIN_RTT_WINDOW (and took its RTT as the
        #: new one: a path whose delay grew for good is believed after that long)
        self.rtt_expired = False

    def update(self, peer: Peer, s: RateSample) -> bool:
        """Take one sample in; True when it ended a round (the caller's once-a-round work).
        Per ACK datagram: a handful of comparisons, a loop only once per round."""
        n = len(peer.unacked) - len(peer.resend)
        if n > 0 and s.in_flight > 0:
            if self.rounds:
                self.seg += (s.in_flight / n - self.seg) * _SEG_EWMA
            else:  # (the first round: the guess, made before the handshake set the MTU, goes)
                self.seg = s.in_flight / n
        self.round_acked += s.newly_acked
        self.round_lost += s.newly_lost
        rtt = s.rtt
        if 0.0 < rtt < self.round_min_rtt:
            self.round_min_rtt = rtt
        at = self.min_rtt_at
        self.rtt_expired = expired = at >= 0.0 and s.now - at > MIN_RTT_WINDOW
        if rtt > 0.0 and (rtt <= self.min_rtt or at < 0.0 or expired):
            self.min_rtt, self.min_rtt_at = rtt, s.now
        prior = s.prior_delivered
        # a round ends when a segment sent after it began is acknowledged (the draft's rule);
        # without that mark, when what was in flight at its start has been delivered.  And
        # not before half a min RTT: resends after a timeout, each stamped a little later,
        # would otherwise end a "round" per ACK (and STARTUP see three flat ones at once)
        ended = ((prior >= self.round_end if prior >= 0 else s.delivered >= self.round_end)
                 and s.now - self.round_at >= 0.5 * self.min_rtt)
        if ended:
            self.prev_round_min_rtt = self.round_min_rtt
            self.round_min_rtt = INF
            self.rounds += 1
            self.round_at = s.now
            self.round_end = s.delivered if prior >= 0 else s.delivered + s.in_flight
            if self._bw_full:
                # the filter ages by rounds that used the path: an application that paused
                # (request/response, idle) leaves the estimate as its last bulk measured it,
                # not as small as its trickle, so a new burst starts at the path's rate
                self._bw_full = False
                self._bw_round += 1
                ring = self._bw_ring
                ring[self._bw_round % BW_ROUNDS] = 0.0
                self.bw = max(ring)  # (the round that left the window no longer counts)
        rate = s.delivery_rate
        if rate > 0.0:
            if not s.app_limited:
                self._bw_full = True
            slot = self._bw_round % BW_ROUNDS
            ring = self._bw_ring
            if not ring:
                ring = self._bw_ring = [0.0] * BW_ROUNDS
            # an application-limited sample only ever raises the estimate (the draft's rule)
            if rate > ring[slot] and (not s.app_limited or rate > self.bw):
                ring[slot] = rate
                if rate > self.bw:
                    self.bw = rate
        return ended

    def new_round(self) -> tuple[int, int]:
        """The bytes acknowledged and lost since the last call (the caller's accounting
        period: a round or more); starts counting anew."""
        acked, lost = self.round_acked, self.round_lost
        self.round_acked = self.round_lost = 0
        return acked, lost

    def bdp(self) -> float:
        """Bandwidth-delay product, bytes (0.0 until both are measured)."""
        return self.bw * self.min_rtt



def segments(nbytes: float, model: PathModel, cwnd_max: float) -> float:
    """A window of ``nbytes`` in segments, within [MIN_SEGMENTS, cwnd_max]."""
    w = nbytes / model.seg
    if w < MIN_SEGMENTS:
        w = MIN_SEGMENTS
    return w if w < cwnd_max else cwnd_max
