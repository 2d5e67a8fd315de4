"""The memory budget of an idle peer (issue #11: at most 4 KiB, compiled build), measured as
``btl bench`` measures it (``btlcore.bench.btl_scale.memory_per_peer``: tracemalloc growth
over 200 simulated connections, both ends counted).  tracemalloc counts allocations, not
time, so the figure is the same from run to run: a change that adds a slot to every peer
shows here, where the benchmark's figure once crept over the budget unnoticed."""

from __future__ import annotations

import dataclasses

import pytest

import btlcore
from btlcore.bench import btl_scale
from btlcore.bench.profiles import PROFILES

BUDGET = 4096  # bytes per idle peer


@pytest.mark.skipif(not btlcore.compiled, reason="the budget is the compiled build's (pure Python objects are larger)")
def test_an_idle_peer_costs_at_most_4_kib_and_gives_back_its_buffers() -> None:
    profile = dataclasses.replace(PROFILES["quick"], memory_peers=200, trials=1)
    idle, used = btl_scale.memory_per_peer(profile)
    assert (idle.id, used.id) == ("btl.mem_per_peer", "btl.mem_per_peer_used")
    (idle_b,), (used_b,) = idle.values, used.values
    assert idle_b <= BUDGET, f"an idle peer costs {idle_b:,.0f} B, over the {BUDGET} B budget"
    # a third of peer_timeout of silence later, the emptied send queue's deque (~760 B, at
    # one end of each connection) and grown tables are given back (Peer.shed)
    assert used_b - idle_b >= 200
