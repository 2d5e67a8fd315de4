"""Queues: how much a rate-limited link holds, and the bottleneck several links share.

**Size.**  A queue is given in bytes (``queue_limit``) or as a multiple of the path's
bandwidth-delay product (``queue_bdp``): the rate times the round trip, which on the fabric
is the direction's delay plus the reverse direction's (for a :class:`Bottleneck`, the longest
round trip of the directions it carries).  A size given as a multiple never holds fewer than
:data:`MIN_QUEUE_FRAMES` of the largest frames the link carries, so a short path still
queues a few datagrams; a size in bytes is taken as given.  ``btl transfer --queue`` parses
both forms with :func:`parse_queue` (default :data:`CLI_DEFAULT_QUEUE`).

**A shared bottleneck.**  A :class:`Bottleneck` is one rate limiter and one FIFO queue that
several directions of the fabric feed (made by ``Fabric.bottleneck``): frames of different
node pairs are serialised one after another at its rate, so their flows compete for it.  It
replaces the rate stage of the directions it carries (their own ``rate_mbps`` and queue are
not used); everything after it (delay, loss, ...) stays each direction's own.

**What it drops.**  ``droptail``: a frame that would push the backlog over the limit (cause
``queue``).  ``codel``: drop-tail, and CoDel (RFC 8289, ``target`` 5 ms, ``interval``
100 ms) on the time each frame waits (cause ``aqm``).  Service here is deterministic FIFO, so
a frame's wait and its departure time are known when it arrives: CoDel's dequeue decision is
taken then, at the departure time, in departure order, as a queue draining at the head would
take it, and a frame it drops takes no time on the wire.  CoDel's "no drop while at most one
frame is queued" reads the backlog ahead of the frame.
"""

from __future__ import annotations

import math
import re
from typing import Any

import attrs

from btlcore.errors import ConfigError

MIN_QUEUE_FRAMES = 4
"""A queue sized as a multiple of the BDP holds at least this many of the largest frames."""
CLI_DEFAULT_QUEUE = "1bdp"
"""``btl transfer --rate``'s queue when ``--queue`` is not given: one bandwidth-delay product
(the classic router buffer), at least :data:`MIN_QUEUE_FRAMES` datagrams."""
AQMS = ("droptail", "codel")
CODEL_TARGET = 0.005
CODEL_INTERVAL = 0.1
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(bdp|[kmg]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_queue(text: str) -> tuple[int, float]:
    """``--queue``'s text as ``(queue_limit bytes, queue_bdp multiple)``, one of them 0:
    ``65536``, ``64K``, ``1M``, ``1.5M`` (bytes; K/M/G are powers of 2) or ``2bdp``,
    ``0.5bdp`` (multiples of the path's BDP).  ValueError naming what is allowed."""
    m = _SIZE.match(text)
    allowed = "bytes (65536, 64K, 1M) or a multiple of the path's bandwidth-delay product (2bdp, 0.5bdp)"
    if m is None:
        raise ValueError(f"--queue: expected {allowed}, got {text!r}")
    value, unit = float(m.group(1)), (m.group(2) or "").lower()
    if unit == "bdp":
        if not value > 0:
            raise ValueError(f"--queue: expected a multiple > 0 of the BDP (2bdp, 0.5bdp) or bytes, got {text!r}")
        return 0, value
    nbytes = int(value * _UNITS[unit[:1]])
    if nbytes < 1:
        raise ValueError(f"--queue: expected at least 1 byte, or a multiple of the BDP (2bdp), got {text!r}")
    return nbytes, 0.0


def queue_bytes(queue_limit: int, queue_bdp: float, bytes_per_s: float, rtt: float, frame: int) -> int:
    """The byte limit a queue enforces: ``queue_limit`` as given, or ``queue_bdp`` times
    ``bytes_per_s * rtt`` but never under :data:`MIN_QUEUE_FRAMES` frames of ``frame`` bytes;
    0 (unlimited) when neither is set."""
    if queue_bdp:
        return max(int(queue_bdp * bytes_per_s * rtt), MIN_QUEUE_FRAMES * frame)
    return queue_limit


def _positive(_inst: Any, field: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"bad value {value!r} for bottleneck parameter {field.name!r}: allowed is a number > 0")


def _nonneg(_inst: Any, field: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ConfigError(f"bad value {value!r} for bottleneck parameter {field.name!r}: allowed is a number >= 0")


def _aqm(_inst: Any, field: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if value not in AQMS:
        raise ConfigError(f"bad value {value!r} for bottleneck parameter 'aqm': allowed is one of {', '.join(AQMS)}")


@attrs.define(slots=True, eq=False)
class Bottleneck:
    """One rate limiter and FIFO queue fed by several directions (see the module docstring).
    The first five fields are as given; the rest are run-time state and counters."""

    name: str
    rate_mbps: float = attrs.field(validator=_positive)
    queue_limit: int = attrs.field(default=0, validator=_nonneg)
    """Bytes the queue holds; 0 with ``queue_bdp`` 0: unlimited."""
    queue_bdp: float = attrs.field(default=0.0, validator=_nonneg)
    """The queue as a multiple of the BDP (rate x the longest round trip carried)."""
    aqm: str = attrs.field(default="droptail", validator=_aqm)
    bytes_per_s: float = 0.0
    limit: int = 0
    """The byte limit in force (:func:`queue_bytes`), set by the fabric."""
    rtt: float = 0.0
    busy_until: float = 0.0
    cause: str = "queue"
    """Why the last refused frame was dropped: ``queue`` or ``aqm``."""
    offered: int = 0
    bytes_offered: int = 0
    sent: int = 0
    bytes_sent: int = 0
    drops: dict[str, int] = attrs.Factory(dict)
    max_backlog: float = 0.0
    # CoDel's state (RFC 8289's names)
    first_above: float = 0.0
    dropping: bool = False
    drop_next: float = 0.0
    count: int = 0
    last_count: int = 0

    def __attrs_post_init__(self) -> None:
        if self.queue_limit and self.queue_bdp:
            raise ConfigError("a bottleneck's queue is given either in bytes (queue_limit) or as a "
                              "multiple of the BDP (queue_bdp), not both")
        if isinstance(self.queue_limit, float):
            raise ConfigError(f"bad value {self.queue_limit!r} for bottleneck parameter 'queue_limit': "
                              "allowed is an integer number of bytes >= 0")
        self.bytes_per_s = self.rate_mbps * 1e6 / 8.0

    def size(self, rtt: float, frame: int) -> None:
        """Set the byte limit for a longest round trip ``rtt`` and largest frame ``frame``."""
        self.rtt = rtt
        self.limit = queue_bytes(self.queue_limit, self.queue_bdp, self.bytes_per_s, rtt, frame)

    def admit(self, n: int, now: float) -> float:
        """Queue an ``n``-byte frame arriving at ``now``: the time its last bit leaves, or
        -1.0 if it is dropped (``cause`` says why)."""
        self.offered += 1
        self.bytes_offered += n
        start = self.busy_until if self.busy_until > now else now
        backlog = (start - now) * self.bytes_per_s
        if self.limit and backlog + n > self.limit + 1e-6:
            return self._drop("queue")
        if self.aqm == "codel" and self._codel_drops(start, start - now, backlog, n):
            return self._drop("aqm")
        if backlog + n > self.max_backlog:
            self.max_backlog = backlog + n
        t = start + n / self.bytes_per_s
        self.busy_until = t
        self.sent += 1
        self.bytes_sent += n
        return t

    def _drop(self, cause: str) -> float:
        self.cause = cause
        self.drops[cause] = self.drops.get(cause, 0) + 1
        return -1.0

    def _codel_drops(self, t: float, sojourn: float, backlog: float, n: int) -> bool:
        """CoDel's dequeue at ``t`` of a frame that waited ``sojourn``: drop it?"""
        ok = self._codel_ok_to_drop(t, sojourn, backlog, n)
        if self.dropping:
            if not ok:
                self.dropping = False
            elif t >= self.drop_next:
                self.count += 1
                self.drop_next += CODEL_INTERVAL / math.sqrt(self.count)
                return True
            return False
        if ok:
            self.dropping = True
            delta = self.count - self.last_count
            recent = t - self.drop_next < 16 * CODEL_INTERVAL
            self.count = delta if delta > 1 and recent else 1
            self.last_count = self.count
            self.drop_next = t + CODEL_INTERVAL / math.sqrt(self.count)
            return True
        return False

    def _codel_ok_to_drop(self, t: float, sojourn: float, backlog: float, n: int) -> bool:
        if sojourn < CODEL_TARGET or backlog <= n:
            self.first_above = 0.0
            return False
        if not self.first_above:
            self.first_above = t + CODEL_INTERVAL
            return False
        return t >= self.first_above

    def stats(self) -> dict[str, Any]:
        """Frames and bytes offered and sent, drops by cause, the byte limit in force and the
        largest backlog seen."""
        return {"offered": self.offered, "sent": self.sent, "dropped": sum(self.drops.values()),
                "drops": dict(sorted(self.drops.items())), "bytes_offered": self.bytes_offered,
                "bytes_sent": self.bytes_sent, "queue_bytes": self.limit, "rtt": self.rtt,
                "max_backlog": int(self.max_backlog), "aqm": self.aqm, "rate_mbps": self.rate_mbps}
