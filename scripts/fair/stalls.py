"""Fairness over seeds with what explains it: first-ACK delays and loss at the bottleneck.

    .venv/bin/python scripts/fair/stalls.py SEEDS [FLOWS [RATE_MBPS [DELAY_MS]]]

For queues of 1 and 2 BDP (default: 8 flows, 100 Mb/s, 1 ms one way), each seed's cell as
:class:`cell.Cell` sets it up: every flow's first acknowledgement is looked for in 4 ms steps
up to 0.4 s (a flow still waiting then has had its first window and its timeout probes
dropped: the STARTUP stall), then the shares are taken over the same window as
``seeds.py`` and Jain's index printed with them.  Per queue: the runs below 0.95 (seed:
index), the mean and lowest index, the flow-runs whose first ACK came after 100 ms and after
400 ms, and the mean loss at the bottleneck over the window.  Runs one process per core."""
from __future__ import annotations

import os
import sys
from multiprocessing import Pool

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cell import Cell  # noqa: E402

from btlcore.bench import flows as F  # noqa: E402

STEP = 0.004  # seconds between looks for each flow's first ACK
LOOK_UNTIL = 0.4  # when the looking stops (and the warm-up of the measured window ends)
MEASURE_UNTIL = 1.2  # the end of the measured window, virtual seconds


def one(job: tuple[float, int, int, float, float]) -> tuple[float, int, float, int, int, float]:
    """(queue, seed, Jain, flows whose first ACK came after 100 ms, after 400 ms, loss)."""
    queue, seed, n, rate, delay = job
    cell = Cell(rate, delay, queue, n, seed)
    first: list[float | None] = [None] * n
    t = 0.0
    while t < LOOK_UNTIL:
        t += STEP
        cell.advance(t)
        for i, f in enumerate(cell.flows):
            if first[i] is None and f.peer.snd_una != f.peer.isn:
                first[i] = t
    bn = cell.fab.bottlenecks[0]
    offered, sent = bn.offered, bn.sent
    before = cell.taken()
    cell.advance(MEASURE_UNTIL)
    after = cell.taken()
    loss = 1 - (bn.sent - sent) / max(1, bn.offered - offered)
    cell.close()
    shares = [b - a for a, b in zip(before, after, strict=True)]
    late = [x if x is not None else LOOK_UNTIL + 1 for x in first]
    return (queue, seed, F.jain(shares), sum(x > 0.1 for x in late), sum(x > LOOK_UNTIL for x in late), loss)


def main() -> int:
    seeds = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    rate = float(sys.argv[3]) if len(sys.argv) > 3 else 100.0
    delay = float(sys.argv[4]) * 1e-3 if len(sys.argv) > 4 else 1e-3
    queues = (1.0, 2.0)
    jobs = [(q, s, n, rate, delay) for q in queues for s in range(1, seeds + 1)]
    with Pool(os.cpu_count() or 1) as pool:
        results = pool.map(one, jobs)
    for q in queues:
        rows = [r for r in results if r[0] == q]
        jains = [r[2] for r in rows]
        below = [f"{r[1]}:{r[2]:.3f}" for r in rows if r[2] < 0.95]
        print(f"{rate:g} Mb/s {delay * 1e3:g} ms q{q:g} x{n}: {len(below)} of {len(rows)} below 0.95, "
              f"mean {sum(jains) / len(jains):.3f}, lowest {min(jains):.3f}; first ACK after 100 ms: "
              f"{sum(r[3] for r in rows)} flow-runs, after {LOOK_UNTIL * 1e3:g} ms: {sum(r[4] for r in rows)}; "
              f"loss at the bottleneck {sum(r[5] for r in rows) / len(rows):.2f}; below: {' '.join(below)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
