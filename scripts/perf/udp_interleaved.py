"""Blocking udp round trips of several trees, interleaved in segments: one echo pair (two
processes, pinned to cores 0 and 1) per tree stays up, and the driver has each pair run
``SEG`` round trips in turn, ``ROUNDS`` times (the order reversed every other round), so that
load from others falls on every tree alike.  A whole ``btl bench`` run per tree, alternated,
could not tell 10% apart on a loaded 2-core machine; this can.

    python scripts/perf/udp_interleaved.py ROUNDS SEG TREE [TREE...]

A TREE is a checkout with its own ``.venv`` (``/work/base``, ``/work/wt-x``), optionally with
environment settings for its pair: ``/work/wt-x:BTL_TLP=0``.  ``SIZE=8192`` sets the message
size; ``BUSY=1`` busy-polls (then the idle pairs' servers spin too: compare with care).
Prints each tree's median round trip, its ratio to the first tree's, the client's CPU per
round trip, and in how many segments it was faster than the first tree."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from typing import Any

TIMEOUT = 0.05


def _server(q: Any, busy: bool) -> None:
    import btlcore

    os.sched_setaffinity(0, {1})
    t = btlcore.open("udp", bind="127.0.0.1:0", busy_poll=busy, seed=2)
    stop = [False]
    t.on(1, lambda p, tag, d: t.send(p, 1, bytes(d)))
    t.on(2, lambda p, tag, d: stop.__setitem__(0, True))
    q.put(t.address)
    while not stop[0]:
        t.progress(TIMEOUT)
    t.close()


def client() -> None:
    """One tree's pair: 'run N' on stdin -> 'cpu_us rtt_us...' on stdout; 'quit'."""
    import multiprocessing as mp

    import btlcore

    busy = os.environ.get("BUSY") == "1"
    q: Any = mp.Queue()
    p = mp.Process(target=_server, args=(q, busy))
    p.start()
    os.sched_setaffinity(0, {0})
    t = btlcore.open("udp", bind="127.0.0.1:0", busy_poll=busy, seed=1)
    peer = t.connect(q.get())
    got = [0]
    t.on(1, lambda p_, tag, d: got.__setitem__(0, got[0] + 1))
    msg = bytes(int(os.environ.get("SIZE", "64")))
    pc = time.perf_counter

    def run(n: int) -> list[float]:
        out = []
        for _ in range(n):
            want = got[0] + 1
            t0 = pc()
            t.send(peer, 1, msg)
            while got[0] < want:
                t.progress(TIMEOUT)
            out.append(pc() - t0)
        return out

    run(300)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] != "run":
            break
        c0 = time.process_time()
        s = run(int(cmd[1]))
        cpu = (time.process_time() - c0) / len(s)
        print(f"{cpu * 1e6:.2f} " + " ".join(f"{x * 1e6:.1f}" for x in s), flush=True)
    done: list[Any] = []
    t.send(peer, 2, b"stop", callback=done.append)
    while not done:
        t.progress(0.01)
    p.join()
    t.close()


def main(rounds: int, seg: int, trees: list[str]) -> None:
    procs = {}
    for spec in trees:
        tree, *envs = spec.split(":")
        env = dict(os.environ, **dict(e.split("=", 1) for e in envs))
        procs[spec] = subprocess.Popen([os.path.join(tree, ".venv", "bin", "python"), os.path.abspath(__file__),
                                        "--client"], cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True, env=env)
        assert procs[spec].stdout is not None and procs[spec].stdout.readline().strip() == "ready"
    samples: dict[str, list[float]] = {t: [] for t in trees}
    cpus: dict[str, list[float]] = {t: [] for t in trees}
    medians: dict[str, list[float]] = {t: [] for t in trees}
    for r in range(rounds):
        for spec in trees if r % 2 == 0 else trees[::-1]:
            p = procs[spec]
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write(f"run {seg}\n")
            p.stdin.flush()
            vals = [float(x) for x in p.stdout.readline().split()]
            cpus[spec].append(vals[0])
            samples[spec] += vals[1:]
            medians[spec].append(statistics.median(vals[1:]))
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.write("quit\n")
        p.stdin.flush()
        p.wait()
    first = trees[0]
    ref = statistics.median(samples[first])
    for spec in trees:
        m = statistics.median(samples[spec])
        wins = sum(a < b for a, b in zip(medians[spec], medians[first], strict=True))
        print(f"{spec:24s} median {m:7.1f} us ({m / ref:.3f}x)  client CPU/RT {statistics.median(cpus[spec]):6.1f} us"
              f"  segments faster than {first}: {wins}/{rounds}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        client()
    else:
        main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
