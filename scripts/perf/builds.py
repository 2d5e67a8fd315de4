"""The compiled and the pure-Python build side by side, interleaved: per trial, one run of
each figure on each build (compiled, pure, compiled, pure, ...; the order alternates), the
ratio of every pair, then the median and the spread (min ... max) of the ratios.

    .venv/bin/python scripts/perf/builds.py [TRIALS]

Figures: engine CPU per segment (engine_pingpong.py 64 B and engine_bulk_rx.py batch 8972 B,
ns: lower is better) and the simulator's data segments per wall-second with CRC32C (btl
bench's btl.sim_rate, quick profile: higher is better).  Each run is a fresh process; the pure
one has BTL_PURE=1.  Run from the repository root after ``bash scripts/setup.sh``."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SIM = ("from btlcore.bench import btl_sim, profiles; import dataclasses; "
       "p = dataclasses.replace(profiles.PROFILES['quick'], trials=1, warmup=0); "
       "print(btl_sim.segment_rate(p).stats['median'])")
FIGURES = {  # name: (argv, lower is better)
    "engine ping-pong 64 B, ns per receive": ([os.path.join(HERE, "engine_pingpong.py"), "64", "20000"], True),
    "engine bulk 8972 B, ns per segment received": ([os.path.join(HERE, "engine_bulk_rx.py"), "batch", "9000", "3000"],
                                                   True),
    "simulator, data segments per wall-second (CRC32C)": (["-c", SIM], False),
}


def once(argv: list[str], pure: bool) -> float:
    env = {k: v for k, v in os.environ.items() if k != "BTL_PURE"}
    if pure:
        env["BTL_PURE"] = "1"
    out = subprocess.run([sys.executable, "-W", "ignore", *argv], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.split()[-1])


def check_builds() -> None:
    got = [once(["-c", "import btlcore; print(int(btlcore.compiled))"], pure) for pure in (False, True)]
    if got != [1.0, 0.0]:
        sys.exit(f"expected a compiled and a pure build, got compiled={got[0]:g}, pure={got[1]:g}: "
                 "run scripts/setup.sh")


def main(trials: int) -> None:
    check_builds()
    for name, (argv, lower) in FIGURES.items():
        pairs: list[tuple[float, float]] = []
        for i in range(trials):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {pure: once(argv, pure) for pure in order}
            pairs.append((got[False], got[True]))
        # the compiled build's advantage: pure / compiled for costs, compiled / pure for rates
        ratios = sorted((p / c) if lower else (c / p) for c, p in pairs)
        comp = statistics.median(c for c, _ in pairs)
        pure = statistics.median(p for _, p in pairs)
        print(f"{name}: compiled {comp:,.0f}, pure {pure:,.0f}; compiled is "
              f"{statistics.median(ratios):.2f}x better (pairs: {ratios[0]:.2f} ... {ratios[-1]:.2f}, n={trials})",
              flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
