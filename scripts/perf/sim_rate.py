"""The simulator's data segments per wall-second with CRC32C (``btl.sim_rate``), alone.

    .venv/bin/python scripts/perf/sim_rate.py [MIB] [TRIALS]

Prints, on stderr, the build and the segments per CPU-second of this process over the whole
measurement (setup included: steadier than wall time on a loaded machine), then on stdout
the median of the trials' wall-time rates (what ``btl bench`` reports).  Alternate it with
the same in another tree for a comparison; ``BTL_PURE=1`` for the pure build."""
import dataclasses
import sys
import time

import btlcore
from btlcore.bench import btl_sim, profiles

mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
trials = int(sys.argv[2]) if len(sys.argv) > 2 else 1
p = dataclasses.replace(profiles.PROFILES["full"], trials=trials, warmup=0, sim_bytes=mib << 20)
cpu = time.process_time()
result = btl_sim.segment_rate(p)
cpu = time.process_time() - cpu
segments = result.extra["segments"] * trials
print(f"compiled={btlcore.compiled} {mib} MiB x {trials}: {segments / cpu:,.0f} segments per CPU-second",
      file=sys.stderr)
print(f"{result.stats['median']:.0f}")
