"""Each flow's mean share, by its index, over seeds and windows of one fairness cell (diagnosis).

    .venv/bin/python scripts/fair/shares.py RATE_MBPS DELAY_MS QUEUE_BDP FLOWS MARKS SEEDS

MARKS: comma-separated virtual times (``0,0.4,1.2,2.0``); SEEDS: how many, from 1.  The run is
set up as :func:`btlcore.bench.flows.run_flows` sets it up.  Per window: each flow index's
share averaged over the seeds, and how often it was the largest.  Flows open in index order
at time 0, so a share that follows the index (over many seeds) is the start's doing, not
chance: how long it lasts shows how fast the shares converge."""
import sys

from cell import Cell

rate, delay, queue_bdp, n = float(sys.argv[1]), float(sys.argv[2]) * 1e-3, float(sys.argv[3]), int(sys.argv[4])
marks = [float(x) for x in sys.argv[5].split(",")]
seeds = range(1, int(sys.argv[6]) + 1)
mean = [[0.0] * n for _ in marks[1:]]
top = [[0] * n for _ in marks[1:]]
for seed in seeds:
    cell = Cell(rate, delay, queue_bdp, n, seed)
    got = cell.taken_at(marks)
    for k in range(len(marks) - 1):
        d = [b - a for a, b in zip(got[k], got[k + 1], strict=True)]
        total = sum(d) or 1
        for i in range(n):
            mean[k][i] += d[i] / total / len(seeds)
        top[k][max(range(n), key=d.__getitem__)] += 1
    cell.close()
print(f"{rate:g} Mb/s, {delay * 1e3:g} ms, queue {queue_bdp:g} BDP, {n} flows, seeds 1-{len(seeds)}:")
for k in range(len(marks) - 1):
    print(f"  {marks[k]:g}-{marks[k + 1]:g} s: mean share {[round(x, 3) for x in mean[k]]}, largest {top[k]}")
