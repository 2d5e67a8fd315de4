"""What an ACK tells a congestion controller beyond "one segment arrived": a delivery-rate
sample (the BBR drafts' rate sample, draft-cheng-iccrg-delivery-rate-estimation).

The engine builds one per ACK datagram that acknowledged something new and hands it to an
algorithm's optional ``on_rate_sample``; algorithms that only count segments (``aimd``) never
see it.  Each sent segment remembers the connection's ``delivered`` byte count and time when
it left; when it is acknowledged, the bytes delivered since over the time elapsed since is the
rate the path sustained (the larger of the send and the ACK intervals, so ACK compression
never inflates it)."""

from __future__ import annotations


class RateSample:
    """One ACK's worth of delivery information for one peer (times in seconds, sizes in
    bytes)."""

    __slots__ = ("now", "delivery_rate", "interval", "delivered", "newly_acked", "newly_lost",
                 "in_flight", "rtt", "app_limited", "prior_delivered")

    def __init__(self, now: float, delivery_rate: float, interval: float, delivered: int,
                 newly_acked: int, newly_lost: int, in_flight: int, rtt: float,
                 app_limited: bool, prior_delivered: int = -1) -> None:
        self.now = now
        #: bytes/s delivered over ``interval`` (0.0: no valid sample from this ACK)
        self.delivery_rate = delivery_rate
        self.interval = interval
        #: the connection's bytes delivered in total, after this ACK
        self.delivered = delivered
        self.newly_acked = newly_acked  # bytes this ACK acknowledged (cumulative and SACK)
        self.newly_lost = newly_lost  # bytes this ACK's processing declared lost
        self.in_flight = in_flight  # bytes sent and neither acknowledged nor lost, after it
        self.rtt = rtt  # the RTT of the newest segment acknowledged (0.0: none, Karn's rule)
        #: the sender had less to send than the window allowed when the sampled segment left,
        #: so the rate may be below what the path could carry (never lower an estimate with it)
        self.app_limited = app_limited
        #: the connection's ``delivered`` when the sampled segment (the newest acknowledged)
        #: was sent: a round trip ends when it reaches the ``delivered`` of the round's start
        #: (-1: not known; algorithms then count rounds by the bytes in flight)
        self.prior_delivered = prior_delivered

    def __repr__(self) -> str:
        return (f"RateSample(now={self.now:.6f}, rate={self.delivery_rate:.0f} B/s, "
                f"acked={self.newly_acked}, lost={self.newly_lost}, in_flight={self.in_flight}, "
                f"rtt={self.rtt:.6f}, app_limited={self.app_limited})")
