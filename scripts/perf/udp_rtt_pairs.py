"""Round trips of several trees against raw UDP, in pairs: for each tree in turn (the order
reversed every other round) one ``btl bench`` raw UDP ping-pong trial and one btlcore round
trip trial run back to back, with the bench's own code (``btlcore.bench``: two processes
pinned to cores 0 and 1); the ratio of each pair is what load from others moves least.

    python scripts/perf/udp_rtt_pairs.py ROUNDS TREE [TREE...]

A TREE is a checkout with its own ``.venv`` (``/work/main``, ``/work/wt-x``).  ``SIZE=8192``
sets the message size (default 64); ``BLOCKING=1`` measures blocking round trips instead of
busy-polling ones; ``SECONDS`` the length of each trial (default 0.3).  ``BULK=65000``
measures bulk goodput at that datagram size against a kernel TCP stream trial instead (the
ratio is then btlcore over TCP, higher is better).  Prints, per tree, the median btlcore
figure, the median reference one and the median of the pairs' ratios (with their range),
then each pair's ratio in the order they ran."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys


def one_pair() -> None:
    """In a tree's venv: one raw UDP trial and one btlcore trial; their medians as JSON."""
    from dataclasses import replace

    from btlcore.bench import btl_udp, ref_tcp, ref_udp
    from btlcore.bench.profiles import PROFILES

    size = int(os.environ.get("SIZE", "64"))
    busy = os.environ.get("BLOCKING") != "1"
    bulk = int(os.environ.get("BULK", "0"))
    prof = replace(PROFILES["quick"], trials=1, warmup=1, rtt_seconds=float(os.environ.get("SECONDS", "0.3")),
                   rtt_max_iters=200_000)
    if bulk:
        raw = ref_tcp.stream(prof)
        btl = btl_udp.bulk(prof, bulk)
    else:
        raw = ref_udp.pingpong(prof, size, busy)
        btl = btl_udp.rtt(prof, size, busy)
    if not raw.ok or not btl.ok:
        raise SystemExit(f"a trial failed: {raw.error or raw.skipped} / {btl.error or btl.skipped}")
    print(json.dumps({"raw": raw.values[-1], "btl": btl.values[-1]}))


def main(rounds: int, trees: list[str]) -> None:
    res: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    me = os.path.abspath(__file__)
    for r in range(rounds):
        for tree in trees if r % 2 == 0 else trees[::-1]:
            out = subprocess.run([os.path.join(tree, ".venv", "bin", "python"), me, "--pair"], cwd=tree,
                                 capture_output=True, text=True, check=True)
            res[tree].append(json.loads(out.stdout.strip().splitlines()[-1]))
    bulk = bool(os.environ.get("BULK"))
    scale, unit, ref = (1e-9, "GB/s", "tcp") if bulk else (1e6, "us", "raw")
    for tree in trees:
        rs = res[tree]
        ratios = sorted(x["btl"] / x["raw"] for x in rs)
        print(f"{tree:20s} btl {statistics.median(x['btl'] for x in rs) * scale:7.2f} {unit}  "
              f"{ref} {statistics.median(x['raw'] for x in rs) * scale:6.2f} {unit}  "
              f"ratio {statistics.median(ratios):.2f}x ({ratios[0]:.2f} .. {ratios[-1]:.2f}, n={len(ratios)})")
        print(" " * 21 + "pairs in order: " + " ".join(f"{x['btl'] / x['raw']:.2f}" for x in rs))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pair"]:
        one_pair()
    else:
        main(int(sys.argv[1]), sys.argv[2:])
