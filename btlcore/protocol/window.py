"""Sequence-space bookkeeping: what the receiver has, and what the sender learned of it.

Sequence numbers are unbounded Python ints inside the core (the wire carries their low 64
bits, see :func:`btlcore.protocol.wire.unwrap_seq`), so comparisons here are plain ``<``.

* :class:`ReceiveWindow` classifies each arriving sequence number (new, duplicate, below or
  above the window), keeps the cumulative ACK point and the out-of-order ranges above it
  (the SACK information).
* :class:`SackScoreboard` is the sender's mirror of those ranges: given the ranges of a new
  ACK it yields only the sequence numbers that were not already known to be received, so that
  every segment is processed once however many ACKs repeat the same ranges.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Final

# bisect's functions from statics (compiled, an imported name is looked up in the module's
# dict at every call: every segment out of order, every SACK range)
_bisect_left: Final = bisect_left
_bisect_right: Final = bisect_right
# serial arithmetic on the 64-bit wire sequence numbers: half the space, and all of it
SEQ_HALF: Final = 1 << 63
SEQ_WRAP: Final = 1 << 64

# ReceiveWindow.accept() verdicts
NEW: Final = 0
DUPLICATE: Final = 1
BELOW_WINDOW: Final = 2
ABOVE_WINDOW: Final = 3

#: the ranges of a window or scoreboard that never had any (nearly all: an idle peer's), one
#: list shared by all of them and never mutated -- each method that adds a range to an empty
#: record gives it lists of its own first (two empty lists per record are 224 bytes a peer)
_NO_RANGES: list[int] = []

RECENT: Final = 256
"""Runs of out-of-order arrivals a receiver remembers until an ACK lists their ranges
(:meth:`ReceiveWindow.sack_ranges`): a burst that opened more ranges than one ACK lists is
listed by several ACKs at once (:data:`MORE_ACKS`), never left out unheard."""
REPEAT: Final = 32
"""Runs, the latest, whose ranges a truncated list names again when it has room: a range is
listed by the several ACKs that follow its change, so one lost ACK does not hide it."""
MORE_ACKS: Final = 8
"""Standalone ACKs one ACK pass may add for a peer whose ranges changed more than one lists."""


class ReceiveWindow:
    """The receive side of one peer's sequence space.

    ``cum`` is the highest sequence number such that it and everything before it arrived.
    Above it, ``_starts``/``_ends`` hold disjoint, non-adjacent inclusive ranges of what also
    arrived, sorted; a gap between ``cum`` and the first range is what is missing."""

    __slots__ = ("cum", "size", "_starts", "_ends", "high", "_recent", "_listed", "unlisted")

    def __init__(self, cum: int, size: int) -> None:
        self.cum = cum
        self.size = size
        self._starts: list[int] = _NO_RANGES
        self._ends: list[int] = _NO_RANGES
        self.high = cum  # highest sequence number seen
        #: the last arrival of each of the latest runs of out-of-order arrivals, oldest first
        #: (at most 2 x RECENT kept), and how many of them an ACK listed already
        self._recent: list[int] | None = None  # (None: never had gaps, an idle peer's)
        self._listed = 0
        #: a truncated list left changed ranges out: another ACK should follow at once
        self.unlisted = False

    def accept(self, seq: int) -> int:
        """Classify ``seq`` and record it if new.  Does not move ``cum`` for out-of-order
        arrivals beyond filling what is contiguous."""
        cum = self.cum
        if seq == cum + 1 and not self._starts:  # the common case: in order, no holes
            self.cum = seq
            if seq > self.high:
                self.high = seq
            return NEW
        if seq <= cum:
            return DUPLICATE if seq > cum - self.size else BELOW_WINDOW
        if seq > cum + self.size:
            return ABOVE_WINDOW
        starts, ends = self._starts, self._ends
        if starts and seq == ends[-1] + 1:
            # the next above the highest range: what arrives while a hole waits for its
            # repair, the usual case on a lossy path (no search; and no note in _recent:
            # every ACK lists the highest range, so its growth is never left unheard)
            ends[-1] = seq
            if seq > self.high:
                self.high = seq
            return NEW
        i = _bisect_right(starts, seq) - 1  # the range starting at or before seq
        if i >= 0 and seq <= ends[i]:
            return DUPLICATE
        if seq > self.high:
            self.high = seq
        if seq == cum + 1:
            # fills the hole in front of the first range
            if starts and starts[0] == seq + 1:
                self.cum = ends[0]
                del starts[0], ends[0]
            else:
                self.cum = seq
            return NEW
        joins_left = i >= 0 and ends[i] == seq - 1
        joins_right = i + 1 < len(starts) and starts[i + 1] == seq + 1
        if joins_left and joins_right:
            ends[i] = ends[i + 1]
            del starts[i + 1], ends[i + 1]
        elif joins_left:
            ends[i] = seq
        elif joins_right:
            starts[i + 1] = seq
        elif not starts:
            self._starts, self._ends = [seq], [seq]  # (the first range: lists of its own)
        else:
            starts.insert(i + 1, seq)
            ends.insert(i + 1, seq)
        recent = self._recent
        if recent is None:
            recent = self._recent = []
        n = len(recent)
        if n > self._listed and recent[n - 1] == seq - 1:
            recent[n - 1] = seq  # (the same run, not yet listed: one entry)
        else:
            recent.append(seq)
            if n >= 2 * RECENT:
                del recent[:RECENT]
                self._listed = self._listed - RECENT if self._listed > RECENT else 0
        return NEW

    @property
    def has_gaps(self) -> bool:
        return bool(self._starts)

    def holds(self, seq: int) -> bool:
        """True if ``seq`` arrived (at or below ``cum``, or in a range above it)."""
        if seq <= self.cum:
            return True
        i = _bisect_right(self._starts, seq) - 1
        return i >= 0 and seq <= self._ends[i]

    def sack_truncated(self, limit: int) -> bool:
        return len(self._starts) > limit

    def sack_ranges(self, limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` ranges as ``(start - cum, length)``, ascending.  When there are
        more, those :meth:`_truncated` picks: the highest, those changed since the last ACK
        and the latest, and the lowest (``unlisted`` then says whether changed ones were
        left for another ACK).  Called once per ACK built: it counts what was listed."""
        cum = self.cum
        starts, ends = self._starts, self._ends
        if len(starts) > limit >= 2:
            return [(starts[i] - cum, ends[i] - starts[i] + 1) for i in self._truncated(limit)]
        self._listed = len(self._recent) if self._recent is not None else 0
        self.unlisted = False
        # (by index: compiled, zip with a keyword is a generic call, ~2,500 instructions)
        return [(starts[i] - cum, ends[i] - starts[i] + 1) for i in range(min(len(starts), limit))]

    def _range_of(self, seq: int, hint: int) -> int:
        """The index of the range holding ``seq`` (-1: none, it is at or below ``cum``).
        Runs of arrivals taken newest first lie in the ranges just below the last one found
        (``hint``): a few comparisons from there before a binary search (per truncated ACK,
        up to REPEAT of them)."""
        if seq <= self.cum:
            return -1
        starts = self._starts
        i = hint
        if i + 1 >= len(starts) or seq < starts[i + 1]:  # (at or below the hint's range)
            stop = i - 4
            while i > stop and i >= 0:
                if starts[i] <= seq:
                    return i if seq <= self._ends[i] else -1
                i -= 1
        i = _bisect_right(starts, seq) - 1
        return i if i >= 0 and seq <= self._ends[i] else -1

    def _truncated(self, limit: int) -> list[int]:
        """Which ``limit`` of the ranges (more than ``limit``, ``limit >= 2``) a SACK list
        names, ascending indices: the highest (the largest sequence number received, which
        the sender's RTT sample and loss detection key on); those of the runs of arrivals no
        ACK listed yet, oldest first, then those of the :data:`REPEAT` latest runs, up to
        ``limit // 2`` with the highest; and the lowest that fit (just above the holes the
        sender must fill first).  The sender keeps what each ACK told it, so every range is
        known once listed; with the lowest alone, on a path losing 10% of 1000 segments a
        round trip, the ranges past the lowest 63 went unheard, no loss could be declared
        there (the truncation limit), and holes waited seconds for their repair."""
        n = len(self._starts)
        chosen: dict[int, None] = {n - 1: None}
        most = limit >> 1
        recent = self._recent if self._recent is not None else _NO_RANGES
        k, end = self._listed, len(recent)
        while k < end and len(chosen) < most:
            i = self._range_of(recent[k], n - 1)
            if i >= 0:
                chosen[i] = None
            k += 1
        self._listed = k
        self.unlisted = k < end
        stop = end - REPEAT if end > REPEAT else 0
        hint = n - 1
        while end > stop and len(chosen) < most:
            end -= 1
            i = self._range_of(recent[end], hint)
            if i >= 0:
                chosen[i] = None
                hint = i
        i = 0
        while len(chosen) < limit:
            chosen[i] = None
            i += 1
        return sorted(chosen)

    def out_of_order_count(self) -> int:
        return sum(e - s + 1 for s, e in zip(self._starts, self._ends, strict=True))


class SackScoreboard:
    """The sender's record of which sequence numbers above its cumulative ACK point the
    receiver reported in SACK ranges."""

    __slots__ = ("_starts", "_ends")

    def __init__(self) -> None:
        self._starts: list[int] = _NO_RANGES
        self._ends: list[int] = _NO_RANGES

    def prune(self, cum: int) -> None:
        """Forget what the cumulative ACK now covers."""
        starts, ends = self._starts, self._ends
        while starts and ends[0] <= cum:
            del starts[0], ends[0]
        if starts and starts[0] <= cum:
            starts[0] = cum + 1

    def add(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """Record the inclusive range ``lo..hi``; return the inclusive sub-ranges of it that
        were not recorded before."""
        if lo > hi:
            return []
        starts, ends = self._starts, self._ends
        i = _bisect_left(ends, lo - 1)  # first range that ends at or after lo - 1 (touching)
        fresh = []
        pos = lo
        j = i
        n = len(starts)
        while j < n and starts[j] <= hi + 1:
            if starts[j] > pos:
                fresh.append((pos, starts[j] - 1))
            if ends[j] + 1 > pos:
                pos = ends[j] + 1
            j += 1
        if pos <= hi:
            fresh.append((pos, hi))
        if not starts:
            self._starts, self._ends = [lo], [hi]  # (the first range: lists of its own)
            return fresh
        if i < j:
            lo = min(lo, starts[i])
            hi = max(hi, ends[j - 1])
        starts[i:j] = [lo]
        ends[i:j] = [hi]
        return fresh

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends, strict=True))
