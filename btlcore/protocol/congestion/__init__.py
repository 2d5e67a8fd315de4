"""Congestion control behind a small interface, chosen by name.

An algorithm is a class built once per engine from its :class:`~btlcore.config.Config`; it
serves every peer of that engine and keeps its per-peer state on the
:class:`~btlcore.protocol.peers.Peer` (``cwnd``, the window the send pass reads, in segments;
``ssthresh``).  The engine calls it at four moments:

* :meth:`CongestionControl.on_new_peer`: a connection starts (or starts again after a reset);
* :meth:`CongestionControl.on_ack`: one segment was acknowledged (cumulatively or by SACK) while
  the window is below its cap (``peer.cwnd_cap``) -- this runs per segment, so the engine binds
  it once and it should stay a few lines;
* :meth:`CongestionControl.on_loss_episode`: a loss episode began (fast retransmit, or a
  timeout's probes were found lost); once per episode;
* :meth:`CongestionControl.on_persistent_congestion`: several retransmit timeouts in a row.

Optional, looked up once per engine (an algorithm that lacks one is never called for it):

* ``on_rate_sample(peer, sample)``: once per ACK datagram that acknowledged something new,
  with a :class:`~btlcore.protocol.congestion.rate.RateSample` (delivery rate, RTT, bytes
  acknowledged, lost and in flight) -- what model-based algorithms (``bbr``) steer by;
* ``on_handshake_rtt(peer, rtt)``: the handshake took ``rtt`` seconds (the round trip, or
  an upper bound of it when a HELLO was retried), before any data was sent -- what an
  algorithm that paces spreads its first window over;
* ``on_timeout(peer)``: a retransmit timeout fired (each one, before its probes are queued)
  -- ``bbr`` paces the probes of a flow that has no rate sample yet one per smoothed RTT;
* ``on_spurious(peer)``: the last loss episode (or timeout) proved spurious: undo its decrease.
  Before each ``on_loss_episode`` and ``on_persistent_congestion`` the engine keeps
  ``peer.undo_cwnd`` and ``peer.undo_ssthresh`` (the values the decrease replaces), which it
  may restore; an algorithm with more state keeps its own (see :mod:`..undo`).

Pacing: an algorithm that wants its sends spread sets ``peer.pacing_rate`` (bytes per second;
``0.0``, the default, means unpaced) and the engine releases segments no faster, keeping small
bursts where the device batches.

Algorithms are registered in the entry-point group ``btlcore.congestion`` and picked by
``Config.cc``; :func:`load` resolves the name once, when an engine is made.  btlcore's own:

* ``aimd`` (:mod:`.aimd`): slow start, then a segment per round, a Veno-style decrease per loss;
* ``bbr`` (:mod:`.bbr`): BBR-like, steered by the bottleneck bandwidth and min RTT it measures,
  paced; random loss is not read as congestion;
* ``cubic`` (:mod:`.cubic`): RFC 9438, with HyStart++;
* ``none`` (:mod:`.none`): a fixed window (``cwnd_max``), paced at the measured delivery rate.

Whatever the algorithm, ``Config.cwnd_max`` caps the window (``0``: only the send window does).
The cap is kept per peer, ``peer.cwnd_cap``, which an algorithm sets to its ``cwnd_max`` in
``on_new_peer`` and never exceeds: at the default ``cwnd_max`` the engine raises it to cover the
path's measured bandwidth-delay product, within the memory budgets (window auto-tuning,
:mod:`..autotune`).
Third parties add theirs the same way: a class taking the Config, in the group.  It may
subclass :class:`~.base.Algorithm` (btlcore's own do: in the compiled build the engine then
calls it through a C vtable, and a pure-Python subclass's overrides are called as well) or
nothing (the engine then forwards each call to it: :class:`~.base.Foreign`).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import ConfigError

if TYPE_CHECKING:
    from ...config import Config
    from ..peers import Peer

GROUP = "btlcore.congestion"


class CongestionControl(Protocol):
    """What the engine needs of a congestion control algorithm (see the module docstring)."""

    #: the largest window it sets (``inf``: none), as ``peer.cwnd_cap`` at ``on_new_peer``;
    #: the engine skips :meth:`on_ack` while a peer's window is at its cap, so that a full
    #: window costs no call per ACK
    cwnd_max: float

    def on_new_peer(self, peer: Peer) -> None:
        """Set the window of a connection that starts."""

    def on_ack(self, peer: Peer) -> None:
        """One segment toward ``peer`` was acknowledged."""

    def on_loss_episode(self, peer: Peer) -> None:
        """A loss episode began: decrease (once per episode)."""

    def on_persistent_congestion(self, peer: Peer) -> None:
        """Retransmit timeouts in a row with nothing acknowledged."""


Factory = Callable[["Config"], CongestionControl]


@functools.cache
def _registered() -> dict[str, Any]:
    """The group's entry points, by name (read once per process: the scan costs milliseconds)."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


#: btlcore's own, found even where the package metadata is stale (an old editable install)
BUILTIN = {"aimd": "aimd:Aimd", "bbr": "bbr:Bbr", "cubic": "cubic:Cubic", "none": "none:NoCc"}


def available() -> list[str]:
    """The names ``Config.cc`` may take."""
    return sorted(set(_registered()) | set(BUILTIN))


def load(name: str) -> Factory:
    """The algorithm registered as ``name``; ConfigError listing the known ones otherwise."""
    ep = _registered().get(name)
    if ep is not None:
        factory: Factory = ep.load()
        return factory
    if name in BUILTIN:
        module, attr = BUILTIN[name].split(":")
        builtin: Factory = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        return builtin
    raise ConfigError(f"bad value {name!r} for parameter 'cc' (BTL_CC): allowed is one of "
                      f"{', '.join(available())} (the entry-point group {GROUP!r})")
