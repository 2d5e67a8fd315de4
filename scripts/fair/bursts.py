"""Goodput of the full grid's burst-loss cells over many seeds (the sweep runs seed 1 only).

    .venv/bin/python scripts/fair/bursts.py SEEDS [RATE_MBPS DELAY_MS ...]

With no path given: the 5% burst cells (Gilbert-Elliott, mean burst 4 frames) of the paths
where a burst outlasting timeouts showed (0.05 and 1 ms at 10 Mb/s to 10 Gb/s).  A path is
two numbers.  Prints each path's goodput over (1 - p) x rate per seed, then its mean, the runs
below the 0.75 goal and the lowest; exit 1 if any run failed its byte check or declared a live
peer dead.  One process per core, each run as ``btl bench --regimes`` runs its cell
(:func:`btlcore.bench.regimes.run_cell`)."""
from __future__ import annotations

import sys
from multiprocessing import Pool
from typing import Any

from btlcore import Config
from btlcore.bench import regimes as R

PATHS = ((10, 0.05), (10, 1.0), (100, 0.05), (1000, 0.05), (1000, 1.0), (10000, 0.05))
GOAL = 0.75  # #12's goodput goal at 5% loss, of (1 - p) x rate


def _one(job: tuple[float, float, int]) -> tuple[float, float, int, dict[str, Any]]:
    rate, delay_ms, seed = job
    cell = R.Cell("loss", R._path(rate, delay_ms * 1e-3, -1.0), ((),))
    return rate, delay_ms, seed, R.run_cell(cell, R.GRIDS["full"], Config.build(), seed=seed)


def main() -> int:
    seeds = int(sys.argv[1])
    nums = [float(a) for a in sys.argv[2:]]
    paths = [(nums[i], nums[i + 1]) for i in range(0, len(nums), 2)] if nums else PATHS
    jobs = [(r, d, s) for r, d in paths for s in range(1, seeds + 1)]
    by: dict[tuple[float, float], list[float]] = {}
    bad = 0
    with Pool() as pool:
        for rate, delay_ms, _seed, row in pool.imap(_one, jobs):
            ok = row.get("verified") and not row.get("dead") and "error" not in row
            bad += not ok
            by.setdefault((rate, delay_ms), []).append(row.get("goodput_frac", 0.0))
    for (rate, delay_ms), g in by.items():
        print(f"{rate:g} Mb/s {delay_ms:g} ms 5% burst: mean {sum(g) / len(g):.3f}, {sum(x < GOAL for x in g)} of "
              f"{len(g)} below {GOAL}, lowest {min(g):.2f}  [{' '.join(f'{x:.2f}' for x in g)}]", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
