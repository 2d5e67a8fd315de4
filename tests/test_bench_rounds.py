"""btl bench's interleaved rounds: references and btlcore one trial at a time, side by side,
and a ratio per pair of trials (btlcore.bench.runner.rounds/merge, report.ratios)."""

from __future__ import annotations

from btlcore.bench import report
from btlcore.bench.harness import measured
from btlcore.bench.profiles import QUICK
from btlcore.bench.runner import merge, rounds


def test_paired_sections_run_one_trial_per_round_then_the_rest_once() -> None:
    plan = rounds(QUICK, ("raw_udp", "btl_udp", "btl_sim"))
    assert [(p.trials, p.warmup, s) for p, s in plan[:-1]] == (
        [(1, QUICK.warmup, ("raw_udp", "btl_udp"))] + [(1, 0, ("raw_udp", "btl_udp"))] * (QUICK.trials - 1))
    assert plan[-1] == (QUICK, ("btl_sim",))
    assert rounds(QUICK, ("btl_sim",)) == [(QUICK, ("btl_sim",))]  # nothing to pair: as before


def test_rounds_gather_a_figures_trials() -> None:
    a = measured("x", "raw_udp", "x", "s", [3.0])
    merged = merge(merge(merge(None, a), measured("x", "raw_udp", "x", "s", [1.0])),
                   measured("x", "raw_udp", "x", "s", [2.0]))
    assert merged.values == [3.0, 1.0, 2.0] and merged.stats["median"] == 2.0 and merged.stats["n"] == 3


def test_the_ratio_is_the_median_of_the_pairs() -> None:
    ref = measured("ref.udp_rtt.64.busy", "raw_udp", "r", "s", [10.0, 20.0, 10.0], better="lower")
    btl = measured("btl.udp_rtt.64.busy", "btl_udp", "b", "s", [30.0, 40.0, 50.0], better="lower")
    row = next(r for r in report.ratios([ref.to_json(), btl.to_json()]) if r["btlcore"] == btl.id
               and r["reference"] == ref.id)
    # pairs 3, 2, 5: their median 3 (the medians' ratio would be 40 / 10 = 4)
    assert (row["ratio"], row["ratio_min"], row["ratio_max"], row["pairs"]) == (3.0, 2.0, 5.0, 3)
