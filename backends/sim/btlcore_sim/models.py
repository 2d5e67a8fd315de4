"""Link models: what one direction of the fabric does to frames, as a frozen description.

A :class:`LinkModel` is shared and reused; :class:`~btlcore_sim.links.Link` (one direction
at run time) copies its numbers into slots and applies them, in the order and by the models
that :mod:`btlcore_sim.links` documents.  This module stays pure Python (attrs validates the
fields); ``links`` is compiled and imports it.
"""

from __future__ import annotations

from typing import Any

import attrs

from btlcore.errors import ConfigError

JITTER_DISTS = ("normal", "uniform", "pareto")


def _bad(name: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"bad value {value!r} for link parameter {name!r}: allowed is {allowed}")


def _prob(_inst: Any, field: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise _bad(field.name, value, "a probability from 0 to 1")


def _nonneg(_inst: Any, field: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise _bad(field.name, value, "a number >= 0")


def _burst(_inst: Any, field: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if value is None:
        return
    allowed = "None or (p, mean_len) with 0 <= p < 1, mean_len >= 1, p <= mean_len/(mean_len+1)"
    try:
        p, mean_len = value
        p, mean_len = float(p), float(mean_len)
    except (TypeError, ValueError):
        raise _bad(field.name, value, allowed) from None
    if not (0.0 <= p < 1.0 and mean_len >= 1.0 and p <= mean_len / (mean_len + 1.0)):
        raise _bad(field.name, value, allowed)


def _mtu(_inst: Any, field: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(field.name, value, "None (no link limit) or an integer >= 1")


def _queue_limit(_inst: Any, field: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(field.name, value, "an integer number of bytes >= 0 (0: unlimited)")


def _dist(_inst: Any, field: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if value not in JITTER_DISTS:
        raise _bad(field.name, value, "one of " + ", ".join(JITTER_DISTS))


@attrs.define(slots=True, frozen=True)
class LinkModel:
    """What one direction of a link does to frames.  The default is a perfect link: no
    loss, no delay, unlimited rate.  Times are seconds; see the module docstring for the
    order of the stages and the models behind them."""

    loss: float = attrs.field(default=0.0, validator=_prob)
    """Probability that a frame is lost, independently of the others."""
    burst: tuple[float, float] | None = attrs.field(default=None, validator=_burst)
    """Gilbert-Elliott burst loss ``(long-run loss rate, mean burst length in frames)``."""
    delay: float = attrs.field(default=0.0, validator=_nonneg)
    """One-way propagation delay."""
    jitter: float = attrs.field(default=0.0, validator=_nonneg)
    """Spread of the delay (the distribution's sigma, half-width or mean; see above)."""
    jitter_dist: str = attrs.field(default="normal", validator=_dist)
    reorder: float = attrs.field(default=0.0, validator=_prob)
    """Probability that a frame skips the delay and overtakes earlier ones (netem)."""
    duplicate: float = attrs.field(default=0.0, validator=_prob)
    """Probability that a frame is delivered twice."""
    corrupt: float = attrs.field(default=0.0, validator=_prob)
    """Probability that a delivered copy has one bit flipped."""
    rate_mbps: float = attrs.field(default=0.0, validator=_nonneg)
    """Serialisation rate in megabits per second (10**6); 0 is unlimited."""
    queue_limit: int = attrs.field(default=0, validator=_queue_limit)
    """Bytes the rate limiter may hold before it tail-drops; 0 is unlimited (unless
    ``queue_bdp`` is set)."""
    queue_bdp: float = attrs.field(default=0.0, validator=_nonneg)
    """The queue as a multiple of the path's bandwidth-delay product (rate x this delay plus
    the reverse direction's), never under a few frames (:mod:`.queues`); 0: not used."""
    mtu: int | None = attrs.field(default=None, validator=_mtu)
    """Largest frame the link carries (longer ones are dropped); None: no link limit."""

    def __attrs_post_init__(self) -> None:
        if self.queue_limit and self.queue_bdp:
            raise ConfigError("link parameters 'queue_limit' (bytes) and 'queue_bdp' (a multiple of the "
                              "bandwidth-delay product) size the same queue: give one of them")
        if self.reorder and not self.delay:
            raise ConfigError(
                "link parameter 'reorder' needs 'delay' > 0: a reordered frame skips the delay "
                "and overtakes frames still in flight (netem's model)")

    @property
    def ideal(self) -> bool:
        """True if the link neither loses, delays, limits nor alters anything."""
        return self == _IDEAL

    def gilbert_elliott(self) -> tuple[float, float]:
        """``(q, r)``: the Good->Bad and Bad->Good transition probabilities per frame."""
        if self.burst is None:
            return 0.0, 0.0
        p, mean_len = float(self.burst[0]), float(self.burst[1])
        r = 1.0 / mean_len
        return (p * r / (1.0 - p) if p else 0.0), r


_IDEAL = LinkModel()
