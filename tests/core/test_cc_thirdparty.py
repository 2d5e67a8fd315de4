"""A third party's congestion control plugs in whether or not it subclasses btlcore's native
base class (congestion/base.py), on both builds: a class that subclasses nothing is called
through ``Foreign``; a pure-Python subclass of a compiled algorithm has its overrides called
(the base allows interpreted subclasses) -- on_ack per ACKed segment, on_rate_sample per ACK
datagram, the loss and persistent-congestion calls."""

from __future__ import annotations

from typing import Any

import pytest

from btlcore import Config
from btlcore.protocol import congestion
from btlcore.protocol.congestion.base import Algorithm, Foreign, RateSampled, native
from btlcore.protocol.congestion.bbr import Bbr
from btlcore.protocol.congestion.rate import RateSample
from btlcore.protocol.peers import Peer
from btlcore.protocol.wire import T_DATA
from btlcore.testing.enginepair import EnginePair


class Standalone:
    """The documented interface (a Protocol): four methods and cwnd_max, no base class."""

    def __init__(self, config: Config) -> None:
        self.cwnd_max = 64.0
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def on_new_peer(self, peer: Any) -> None:
        self._count("on_new_peer")
        peer.cwnd, peer.cwnd_cap = 2.0, self.cwnd_max

    def on_ack(self, peer: Any) -> None:
        self._count("on_ack")
        peer.cwnd += 1.0

    def on_loss_episode(self, peer: Any) -> None:
        self._count("on_loss_episode")
        peer.cwnd = max(peer.cwnd / 2, 2.0)

    def on_persistent_congestion(self, peer: Any) -> None:
        self._count("on_persistent_congestion")


class Subclassed(Algorithm):
    """A pure-Python subclass of the native base."""

    def __init__(self, config: Config) -> None:
        self.cwnd_max = 64.0
        self.cwnd_initial = 2.0
        self.acks = 0

    def on_ack(self, peer: Peer) -> None:
        self.acks += 1
        peer.cwnd += 1.0


class CountingBbr(Bbr):
    """A pure-Python subclass of a compiled algorithm that overrides its per-ACK hook."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self.samples = 0

    def on_rate_sample(self, peer: Peer, s: RateSample) -> None:
        self.samples += 1
        super().on_rate_sample(peer, s)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Config(cc=...)`` also resolves the three classes above (as entry points would)."""
    load = congestion.load
    extra = {"standalone": Standalone, "subclassed": Subclassed, "countingbbr": CountingBbr}
    monkeypatch.setattr(congestion, "load", lambda name: extra.get(name) or load(name))


def transfer(name: str, loss_every: int = 0) -> tuple[EnginePair, Any]:
    p = EnginePair(Config(cc=name))
    p.handshake()
    if loss_every:
        p.faults.drop(where=lambda d: d.type == T_DATA and d.seq % loss_every == 0, count=3)
    for i in range(40):
        p.send(0, 1, 1, bytes(3000), key=("m", i))
    p.run(lambda: all(p.completions.get(("m", i)) for i in range(40)), max_time=p.now + 60)
    assert all(p.completions.get(("m", i)) for i in range(40))
    return p, p.a.state.cc


def test_a_class_that_subclasses_nothing_is_called_through_foreign(registered: None) -> None:
    p, cc = transfer("standalone", loss_every=7)
    assert isinstance(cc, Standalone) and isinstance(native(cc), Foreign)
    assert cc.calls["on_new_peer"] == 1
    assert cc.calls["on_ack"] > 0  # per ACKed segment, while below the cap
    assert cc.calls.get("on_loss_episode", 0) > 0  # the dropped segments
    assert p.pa.cwnd > 2.0


def test_a_pure_subclass_of_the_native_base_has_its_overrides_called(registered: None) -> None:
    _, cc = transfer("subclassed")
    assert isinstance(cc, Subclassed) and native(cc) is cc  # (no Foreign: the engine calls it as one of its own)
    assert cc.acks > 0


def test_a_pure_subclass_of_bbr_gets_every_rate_sample(registered: None) -> None:
    p, cc = transfer("countingbbr")
    assert isinstance(cc, CountingBbr) and isinstance(cc, RateSampled) and cc.samples > 0
    assert p.pa.cc_state.bw > 0.0  # Bbr's own on_rate_sample ran too (super())
