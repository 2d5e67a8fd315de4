"""Congestion control is chosen by name from the btlcore.congestion entry points."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

from btlcore import Config, ConfigError
from btlcore.errors import BtlDeprecationWarning
from btlcore.protocol import congestion
from btlcore.protocol.congestion.aimd import Aimd
from btlcore.protocol.congestion.bbr import Bbr
from btlcore.protocol.congestion.cubic import Cubic
from btlcore.protocol.congestion.none import NoCc
from btlcore.testing.enginepair import EnginePair


def test_bbr_is_the_default_and_aimd_is_registered() -> None:
    assert Config().cc == "bbr"  # (issue #12 item 5)
    assert isinstance(EnginePair(Config()).a.state.cc, Bbr)
    names = {ep.name: ep.value for ep in entry_points(group=congestion.GROUP)}
    assert names.get("aimd") == "btlcore.protocol.congestion.aimd:Aimd"
    assert congestion.load("aimd") is Aimd
    assert "aimd" in congestion.available()
    p = EnginePair(Config(cc="aimd"))
    assert isinstance(p.a.state.cc, Aimd)


@pytest.mark.parametrize("name, cls", [("bbr", Bbr), ("cubic", Cubic), ("none", NoCc)])
def test_bbr_cubic_and_none_are_registered(name: str, cls: type) -> None:
    names = {ep.name: ep.value for ep in entry_points(group=congestion.GROUP)}
    assert names.get(name) == f"{cls.__module__}:{cls.__name__}"
    assert congestion.load(name) is cls
    assert name in congestion.available()
    assert Config.from_env({"BTL_CC": name}).cc == name
    p = EnginePair(Config(cc=name, cwnd_max=100, cwnd_initial=8))
    p.handshake()
    assert isinstance(p.a.state.cc, cls)
    assert 0 < p.pa.cwnd <= 100  # cwnd_max caps every algorithm's window


def test_an_unknown_algorithm_is_a_config_error_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"'vegas'.*BTL_CC.*allowed is one of aimd, bbr, cubic, none"):
        EnginePair(Config(cc="vegas"))
    with pytest.raises(ConfigError, match="'cc'"):
        Config(cc="")
    assert Config.from_env({"BTL_CC": "aimd"}).cc == "aimd"


def test_aimd_window_rules() -> None:
    p = EnginePair(Config(cc="aimd", cwnd_initial=4, cwnd_max=6))
    p.handshake()
    cc, peer = p.a.state.cc, p.pa
    assert peer.cwnd == 4.0
    cc.on_ack(peer)
    assert peer.cwnd == 5.0  # slow start
    peer.ssthresh = 5.0
    cc.on_ack(peer)
    assert peer.cwnd == 5.2  # congestion avoidance: 1/cwnd per ACK
    peer.cwnd = 6.0
    cc.on_ack(peer)
    assert peer.cwnd == 6.0  # capped
    assert peer.timer.srtt == peer.timer.min_rtt  # (one sample, the handshake's): no queue
    cc.on_loss_episode(peer)  # so the loss looks random: the gentle cut (Veno)
    assert peer.cwnd == peer.ssthresh == pytest.approx(4.8)
    peer.timer.srtt = 10 * peer.timer.min_rtt  # most of the round trip is queue: congestion
    cc.on_loss_episode(peer)
    assert peer.cwnd == peer.ssthresh == pytest.approx(4.8 * 0.7)
    cc.on_persistent_congestion(peer)
    assert peer.ssthresh == peer.cwnd == 2.0  # half, but never below 2 segments
    # off: cwnd_max=0 once meant an infinite aimd window; it selects cc=none now (deprecated)
    with pytest.warns(BtlDeprecationWarning):
        p = EnginePair(Config(cwnd_max=0))
    assert isinstance(p.a.state.cc, NoCc) and p.a.state.cc.cwnd_max == float("inf")
