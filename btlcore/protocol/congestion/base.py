"""The native base class of btlcore's congestion control algorithms.

The interface an algorithm offers is :class:`~btlcore.protocol.congestion.CongestionControl`
(a Protocol: any class with its four methods and ``cwnd_max`` plugs in).  btlcore's own
(``aimd``, ``bbr``, ``cubic``, ``none``) subclass :class:`Algorithm`, a concrete class: in the
compiled build the engine then calls them through a C vtable (its per-ACK calls, ``on_ack``
per acknowledged segment, ``on_rate_sample`` per ACK datagram) rather than through Python
bound methods.  A pure-Python subclass works too (the base allows interpreted subclasses:
its overrides are found through a Python lookup, as they would be anyway), and an algorithm
that subclasses nothing is called through :class:`Foreign`, which forwards each call.

Only the four required methods and ``on_rate_sample`` (:class:`RateSampled`) are here: the
optional hooks (``on_spurious``, ``on_handshake_rtt``, ``on_rate_sample``) are looked up by
name once per engine, and an algorithm without one is never called for it, so a base that
defined them would change which code paths run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

if TYPE_CHECKING:
    from ..peers import Peer
    from .rate import RateSample


# subclassed by pure Python (third parties, tests): allowed when compiled
@mypyc_attr(allow_interpreted_subclasses=True)
class Algorithm:
    """A congestion control algorithm (see the package docstring for when each method is
    called).  The defaults: the window starts at ``cwnd_initial`` under the cap ``cwnd_max``
    and nothing moves it."""

    __slots__ = ("cwnd_max", "cwnd_initial")

    #: the largest window it sets (``inf``: none), as ``peer.cwnd_cap`` at ``on_new_peer``
    cwnd_max: float
    #: the window a connection starts with, segments
    cwnd_initial: float

    def on_new_peer(self, peer: Peer) -> None:
        """Set the window of a connection that starts."""
        peer.cwnd = self.cwnd_initial
        peer.cwnd_cap = self.cwnd_max

    def on_ack(self, peer: Peer) -> None:
        """One segment toward ``peer`` was acknowledged (called while below the cap)."""

    def on_loss_episode(self, peer: Peer) -> None:
        """A loss episode began: decrease (once per episode)."""

    def on_persistent_congestion(self, peer: Peer) -> None:
        """Retransmit timeouts in a row with nothing acknowledged."""


# subclassed by pure Python (third parties, tests): allowed when compiled
@mypyc_attr(allow_interpreted_subclasses=True)
class RateSampled(Algorithm):
    """An algorithm that takes delivery-rate samples (``bbr``, ``cubic``, ``none``): the
    sampler calls its :meth:`on_rate_sample` directly."""

    __slots__ = ()

    def on_rate_sample(self, peer: Peer, s: RateSample) -> None:
        """One ACK datagram's sample (rate.py)."""
        raise NotImplementedError


class Foreign(Algorithm):
    """An algorithm that is not an :class:`Algorithm` (a third party's class that subclasses
    nothing, a tracer's wrapper), called through Python: each call is forwarded."""

    __slots__ = ("inner",)

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.cwnd_max = float(inner.cwnd_max)
        self.cwnd_initial = 0.0  # (unused: on_new_peer is the inner one's)

    def on_new_peer(self, peer: Peer) -> None:
        self.inner.on_new_peer(peer)

    def on_ack(self, peer: Peer) -> None:
        self.inner.on_ack(peer)

    def on_loss_episode(self, peer: Peer) -> None:
        self.inner.on_loss_episode(peer)

    def on_persistent_congestion(self, peer: Peer) -> None:
        self.inner.on_persistent_congestion(peer)


def native(cc: Any) -> Algorithm:
    """``cc`` as an :class:`Algorithm` (itself, or forwarded to by a :class:`Foreign`)."""
    return cc if isinstance(cc, Algorithm) else Foreign(cc)
