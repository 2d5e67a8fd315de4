"""No congestion window: usnic's fixed window, made safe by pacing.

usnic sent a fixed window and left the rest to the network; behind a queue shallower than
that window, a burst overflows it, the resends overflow it again, and the flow collapses
(15 of 200 messages at 1 Gb/s behind a 10 ms queue).  ``none`` keeps a fixed window
(``Config.cwnd_max``; ``0``: only the send window) and never shrinks it, on loss or timeout;
what keeps the queue bounded is the pace: sends are spread at the measured delivery rate,
``bbr``'s bandwidth model and pacing-gain cycle (1.25 / 0.75 / 1 per min RTT), so the sender
offers about what the path delivers whatever the window.  Only the first round trips, before
there is a rate to pace at, follow ``bbr``'s STARTUP window (a window of 1024 segments sent
at once, and STARTUP's 2.77 pace with nothing to bound the flight, would flood any queue).
It is what ``cwnd_max=0`` selects (deprecated spelling)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr

from .bbr import Bbr, BbrState

if TYPE_CHECKING:
    from ..peers import Peer
    from .rate import RateSample


# subclassed by pure Python (third parties, tests): allowed when compiled
@mypyc_attr(allow_interpreted_subclasses=True)
class NoCc(Bbr):
    """The ``none`` algorithm: a fixed window (once STARTUP measured the path), paced at the
    measured delivery rate."""

    __slots__ = ()

    probe_rtt = False  # (no window to shrink: the pace alone sets the queue)

    def _set_cwnd(self, peer: Peer, st: BbrState, s: RateSample) -> None:
        if st.filled:
            peer.cwnd = peer.cwnd_cap
        else:
            super()._set_cwnd(peer, st, s)

    def on_persistent_congestion(self, peer: Peer) -> None:
        """Nothing: the window is fixed."""

    def on_spurious(self, peer: Peer) -> None:
        """Nothing to undo."""
