"""CPU per udp round trip with both ends in one process: the sync API's blocking loop
against btlcore.aio on asyncio and on uvloop, in interleaved runs (64 B echo, the server a
plain handler).  Steadier under machine load than ``python -m btlcore.bench.aio_rtt`` (no
scheduler between two processes), so a change to the driver shows here first.

    .venv/bin/python scripts/perf/aio_pingpong.py [ROUND_TRIPS] [RUNS]

``sync`` sends, posts with ``progress(0)``, then ``progress(0.05)`` on each end until the
reply is in (each wait returns at once: the datagram is there); the aio modes ``await
send`` then ``await recv`` with both transports on one loop.  Run it from the repository
root of each tree to compare, alternating.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import btlcore
import btlcore.aio

WARMUP = 500
MSG = b"x" * 64


def sync_rt(n: int) -> float:
    a = btlcore.open("udp", bind="127.0.0.1:0", seed=1)
    b = btlcore.open("udp", bind="127.0.0.1:0", seed=2)
    got = [0]
    b.on(1, lambda p, t, d: b.send(p, 1, bytes(d)))
    a.on(1, lambda p, t, d: got.__setitem__(0, got[0] + 1))
    pb = a.connect(b.address)

    def run(count: int) -> None:
        for _ in range(count):
            want = got[0] + 1
            a.send(pb, 1, MSG)
            a.progress(0)
            while got[0] < want:
                b.progress(0.05)
                a.progress(0.05)

    run(WARMUP)
    t0 = time.process_time()
    run(n)
    cpu = (time.process_time() - t0) / n
    a.close()
    b.close()
    return cpu


async def aio_rt(n: int) -> float:
    async with btlcore.aio.open("udp", bind="127.0.0.1:0", seed=1) as a, \
            btlcore.aio.open("udp", bind="127.0.0.1:0", seed=2) as b:
        b.on(1, lambda p, t, d: b.send_nowait(p, 1, d))
        pb = a.connect(b.address_text)
        await a.wait_connected(pb, 5)

        async def run(count: int) -> None:
            for _ in range(count):
                await a.send(pb, 1, MSG)
                await a.recv(1, timeout=5)

        await run(WARMUP)
        t0 = time.process_time()
        await run(n)
        return (time.process_time() - t0) / n


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    modes: dict[str, Callable[[], Any]] = {"sync": lambda: sync_rt(n), "asyncio": lambda: asyncio.run(aio_rt(n))}
    try:
        import uvloop

        modes["uvloop"] = lambda: uvloop.run(aio_rt(n))
    except ImportError:
        pass
    res: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(runs):
        for mode, fn in modes.items():
            res[mode].append(fn())
    base = statistics.median(res["sync"])
    for mode, v in res.items():
        m = statistics.median(v)
        print(f"{mode:8s} {m * 1e6:7.1f} us CPU per round trip  {m / base:.2f}x   runs "
              + " ".join(f"{x * 1e6:.1f}" for x in v))


if __name__ == "__main__":
    main()
