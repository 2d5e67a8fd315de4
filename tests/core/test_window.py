"""ReceiveWindow (classification, cumulative point, SACK ranges) and SackScoreboard."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from btlcore.protocol.window import ABOVE_WINDOW, BELOW_WINDOW, DUPLICATE, NEW, ReceiveWindow, SackScoreboard


def ranges_of(w: ReceiveWindow) -> list[tuple[int, int]]:
    return list(zip(w._starts, w._ends, strict=True))


def test_in_order_advances_cum() -> None:
    w = ReceiveWindow(100, 8)
    for s in range(101, 111):
        assert w.accept(s) == NEW
        assert w.cum == s and w.high == s
    assert not w.has_gaps


def test_classification_boundaries() -> None:
    w = ReceiveWindow(100, 8)
    assert w.accept(100) == DUPLICATE  # cum itself
    assert w.accept(93) == DUPLICATE  # cum - size + 1: still in the duplicate window
    assert w.accept(92) == BELOW_WINDOW  # cum - size
    assert w.accept(0) == BELOW_WINDOW
    assert w.accept(109) == ABOVE_WINDOW  # cum + size + 1
    assert w.accept(108) == NEW  # cum + size: the top of the window
    assert w.accept(108) == DUPLICATE  # again, now in a SACK range
    assert w.cum == 100 and ranges_of(w) == [(108, 108)]
    assert w.high == 108


def test_rejected_do_not_change_state() -> None:
    w = ReceiveWindow(100, 8)
    w.accept(103)
    before = (w.cum, ranges_of(w), w.high)
    for s in (100, 50, 109, 10**6, 103):
        assert w.accept(s) != NEW
    assert (w.cum, ranges_of(w), w.high) == before


def test_hole_filling_and_merging() -> None:
    w = ReceiveWindow(0, 64)
    assert w.accept(3) == NEW
    assert ranges_of(w) == [(3, 3)] and w.cum == 0 and w.has_gaps
    w.accept(5)
    assert ranges_of(w) == [(3, 3), (5, 5)]
    w.accept(4)  # joins both sides
    assert ranges_of(w) == [(3, 5)]
    w.accept(7)
    w.accept(8)  # joins left
    w.accept(10)
    w.accept(9)  # joins left and right
    assert ranges_of(w) == [(3, 5), (7, 10)]
    w.accept(12)
    w.accept(11)  # joins left and right
    assert ranges_of(w) == [(3, 5), (7, 12)]
    w.accept(20)
    w.accept(19)  # joins right only
    assert ranges_of(w) == [(3, 5), (7, 12), (19, 20)]
    w.accept(2)  # joins the first range from the left
    assert ranges_of(w) == [(2, 5), (7, 12), (19, 20)]
    assert w.cum == 0
    w.accept(1)  # fills the hole in front: cum jumps over the first range
    assert w.cum == 5 and ranges_of(w) == [(7, 12), (19, 20)]
    w.accept(6)
    assert w.cum == 12 and ranges_of(w) == [(19, 20)]
    assert w.high == 20
    assert w.out_of_order_count() == 2


def test_fill_hole_not_adjacent_to_first_range() -> None:
    w = ReceiveWindow(0, 64)
    w.accept(5)
    assert w.accept(1) == NEW
    assert w.cum == 1 and ranges_of(w) == [(5, 5)]


def test_holds() -> None:
    w = ReceiveWindow(10, 32)
    for s in (12, 13, 20):
        w.accept(s)
    assert all(w.holds(s) for s in (0, 5, 10, 12, 13, 20))
    assert not any(w.holds(s) for s in (11, 14, 19, 21, 42))


def test_sack_ranges_relative_to_cum() -> None:
    w = ReceiveWindow(1000, 64)
    for s in (1003, 1004, 1010):
        w.accept(s)
    assert w.sack_ranges(10) == [(3, 2), (10, 1)]
    assert not w.sack_truncated(10)
    assert w.sack_ranges(0) == []


def test_sack_ranges_truncation_keeps_highest_changed_and_lowest() -> None:
    w = ReceiveWindow(0, 1000)
    for s in range(2, 42, 2):  # 20 single-seq ranges: 2, 4, ..., 40, in that order
        w.accept(s)
    assert len(ranges_of(w)) == 20
    assert w.sack_truncated(5) and not w.sack_truncated(20)
    # each list: the highest, the oldest changed range not yet listed (limit // 2 with the
    # highest), then the lowest; the first is the lowest four and the highest
    lists = [w.sack_ranges(5)]
    assert lists[0] == [(2, 1), (4, 1), (6, 1), (8, 1), (40, 1)] and w.unlisted
    while w.unlisted:  # (the ACK pass sends another at once)
        lists.append(w.sack_ranges(5))
    assert len(lists) == 20
    assert lists[5] == [(2, 1), (4, 1), (6, 1), (12, 1), (40, 1)]  # the sixth: the sixth range
    assert {r for got in lists for r in got} == {(s, 1) for s in range(2, 42, 2)}  # every range heard
    assert all(len(got) == 5 and got == sorted(got) and got[-1] == (40, 1) for got in lists)
    # nothing changed since: the room goes to the latest ranges again (a lost ACK hides none)
    assert w.sack_ranges(5) == [(2, 1), (4, 1), (6, 1), (38, 1), (40, 1)] and not w.unlisted
    assert w.sack_ranges(20) == [(s, 1) for s in range(2, 42, 2)]
    # limit 1: only the lowest (no room for both ends)
    assert w.sack_ranges(1) == [(2, 1)]
    # a hole low down filled late (as a retransmission is) is listed though neither lowest
    # nor highest: the sender hears of it at once
    w.accept(21)  # joins 20 and 22 into one range
    w.accept(43)  # the highest, now
    assert w.sack_ranges(4) == [(2, 1), (4, 1), (20, 3), (43, 1)]


def test_sack_ranges_truncation_lists_every_range_as_it_changes() -> None:
    """A flow losing every fifth segment, a truncated ACK after every eighth arrival: each
    range is listed by some ACK (the sender's scoreboard learns all), which listing only the
    lowest and the highest did not do."""
    w = ReceiveWindow(0, 1 << 20)
    heard: set[tuple[int, int]] = set()
    for s in range(2, 2000):
        if s % 5 == 0:
            continue
        w.accept(s)
        if s % 8 == 0:
            heard.update((w.cum + a, w.cum + a + n - 1) for a, n in w.sack_ranges(8))
    heard.update((w.cum + a, w.cum + a + n - 1) for a, n in w.sack_ranges(8))  # the last ACK
    assert len(ranges_of(w)) == 400 and set(ranges_of(w)) <= heard


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**64), st.integers(8, 64), st.lists(st.integers(-80, 80), max_size=120))
def test_receive_window_matches_set_model(base: int, size: int, offsets: list[int]) -> None:
    w = ReceiveWindow(base, size)
    got: set[int] = set()
    cum = base
    for off in offsets:
        s = base + off
        if s <= cum:
            want = DUPLICATE if s > cum - size else BELOW_WINDOW
        elif s > cum + size:
            want = ABOVE_WINDOW
        elif s in got:
            want = DUPLICATE
        else:
            want = NEW
            got.add(s)
            while cum + 1 in got:
                cum += 1
                got.discard(cum)
        assert w.accept(s) == want, (s, cum)
        assert w.cum == cum
        # ranges: disjoint, ascending, non-adjacent, above cum, exactly the set
        rs = ranges_of(w)
        assert {x for a, b in rs for x in range(a, b + 1)} == got
        for (a, b), (c, _d) in itertools.pairwise(rs):
            assert a <= b < c - 1
        assert all(a > cum + 1 for a, _ in rs)
        assert all(w.holds(x) for x in got) and w.holds(cum)


# ---------------------------------------------------------------------------- scoreboard

def test_scoreboard_add_returns_fresh_subranges() -> None:
    sb = SackScoreboard()
    assert sb.add(10, 12) == [(10, 12)]
    assert sb.add(10, 12) == []
    assert sb.add(8, 14) == [(8, 9), (13, 14)]
    assert sb.ranges() == [(8, 14)]
    assert sb.add(20, 20) == [(20, 20)]
    assert sb.add(16, 18) == [(16, 18)]
    assert sb.ranges() == [(8, 14), (16, 18), (20, 20)]
    assert sb.add(5, 25) == [(5, 7), (15, 15), (19, 19), (21, 25)]
    assert sb.ranges() == [(5, 25)]
    assert sb.add(7, 6) == []


def test_scoreboard_adjacent_ranges_merge() -> None:
    sb = SackScoreboard()
    sb.add(1, 3)
    assert sb.add(4, 6) == [(4, 6)]
    assert sb.ranges() == [(1, 6)]
    assert sb.add(0, 0) == [(0, 0)]
    assert sb.ranges() == [(0, 6)]


def test_scoreboard_prune() -> None:
    sb = SackScoreboard()
    sb.add(5, 7)
    sb.add(10, 12)
    sb.prune(4)
    assert sb.ranges() == [(5, 7), (10, 12)]
    sb.prune(6)
    assert sb.ranges() == [(7, 7), (10, 12)]
    sb.prune(9)
    assert sb.ranges() == [(10, 12)]
    sb.prune(12)
    assert sb.ranges() == []


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 60), st.integers(-2, 12)),
    st.tuples(st.just("prune"), st.integers(0, 70), st.just(0)),
), max_size=40))
def test_scoreboard_matches_set_model(ops: list[tuple[str, int, int]]) -> None:
    sb = SackScoreboard()
    known: set[int] = set()
    floor = -1
    for op, a, b in ops:
        if op == "prune":
            floor = max(floor, a)
            sb.prune(a)
            known = {x for x in known if x > a}
        else:
            lo, hi = a, a + b
            if lo <= floor:  # the engine never adds below its cumulative point
                continue
            fresh = sb.add(lo, hi)
            want = sorted(set(range(lo, hi + 1)) - known)
            flat = [x for s, e in fresh for x in range(s, e + 1)]
            assert flat == want
            # fresh sub-ranges are maximal: ascending and non-adjacent
            for (_s1, e1), (s2, _e2) in itertools.pairwise(fresh):
                assert e1 + 1 < s2
            known |= set(range(lo, hi + 1))
        rs = sb.ranges()
        assert {x for s, e in rs for x in range(s, e + 1)} == known
        for (_s1, e1), (s2, _e2) in itertools.pairwise(rs):
            assert e1 + 1 < s2


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(1, 300), max_size=120), st.integers(0, 70))
def test_sack_ranges_model(received: set[int], limit: int) -> None:
    w = ReceiveWindow(0, 1000)
    arrivals = sorted(received, key=lambda x: (x * 7919) % 301)  # arbitrary arrival order
    entries: list[int] = []  # the model of the runs of out-of-order arrivals: the last of each
    have: set[int] = set()
    at = 0
    for s in arrivals:
        w.accept(s)
        if s != at + 1:
            if entries and entries[-1] == s - 1:
                entries[-1] = s
            else:
                entries.append(s)
        have.add(s)
        while at + 1 in have:
            at += 1
    # the model: maximal runs above cum
    cum = 0
    while cum + 1 in received:
        cum += 1
    runs: list[tuple[int, int]] = []
    for s in sorted(x for x in received if x > cum):
        if runs and runs[-1][1] == s - 1:
            runs[-1] = (runs[-1][0], s)
        else:
            runs.append((s, s))
    assert w.cum == cum
    unlisted = False
    if len(runs) > limit >= 2:
        def holding(s: int) -> list[int]:
            return [i for i, (a, b) in enumerate(runs) if a <= s <= b]

        # the highest; the runs no ACK listed, oldest first, then the latest 32, until
        # limit // 2 are chosen; then the lowest
        chosen = [len(runs) - 1]
        k = 0
        while k < len(entries) and len(chosen) < limit // 2:
            chosen += [i for i in holding(entries[k]) if i not in chosen]
            k += 1
        unlisted = k < len(entries)
        for s in reversed(entries[-32:]):
            if len(chosen) >= limit // 2:
                break
            chosen += [i for i in holding(s) if i not in chosen]
        chosen += [i for i in range(len(runs)) if i not in chosen][:limit - len(chosen)]
        picked = [runs[i] for i in sorted(chosen)]
    else:
        picked = runs[:limit]
    assert w.sack_ranges(limit) == [(a - cum, b - a + 1) for a, b in picked]
    assert w.unlisted == unlisted
    assert w.sack_truncated(limit) == (len(runs) > limit)
    assert w.out_of_order_count() == sum(b - a + 1 for a, b in runs)


def test_records_without_ranges_share_nothing_once_one_has_some() -> None:
    """An idle peer's window and scoreboard hold no lists of their own (memory per peer); the
    first range gives one its own, and the others stay empty."""
    windows = [ReceiveWindow(100, 64) for _ in range(3)]
    boards = [SackScoreboard() for _ in range(3)]
    assert windows[1].accept(105) == NEW and ranges_of(windows[1]) == [(105, 105)]
    assert windows[1].accept(107) == NEW and ranges_of(windows[1]) == [(105, 105), (107, 107)]
    assert boards[2].add(10, 12) == [(10, 12)] and boards[2].ranges() == [(10, 12)]
    for w in (windows[0], windows[2]):
        assert ranges_of(w) == [] and not w.has_gaps and w.accept(101) == NEW
    for b in boards[:2]:
        assert b.ranges() == [] and b.add(20, 21) == [(20, 21)] and b.ranges() == [(20, 21)]
    assert boards[2].ranges() == [(10, 12)] and ranges_of(windows[1]) == [(105, 105), (107, 107)]
    assert ReceiveWindow(0, 8)._starts == [] and SackScoreboard()._ends == []


def test_sack_ranges_repeat_ranges_in_any_order() -> None:
    """The latest runs listed again are found wherever they lie (a resend filling a low
    hole between two runs at the top): the rule holds whatever the order of the runs."""
    w = ReceiveWindow(0, 1000)
    for s in range(2, 200, 2):  # 99 ranges of one
        w.accept(s)
    while w.sack_ranges(8) and w.unlisted:
        pass  # (every change listed once)
    for s in (300, 51, 302, 304):  # top, low (joins 50 and 52), top, top
        w.accept(s)
    w.sack_ranges(8)  # lists the changes
    # nothing new: the latest runs again, newest first, until 4 with the highest
    assert w.sack_ranges(8) == [(2, 1), (4, 1), (6, 1), (8, 1), (50, 3), (300, 1), (302, 1), (304, 1)]
