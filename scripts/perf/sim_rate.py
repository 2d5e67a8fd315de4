"""The simulator's data segments per wall-second with CRC32C (``btl.sim_rate``), one transfer.

    .venv/bin/python scripts/perf/sim_rate.py [MIB] [TRIALS]

Prints the build, then one figure per trial and the median last (the line builds.py reads).
Run it beside the same in another tree (alternating) for a comparison; ``BTL_PURE=1`` for the
pure build."""
import dataclasses
import sys

import btlcore
from btlcore.bench import btl_sim, profiles

mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
trials = int(sys.argv[2]) if len(sys.argv) > 2 else 1
p = dataclasses.replace(profiles.PROFILES["full"], trials=trials, warmup=0, sim_bytes=mib << 20)
rates = btl_sim.segment_rate(p).stats
print(f"compiled={btlcore.compiled} {mib} MiB x {trials}", file=sys.stderr)
print(f"{rates['median']:.0f}")
