"""Jain's index of the full grid's fairness cells over many seeds (the sweep runs seed 1 only).

    .venv/bin/python scripts/fair/seeds.py SEEDS [RATE_MBPS DELAY_MS QUEUE_BDP FLOWS ...]

With no cell given: every droptail ``flows`` cell of the full grid (2 and 8 flows, queues of 1
and 2 BDP).  A cell is four numbers.  Prints each run's Jain index, then per cell the runs
below 0.95, the mean and the lowest; exit 1 if any run failed its byte check or declared a
live peer dead.  Runs one process per core (multiprocessing), each run as ``btl bench
--regimes`` runs its cells (:func:`btlcore.bench.regimes.run_cell`)."""
from __future__ import annotations

import sys
from multiprocessing import Pool
from typing import Any

from btlcore import Config
from btlcore.bench import regimes as R


def _cells(args: list[str]) -> list[R.Cell]:
    if args:
        nums = [float(a) for a in args]
        return [R.Cell("flows", R._path(nums[i], nums[i + 1] * 1e-3, queue=nums[i + 2]), ((),) * int(nums[i + 3]))
                for i in range(0, len(nums), 4)]
    return [c for c in R.cells(R.GRIDS["full"]) if c.kind == "flows" and c.path.aqm == "droptail"
            and len(c.flows) > 1]


def _one(job: tuple[R.Cell, int]) -> tuple[str, int, dict[str, Any]]:
    cell, seed = job
    row = R.run_cell(cell, R.GRIDS["full"], Config.build(), seed=seed)
    return (f"{cell.path.rate_mbps:g} Mb/s {cell.path.delay * 1e3:g} ms q{cell.path.queue_bdp:g} "
            f"x{len(cell.flows)}", seed, row)


def main() -> int:
    seeds = int(sys.argv[1])
    jobs = [(c, s) for c in _cells(sys.argv[2:]) for s in range(1, seeds + 1)]
    by: dict[str, list[float]] = {}
    bad = 0
    with Pool() as pool:
        for label, seed, row in pool.imap(_one, jobs):
            ok = row.get("verified") and not row.get("dead") and "error" not in row
            bad += not ok
            by.setdefault(label, []).append(row.get("jain", 0.0))
            print(f"{label} seed {seed}: Jain {row.get('jain', 0.0):.3f} goodput {row.get('goodput_frac', 0.0):.2f}"
                  + ("" if ok else f" FAILED {row.get('error') or row.get('errors') or row.get('dead')}"), flush=True)
    for label, js in by.items():
        print(f"{label}: {sum(j < 0.95 for j in js)} of {len(js)} below 0.95, mean {sum(js) / len(js):.3f}, "
              f"lowest {min(js):.3f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
