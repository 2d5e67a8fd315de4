"""Virtual time: a heap of timed events and the clock that jumps from one to the next.

Events are tuples ``(time, serial, link, channel, frame, note)``: a frame that lands in
``link.dst``'s receive queue at ``time``.  ``link is None`` marks a wake-up (a send-queue
slot frees), which only stops :meth:`Scheduler.advance` there.  ``serial`` breaks ties in
the order events were scheduled, so equal times never compare links and every run with the
same inputs pops events in the same order.

The invariant ``advance`` keeps: every event in the heap lies strictly in the future.
Frames due now are landed at once instead (and ``landed`` is set, so the next ``advance``
returns without moving the clock: whoever drives the loop gets to poll them first).

A link on its plain path (a fixed delay, nothing random) delivers in the order it sent, so
its frames need not each go through the heap: only the first frame in flight (``link.head``)
is in it, and the others wait in ``link.fifo``.  When ``advance`` pops a head it lands it,
then lands the frames queued behind it for as long as they come before everything in the
heap, and pushes the next one as the new head.  Events still land in exactly
``(time, serial)`` order; the heap just does a push and a pop per run of frames instead of
per frame.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from .links import Link
    from .pcap import PcapWriter


# subclassed by the (compiled) Fabric and by pure Python (Lab, tests): allowed when compiled
@mypyc_attr(allow_interpreted_subclasses=True)
class Scheduler:
    """The fabric's clock and event heap (the :class:`Fabric` is one).  A plain slotted
    class, not attrs: it is a base class with a hand-written ``__init__``."""

    __slots__ = ("now", "heap", "landed", "pcap", "serial", "coalesce")
    now: float
    heap: list[tuple[Any, ...]]
    landed: bool
    """Frames landed outside ``advance`` since it last ran."""
    pcap: PcapWriter | None
    serial: int
    """The next event's serial (whoever schedules an event takes it and adds one)."""
    coalesce: float

    def __init__(self) -> None:
        self.now = 0.0
        self.heap = []
        self.landed = False
        self.pcap = None
        self.serial = 0
        self.coalesce = 0.0  # seconds; see advance()

    def clock(self) -> float:
        """The virtual time, seconds since the fabric was made."""
        return self.now

    def pending(self) -> int:
        """Events not yet due (frames in flight and wake-ups)."""
        return len(self.heap) + sum(len(ev[2].fifo) for ev in self.heap
                                    if ev[2] is not None and ev is ev[2].head)

    def next_event(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def wake(self, when: float) -> None:
        """Make ``advance`` stop at ``when`` (a send-queue slot frees then)."""
        if when > self.now:
            serial = self.serial
            self.serial = serial + 1
            heappush(self.heap, (when, serial, None, 0, None, None))

    def schedule_frame(self, when: float, link: Link, channel: int, frame: bytes,
                       note: str | None) -> None:
        """Land ``frame`` on ``link``'s far end at ``when`` (now if ``when`` is not later)."""
        if when > self.now:
            serial = self.serial
            self.serial = serial + 1
            heappush(self.heap, (when, serial, link, channel, frame, note))
        else:
            self.land(link, channel, frame, note)

    def land(self, link: Link, channel: int, frame: bytes, note: str | None) -> None:
        """A frame reaches ``link.dst`` now: queue it, or drop it (closed, MTU, queue full)."""
        n = len(frame)
        if n > link.dst_mtus[channel]:
            link.drop("closed" if link.dst.closed else "rx_mtu", frame, self.now)
            return
        queue = link.dst_rx[channel]
        if len(queue) >= link.dst_depth[channel]:
            link.drop("rx_queue", frame, self.now)
            return
        queue.append(frame)
        link.dst_rx_from[channel].append(link.sources[channel])
        link.delivered += 1
        link.bytes_delivered += n
        self.landed = True
        if self.pcap is not None:
            self.pcap.delivered(self.now, link.src.node_id, link.dst.node_id, frame, note)

    def advance(self, deadline: float | None) -> None:
        """The device's ``wait``: move the clock to the earlier of ``deadline`` and the next
        event, and land every frame due then.  Returns at once, clock unmoved, if frames
        landed since the last call, or if nothing is pending and ``deadline`` is None."""
        if self.landed:
            self.landed = False
            return
        heap = self.heap
        if not heap or (deadline is not None and deadline < heap[0][0]):
            if deadline is not None and deadline > self.now:
                self.now = deadline
            return
        # Interrupt coalescing (a NIC's rx-usecs): land everything due within ``coalesce``
        # of the next event in one go, so that a receiver handles a batch per wake-up.  The
        # clock stops at the last frame landed, never past the deadline.
        first: float = heap[0][0]
        horizon = first + self.coalesce
        if deadline is not None and deadline < horizon:
            horizon = deadline
        now = self.now = first
        pcap = self.pcap
        while heap:
            top: float = heap[0][0]
            if top > horizon:
                break
            event = heappop(heap)
            link: Link | None = event[2]
            if link is None:
                if top > now:
                    now = self.now = top
                continue
            fifo = link.fifo if event is link.head else None
            while True:
                when: float = event[0]
                channel: int = event[3]
                frame: bytes = event[4]
                if when > now:
                    now = self.now = when
                # the common case of land(), inline: this runs once per frame
                n = len(frame)
                queue = link.dst_rx[channel]
                if n > link.dst_mtus[channel] or len(queue) >= link.dst_depth[channel]:
                    self.land(link, channel, frame, event[5])
                else:
                    queue.append(frame)
                    link.dst_rx_from[channel].append(link.sources[channel])
                    link.delivered += 1
                    link.bytes_delivered += n
                    if pcap is not None:
                        pcap.delivered(now, link.src.node_id, link.dst.node_id, frame, event[5])
                # the next frame of this link's run, if nothing in the heap comes first
                if not fifo:
                    break
                after: tuple[Any, ...] = fifo[0]
                due: float = after[0]
                if due > horizon:
                    break
                if heap:  # heap[0] < after, as tuples (the serials differ), in typed pieces
                    nxt = heap[0]
                    nxt_when: float = nxt[0]
                    if nxt_when < due:
                        break
                    if nxt_when == due:
                        nxt_serial: int = nxt[1]
                        after_serial: int = after[1]
                        if nxt_serial < after_serial:
                            break
                event = fifo.popleft()
            if fifo is not None:
                if fifo:
                    head: tuple[Any, ...] = fifo.popleft()
                    link.head = head
                    heappush(heap, head)
                else:
                    link.head = None
        self.landed = False

    def run(self, until: float) -> None:
        """Advance to ``until``, landing everything due by then (for scripts and tests that
        drive no transport)."""
        while True:
            self.landed = False
            if self.now >= until and not (self.heap and self.heap[0][0] <= until):
                return
            self.advance(until)
