"""Per-flow counters of one fairness cell over the sweep's window (diagnosis).

    .venv/bin/python scripts/fair/counters.py RATE_MBPS DELAY_MS QUEUE_BDP FLOWS SEED

Runs the cell exactly as :func:`btlcore.bench.flows.run_flows` sets it up (same fabric,
bottleneck, senders and seeds: the same Jain as the sweep's), stepping virtual time by 5 ms
to sample each sender's pace, flight and srtt, and prints per flow, between the warm-up mark
(a third of the duration) and the end: its share, new segments and resends, timeouts, fast
retransmits, tail probes, spurious resends, undos, resends per new segment, and the mean
pace (Mb/s), flight (datagrams of 9000 B) and srtt (ms).  Compiled build: no wrapping.
Where shares differ, this shows whether by pace (the bandwidth estimate) or by how losses
were repaired (timeouts against fast retransmits)."""
import sys

from cell import Cell

from btlcore.bench import flows as F
from btlcore.bench.regimes import GRIDS

KEYS = ("num_chunk_sends", "num_resends", "num_timeout_retrans", "num_fast_retrans", "num_tail_probes",
        "num_spurious_retrans", "num_undos")
STEP = 0.005

rate, delay, queue_bdp, n, seed = (float(sys.argv[1]), float(sys.argv[2]) * 1e-3, float(sys.argv[3]),
                                   int(sys.argv[4]), int(sys.argv[5]))
duration = GRIDS["full"].duration(F.PathSpec(rate, delay, 0.0, None, queue_bdp))
warmup = duration / 3
cell = Cell(rate, delay, queue_bdp, n, seed)
flows, fab, advance = cell.flows, cell.fab, cell.advance


def snap() -> list[tuple[int, dict[str, float]]]:
    return [(F._taken(f), f.sender.peer_stats(f.peer)) for f in flows]


advance(warmup)
start = snap()
samples: list[list[tuple[float, float, float]]] = [[] for _ in flows]
t = warmup
while fab.now < duration:
    t = min(t + STEP, duration)
    advance(t)
    for i, f in enumerate(flows):
        ps = f.sender.peer_stats(f.peer)
        samples[i].append((ps["pacing_rate"], ps["bytes_in_flight"], ps["srtt"] or 0.0))
end = snap()
got = [e[0] - s[0] for s, e in zip(start, end, strict=True)]
total = sum(got) or 1
print(f"{rate:g} Mb/s, {delay * 1e3:g} ms, queue {queue_bdp:g} BDP, {n} flows, seed {seed}: jain {F.jain(got):.3f}")
print("flow share    new resent  tmo fast tlp spur undo resent/new  pace  flight srtt")
for i, ((_, s0), (_, s1)) in enumerate(zip(start, end, strict=True)):
    d = {k: int(s1[k] - s0[k]) for k in KEYS}
    sm = samples[i]
    pace = sum(x[0] for x in sm) / len(sm) * 8 / 1e6
    flight = sum(x[1] for x in sm) / len(sm) / 9000
    srtt = sum(x[2] for x in sm) / len(sm) * 1e3
    print(f"f{i}  {got[i] / total:.3f} {d['num_chunk_sends']:6d} {d['num_resends']:6d} {d['num_timeout_retrans']:4d} "
          f"{d['num_fast_retrans']:4d} {d['num_tail_probes']:3d} {d['num_spurious_retrans']:4d} {d['num_undos']:4d}"
          f"      {d['num_resends'] / max(1, d['num_chunk_sends']):5.2f} {pace:6.1f} {flight:5.1f} {srtt:5.2f}")
cell.close()
