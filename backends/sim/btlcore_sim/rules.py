"""Partitions of the fabric, as ns-3's list error models: drop these frames, not random ones.

:class:`Partition`: between two groups of nodes, in both directions, from ``start`` to
``end`` in virtual time (``[start, end)``; ``end=None`` never heals).  Every other scripted
fault is a rule of the one vocabulary, :mod:`btlcore.faults`, installed on
``fabric.faults``; matching decodes the frames of the links a rule covers, so the cost is
paid only on those links and only while the rule is installed.  ``DropRule`` (the old
header-matching drop) is now :class:`btlcore.faults.Rule`; the old name works, deprecated.
"""

from __future__ import annotations

from collections.abc import Mapping
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


def __getattr__(name: str) -> Any:
    """``DropRule``: now :class:`btlcore.faults.Rule` (deprecated name, one more release)."""
    if name == "DropRule":
        import warnings

        from btlcore.errors import BtlDeprecationWarning
        from btlcore.faults import Rule

        warnings.warn("btlcore_sim DropRule is deprecated: rules are btlcore.faults.Rule "
                      "(fabric.faults.drop(...))", BtlDeprecationWarning, stacklevel=2)
        return Rule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
