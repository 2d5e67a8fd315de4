"""none: usnic's fixed window, made safe by pacing at the measured delivery rate (cclink.py)."""

from __future__ import annotations

import pytest
from cclink import Link, Run

from btlcore import Config, ConfigError
from btlcore.errors import BtlDeprecationWarning
from btlcore.protocol.congestion.none import NoCc
from btlcore.testing.enginepair import EnginePair

MBPS = 1e6 / 8
SEG = 1500


def test_the_window_is_fixed_through_losses_and_timeouts() -> None:
    link = Link(50 * MBPS, 0.010, loss=0.02)
    run = Run("none", link, seg=SEG, cwnd_max=500).run(0.5)
    assert run.peer.cc_state.filled  # (bbr's STARTUP window only until the path is measured)
    n, lost = len(run.trace), run.lost_total
    run.run(1.0)
    assert run.lost_total > lost + 50  # (2% of 4000 segments a second)
    assert {c for _, c, _ in run.trace[n:]} == {500.0}
    run.cc.on_persistent_congestion(run.peer)
    run.cc.on_spurious(run.peer)
    assert run.peer.cwnd == 500.0


def test_paced_at_the_delivery_rate_a_shallow_queue_never_collapses_it() -> None:
    """A window of 1024 segments, five times what the path and its queue hold: the pace
    alone keeps the queue from overflowing after the first round trips."""
    link = Link(50 * MBPS, 0.010, queue=0.5 * 50 * MBPS * 0.020)
    run = Run("none", link, seg=SEG).run(0.5)
    assert run.peer.cwnd == 1024.0 > 5 * (link.bdp + link.queue) / SEG
    drops, sent = run.dropped_queue, run.sent_total
    n = len(run.trace)
    run.run(2.5)
    later = [p for _, _, p in run.trace[n:]]
    assert 0.7 * link.rate < min(later) and max(later) < 1.3 * link.rate  # the delivery rate, +-
    assert run.dropped_queue - drops < 0.01 * (run.sent_total - sent)
    assert run.goodput(since=0.5) >= 0.9 * link.rate


def test_cwnd_max_zero_is_the_deprecated_spelling_of_none() -> None:
    with pytest.warns(BtlDeprecationWarning, match="cc=none"):
        cfg = Config(cwnd_max=0)
    assert cfg.cc == "none"
    with pytest.warns(BtlDeprecationWarning), pytest.raises(ConfigError, match="cwnd_max"):
        Config(cc="cubic", cwnd_max=0)  # the alias and another algorithm: which one was meant?
    with pytest.warns(BtlDeprecationWarning):
        p = EnginePair(Config(cc="none", cwnd_max=0))
    assert isinstance(p.a.state.cc, NoCc)
    assert p.a.state.cc.cwnd_max == float("inf")  # uncapped: the send window alone limits
