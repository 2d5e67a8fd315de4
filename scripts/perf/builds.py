"""The compiled and the pure-Python build side by side, interleaved (``btl bench --builds``).

    .venv/bin/python scripts/perf/builds.py [TRIALS]
"""
import sys

from btlcore.bench.builds import main

sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
