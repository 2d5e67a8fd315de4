"""Dask on btl:// against Dask's tcp://, side by side in one run (issue #13's goals).

    .venv/bin/python scripts/perf/dask_bench.py [--rounds N] [--size MB] [--skip-cluster]

1. A job on a LocalCluster with 2 worker processes (a dask.array reduction and 300 small
   tasks), on tcp:// and btl:// in alternating rounds; the job's wall time (cluster start
   excluded), median per protocol and btl/tcp (goal <= 1.2x).
2. A large frame (``--size`` MB, default 1024) written on one comm to a listener in another
   process, which answers when it has read it: throughput per protocol; meanwhile a second comm
   between the same two processes ping-pongs small messages (Dask's heartbeats), whose round
   trips are reported (median and worst, during the transfer).

Run from the repository root with the dask extra installed; the machine's load shows in the
figures, so compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import statistics
import subprocess
import sys
import textwrap
import time
from functools import partial
from typing import Any

SERVER = textwrap.dedent("""
    import asyncio, sys
    from distributed.comm import listen, CommClosedError

    async def main(proto):
        async def handle(comm):
            while True:
                try:
                    msg = await comm.read()
                except CommClosedError:
                    return
                if isinstance(msg, dict) and msg.get("op") == "beat":
                    await comm.write(msg)
                else:
                    await comm.write(msg["x"].nbytes)
        listener = await listen(proto + "127.0.0.1", handle)
        print(listener.contact_address, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main(sys.argv[1]))
""")


def job(client: Any) -> tuple[int, int]:
    import dask.array as da

    total = int(da.arange(2_000_000, chunks=100_000).sum().compute())
    futures = client.map(partial(operator.add, 1), range(300), pure=False)
    return total, int(sum(client.gather(futures)))


def cluster_round(proto: str) -> tuple[float, float, tuple[int, int]]:
    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, protocol=proto,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        up = time.perf_counter() - t0
        job(client)  # warm: imports and first connections in the workers
        t1 = time.perf_counter()
        answer = job(client)
        return up, time.perf_counter() - t1, answer


async def transfer(proto: str, size: int) -> tuple[float, list[float]]:
    import numpy as np
    from distributed.comm import connect
    from distributed.protocol import to_serialize

    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", SERVER, proto, stdin=subprocess.PIPE,
                                                stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None
    addr = (await proc.stdout.readline()).decode().strip()
    try:
        bulk = await connect(addr)
        beat = await connect(addr)
        # a numpy array, as workers send data: its buffer goes as frames, not copied into msgpack
        blob = {"x": to_serialize(np.ones(size, dtype="u1"))}
        await bulk.write({"x": to_serialize(np.ones(1000, dtype="u1"))})
        await bulk.read()
        done = False
        rtts: list[float] = []

        async def beats() -> None:
            k = 0
            while not done:
                t = time.perf_counter()
                await beat.write({"op": "beat", "k": k})
                await beat.read()
                rtts.append(time.perf_counter() - t)
                k += 1
                await asyncio.sleep(0.001)

        beater = asyncio.ensure_future(beats())
        t0 = time.perf_counter()
        await bulk.write(blob)
        assert await bulk.read() == size
        took = time.perf_counter() - t0
        done = True
        await beater
        await bulk.close()
        await beat.close()
        return took, rtts
    finally:
        proc.stdin.close()
        await proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="LocalCluster rounds per protocol (alternating)")
    ap.add_argument("--size", type=int, default=1024, help="the large frame, MB")
    ap.add_argument("--skip-cluster", action="store_true")
    args = ap.parse_args()
    protos = ["tcp://", "btl://"]
    if not args.skip_cluster:
        times: dict[str, list[float]] = {p: [] for p in protos}
        ups: dict[str, list[float]] = {p: [] for p in protos}
        answers = set()
        for r in range(args.rounds):
            for p in protos if r % 2 == 0 else protos[::-1]:
                up, took, answer = cluster_round(p)
                times[p].append(took)
                ups[p].append(up)
                answers.add(answer)
                print(f"  round {r} {p:7} job {took:.3f} s (cluster up in {up:.2f} s)", flush=True)
        assert len(answers) == 1, answers
        tcp, btl = (statistics.median(times[p]) for p in protos)
        print(f"LocalCluster, 2 worker processes, dask.array sum + 300 tasks (answer {answers.pop()}):")
        print(f"  tcp {tcp:.3f} s   btl {btl:.3f} s   btl/tcp {btl / tcp:.2f}x   (median of {args.rounds}; "
              f"goal <= 1.2x)")
    size = args.size << 20
    print(f"one {args.size} MB frame to another process, small round trips on a second comm meanwhile:")
    for p in protos:
        took, rtts = asyncio.run(transfer(p, size))
        rtts_ms = sorted(x * 1e3 for x in rtts) or [float("nan")]
        print(f"  {p:7} {size / took / 1e6:8.0f} MB/s ({took:.2f} s)   round trips during it: {len(rtts)}, "
              f"median {statistics.median(rtts_ms):.2f} ms, worst {rtts_ms[-1]:.2f} ms", flush=True)


if __name__ == "__main__":
    main()
