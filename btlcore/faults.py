"""One fault vocabulary, for every place datagrams can be hurt on purpose.

The same words script faults on the simulator's fabric (``fabric.faults``, the pytest
fixture's ``btl_fabric.faults``), on one endpoint of any backend
(``btlcore.open("udp", faults=plan)``: an interposer on the device's send and receive
paths, :mod:`btlcore.interpose`), and in the engine harness
(``btlcore.testing.enginepair``'s ``net.faults``)::

    from btlcore.faults import Faults

    plan = Faults(seed=1)
    plan.drop(type="ACK", nth=3)                  # the 3rd ACK
    plan.duplicate(type="DATA", seq=range(10, 20))
    plan.delay(0.05, direction="recv", count=5)   # 5 received datagrams, 50 ms late each
    plan.reorder(after=2, type="DATA", nth=1)     # the 1st DATA, behind the next 2 datagrams
    plan.corrupt(probability=0.01)                # one random bit of 1% of all datagrams
    plan.partition(1.0, 3.0)                      # nothing passes from t=1 s to t=3 s

Five actions (:data:`ACTIONS`), each on the datagrams a rule matches:

* ``drop``: lost;  ``duplicate(copies=1)``: delivered ``1 + copies`` times;
  ``delay(seconds)``: delivered that much later (later datagrams overtake it);
  ``reorder(after=1)``: held back until ``after`` more datagrams passed the same way (to
  the same destination, or from the same source), then delivered right behind them (a
  datagram nothing follows stays held);  ``corrupt(bit=None)``: one bit flipped (the given
  bit number, mod the datagram's length; None: a seeded random one).
* ``partition(start, end, group_a=None, group_b=None)``: drop everything between the groups
  while ``start <= now < end`` (on an endpoint: between it and ``group_a``, None: everyone).

Which datagrams a rule takes (every criterion given must hold):

* the header (the datagram decoded by :func:`btlcore.protocol.wire.decode`; one that does not
  decode never matches a header criterion): ``type`` (a number or a name: ``"ACK"``),
  ``seq``, ``ack``, ``tag`` and any other field of :class:`~btlcore.protocol.wire.Datagram`,
  each a value or a collection of values (a ``range``, a set); ``where``, a predicate on the
  decoded datagram;
* the path: ``direction`` (``"send"`` or ``"recv"``: where the plan sits on one endpoint),
  ``peer`` (the other end; on a fabric, either end), ``src``, ``dst`` (on a fabric or in the
  harness): addresses, or whatever the place names nodes by (NIC names on a fabric);
* time: ``start``, ``end`` (the rule acts while ``start <= now < end``);
* ``nth``: only the Nth datagram(s) the criteria above took (counting from 1, from when the
  rule was made; an int or a collection); ``probability``: each with that chance (the
  place's seeded random stream); ``count``: at most that many times, then the rule is gone.

Rules are judged in the order they were made.  Every rule counts each datagram its criteria
take (so ``nth`` counts every datagram on its path), but only the first rule that acts on a
datagram acts: the rules after it leave that datagram alone.  ``rule.matched`` counts the
datagrams a rule acted on; ``rule.cause`` names it in the simulator's drop counters
(``"fault"`` unless given).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import attrs

from .protocol import wire

ACTIONS = ("drop", "duplicate", "delay", "reorder", "corrupt")
DIRECTIONS = ("send", "recv")
DATAGRAM_FIELDS = tuple(a.name for a in attrs.fields(wire.Datagram) if a.name not in ("payload",))
TYPE_BY_NAME = {name: typ for typ, name in wire.TYPE_NAMES.items()}
_INF = float("inf")

Refs = tuple[Any, ...]
KeysOf = Callable[[Refs], Collection[Any]]
"""How a place turns a rule's node references into the keys its datagrams carry (addresses
on a fabric; destination handles and sources on an endpoint)."""


class _Local:
    """The endpoint itself, as the source of what it sends and the destination of what it
    receives (the interposer's side of every path)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "LOCAL"


LOCAL: Any = _Local()


def _values(name: str, value: Any) -> Collection[Any]:
    """One value or a collection of them, as something ``in`` works on."""
    if name == "type":
        items = [value] if isinstance(value, (int, str)) else list(value)
        out = set()
        for item in items:
            if isinstance(item, str):
                if item.upper() not in TYPE_BY_NAME:
                    raise ValueError(f"unknown datagram type {item!r}; types: {', '.join(TYPE_BY_NAME)}")
                item = TYPE_BY_NAME[item.upper()]
            out.add(item)
        return frozenset(out)
    if isinstance(value, range):
        return value
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        values: Iterable[Any] = [value]
    else:
        values = value
    try:
        return frozenset(values)
    except TypeError:
        raise ValueError(f"bad value {value!r} for datagram field {name!r}: allowed is a value or a "
                         "collection of values (a range, a set)") from None


def _refs(name: str, value: Any) -> Refs | None:
    """Node references as a tuple (one reference may be given alone)."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, bytearray, memoryview, int)) or not isinstance(value, Iterable):
        return (bytes(value) if isinstance(value, (bytearray, memoryview)) else value,)
    out = tuple(bytes(v) if isinstance(v, (bytearray, memoryview)) else v for v in value)
    if not out:
        raise ValueError(f"{name} names no node: give one or more, or leave it out")
    return out


@attrs.define(slots=True, eq=False)
class Rule:
    """One scripted fault: which datagrams (see the module docstring) and what befalls them."""

    action: str
    arg: Any = None
    """``copies``, ``seconds``, ``after`` or ``bit``, as the action takes."""
    fields: dict[str, Collection[Any]] = attrs.Factory(dict)
    where: Callable[[wire.Datagram], bool] | None = None
    direction: str | None = None
    peer: Refs | None = None
    src: Refs | None = None
    dst: Refs | None = None
    cut: tuple[Refs | None, Refs | None] | None = None
    """A partition's two groups (None: every other node)."""
    nth: Collection[int] | None = None
    probability: float = 1.0
    start: float = 0.0
    end: float = _INF
    remaining: int | None = None
    cause: str = "fault"
    seen: int = 0
    """Datagrams this rule's criteria took (what ``nth`` counts)."""
    matched: int = 0
    """Datagrams this rule acted on."""

    @property
    def exhausted(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    @property
    def header(self) -> bool:
        """Does judging this rule need the decoded datagram?"""
        return bool(self.fields) or self.where is not None

    def on_path(self, src: Any, dst: Any, keys_of: KeysOf) -> bool:
        """Do the path criteria hold for a datagram from ``src`` to ``dst`` (keys)?"""
        if self.direction is not None and (src is LOCAL) != (self.direction == "send"):
            return False
        if self.src is not None and src not in keys_of(self.src):
            return False
        if self.dst is not None and dst not in keys_of(self.dst):
            return False
        if self.peer is not None:
            keys = keys_of(self.peer)
            if src not in keys and dst not in keys:
                return False
        if self.cut is not None:
            a_refs, b_refs = self.cut
            a = keys_of(a_refs) if a_refs is not None else None
            b = keys_of(b_refs) if b_refs is not None else None
            return _cuts(a, b, src, dst) or _cuts(a, b, dst, src)
        return True

    def takes(self, dg: wire.Datagram | None) -> bool:
        """Do the header criteria hold (``dg`` None: it did not decode)?"""
        if dg is None:
            return False
        for name, values in self.fields.items():
            if getattr(dg, name) not in values:
                return False
        return self.where is None or bool(self.where(dg))


def _cuts(a: Collection[Any] | None, b: Collection[Any] | None, x: Any, y: Any) -> bool:
    """Is ``x`` in group a and ``y`` in group b?  A group left None is every node not in the
    other (both None: everything is cut)."""
    if a is None:
        return b is None or (y in b and x not in b)
    if b is None:
        return x in a and y not in a
    return x in a and y in b


def _number(name: str, value: Any, lo: float, hi: float = _INF) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        bound = f"from {lo:g} to {hi:g}" if hi != _INF else f">= {lo:g}"
        raise ValueError(f"bad value {value!r} for fault {name!r}: allowed is a number {bound}")
    return float(value)


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"bad value {value!r} for fault {name!r}: allowed is an integer >= 1")
    return value


class Faults:
    """An ordered set of fault rules and the seeded random stream their ``probability`` and
    random bits draw from.  See the module docstring for the words."""

    __slots__ = ("rules", "rng", "seed", "listeners")

    def __init__(self, seed: int = 0) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"bad fault seed {seed!r}: allowed is an integer")
        self.seed = seed
        self.rng = random.Random(f"btlcore.faults/{seed}")
        self.rules: list[Rule] = []
        self.listeners: list[Callable[[], None]] = []
        """Called after every change of ``rules`` (the fabric re-reads its links)."""

    # -- the words ----------------------------------------------------------------------

    def drop(self, **match: Any) -> Rule:
        return self._add("drop", None, match)

    def duplicate(self, copies: int = 1, **match: Any) -> Rule:
        return self._add("duplicate", _count("copies", copies), match)

    def delay(self, seconds: float, **match: Any) -> Rule:
        return self._add("delay", _number("seconds", seconds, 0.0), match)

    def reorder(self, after: int = 1, **match: Any) -> Rule:
        return self._add("reorder", _count("after", after), match)

    def corrupt(self, bit: int | None = None, **match: Any) -> Rule:
        if bit is not None and (isinstance(bit, bool) or not isinstance(bit, int) or bit < 0):
            raise ValueError(f"bad value {bit!r} for fault 'bit': allowed is None (random) or an integer >= 0")
        return self._add("corrupt", bit, match)

    def partition(self, start: float, end: float | None, group_a: Any = None,
                  group_b: Any = None) -> Rule:
        """Drop everything between ``group_a`` and ``group_b`` (None: every other node; on
        an endpoint, ``group_a`` None is every peer) for ``start <= now < end``."""
        end_t = _INF if end is None else _number("end", end, 0.0)
        if not 0.0 <= _number("start", start, 0.0) <= end_t:
            raise ValueError(f"partition needs 0 <= start <= end, got start={start}, end={end}")
        rule = Rule("drop", cut=(_refs("group_a", group_a), _refs("group_b", group_b)),
                    start=float(start), end=end_t, cause="partition")
        return self.add(rule)

    def _add(self, action: str, arg: Any, match: dict[str, Any]) -> Rule:
        return self.add(make_rule(action, arg, **match))

    # -- the set ------------------------------------------------------------------------

    def add(self, rule: Rule, index: int | None = None) -> Rule:
        """Install ``rule`` (last, or at ``index``)."""
        if index is None:
            self.rules.append(rule)
        else:
            self.rules.insert(index, rule)
        self._changed()
        return rule

    def remove(self, rule: Rule | None = None) -> None:
        """Remove one rule (or every rule); a rule not installed is ignored."""
        if rule is None:
            self.rules.clear()
        elif rule in self.rules:
            self.rules.remove(rule)
        self._changed()

    def _changed(self) -> None:
        for listener in self.listeners:
            listener()

    def __bool__(self) -> bool:
        return bool(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    # -- judging a datagram -------------------------------------------------------------

    def judge(self, rules: Sequence[Rule], now: float, src: Any, dst: Any,
              data: bytes | bytearray | memoryview, keys_of: KeysOf,
              rng: random.Random | None = None, taken: bool = False) -> Rule | None:
        """The rule of ``rules`` (the plan's, or those a place kept for one path) that acts
        on this datagram, or None.  Every rule whose criteria take it counts it; ``taken``:
        something before the plan already acted on it (count only)."""
        rnd = (rng or self.rng).random
        decoded: Any = _UNDECODED
        acting: Rule | None = None
        for rule in rules:
            if not rule.start <= now < rule.end or not rule.on_path(src, dst, keys_of):
                continue
            if rule.fields or rule.where is not None:
                if decoded is _UNDECODED:
                    decoded = _decode(data)
                if not rule.takes(decoded):
                    continue
            rule.seen += 1
            if taken or acting is not None or rule.exhausted:
                continue
            if rule.nth is not None and rule.seen not in rule.nth:
                continue
            if rule.probability < 1.0 and not rnd() < rule.probability:
                continue
            acting = rule
        if acting is not None:
            acting.matched += 1
            if acting.remaining is not None:
                acting.remaining -= 1
                if acting.remaining <= 0:
                    self.remove(acting)
        return acting

    def flip(self, rule: Rule, data: bytes | bytearray | memoryview,
             rng: random.Random | None = None) -> tuple[bytes, int]:
        """``data`` with the bit ``rule`` names flipped (bit 0 is the first on the wire),
        and its number."""
        n = len(data) * 8
        if not n:
            return bytes(data), 0
        bit = rule.arg % n if rule.arg is not None else (rng or self.rng).randrange(n)
        buf = bytearray(data)
        buf[bit >> 3] ^= 0x80 >> (bit & 7)
        return bytes(buf), bit


_UNDECODED = object()


def _decode(data: bytes | bytearray | memoryview) -> wire.Datagram | None:
    try:
        return wire.decode(data)
    except wire.MalformedDatagram:
        return None


def make_rule(action: str, arg: Any = None, *, where: Callable[[wire.Datagram], bool] | None = None,
              direction: str | None = None, peer: Any = None, src: Any = None, dst: Any = None,
              nth: int | Iterable[int] | None = None, count: int | None = None,
              probability: float = 1.0, start: float = 0.0, end: float | None = None,
              cause: str | None = None, **fields: Any) -> Rule:
    """A :class:`Rule`, every argument checked (errors name what is allowed)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown fault action {action!r}; actions: {', '.join(ACTIONS)}")
    if direction is not None and direction not in DIRECTIONS:
        raise ValueError(f"bad value {direction!r} for fault 'direction': allowed is 'send', 'recv' or None")
    if where is not None and not callable(where):
        raise ValueError(f"bad value {where!r} for fault 'where': allowed is a predicate on a wire.Datagram")
    checked = {}
    for name, value in fields.items():
        if name not in DATAGRAM_FIELDS:
            raise ValueError(f"unknown fault criterion {name!r}; allowed: direction, peer, src, dst, nth, count, "
                             f"probability, start, end, where, cause, or a datagram field "
                             f"({', '.join(DATAGRAM_FIELDS)})")
        checked[name] = _values(name, value)
    nths: Collection[int] | None = None
    if nth is not None:
        nths = frozenset([nth]) if isinstance(nth, int) else (nth if isinstance(nth, range) else frozenset(nth))
        if any(isinstance(i, bool) or not isinstance(i, int) or i < 1 for i in nths):
            raise ValueError(f"bad value {nth!r} for fault 'nth': datagrams count from 1")
    return Rule(action, arg, checked, where, direction, _refs("peer", peer), _refs("src", src),
                _refs("dst", dst), None, nths, _number("probability", probability, 0.0, 1.0),
                _number("start", start, 0.0), _INF if end is None else _number("end", end, 0.0),
                None if count is None else _count("count", count), cause or "fault")
