"""Jain's index of one fairness cell over successive windows of one longer run (diagnosis).

    .venv/bin/python scripts/fair/windows.py RATE_MBPS DELAY_MS QUEUE_BDP FLOWS MARKS [SEEDS]

MARKS: comma-separated virtual times, e.g. ``0.4,1.2,2.0,2.8``: Jain is printed for each
window between two marks, per seed (default 1,2,3).  The run is set up exactly as
:func:`btlcore.bench.flows.run_flows` sets it up (same fabric, bottleneck, senders and seeds),
so the window ``0.4,1.2`` of a 100 Mb/s cell gives the sweep's figure; later windows show
whether the shares settle, drift or swing.  It measures, it does not change the sweep."""
import sys

from cell import Cell

from btlcore.bench import flows as F

rate, delay, queue_bdp, n = float(sys.argv[1]), float(sys.argv[2]) * 1e-3, float(sys.argv[3]), int(sys.argv[4])
marks = [float(x) for x in sys.argv[5].split(",")]
seeds = [int(x) for x in sys.argv[6].split(",")] if len(sys.argv) > 6 else [1, 2, 3]
for seed in seeds:
    cell = Cell(rate, delay, queue_bdp, n, seed)
    got = cell.taken_at(marks)
    js = [F.jain([b - a for a, b in zip(x, y, strict=True)]) for x, y in zip(got, got[1:], strict=False)]
    print(f"{rate:g} Mb/s {delay * 1e3:g} ms {queue_bdp:g} BDP {n} flows seed {seed}:",
          " ".join(f"{j:.3f}" for j in js), flush=True)
    cell.close()
