"""The links: one direction of the fabric at run time, applying its link model to frames.

A :class:`~btlcore_sim.models.LinkModel` (:mod:`.models`, imported here too) is a frozen
description, shared and reused; a :class:`Link` is one direction between two NICs at run
time, holding the model's numbers unpacked into plain slots, its own random stream and its
counters.  The per-frame path reads those slots only: no attrs instance, closure or dict is
built per frame (this module is compiled where the build can; see ``btlcore/_native.py``).

What happens to a frame offered to a link, in this order (each stage counted by cause):

1. ``mtu``: longer than the link MTU: dropped.
2. ``queue``: the rate limiter.  Frames are serialised one after another at ``rate_mbps``;
   the backlog is the bytes waiting for the wire (including the one being sent).  A frame
   that would push the backlog over the queue's size (``queue_limit`` bytes, or
   ``queue_bdp`` times the path's bandwidth-delay product: see :mod:`.queues`) is
   tail-dropped.  A direction that feeds a shared :class:`~.queues.Bottleneck` is
   serialised by it instead (causes ``queue`` and ``aqm``).  The sending NIC's
   send-queue slot stays taken until the frame's last bit left, which is what makes
   ``post_send`` return False on a full send queue.
3. ``partition``: the fabric is partitioned between the two ends when the frame finishes
   serialisation.
4. Scripted faults (``fabric.faults``, the words of :mod:`btlcore.faults`; ns-3's list error
   models): a rule that drops counts under its cause (``fault``; ``partition``, ``nth`` and
   ``rule`` for the old words).  A frame a rule duplicates, delays, reorders or corrupts skips
   the random stages below (the script decided its fate); each copy still takes the link's
   delay and jitter.  A reordered frame is held until ``after`` more frames were offered to the
   link, then lands a nanosecond behind the last of them (the link's fixed delay).
5. ``loss``: independent random loss; ``burst``: Gilbert-Elliott loss (see below).
6. ``corrupt``: one random bit of the copy is flipped (netem's model).  ``duplicate``: a
   second copy is sent, with its own corruption, delay and reorder draw.
7. Delay: ``delay`` plus a ``jitter`` draw from ``jitter_dist``; never below zero.  Jitter
   can reorder frames, as in netem.  ``reorder`` follows netem: with that probability a
   frame is sent at once, skipping delay and jitter, so it overtakes the frames sent during
   the last ``delay`` seconds (this is why ``reorder`` needs ``delay > 0``).
8. At the receiving NIC: ``rx_mtu`` (longer than the receiving channel's MTU), ``rx_queue``
   (receive queue full), ``closed`` (the NIC was closed).

Gilbert-Elliott burst loss, ``burst=(p, mean_len)``: two states, Good (no loss) and Bad
(every frame lost).  Each frame is judged in the current state, then the state moves.
Leaving Bad has probability ``r = 1 / mean_len``, so a burst (a run of frames in Bad) lasts
``mean_len`` frames on average (geometric).  Entering Bad has probability
``q = p * r / (1 - p)``, which makes the stationary share of Bad, ``q / (q + r)``, equal the
long-run loss rate ``p``.  ``q <= 1`` needs ``p <= mean_len / (mean_len + 1)``.

Jitter distributions (``jitter`` is in seconds):
``normal``: ``delay + N(0, jitter)``;  ``uniform``: ``delay + U(-jitter, +jitter)``;
``pareto``: ``delay + X`` with X >= 0 heavy-tailed (Pareto, shape 3) and mean ``jitter``.
A draw that would make the delay negative is clamped to zero.
"""

from __future__ import annotations

import random
from bisect import insort
from collections import deque
from collections.abc import Sequence
from heapq import heappush
from typing import TYPE_CHECKING, Any

from .models import _IDEAL
from .models import JITTER_DISTS as JITTER_DISTS  # (re-exported: defined here before models.py)
from .models import LinkModel as LinkModel
from .queues import queue_bytes

if TYPE_CHECKING:
    from .fabric import Fabric
    from .nic import SimNIC
    from .queues import Bottleneck

PARETO_SHAPE = 3.0
"""Shape of the Pareto jitter: heavy tail, finite variance."""
NO_LIMIT = 1 << 62

DROP_CAUSES = ("mtu", "queue", "aqm", "partition", "nth", "rule", "fault", "loss", "burst", "rx_mtu",
               "rx_queue", "closed")


class Link:
    """One direction ``src -> dst`` of the fabric at run time.

    The model's numbers are copied into slots (``apply``) so the per-frame path costs a
    slot read per stage; counters are plain ints; randomness comes from this direction's
    own ``random.Random``, seeded from the fabric seed and the two node ids, so adding
    traffic on one link never changes what happens on another.  A plain slotted class, not
    attrs: compiled (``btlcore/_native.py``), every slot below is a typed C field."""

    __slots__ = ("fabric", "src", "dst", "rng", "model", "name", "ideal", "plain", "head", "fifo", "dst_rx",
                 "dst_rx_from", "sources", "dst_mtus", "dst_depth", "mtu", "loss", "ge_q", "ge_r", "ge_bad",
                 "delay", "jitter", "jitter_dist", "reorder", "duplicate", "corrupt", "bytes_per_s",
                 "queue_limit", "shared", "busy_until", "partitions", "rules", "held", "fast_frames",
                 "fast_bytes", "offered", "bytes_offered", "delivered", "bytes_delivered", "duplicated",
                 "corrupted", "drops")
    fabric: Fabric
    src: SimNIC
    dst: SimNIC
    rng: random.Random
    model: LinkModel
    name: str
    # -- what the per-frame path reads --------------------------------------------------
    ideal: bool
    """No stage can act: post_send delivers at once without calling :meth:`transmit`."""
    plain: bool
    """No stage after the rate limiter can act but the fixed delay (:meth:`transmit`'s
    short cut)."""
    head: tuple[Any, ...] | None
    """The event of this link's that stands in the fabric's heap for ``fifo`` (see
    :class:`~.scheduler.Scheduler`)."""
    fifo: deque[tuple[Any, ...]]
    """Plain-path frames in flight behind ``head``, in arrival order: they join the heap
    one at a time, or land straight from here when nothing in the heap comes first."""
    dst_rx: list[list[bytes]]
    dst_rx_from: list[list[Any]]
    """``dst.rx_from``: where a frame landing in ``dst_rx`` records its source."""
    sources: tuple[Any, ...]
    """Per channel: the source a frame sent on it carries, ``(src address, channel)``."""
    dst_mtus: list[int]
    dst_depth: list[int]
    mtu: int
    loss: float
    ge_q: float
    ge_r: float
    ge_bad: bool
    delay: float
    jitter: float
    jitter_dist: str
    reorder: float
    duplicate: float
    corrupt: float
    bytes_per_s: float
    queue_limit: int
    """The byte limit in force (``queue_bdp`` resolved by the fabric); 0: unlimited."""
    shared: Bottleneck | None
    """The bottleneck that serialises this direction's frames instead of its own limiter."""
    busy_until: float
    partitions: tuple[tuple[float, float], ...]
    rules: tuple[Any, ...]
    """The fabric's fault rules that may act on this direction (:mod:`btlcore.faults`)."""
    held: list[list[Any]]
    """Reordered frames: ``[frames still to pass, channel, frame]``."""
    # -- counters -----------------------------------------------------------------------
    fast_frames: int
    """Frames that took the ideal path (offered and delivered at once)."""
    fast_bytes: int
    offered: int
    bytes_offered: int
    delivered: int
    bytes_delivered: int
    duplicated: int
    corrupted: int
    drops: dict[str, int]

    def __init__(self, fabric: Fabric, src: SimNIC, dst: SimNIC, rng: random.Random,
                 model: LinkModel = _IDEAL, name: str = "") -> None:
        self.fabric = fabric
        self.src = src
        self.dst = dst
        self.rng = rng
        self.model = model
        self.name = name
        self.ideal = self.plain = True
        self.head = None
        self.fifo = deque()
        self.dst_rx = []
        self.dst_rx_from = []
        self.sources = ()
        self.dst_mtus = []
        self.dst_depth = []
        self.mtu = NO_LIMIT
        self.loss = self.ge_q = self.ge_r = 0.0
        self.ge_bad = False
        self.delay = self.jitter = 0.0
        self.jitter_dist = "normal"
        self.reorder = self.duplicate = self.corrupt = self.bytes_per_s = 0.0
        self.queue_limit = 0
        self.shared = None
        self.busy_until = 0.0
        self.partitions = ()
        self.rules = ()
        self.held = []
        self.fast_frames = self.fast_bytes = self.offered = self.bytes_offered = 0
        self.delivered = self.bytes_delivered = self.duplicated = self.corrupted = 0
        self.drops = {}

    def __repr__(self) -> str:
        return f"Link({self.name!r})"

    def apply(self, model: LinkModel, rtt: float | None = None) -> None:
        """Take ``model``'s numbers; the random stream and the counters carry on.  ``rtt``:
        the path's round trip, which sizes a ``queue_bdp`` queue (default twice the delay)."""
        self.model = model
        self.mtu = model.mtu if model.mtu is not None else NO_LIMIT
        self.loss = float(model.loss)
        self.ge_q, self.ge_r = model.gilbert_elliott()
        if not self.ge_q:
            self.ge_bad = False
        self.delay = float(model.delay)
        self.jitter = float(model.jitter)
        self.jitter_dist = model.jitter_dist
        self.reorder = float(model.reorder)
        self.duplicate = float(model.duplicate)
        self.corrupt = float(model.corrupt)
        self.bytes_per_s = model.rate_mbps * 1e6 / 8.0
        frame = min(self.mtu, self.src.mtu)
        self.queue_limit = queue_bytes(model.queue_limit, model.queue_bdp, self.bytes_per_s,
                                       2 * self.delay if rtt is None else rtt, frame)
        if self.shared is not None:
            self.bytes_per_s = self.shared.bytes_per_s  # (it serialises; the own limiter is unused)
            self.queue_limit = 0
        self.refresh()

    def refresh(self) -> None:
        """Recompute whether the ideal path (and the plain one) may be taken."""
        self.plain = not (self.partitions or self.rules or self.held or self.loss or self.ge_q
                          or self.duplicate or self.corrupt or self.jitter or self.reorder)
        self.ideal = (
            self.model.ideal
            and self.shared is None
            and not self.partitions
            and not self.rules
            and not self.held
            and self.fabric.pcap is None
            and not self.src.closed
            and not self.dst.closed
        )

    # -- the general per-frame path -----------------------------------------------------

    def transmit(self, channel: int, data: bytes | bytearray | memoryview) -> bool:
        """Carry one frame through every stage (the module docstring lists them)."""
        src = self.src
        if src.closed:
            raise RuntimeError(f"{src.name}: device is closed")
        fab = self.fabric
        now = fab.now
        n = len(data)
        self.offered += 1
        self.bytes_offered += n
        # Every accepted post completes once: at once, or when its last bit left (rate).
        if n > self.mtu:
            return self.refuse("mtu", data, now)
        t = now
        bps = self.bytes_per_s
        if bps:
            shared = self.shared
            if shared is None:
                busy = self.busy_until
                start = busy if busy > now else now
                # backlog in bytes; the 1e-6 forgives float error in the accumulated busy time
                if self.queue_limit and (start - now) * bps + n > self.queue_limit + 1e-6:
                    return self.refuse("queue", data, now)
                t = start + n / bps
                self.busy_until = t
            else:
                t = shared.admit(n, now)
                if t < 0.0:
                    return self.refuse(shared.cause, data, now)
            infl = src.inflight[channel]
            if not infl or t >= infl[-1]:
                infl.append(t)  # the usual case: after every slot taken before
            else:
                insort(infl, t)  # another link of this NIC's is further behind
        else:
            src.completed += 1
        if self.plain:  # the stages below cannot act: deliver after the fixed delay
            arrival = t + self.delay
            if arrival <= now:
                fab.land(self, channel, data if type(data) is bytes else bytes(data), None)
                return True
            serial = fab.serial
            fab.serial = serial + 1
            # (a frame is immutable bytes on the wire; the core's already are: no call, no copy)
            frame = data if type(data) is bytes else bytes(data)
            event: tuple[Any, ...] = (arrival, serial, self, channel, frame, None)
            fifo = self.fifo
            head = self.head
            if head is None:
                self.head = event
                heappush(fab.heap, event)
            elif arrival >= (fifo[-1][0] if fifo else head[0]):
                fifo.append(event)  # arrivals on a plain link keep their order: no heap push
            else:
                heappush(fab.heap, event)  # the model changed to a shorter delay meanwhile
            return True
        return self._impaired(channel, data, n, t)

    def _impaired(self, channel: int, data: bytes | bytearray | memoryview, n: int, t: float) -> bool:
        """:meth:`transmit`'s stages after the rate limiter, on a link where they may act (not
        ``plain``): ``n`` bytes that leave the wire at ``t``."""
        fab = self.fabric
        now = fab.now
        if self.partitions or self.rules or self.held:
            fate = self._scripted(data, t)
            if fate is not None:
                return self.drop(fate, data, now) if type(fate) is str else self._fated(fate, channel, data, t)
        rnd = self.rng.random
        if self.loss and rnd() < self.loss:
            return self.drop("loss", data, now)
        if self.ge_q and self._burst_step():
            return self.drop("burst", data, now)
        frame = data if type(data) is bytes else bytes(data)
        copies = 1
        if self.duplicate and rnd() < self.duplicate:
            copies = 2
            self.duplicated += 1
        for copy in range(copies):
            note = "duplicate" if copy else None
            out = frame
            if self.corrupt and n and rnd() < self.corrupt:
                out, note = self._corrupted(frame, note)
            arrival = t
            if self.delay or self.jitter:
                if self.reorder and rnd() < self.reorder:
                    pass  # netem's reorder: this frame goes at once, overtaking others
                else:
                    arrival = t + self._delay_draw()
            if arrival > now:  # Scheduler.schedule_frame, inline
                serial = fab.serial
                fab.serial = serial + 1
                heappush(fab.heap, (arrival, serial, self, channel, out, note))
            else:
                fab.land(self, channel, out, note)
        return True

    # -- the stages that act rarely, out of transmit's way --------------------------------

    def _scripted(self, data: bytes | bytearray | memoryview, t: float) -> Any:
        """The cause if a partition or a fault rule drops this frame (in that order, as the
        module docstring says), the rule if one acts on it otherwise, else None.  ``t``:
        when it left the wire.  Releases the reordered frames waiting for this one."""
        if self.held:
            self._pass_held(t)
        cause = None
        for start, end in self.partitions:
            if start <= t < end:
                cause = "partition"
                break
        if self.rules:
            fab = self.fabric
            rule = fab.faults.judge(self.rules, t, self.src.address, self.dst.address, data,
                                    fab.keys_of, self.rng, taken=cause is not None)
            if rule is not None:
                return rule.cause if rule.action == "drop" else rule
        return cause

    def _fated(self, rule: Any, channel: int, data: bytes | bytearray | memoryview, t: float) -> bool:
        """Carry a frame a fault rule duplicates, delays, reorders or corrupts."""
        fab = self.fabric
        frame = bytes(data)
        action = rule.action
        if action == "reorder":
            self.held.append([rule.arg, channel, frame])
            self.refresh()
            return True
        note = f"fault: {action}"
        copies = 1
        if action == "duplicate":
            copies += rule.arg
            self.duplicated += rule.arg
        elif action == "corrupt":
            frame, bit = fab.faults.flip(rule, frame, self.rng)
            self.corrupted += 1
            note = f"fault: corrupted bit {bit}"
        extra = rule.arg if action == "delay" else 0.0
        for _ in range(copies):
            fab.schedule_frame(t + self._delay_draw() + extra, self, channel, frame, note)
        return True

    def _pass_held(self, t: float) -> None:
        """One more frame was offered (leaving the wire at ``t``): the reordered frames that
        waited for it leave too, landing a nanosecond behind it (the link's fixed delay;
        behind every frame landing at that instant)."""
        fab = self.fabric
        for entry in list(self.held):
            entry[0] -= 1
            if entry[0] <= 0:
                self.held.remove(entry)
                fab.schedule_frame(t + self.delay + 1e-9, self, entry[1], entry[2], "fault: reordered")
        if not self.held:
            self.refresh()

    def _burst_step(self) -> bool:
        """Gilbert-Elliott: True if this frame is lost (judged in the current state), then
        move the state (the module docstring has the model)."""
        rnd = self.rng.random
        bad = self.ge_bad
        if bad:
            if rnd() < self.ge_r:
                self.ge_bad = False
        elif rnd() < self.ge_q:
            self.ge_bad = True
        return bad

    def _corrupted(self, frame: bytes, note: str | None) -> tuple[bytes, str]:
        """``frame`` with one random bit flipped, and ``note`` saying which."""
        bit = self.rng.randrange(len(frame) * 8)
        buf = bytearray(frame)
        buf[bit >> 3] ^= 0x80 >> (bit & 7)  # bit 0 is the first bit on the wire
        self.corrupted += 1
        return bytes(buf), (f"{note}, corrupted bit {bit}" if note else f"corrupted bit {bit}")

    def transmit_run(self, channel: int, items: Sequence[tuple[int, Any, Any]], i: int) -> int:
        """Take ``items[i:]`` on the plain path for as long as they go to this link on
        ``channel`` and nothing but the rate limiter and the fixed delay applies; return the
        index of the first item not taken (the caller posts it the one-frame way, which
        raises, drops, reaps or refuses as :meth:`transmit` and ``post_send`` do).  Called
        after one frame of the run went the one-frame way, so the link's head is set: the
        rest join its FIFO with the link's state held in locals, as a bulk sender's frames
        do.  The same frames, serials and times as one :meth:`transmit` per frame."""
        head = self.head
        if head is None or not (self.plain and self.bytes_per_s and self.delay and not self.queue_limit
                                and self.shared is None):
            return i
        src = self.src
        infl = src.inflight[channel]
        depth = src.sq_depth[channel]
        limit = min(self.mtu, src.mtus[channel])  # beyond either: dropped or refused, not here
        bps = self.bytes_per_s
        delay = self.delay
        fab = self.fabric
        now = fab.now
        serial = fab.serial
        fifo = self.fifo
        busy = self.busy_until
        tail: float = fifo[-1][0] if fifo else head[0]
        first = i
        nbytes = 0
        total = len(items)
        while i < total:
            ch, dest, data = items[i]
            n = len(data)
            if dest is not self or ch != channel or n > limit or len(infl) >= depth:
                break
            t = (busy if busy > now else now) + n / bps  # (as transmit computes it, bit for bit)
            if (infl and t < infl[-1]) or t + delay < tail:
                break  # out of order here or there: the one-frame way sorts it out
            busy = t
            infl.append(t)
            tail = t + delay
            frame = data if type(data) is bytes else bytes(data)
            event: tuple[Any, ...] = (tail, serial, self, channel, frame, None)
            fifo.append(event)
            serial += 1
            nbytes += n
            i += 1
        fab.serial = serial
        self.busy_until = busy
        self.offered += i - first
        self.bytes_offered += nbytes
        return i

    def _delay_draw(self) -> float:
        d = self.delay
        j = self.jitter
        if j:
            dist = self.jitter_dist
            if dist == "normal":
                d += self.rng.gauss(0.0, j)
            elif dist == "uniform":
                d += self.rng.uniform(-j, j)
            else:
                d += j * (PARETO_SHAPE - 1.0) * (self.rng.paretovariate(PARETO_SHAPE) - 1.0)
            if d < 0.0:
                d = 0.0
        return d

    def refuse(self, cause: str, data: bytes | bytearray | memoryview, now: float) -> bool:
        """A frame dropped before it took the wire: its post completes now."""
        self.src.completed += 1
        return self.drop(cause, data, now)

    def drop(self, cause: str, data: bytes | bytearray | memoryview, now: float) -> bool:
        """Count (and capture) a frame this link lost.  Returns True: the post succeeded."""
        self.drops[cause] = self.drops.get(cause, 0) + 1
        pcap = self.fabric.pcap
        if pcap is not None:
            pcap.dropped(now, self.src.node_id, self.dst.node_id, data, f"dropped: {cause} ({self.name})")
        return True

    # -- reporting ----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        drops = {cause: self.drops[cause] for cause in DROP_CAUSES if cause in self.drops}
        return {
            "offered": self.offered + self.fast_frames,
            "delivered": self.delivered + self.fast_frames,
            "dropped": sum(drops.values()),
            "drops": drops,
            "duplicated": self.duplicated,
            "corrupted": self.corrupted,
            "bytes_offered": self.bytes_offered + self.fast_bytes,
            "bytes_delivered": self.bytes_delivered + self.fast_bytes,
        }
