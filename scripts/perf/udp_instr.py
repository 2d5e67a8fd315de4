"""Instructions per udp round trip and per bulk datagram, counted by callgrind: figures that
load from other processes does not move, to compare trees side by side (this machine's
virtual CPU has no performance counters for ``perf stat``).

    python scripts/perf/udp_instr.py TREE [TREE...]      # each tree's own .venv, in turn

For each tree, ``rtt`` (two processes, as ``btl bench`` runs them: an echo server and a
client, 64 B messages one at a time, ``progress(timeout)`` with blocking waits, which sleep
in the kernel: no spin to count) and ``bulk`` (1 MiB messages at 65,000 B datagrams from one
transport to another in one process, ``progress(0)`` on each in turn) run under callgrind
twice, with N and 2N round trips (MiB); the difference of the totals over N is the cost of
one round trip (MiB) with start-up and warm-up cancelled out.  User space only: the kernel's
copies and system calls are not counted (callgrind runs the code on a synthetic CPU).  Wall
clock timers (ACK delay, probes) fire differently on callgrind's slower clock: the round trip
figure moves by about a percent between runs.

    python scripts/perf/udp_instr.py --run rtt N | busy N | bulk N   # one run (what callgrind runs)

(``busy``: the round trip with busy-poll waits; its spin adds instructions that depend on
timing, so compare its functions other than the wait's spin, e.g. with callgrind_annotate.)
"""

from __future__ import annotations

import glob
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

RTT_N = 1000
BULK_MIB = 16


def linger(t: Any) -> None:
    """Progress a moment (the last ACKs leave), then close."""
    end = time.monotonic() + 0.05
    while time.monotonic() < end:
        t.progress(0.01)
    t.close()


def _server(conn: Any, busy: bool) -> None:
    import btlcore

    t = btlcore.open("udp", host="127.0.0.1", busy_poll=busy)
    stop = [False]
    t.on(1, lambda peer, tag, data: t.send(peer, 1, bytes(data)))
    t.on(2, lambda peer, tag, data: stop.__setitem__(0, True))
    conn.send(t.address)
    while not stop[0]:
        t.progress(0.05)
    linger(t)


def rtt(n: int, busy: bool) -> None:
    import btlcore

    ctx = multiprocessing.get_context("fork")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_server, args=(there, busy))
    proc.start()
    t = btlcore.open("udp", host="127.0.0.1", busy_poll=busy)
    peer = t.connect(here.recv())
    got = [0]
    t.on(1, lambda p, tag, data: got.__setitem__(0, got[0] + 1))
    msg = bytes(64)
    for i in range(n):
        t.send(peer, 1, msg)
        while got[0] <= i:
            t.progress(0.05)
    t.send(peer, 2, b"stop")
    linger(t)
    proc.join()


def bulk(mib: int, mtu: int) -> None:
    import btlcore

    a = btlcore.open("udp", host="127.0.0.1", mtu=mtu)
    b = btlcore.open("udp", host="127.0.0.1", mtu=mtu)
    peer = a.connect(b.address)
    got = [0]
    b.on(1, lambda p, tag, data: got.__setitem__(0, got[0] + len(data)))
    msg = bytes(1 << 20)

    def move(count: int) -> None:
        want = got[0] + count * len(msg)
        for _ in range(count):
            a.send(peer, 1, msg)
        while got[0] < want:
            a.progress(0)
            b.progress(0)
        while a.stats()["num_msgs_completed"] < sent[0] + count:
            a.progress(0)
            b.progress(0)
        sent[0] += count

    sent = [0]
    for _ in range(mib // 4):  # (4 MiB in flight at most: the send buffer holds 16)
        move(4)
    a.close()
    b.close()


def total(path: str) -> int:
    """The instruction total of one callgrind output file."""
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise ValueError(f"no totals in {path}")


def measure(tree: str, what: str, n: int) -> list[int]:
    """Each process's instructions for one run under callgrind (the client's first)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.%p",
                        os.path.join(tree, ".venv", "bin", "python"), os.path.abspath(__file__), "--run",
                        what, str(n)], cwd=tree, check=True, capture_output=True)
        files = sorted(glob.glob(f"{tmp}/cg.*"), key=lambda p: int(p.rpartition(".")[2]))
        return [total(p) for p in files]


def main(trees: list[str]) -> None:
    for what, n, unit in (("rtt", RTT_N, "round trip"), ("bulk", BULK_MIB, "MiB")):
        for tree in trees:
            one, two = measure(tree, what, n), measure(tree, what, 2 * n)
            per = [(b - a) / n for a, b in zip(one, two, strict=True)]
            parts = " + ".join(f"{p:,.0f}" for p in per)
            print(f"{what:4s} {tree:24s} {sum(per):12,.0f} instructions per {unit} ({parts})", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        if sys.argv[2] in ("rtt", "busy"):
            rtt(int(sys.argv[3]), sys.argv[2] == "busy")
        else:
            bulk(int(sys.argv[3]), 65000)
    else:
        main(sys.argv[1:] or ["."])
