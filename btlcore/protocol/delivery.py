"""Delivery-rate sampling (draft-cheng-iccrg-delivery-rate-estimation): what the engine
hands an algorithm's optional ``on_rate_sample``, one
:class:`~.congestion.rate.RateSample` per ACK datagram that acknowledged something new.

Built only when the algorithm wants samples (:class:`DeliverySampler` exists then, else
the engine's parts hold None and pay one test per send pass and per ACK): ``aimd`` never
sees it, so its hot paths are those of a tree without sampling.

Units are datagram bytes as handed to the device (header included): the rate a link
carries, and what :mod:`.pacing` spends.  Per connection (on the :class:`~.peers.Peer`):
``delivered`` bytes so far and when the last of them was (``delivered_time``), the send time
of the newest segment acknowledged (``first_sent_time``), bytes in flight (sent, neither
acknowledged nor declared lost) and the ``delivered`` mark until which sends are
application-limited.  Per segment, stamped at every transmission: ``rs``, the connection's
``(delivered, delivered_time, first_sent_time, app_limited)`` then (one tuple shared by the
segments of a send pass), and ``size``.
"""

from __future__ import annotations

from collections.abc import Callable

from .congestion.base import RateSampled
from .congestion.rate import RateSample
from .peers import Frame, Peer, Segment

OnRateSample = Callable[[Peer, RateSample], None]


def frame_size(frame: Frame) -> int:
    """Bytes of a datagram as the device sends it (one buffer, or [header, payload])."""
    if type(frame) is list:
        return sum(len(part) for part in frame)
    return len(frame)


class DeliverySampler:
    """Stamps segments at send, accumulates what one ACK datagram acknowledged and lost, and
    builds its sample (the algorithm's ``on_rate_sample``, bound once)."""

    __slots__ = ("_on_rate_sample", "_native")

    def __init__(self, on_rate_sample: OnRateSample) -> None:
        self._on_rate_sample = on_rate_sample
        # the bound method of one of btlcore's own algorithms (a RateSampled): called on
        # its instance instead, compiled a C call rather than a Python one (same method)
        owner = getattr(on_rate_sample, "__self__", None)
        self._native: RateSampled | None = (
            owner if isinstance(owner, RateSampled)
            and getattr(on_rate_sample, "__name__", None) == "on_rate_sample" else None)

    @staticmethod
    def stamp(peer: Peer, now: float) -> tuple[int, float, float, bool]:
        if peer.inflight_bytes <= 0:  # nothing in flight: intervals start from this send
            peer.first_sent_time = peer.delivered_time = now
        return (peer.delivered, peer.delivered_time, peer.first_sent_time, peer.app_limited_at != 0)

    def sent(self, peer: Peer, first_seq: int, now: float, app_limited: bool) -> None:
        """Segments ``first_seq`` to ``peer.next_seq - 1`` were just cut and sent.
        ``app_limited``: the queue ran dry with the window not full (the sender, not the path,
        set the pace)."""
        if app_limited:
            peer.app_limited_at = max(peer.delivered + peer.inflight_bytes, 1)
        stamp = self.stamp(peer, now)
        unacked, newest = peer.unacked, peer.newest  # (newest: the last cut, taken without a lookup)
        total = 0
        for seq in range(first_seq, peer.next_seq):
            seg = newest if newest is not None and newest.seq == seq else unacked[seq]
            seg.rs = stamp
            size = seg.size = frame_size(seg.buf)
            total += size
        peer.inflight_bytes += total

    def resent(self, peer: Peer, seg: Segment, now: float) -> None:
        """``seg`` (declared lost, so out of the flight) was sent again."""
        seg.rs = self.stamp(peer, now)
        peer.inflight_bytes += seg.size

    @staticmethod
    def lost(peer: Peer, seg: Segment) -> None:
        """``seg`` was declared lost (fast retransmit or a timeout's probe)."""
        peer.inflight_bytes -= seg.size
        peer.rs_lost += seg.size

    @staticmethod
    def restored(peer: Peer, seg: Segment) -> None:
        """``seg``, declared lost, is back in flight without a resend (an undo)."""
        peer.inflight_bytes += seg.size
        peer.rs_lost -= min(seg.size, peer.rs_lost)

    @staticmethod
    def acked(peer: Peer, seg: Segment, now: float) -> None:
        """``seg`` is acknowledged (before the recovery's own bookkeeping of it)."""
        size = seg.size
        peer.delivered += size
        peer.delivered_time = now
        if not seg.lost:
            peer.inflight_bytes -= size
        peer.rs_acked += size
        best = peer.rs_seg
        # the sample is taken from the segment sent last among those acknowledged
        if best is None or seg.rs[0] > best.rs[0] or (seg.rs[0] == best.rs[0] and seg.sent_at > best.sent_at):
            peer.rs_seg = seg

    def finish(self, peer: Peer, now: float) -> None:
        """The ACK datagram is processed (its losses declared): build its sample and hand it
        to the algorithm.  Call only when ``peer.rs_acked``."""
        seg = peer.rs_seg
        peer.rs_seg = None
        if seg is None:  # (acked bytes without a segment cannot happen; be safe)
            peer.rs_acked = 0
            return
        prior_delivered, prior_time, first_sent, app_limited = seg.rs
        if peer.app_limited_at and peer.delivered > peer.app_limited_at:
            peer.app_limited_at = 0  # the application-limited bubble is acknowledged
        send_elapsed = seg.sent_at - first_sent
        ack_elapsed = now - prior_time
        peer.first_sent_time = seg.sent_at
        interval = send_elapsed if send_elapsed > ack_elapsed else ack_elapsed
        delivered = peer.delivered - prior_delivered
        min_rtt = peer.timer.min_rtt
        # an interval shorter than the path's minimum RTT cannot be a valid measure (the
        # draft's rule): ACK compression or a stretched send would inflate it
        rate = delivered / interval if interval > 0 and (min_rtt is None or interval >= min_rtt) else 0.0
        rtt = now - seg.sent_at if seg.tx_count == 1 else 0.0  # Karn: never a resent segment's
        sample = RateSample(now, rate, interval, peer.delivered, peer.rs_acked, peer.rs_lost,
                            peer.inflight_bytes if peer.inflight_bytes > 0 else 0, rtt, app_limited,
                            prior_delivered)
        peer.rs_acked = peer.rs_lost = 0
        if rate:
            peer.delivery_rate = rate  # (the last valid sample: peer_stats shows it)
        if self._native is not None:
            self._native.on_rate_sample(peer, sample)
        else:
            self._on_rate_sample(peer, sample)
