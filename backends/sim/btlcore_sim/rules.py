"""Scripted faults, as ns-3's list error models: drop these frames, not random ones.

Two kinds, both installed on the :class:`~btlcore_sim.fabric.Fabric`:

* :class:`Partition`: between two groups of nodes, in both directions, from ``start`` to
  ``end`` in virtual time (``[start, end)``; ``end=None`` never heals).
* :class:`DropRule`: drop frames whose decoded header matches (``type=T_ACK, ack=7``) and/or
  satisfy a predicate on the :class:`btlcore.wire.Datagram`, at most ``count`` times.
  Matching decodes each frame of the links it covers with :func:`btlcore.wire.decode`,
  so the cost is paid only on those links and only while the rule is installed.

(The third kind, "drop the Nth frame of a link", is a set of indices kept on the link.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from btlcore.protocol import wire

DATAGRAM_FIELDS = tuple(a.name for a in attrs.fields(wire.Datagram))
TYPE_BY_NAME = {name: typ for typ, name in wire.TYPE_NAMES.items()}


@attrs.define(slots=True, frozen=True)
class Partition:
    """Frames between ``a`` and ``b`` (node ids; ``b`` None: every node not in ``a``) are
    lost while ``start <= t < end``."""

    start: float
    end: float
    a: frozenset[int]
    b: frozenset[int] | None

    def cuts(self, src: int, dst: int) -> bool:
        """Does this partition separate ``src`` from ``dst``?"""
        b_src = src not in self.a if self.b is None else src in self.b
        b_dst = dst not in self.a if self.b is None else dst in self.b
        return (src in self.a and b_dst) or (b_src and dst in self.a)


def normalise_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Check field names against :class:`wire.Datagram`; accept ``type="ACK"``."""
    out = {}
    for name, value in fields.items():
        if name not in DATAGRAM_FIELDS:
            raise ValueError(f"unknown datagram field {name!r}; fields: {', '.join(DATAGRAM_FIELDS)}")
        if name == "type" and isinstance(value, str):
            if value.upper() not in TYPE_BY_NAME:
                raise ValueError(f"unknown datagram type {value!r}; types: {', '.join(TYPE_BY_NAME)}")
            value = TYPE_BY_NAME[value.upper()]
        out[name] = value
    return out


@attrs.define(slots=True, eq=False)
class DropRule:
    """Drop frames on matching links whose fields equal ``fields`` and for which ``where``
    (if given) is true.  ``remaining`` None: forever; else that many more drops."""

    src: int | None
    dst: int | None
    fields: dict[str, Any]
    where: Callable[[wire.Datagram], bool] | None = None
    remaining: int | None = None
    matched: int = 0
    """Frames this rule dropped so far."""

    def applies(self, src: int, dst: int) -> bool:
        return (self.src is None or self.src == src) and (self.dst is None or self.dst == dst)

    @property
    def exhausted(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def take(self, frame: bytes | bytearray | memoryview) -> bool:
        """True (and counted) if this rule drops ``frame``."""
        if self.exhausted:
            return False
        try:
            dg = wire.decode(frame)
        except wire.MalformedDatagram:
            return False
        for name, value in self.fields.items():
            if getattr(dg, name) != value:
                return False
        if self.where is not None and not self.where(dg):
            return False
        self.matched += 1
        if self.remaining is not None:
            self.remaining -= 1
        return True
