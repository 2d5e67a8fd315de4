"""AIMD: slow start, then one segment per window per round trip; a multiplicative decrease
per loss episode whose factor follows TCP Veno (gentler when the round trip shows no queue,
so the loss was likely not congestion); persistent congestion restarts slow start."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from mypy_extensions import mypyc_attr

from .base import Algorithm

if TYPE_CHECKING:
    from ...config import Config
    from ..peers import Peer

CWND_BETA: Final = 0.7  # multiplicative decrease per loss episode (CUBIC's; Reno halves)
CWND_BETA_RANDOM: Final = 0.8  # ... when the RTT shows no queue: the loss was likely not congestion (Veno)
VENO_BACKLOG: Final = 3.0  # segments this flow keeps queued (cwnd x (1 - min_rtt/srtt)) below which a loss looks random


# subclassed by pure Python (third parties, tests): allowed when compiled
@mypyc_attr(allow_interpreted_subclasses=True)
class Aimd(Algorithm):
    """The ``aimd`` algorithm (``Config.cwnd_initial``, ``Config.cwnd_max``; ``cwnd_max=0``
    turns congestion control off: a window so large it never binds)."""

    __slots__ = ()

    def __init__(self, config: Config) -> None:
        self.cwnd_max = float(config.cwnd_max) if config.cwnd_max else float("inf")
        self.cwnd_initial = float(min(config.cwnd_initial, config.cwnd_max)) if config.cwnd_max else float("inf")

    def on_new_peer(self, peer: Peer) -> None:
        peer.cwnd = self.cwnd_initial
        peer.cwnd_cap = self.cwnd_max  # (the engine's auto-tuning may move it: autotune.py)

    def on_ack(self, peer: Peer) -> None:
        cwnd = peer.cwnd
        if cwnd < peer.cwnd_cap:  # slow start, then one segment per window
            peer.cwnd = cwnd + (1.0 if cwnd < peer.ssthresh else 1.0 / cwnd)

    def on_loss_episode(self, peer: Peer) -> None:
        """Decrease once.  Veno's rule picks the factor; either way the window decreases, so
        AIMD still converges where the estimate is wrong (a shallow-buffered switch)."""
        t = peer.timer
        beta = CWND_BETA
        if t.min_rtt and t.srtt and peer.cwnd * (1.0 - t.min_rtt / t.srtt) < VENO_BACKLOG:
            beta = CWND_BETA_RANDOM
        peer.ssthresh = peer.cwnd = max(peer.cwnd * beta, 2.0)

    def on_spurious(self, peer: Peer) -> None:
        """The last decrease was for nothing (undo.py): back to the window and threshold it
        replaced, or what grew since."""
        if peer.undo_cwnd > peer.cwnd:
            peer.cwnd = min(peer.undo_cwnd, peer.cwnd_cap)
        if peer.undo_ssthresh > peer.ssthresh:
            peer.ssthresh = peer.undo_ssthresh

    def on_persistent_congestion(self, peer: Peer) -> None:
        peer.ssthresh = max(peer.cwnd / 2, 2.0)
        peer.cwnd = min(self.cwnd_initial, peer.ssthresh)
