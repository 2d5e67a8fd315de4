"""Pacing: a peer's sends released no faster than ``Peer.pacing_rate`` (bytes per second,
set by its congestion control; ``0.0``: unpaced, and none of this runs).

A token bucket kept as one time per peer, ``Peer.pace_next``: the moment the bucket is
empty again.  At or after it, a send pass may release ``1 + credit // mtu`` segments, the
credit being what accrued since (capped at ``burst - 1`` datagrams: a driver that comes
late catches up by that much, never more); each datagram moves ``pace_next`` on by its
size over the rate.  Before it, the peer leaves the send lists and waits on the timer heap
(``Peer.pace_wait``; :meth:`Recovery._timer_times <.recovery.Recovery._timer_times>` makes
``pace_next`` its deadline, so ``next_deadline()`` reports it and ``handle_timer()`` puts
it back).  ``burst`` is one datagram, or :data:`BURST_GATHER` on a device that batches
sends (``Capabilities.gather_sends``: the udp backend's GSO), where a few datagrams leaving
together cost the path nothing and save the host a wake-up each.  There, at a high rate, the
burst grows to :data:`QUANTUM` seconds of the rate (at most :data:`BURST_MAX` datagrams), as
Linux sizes its pacing quantum: at 1 GB/s a datagram of 9000 B leaves every 9 us, far below
what one wake-up of the driver costs, so a burst of 8 kept a loopback transfer waking for
nothing (bulk at 8972 B: about 20% below an unpaced window).

**Jitter.**  On a device that sends datagrams one by one (``burst`` 1; a batching device
sends bursts, there is no one-datagram slot to jitter in), each release is put a random
fraction of its own slot late (uniform over one datagram's time at the rate, a 32-bit
xorshift seeded from the ISN), and the next slot is counted from the unjittered one: the
rate is kept exactly and no datagram leaves a slot late.  Paced at a fixed spacing, flows
sharing a drop-tail queue phase-lock (Floyd and Jacobson's phase effects): each flow's
datagrams meet the queue at the same point of the others' pattern every time, so what the
flows measure of one shared queue differs by flow.
Two ``bbr`` flows at 100 Mb/s, 1 ms, behind a queue of 4 datagrams of 9000 B: the slower
lost 46% of what it sent and the faster 17%, only the first read that as congestion, and the
split held at 80/20 (Jain 0.727).  With each release at a random point of its slot, every
flow samples the queue as it is on average (the same loss rate and delay), which is what any
rule that converges flows (a cut by what a flow holds in the queue, a cut on loss) needs:
over 30 seeds the 2-flow cells below Jain 0.95 went from 18 to 3 (1 ms) and, with bbr's
standing-queue cut draining each flow's excess, 9 to 1 (10 ms).
"""

from __future__ import annotations

from typing import Final

from .peers import Peer
from .timers import DeadlineHeap

BURST: Final = 1  # datagrams released at once on a device that sends them one by one
BURST_GATHER: Final = 8  # ... on one that batches them (Packetizer.enable_gather), at least
QUANTUM: Final = 1e-3  # ... or this many seconds of the pacing rate, when that is more
BURST_MAX: Final = 64  # ... but never more datagrams than this
_TO_UNIT: Final = 1.0 / 4294967296.0  # a 32-bit draw to [0, 1)


class Pacer:
    """The token bucket of every peer of one engine (its state lives on the peers)."""

    __slots__ = ("mtu", "burst", "_timed", "_deadlines")

    def __init__(self, mtu: int, timed: dict[Peer, None], deadlines: DeadlineHeap[Peer]) -> None:
        self.mtu = mtu
        self.burst = BURST
        self._timed = timed
        self._deadlines = deadlines

    def room(self, peer: Peer, now: float, rate: float) -> int:
        """Datagrams ``peer`` may release now (0: it waits on the timer heap until
        ``pace_next``, see :meth:`wait`)."""
        wait = peer.pace_next - now
        if wait > 0:
            return 0
        if self.burst == 1:
            return 1
        n = int(-wait * rate / self.mtu + 1e-9)  # whole datagrams of credit (rounding forgiven)
        cap = self.credit(rate)
        return 1 + (n if n < cap else cap)

    def credit(self, rate: float) -> int:
        """The most datagrams of credit kept beside the one released (``burst - 1``, or
        :data:`QUANTUM` of ``rate`` where that is more, below :data:`BURST_MAX`)."""
        cap = self.burst - 1
        if cap:
            q = int(rate * QUANTUM / self.mtu)
            if q > cap:
                cap = q if q < BURST_MAX - 1 else BURST_MAX - 1
        return cap

    def spent(self, peer: Peer, nbytes: int, now: float, rate: float) -> None:
        """``nbytes`` left for ``peer`` now: the bucket's next empty moment moves on by their
        time at ``rate``, counted from the slot they were due in (``pace_next`` less its
        jitter: a release late by its jitter was on time; after an idle spell of more than
        a datagram's time, from now, with the usual credit), and the next release is put a
        fresh jitter into its own slot."""
        base = peer.pace_next
        gap = nbytes / rate
        if self.burst != 1:  # (a batching device sends bursts: no slot of one datagram to jitter in)
            start = now - self.credit(rate) * self.mtu / rate  # the most credit kept from before
            peer.pace_next = (base if base > start else start) + gap
            return
        x = peer.pace_seed  # xorshift32 (Marsaglia): a few integer operations a release
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        peer.pace_seed = x
        jitter = gap * x * _TO_UNIT
        t = base if base > now else now
        if base >= now - gap:  # (busy: what the last jitter delayed was on time; idle longer, a fresh start)
            t -= peer.pace_jitter
        peer.pace_next = t + gap + jitter
        peer.pace_jitter = jitter

    def wait(self, peer: Peer) -> None:
        """``peer`` has something to send before ``pace_next``: time it (its deadline)."""
        peer.pace_wait = True
        self._timed[peer] = None
        # and at once in the heap, if it comes first: a busy driver goes on the cached
        # deadline between refreshes (Engine.cached_deadline), and a release is due within
        # microseconds on a fast path
        self._deadlines.lower(peer, peer.pace_next)
