"""The raw-throughput probe the benchmarks call."""

from __future__ import annotations

from btlcore_sim.selftest import frames_per_second


def test_frames_per_second_measures_a_lossless_run() -> None:
    # tiny runs: this checks that the probe works (it raises if a frame went missing),
    # not how fast the machine is; the benchmarks report the figure
    for delay in (0.0, 1e-5):
        fps = frames_per_second(frames=2000, size=1500, batch=16, delay=delay)
        assert fps > 1000
