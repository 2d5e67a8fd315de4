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
over rounds and the ratio to ``sync`` (#13's goal: at most 1.3), the spread of the ratio
round by round (each against the sync run beside it), and each end's CPU time per round trip
(what the API costs, which the machine's load does not change as much).
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


class Meter:
    """CPU time per message after a warm-up: what an end costs, whatever the machine's load
    does to the wall-clock figure (``process_time`` read once per message, in every mode)."""

    __slots__ = ("count", "start")

    def __init__(self) -> None:
        self.count = 0
        self.start = 0.0

    def tick(self) -> None:
        self.count += 1
        if self.count == WARMUP:
            self.start = time.process_time()

    def per_message(self) -> float:
        return (time.process_time() - self.start) / max(1, self.count - WARMUP)


WARMUP = 300


def server(ctl: Any, mode: str, pin: bool = False) -> float:
    """An echo server; returns its CPU time per message echoed."""
    _unpin(pin)
    if mode == "sync":
        return _sync_server(ctl)
    out: float = _runner(mode)(_aio_server(ctl))
    return out


def _sync_server(ctl: Any) -> float:
    meter = Meter()
    with btlcore.open("udp") as t:
        stop = []

        def echo(peer: Any, tag: int, data: Any) -> None:
            meter.tick()
            t.send(peer, TAG, bytes(data))

        t.on(TAG, echo)
        t.on(STOP, lambda peer, tag, data: stop.append(meter.per_message()))
        ctl.send(t.address_text)
        end = time.monotonic() + 120
        while not stop and time.monotonic() < end:
            t.progress(BLOCKING)
    return stop[0] if stop else 0.0


async def _aio_server(ctl: Any) -> float:
    import btlcore.aio

    meter = Meter()
    async with btlcore.aio.open("udp") as t:
        stop: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        def echo(peer: Any, tag: int, data: Any) -> None:
            meter.tick()
            t.send_nowait(peer, TAG, data)

        t.on(TAG, echo)
        t.on(STOP, lambda peer, tag, data: stop.set_result(meter.per_message()))
        ctl.send(t.address_text)
        return await stop


def client(ctl: Any, mode: str, size: int, seconds: float, pin: bool = False) -> tuple[list[float], float]:
    """Round trips for ``seconds``: (their durations after a warm-up, CPU time per round trip)."""
    _unpin(pin)
    address = wait_msg(ctl)
    if mode == "sync":
        return _sync_client(address, size, seconds)
    out: tuple[list[float], float] = _runner(mode)(_aio_client(address, size, seconds))
    return out


def _sync_client(address: str, size: int, seconds: float) -> tuple[list[float], float]:
    payload = bytes(size)
    meter = Meter()
    with btlcore.open("udp") as t:
        got = [0]
        t.on(TAG, lambda peer, tag, data: got.__setitem__(0, got[0] + 1))
        peer = t.connect(address)
        samples = []
        pc = time.perf_counter
        end = pc() + seconds + 0.2
        while pc() < end:
            want = got[0] + 1
            meter.tick()
            t0 = pc()
            t.send(peer, TAG, payload)
            while got[0] < want:
                t.progress(BLOCKING)
            samples.append(pc() - t0)
        cpu = meter.per_message()
        t.send(peer, STOP, b"")
        t.flush(1.0)
    return samples[WARMUP:], cpu


async def _aio_client(address: str, size: int, seconds: float) -> tuple[list[float], float]:
    import btlcore.aio

    payload = bytes(size)
    meter = Meter()
    async with btlcore.aio.open("udp") as t:
        peer = t.connect(address)
        await t.wait_connected(peer, timeout=5)
        samples = []
        pc = time.perf_counter
        end = pc() + seconds + 0.2
        while pc() < end:
            meter.tick()
            t0 = pc()
            await t.send(peer, TAG, payload)
            m = await t.recv(TAG, timeout=5)
            samples.append(pc() - t0)
            if len(m.data) != size:
                raise BenchError(f"echo returned {len(m.data)} B, sent {size} B")
        cpu = meter.per_message()
        await t.send(peer, STOP, b"")
    return samples[WARMUP:], cpu


def measure(mode: str, size: int, seconds: float, pin: bool = False) -> tuple[float, float, float]:
    """One run of ``mode``: (median round trip, client CPU per round trip, server CPU per
    message), seconds."""
    server_cpu, (samples, client_cpu) = run_pair(
        server, client, server_kw={"mode": mode, "pin": pin},
        client_kw={"mode": mode, "size": size, "seconds": seconds, "pin": pin}, deadline=60 + seconds)
    return statistics.median(samples), client_cpu, server_cpu or 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m btlcore.bench.aio_rtt", description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=64, help="message size, bytes (default 64)")
    ap.add_argument("--seconds", type=float, default=1.0, help="per run (default 1)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each mode, interleaved (default 3)")
    ap.add_argument("--pin", action="store_true", help="pin the two ends to two cores (as btl bench)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES))
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    figures: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode in modes:
            figures[mode].append(measure(mode, args.size, args.seconds, args.pin))
    med = {m: [statistics.median(f[i] for f in figures[m]) for i in range(3)] for m in modes}
    print(f"udp round trip, {args.size} B, both ends on the API named; median of {args.rounds} "
          f"interleaved runs of {args.seconds:g} s (a run's figure: its median round trip)")
    print(f"  {'mode':8s} {'round trip':>10s} {'vs sync':>8s} {'per round':>11s}   {'CPU/rt client':>13s} "
          f"{'server':>7s}   runs (us)")
    for mode in modes:
        rt, c_cpu, s_cpu = med[mode]
        ratio = spread = ""
        if "sync" in med:
            ratio = f"{rt / med['sync'][0]:7.2f}x"
            spread = _spread([f[0] / g[0] for f, g in zip(figures[mode], figures["sync"], strict=True)])
        runs = " ".join(f"{f[0] * 1e6:.1f}" for f in figures[mode])
        cpu = f"{c_cpu * 1e6:11.1f}us {s_cpu * 1e6:5.1f}us"
        print(f"  {mode:8s} {rt * 1e6:8.1f}us {ratio} {spread:>11s}   {cpu}   {runs}")
    return 0


def _spread(ratios: list[float]) -> str:
    """Each round's ratio to that round's sync figure (load moves both alike): ``min-max``."""
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
