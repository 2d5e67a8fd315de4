"""Undo: a retransmission that proves spurious gives back what its loss cost.

Detection is Eifel's idea (RFC 3522) with the sender's own clocks instead of timestamps on
the wire: a retransmitted segment acknowledged sooner after the resend than
:data:`SPURIOUS_RTT_FRACTION` of the path's minimum RTT was acknowledged for its *original*
transmission, which arrived (no resend's ACK can come back faster than the path allows).

Response:

* the congestion state (RFC 3708's undo, Linux's ``tcp_undo_cwnd_reduction``): before each
  decrease the engine keeps the window and threshold (``Peer.undo_cwnd``,
  ``Peer.undo_ssthresh``) and counts the retransmissions of the episode
  (``Peer.undo_retrans``); once every one of them proved spurious, the algorithm's optional
  ``on_spurious(peer)`` undoes its decrease (``aimd`` restores the two kept values).  One
  retransmission that was needed (its ACK came a round trip after it) makes the decrease stand;
* the timer (RFC 4015's response to a spurious timeout): the timeout's probe was acknowledged
  for its original, which was therefore in flight for ``now - Peer.probe_sent``: that is an
  RTT sample (the timeout had fired too early), fed to the estimator, so the next timeout
  waits for as long as the path takes; the backoff ends as with any progress.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from .peers import Peer, Segment

#: a resend acknowledged within this fraction of the minimum RTT was not needed
SPURIOUS_RTT_FRACTION: Final = 0.75


class Undo:
    """Spurious retransmissions: counted, and their congestion response undone."""

    __slots__ = ("_on_spurious",)

    def __init__(self, on_spurious: Callable[[Peer], None] | None) -> None:
        self._on_spurious = on_spurious  # the algorithm's optional hook, looked up once

    @staticmethod
    def arm(peer: Peer) -> None:
        """A decrease is about to be made: keep what it replaces (the episode's
        retransmissions are counted from here, ``resend_pass``)."""
        peer.undo_cwnd = peer.cwnd
        peer.undo_ssthresh = peer.ssthresh
        peer.undo_retrans = 0

    def resend_acked(self, peer: Peer, seg: Segment, now: float) -> None:
        """``seg``, retransmitted, is acknowledged (``seg.sent_at`` is its last resend)."""
        min_rtt = peer.timer.min_rtt
        if min_rtt is None or now - seg.sent_at >= min_rtt * SPURIOUS_RTT_FRACTION:
            peer.undo_cwnd = 0.0  # the resend may have been needed: the decrease stands
            return
        peer.counters.num_spurious_retrans += 1
        if peer.probe_seq is not None and peer.probe_sent and seg.seq <= peer.probe_seq:
            # a timeout's probe, acknowledged for its original: the timeout came too early,
            # and the original's flight is a fresh RTT sample (Eifel's response)
            peer.timer.sample(now - peer.probe_sent)
            peer.probe_sent = 0.0
            peer.probe_dup = True  # (as a duplicate report: no loss episode, recovery._progress)
        if peer.undo_cwnd:
            peer.undo_retrans -= 1
            if peer.undo_retrans <= 0:
                self.undo(peer)

    def undo(self, peer: Peer) -> None:
        """Every retransmission of the last loss episode was spurious: undo its decrease."""
        peer.counters.num_undos += 1
        if self._on_spurious is not None:
            self._on_spurious(peer)  # (it reads undo_cwnd and undo_ssthresh)
        peer.undo_cwnd = 0.0
