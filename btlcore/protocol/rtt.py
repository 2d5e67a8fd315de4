"""The retransmit timeout of one peer: RTT estimation (RFC 6298) or usnic's fixed timeout,
with exponential backoff.  Kept apart from :mod:`.recovery` (which feeds it samples and
reads :attr:`RetransmitTimer.rto` for every deadline) because it is pure arithmetic on
samples, testable alone."""

from __future__ import annotations

from typing import Final

#: clock granularity term of RFC 6298 (G); our clocks are far finer, so it is small
GRANULARITY: Final = 1e-6


class RetransmitTimer:
    """Computes the retransmit timeout of one peer.

    Adaptive: ``srtt + max(G, 4 * rttvar) + max_ack_delay`` clamped to ``[rto_min, rto_max]``
    (the samples have the peer's ACK delay taken out, so, as QUIC's PTO, the timeout adds the
    longest the peer may hold an ACK back), doubled per
    consecutive timeout (exponential backoff) and reset by fresh progress.  Fixed: always
    ``retrans_timeout``, as usnic did; no backoff, so that a fixed-timeout run behaves like
    usnic's hotel."""

    __slots__ = ("adaptive", "rto_min", "rto_max", "fixed", "max_ack_delay", "srtt", "rttvar",
                 "min_rtt", "backoff", "_base", "rto")

    def __init__(self, adaptive: bool, initial: float, rto_min: float, rto_max: float,
                 fixed: float, max_ack_delay: float = 0.0) -> None:
        self.adaptive = adaptive
        self.max_ack_delay = max_ack_delay
        self.rto_min = rto_min
        self.rto_max = rto_max
        self.fixed = fixed
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.min_rtt: float | None = None
        self.backoff = 1
        self._base = min(max(initial, rto_min), rto_max) if adaptive else fixed
        #: the timeout now: a plain attribute, kept current by whatever changes its inputs
        #: (every deadline computation reads it)
        self.rto = self._base

    def sample(self, rtt: float, ack_delay: float = 0.0) -> None:
        """Feed one RTT sample (from a segment sent once: Karn's rule), ``ack_delay`` the time
        the receiver says it held the ACK.  RFC 9002 section 5.3: the min RTT takes the sample
        whole (the receiver's word cannot take it below what was measured: on a host path,
        where receive passes take as long as the wire, the delay subtracted left min RTTs of
        1-18 us on a 60 us veth path); srtt takes it less the delay, unless that would go
        below the min RTT."""
        if rtt < 0:
            return
        # (srtt and min_rtt read once into locals: compiled, each read of a float-or-None
        # attribute unboxes it, each write boxes a new float)
        if (min_rtt := self.min_rtt) is None or rtt < min_rtt:
            self.min_rtt = min_rtt = rtt
        if ack_delay > 0.0 and rtt - ack_delay >= min_rtt:
            rtt -= ack_delay
        if (srtt := self.srtt) is None:
            srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(srtt - rtt)
            srtt = 0.875 * srtt + 0.125 * rtt
        self.srtt = srtt
        if self.adaptive:  # (max and min spelled out: this runs per sample)
            var = 4 * self.rttvar
            rto = srtt + (var if var > GRANULARITY else GRANULARITY) + self.max_ack_delay
            if self.rto_min > rto:
                rto = self.rto_min
            self._base = self.rto_max if self.rto_max < rto else rto
            self._update()

    def bound(self, rtt: float) -> None:
        """Before any sample, the round trip is known to be at most ``rtt`` (a handshake whose
        HELLO was retried: its answer came that long after the first).  Not a sample (Karn's
        rule: srtt stays unknown), but the first timeout need not wait longer than a sample
        that large would make it (``3 rtt``, RFC 6298's first RTO for one sample) when that
        is shorter than the initial one."""
        if self.srtt is None and self.adaptive:
            rto = 3 * rtt + self.max_ack_delay
            if self.rto_min > rto:
                rto = self.rto_min
            if rto < self._base:
                self._base = rto
                self._update()

    def set_max_ack_delay(self, delay: float) -> None:
        """The peer told us how long it may hold an ACK back (its HELLO)."""
        self.max_ack_delay = delay
        if self.adaptive and self.srtt is not None:
            rto = self.srtt + max(GRANULARITY, 4 * self.rttvar) + delay
            self._base = min(max(rto, self.rto_min), self.rto_max)
            self._update()

    def progress(self) -> None:
        """The peer acknowledged something new: end the backoff."""
        if self.backoff != 1:
            self.backoff = 1
            self._update()

    def expired(self) -> None:
        """A timeout fired: back off (adaptive mode only)."""
        if self.adaptive and self._base * self.backoff < self.rto_max:
            self.backoff *= 2
            self._update()

    def _update(self) -> None:
        """Recompute :attr:`rto` from the base timeout and the backoff."""
        if not self.adaptive:
            self.rto = self.fixed
        else:
            rto = self._base * self.backoff
            self.rto = self.rto_max if self.rto_max < rto else rto
