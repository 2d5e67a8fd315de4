"""Round trip under asyncio against the sync API's blocking round trip, on udp, side by side.

``python -m btlcore.bench.aio_rtt [--size 64] [--seconds 1] [--rounds 3]``

Two pinned processes on loopback (``harness.run_pair``), both ends on the API measured:

* ``sync``: an echo handler that sends the reply; the client sends, then
  ``progress(timeout)`` (blocking in epoll, not busy-polling) until the reply is there;
* ``asyncio`` and ``uvloop``: :mod:`btlcore.aio` on that loop; the server's handler (a plain
  function, as the sync server's) replies with ``t.send_nowait(peer, ...)``; the client
  ``await t.send(peer, ...)`` (it returns once acknowledged: the ACK rides on the reply), then
  ``await t.recv()``.

Each round runs the three one after the other (so that load from elsewhere falls on all of
them alike); a round's figure per mode is its median round trip; the table shows the median
over rounds and the ratio to ``sync`` (#13's goal: at most 1.3).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable, Coroutine
from typing import Any

import btlcore

from .harness import BenchError, run_pair, wait_msg

TAG = 1
STOP = 2
BLOCKING = 0.05
MODES = ("sync", "asyncio", "uvloop")


def _runner(mode: str) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    if mode == "uvloop":
        import uvloop

        return uvloop.run
    return asyncio.run


def _unpin(pin: bool) -> None:
    """On a machine shared with other work, an end pinned to a busy core waits for its time
    slice (milliseconds) while the other core idles: unpinned by default (``--pin``: pinned)."""
    if not pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))


def server(ctl: Any, mode: str, pin: bool = False) -> None:
    _unpin(pin)
    if mode == "sync":
        return _sync_server(ctl)
    _runner(mode)(_aio_server(ctl))
    return None


def _sync_server(ctl: Any) -> None:
    with btlcore.open("udp") as t:
        stop = []
        t.on(TAG, lambda peer, tag, data: t.send(peer, TAG, bytes(data)))
        t.on(STOP, lambda peer, tag, data: stop.append(1))
        ctl.send(t.address_text)
        end = time.monotonic() + 120
        while not stop and time.monotonic() < end:
            t.progress(BLOCKING)


async def _aio_server(ctl: Any) -> None:
    import btlcore.aio

    async with btlcore.aio.open("udp") as t:
        stop = asyncio.Event()
        t.on(TAG, lambda peer, tag, data: t.send_nowait(peer, TAG, data))
        t.on(STOP, lambda peer, tag, data: stop.set())
        ctl.send(t.address_text)
        await stop.wait()


def client(ctl: Any, mode: str, size: int, seconds: float, pin: bool = False) -> list[float]:
    _unpin(pin)
    address = wait_msg(ctl)
    if mode == "sync":
        return _sync_client(address, size, seconds)
    out: list[float] = _runner(mode)(_aio_client(address, size, seconds))
    return out


def _sync_client(address: str, size: int, seconds: float) -> list[float]:
    payload = bytes(size)
    with btlcore.open("udp") as t:
        got = [0]
        t.on(TAG, lambda peer, tag, data: got.__setitem__(0, got[0] + 1))
        peer = t.connect(address)
        samples = []
        pc = time.perf_counter
        end = pc() + seconds + 0.2
        while pc() < end:
            want = got[0] + 1
            t0 = pc()
            t.send(peer, TAG, payload)
            while got[0] < want:
                t.progress(BLOCKING)
            samples.append(pc() - t0)
        t.send(peer, STOP, b"")
        t.flush(1.0)
    return samples[len(samples) // 5:]  # (the first fifth: warm-up)


async def _aio_client(address: str, size: int, seconds: float) -> list[float]:
    import btlcore.aio

    payload = bytes(size)
    async with btlcore.aio.open("udp") as t:
        peer = t.connect(address)
        await t.wait_connected(peer, timeout=5)
        samples = []
        pc = time.perf_counter
        end = pc() + seconds + 0.2
        while pc() < end:
            t0 = pc()
            await t.send(peer, TAG, payload)
            m = await t.recv(TAG, timeout=5)
            samples.append(pc() - t0)
            if len(m.data) != size:
                raise BenchError(f"echo returned {len(m.data)} B, sent {size} B")
        await t.send(peer, STOP, b"")
    return samples[len(samples) // 5:]


def measure(mode: str, size: int, seconds: float, pin: bool = False) -> float:
    """The median round trip of one run of ``mode``, seconds."""
    _, samples = run_pair(server, client, server_kw={"mode": mode, "pin": pin},
                          client_kw={"mode": mode, "size": size, "seconds": seconds, "pin": pin},
                          deadline=60 + seconds)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m btlcore.bench.aio_rtt", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=64, help="message size, bytes (default 64)")
    ap.add_argument("--seconds", type=float, default=1.0, help="per run (default 1)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each mode, interleaved (default 3)")
    ap.add_argument("--pin", action="store_true", help="pin the two ends to two cores (as btl bench)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES))
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    figures: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode in modes:
            figures[mode].append(measure(mode, args.size, args.seconds, args.pin))
    base = statistics.median(figures["sync"]) if figures.get("sync") else None
    print(f"udp round trip, {args.size} B, median of {args.rounds} runs of {args.seconds:g} s "
          f"(each run's median), both ends on the API named:")
    for mode in modes:
        med = statistics.median(figures[mode])
        ratio = f"{med / base:5.2f}x sync" if base else ""
        runs = " ".join(f"{x * 1e6:.1f}" for x in figures[mode])
        print(f"  {mode:8s} {med * 1e6:8.1f} us  {ratio}   (runs: {runs})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
