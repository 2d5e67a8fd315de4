"""Deadlines of many peers, the earliest found in O(log n).

:class:`DeadlineHeap` is a binary heap with lazy invalidation: setting an item's deadline
pushes a new entry and makes its older ones stale (the top's, as a lone peer's always is, is
updated in place instead: no new entry per send and per ACK); stale entries are dropped when they reach
the top (and the heap is rebuilt when they outnumber the live ones).  The engine recomputes a
peer's deadline only when something about the peer changed, so an idle peer costs nothing
per progress pass; see :meth:`btlcore.protocol.recovery.Recovery._refresh_timers`.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush, heapreplace
from typing import Any, Final, Generic, TypeVar

T = TypeVar("T")

_SLACK: Final = 64  # stale entries tolerated beyond the live ones before a rebuild
# heapq's functions from statics (compiled, an imported name is looked up in the module's
# dict at every call): several peers' timers move the top entry at every refresh
_heapify: Final = heapify
_heappop: Final = heappop
_heappush: Final = heappush
_heapreplace: Final = heapreplace


class _Entry:
    """One heap entry: ``at`` (the deadline), ``serial`` (the order set: it breaks ties, so
    items are never compared) and ``item``.  A class, not a list: compiled, the deadline and
    the serial are typed fields, compared and updated in place without a list's generic item
    calls and float boxing (a refresh of a busy peer's timers updates the top entry every time)."""

    __slots__ = ("at", "serial", "item")

    def __init__(self, at: float, serial: int, item: Any) -> None:
        self.at = at
        self.serial = serial
        self.item = item

    def __lt__(self, other: _Entry) -> bool:  # (heapq's one comparison: a list's order, [at, serial, item])
        return self.at < other.at or (self.at == other.at and self.serial < other.serial)


class DeadlineHeap(Generic[T]):
    """At most one live deadline per item; ``first()`` is the earliest of them."""

    __slots__ = ("_heap", "live", "_count")

    def __init__(self) -> None:
        # entries (_Entry): mutable, so the top entry is updated in place (set), and an entry
        # stays one object, in the heap and in ``live``
        self._heap: list[_Entry] = []
        #: item -> its live entry, the very one in the heap (an entry is live while it is
        #: its item's here: one identity test); read-only outside this class (a look in it
        #: spares a method call on hot paths)
        self.live: dict[T, _Entry] = {}
        self._count = 0

    def __len__(self) -> int:
        return len(self.live)

    def __contains__(self, item: T) -> bool:
        return item in self.live

    def get(self, item: T) -> float | None:
        live = self.live.get(item)
        return None if live is None else live.at

    def set(self, item: T, deadline: float | None) -> None:
        """Make ``deadline`` the item's (None: it has none)."""
        live = self.live.get(item)
        if deadline is None:
            if live is not None:
                del self.live[item]
            return
        if live is not None and live.at == deadline:
            return  # unchanged: no new entry
        heap = self._heap
        self._count += 1
        if live is not None and heap[0] is live:
            # its entry is the top (always, for a lone item): updated in place (no new entry,
            # the heap keeps its size and first() has no stale entry to skip), then sifted
            # down to its place among the others
            live.at = deadline
            live.serial = self._count
            if len(heap) > 1:
                _heapreplace(heap, live)
            return
        entry = _Entry(deadline, self._count, item)
        self.live[item] = entry
        _heappush(heap, entry)
        if len(heap) > 2 * len(self.live) + _SLACK:
            self._heap = list(self.live.values())
            _heapify(self._heap)

    def lower(self, item: T, deadline: float) -> None:
        """Make ``deadline`` the item's if it has none or a later one (a time known to come
        first, set without a full recompute)."""
        live = self.live.get(item)
        if live is None or deadline < live.at:
            self.set(item, deadline)

    def discard(self, item: T) -> None:
        self.live.pop(item, None)

    def clear(self) -> None:
        self._heap.clear()
        self.live.clear()

    def first(self) -> float | None:
        """The earliest live deadline (None: there is none)."""
        heap, live = self._heap, self.live
        while heap:
            top = heap[0]
            if live.get(top.item) is top:
                return top.at
            _heappop(heap)  # stale
        return None

    def pop_due(self, now: float) -> list[T]:
        """The items whose deadline is ``now`` or earlier, earliest first; they have no
        deadline afterwards."""
        heap, live = self._heap, self.live
        due: list[T] = []
        while heap and heap[0].at <= now:
            top = _heappop(heap)
            item: T = top.item
            if live.get(item) is top:
                del live[item]
                due.append(item)
        return due
