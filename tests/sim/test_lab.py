"""The fixture's helpers (btlcore_sim.lab.Lab): nodes wired together, virtual time advanced
by the clock or to a condition.  These tests use the plugin's own ``btl_fabric``."""

from __future__ import annotations

import pytest

import btlcore
from btlcore.protocol.peers import PeerState
from btlcore_sim import Fabric, LinkModel
from btlcore_sim.lab import Lab


def test_the_fixture_is_a_seeded_fabric(btl_fabric: Lab, btl_seed: int) -> None:
    assert isinstance(btl_fabric, Fabric) and btl_fabric.seed == btl_seed
    t = btlcore.open("sim", fabric=btl_fabric)  # a node opened the plain way joins it
    assert btl_fabric.node(t.address).name == "sim1"
    t.close()


def test_nodes_are_wired_together_with_their_handshakes_done(btl_fabric: Lab) -> None:
    btl_fabric.default_model = LinkModel(delay=2e-3)
    nodes = btl_fabric.nodes(3)
    assert [btl_fabric.node(t.address).name for t in nodes] == ["a", "b", "c"]
    for t in nodes:
        assert len(t.peers) == 2 and all(p.state is PeerState.ESTABLISHED for p in t.peers)
    assert btl_fabric.now >= 4e-3  # a round trip of virtual time at least, none of wall time to speak of
    more = btl_fabric.nodes(1, connect=False)
    assert btl_fabric.node(more[0].address).name == "d" and not more[0].peers


def test_run_for_moves_virtual_time_and_the_protocol_with_it(btl_fabric: Lab) -> None:
    btl_fabric.default_model = LinkModel(delay=1e-3)
    a, b = btl_fabric.nodes(2)
    got: list[tuple[float, bytes]] = []
    b.on(1, lambda peer, tag, data: got.append((btl_fabric.now, bytes(data))))
    start = btl_fabric.now
    a.send(a.connect(b.address), 1, b"hello")
    assert btl_fabric.run_for(0.5e-3) == pytest.approx(start + 0.5e-3)
    assert not got  # half the one-way delay: still on the wire
    btl_fabric.run_for(30.0)  # 30 s of protocol time (keepalives and all)
    assert btl_fabric.now == pytest.approx(start + 30.0005)
    assert got == [(pytest.approx(start + 1e-3), b"hello")]


def test_run_until_stops_when_the_condition_holds_or_times_out(btl_fabric: Lab) -> None:
    btl_fabric.default_model = LinkModel(delay=1e-3)
    a, b = btl_fabric.nodes(2)
    got: list[bytes] = []
    b.on(1, lambda peer, tag, data: got.append(bytes(data)))
    a.send(a.connect(b.address), 1, b"x" * 100_000)
    when = btl_fabric.run_until(lambda: got)
    assert got and when == btl_fabric.now
    with pytest.raises(TimeoutError):
        btl_fabric.run_until(lambda: len(got) > 1, timeout=0.25)
    with pytest.raises(ValueError, match="allowed is a number of seconds"):
        btl_fabric.run_for(-1)


def test_a_lab_without_transports_runs_the_fabric_alone() -> None:
    lab = Lab(seed=1)
    assert lab.run_for(2.0) == 2.0
    with pytest.raises(TimeoutError):
        lab.run_until(lambda: False, timeout=1.0)
    assert lab.now == 3.0
    lab.close()
