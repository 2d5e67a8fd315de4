"""The loss recovery of an engine whose congestion control takes delivery-rate samples
(:mod:`.delivery`): :class:`SamplingRecovery`, chosen once by the engine."""

from __future__ import annotations

from .packetizer import Packetizer
from .peers import Peer, Segment
from .recovery import Recovery
from .state import EngineState


class SamplingRecovery(Recovery):
    """:class:`Recovery` for an algorithm that takes delivery-rate samples (delivery.py):
    each acknowledged segment goes by the sampler first, and each ACK datagram with news
    ends with its sample, once its losses are declared.  A subclass, chosen once by the
    engine, so that the ACK paths of an algorithm without samples pay nothing for them."""

    __slots__ = ("_in_ack",)

    def __init__(self, state: EngineState, packetizer: Packetizer) -> None:
        super().__init__(state, packetizer)
        self._in_ack = False  # within on_ack: its end takes the sample, not on_cum_ack

    def _acked(self, peer: Peer, seg: Segment) -> None:
        self._sampler.acked(peer, seg, self._state.now)  # type: ignore[union-attr]
        super()._acked(peer, seg)

    def on_cum_ack(self, peer: Peer, ack_w: int, now: float) -> Segment | None:
        """A piggy-backed ACK (the receive path's): its sample once its losses are declared
        (the receive path's own loss check that follows then finds nothing new)."""
        at_cum = super().on_cum_ack(peer, ack_w, now)
        if peer.rs_acked and not self._in_ack:
            if peer.unacked:
                self.detect_losses(peer)
            self._sampler.finish(peer, now)  # type: ignore[union-attr]
        return at_cum

    def on_ack(self, peer: Peer, data: memoryview, n: int, ack_w: int, plen: int, now: float) -> None:
        self._in_ack = True
        try:
            super().on_ack(peer, data, n, ack_w, plen, now)
        finally:
            self._in_ack = False
        if peer.rs_acked:
            self._sampler.finish(peer, now)  # type: ignore[union-attr]
