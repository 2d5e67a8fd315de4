"""``btl bench --builds``: the compiled and the pure-Python build side by side, interleaved.

Per trial, one run of each figure on each build (compiled then pure, pure then compiled, ...:
the order alternates), the ratio of every pair, then the median and the spread (min ... max)
of the ratios: load that drifts during the run moves both runs of a pair alike.

Figures: engine CPU per segment (``scripts/perf/engine_pingpong.py`` 64 B and
``engine_bulk_rx.py`` batch, 8972 B segments; ns, lower is better: in a checkout only) and the
simulator's data segments per wall-second with CRC32C (``btl.sim_rate``, the median of three
64 MiB transfers after a warm-up; higher is better).
Each run is a fresh process; the pure one has ``BTL_PURE=1``."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from typing import TextIO

#: scripts/perf of the checkout this package runs from (absent in an installed wheel)
HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts", "perf")
#: the simulator's figure: per process, one warm-up transfer of 64 MiB, then the median of three (one
#: transfer of 64 MiB lasts ~0.1 s: alone, a moment's load on the shared cores moved a pair's ratio by 30%)
SIM = ("from btlcore.bench import btl_sim, profiles; import dataclasses; "
       "p = dataclasses.replace(profiles.PROFILES['full'], trials=3, warmup=1); "
       "print(btl_sim.segment_rate(p).stats['median'])")
FIGURES: dict[str, tuple[list[str], bool]] = {  # name: (argv, lower is better)
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


def check_builds() -> str | None:
    """Why the two builds cannot be compared here (None: they can)."""
    got = [once(["-c", "import btlcore; print(int(btlcore.compiled))"], pure) for pure in (False, True)]
    if got != [1.0, 0.0]:
        return "no compiled build here (pip install -e . or bash scripts/setup.sh, with a C compiler)"
    return None


def main(trials: int, out: TextIO | None = None) -> int:
    """Print one line per figure; return 0, or 1 where the builds cannot be compared."""
    out = out or sys.stdout
    why = check_builds()
    if why:
        print(f"btl bench --builds: {why}", file=out)
        return 1
    for name, (argv, lower) in FIGURES.items():
        if argv[0] != "-c" and not os.path.exists(argv[0]):
            print(f"{name}: skipped ({argv[0]} is in a checkout only)", file=out)
            continue
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
              file=out, flush=True)
    return 0
