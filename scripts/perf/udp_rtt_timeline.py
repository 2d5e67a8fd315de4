"""A busy udp round trip's timeline: two processes pinned to cores 0 and 1 (as the bench),
64 B echo, each end stamping ``perf_counter_ns`` (CLOCK_MONOTONIC, the same clock in both
processes) around its device calls; the median of each step, which adds up to the round trip.

    .venv/bin/python scripts/perf/udp_rtt_timeline.py [ROUNDS]

Steps: ``c.pre`` client send() to the device send; ``c.sendto`` the device send;
``s.detect`` from there to the server's read (its wait noticing, cross-core); ``s.read``;
``s.work`` read to the reply's device send (engine, handler, send pass); ``s.sendto``;
``c.detect``; ``c.read``; ``c.post`` read to progress() returning with the reply.  The
stamping wrappers add about 0.2 us to each step that holds one.  Run from each tree's root
to compare, alternating.  ``SIZE=8192`` for another message size; ``BLOCKING=1``."""

from __future__ import annotations

import bisect
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any

import btlcore

SIZE = int(os.environ.get("SIZE", "64"))
BUSY = os.environ.get("BLOCKING") != "1"
TIMEOUT = 0.05


def _stamp(t: btlcore.Transport, marks: dict[str, list[int]], names: tuple[str, str, str, str]) -> None:
    """Wrap the pass's receive and send calls: the stamps before and after each."""
    pg = t._progress  # noqa: SLF001  (a measuring script: the pass's device slots)
    pc = time.perf_counter_ns
    recv, many = pg.poll_from, pg.many
    assert recv is not None and many is not None

    def poll_from(budget: int) -> Any:
        t0 = pc()
        r = recv(budget)
        if r[0]:
            marks[names[0]].append(t0)
            marks[names[1]].append(pc())
        return r

    def post_many(items: Any) -> int:
        t0 = pc()
        n = many(items)
        marks[names[2]].append(t0)
        marks[names[3]].append(pc())
        return n

    pg.poll_from = poll_from
    pg.many = post_many


def _server(q: Any, out: Any) -> None:
    os.sched_setaffinity(0, {1})
    t = btlcore.open("udp", bind="127.0.0.1:0", busy_poll=BUSY, seed=2)
    stop = [False]
    marks: dict[str, list[int]] = {k: [] for k in ("r0", "r1", "s0", "s1")}
    t.on(1, lambda p, tag, d: t.send(p, 1, bytes(d)))
    t.on(2, lambda p, tag, d: stop.__setitem__(0, True))
    _stamp(t, marks, ("r0", "r1", "s0", "s1"))
    q.put(t.address)
    while not stop[0]:
        t.progress(TIMEOUT)
    t.flush(1.0)
    t.close()
    out.put(marks)


def main(rounds: int) -> None:
    q: Any = mp.Queue()
    out: Any = mp.Queue()
    p = mp.Process(target=_server, args=(q, out))
    p.start()
    os.sched_setaffinity(0, {0})
    t = btlcore.open("udp", bind="127.0.0.1:0", busy_poll=BUSY, seed=1)
    peer = t.connect(q.get())
    got = [0]
    t.on(1, lambda p_, tag, d: got.__setitem__(0, got[0] + 1))
    msg = bytes(SIZE)
    pc = time.perf_counter_ns
    warm = 2000
    for _ in range(warm):
        want = got[0] + 1
        t.send(peer, 1, msg)
        while got[0] < want:
            t.progress(TIMEOUT)
    marks: dict[str, list[int]] = {k: [] for k in ("r0", "r1", "s0", "s1")}
    _stamp(t, marks, ("r0", "r1", "s0", "s1"))
    starts: list[int] = []
    ends: list[int] = []
    for _ in range(rounds):
        want = got[0] + 1
        starts.append(pc())
        t.send(peer, 1, msg)
        while got[0] < want:
            t.progress(TIMEOUT)
        ends.append(pc())
    done: list[Any] = []
    t.send(peer, 2, b"stop", callback=done.append)
    while not done:
        t.progress(0.01)
    sm = out.get()
    p.join()
    t.close()
    steps: dict[str, list[int]] = {k: [] for k in ("c.pre", "c.sendto", "s.detect", "s.read", "s.work", "s.sendto",
                                                   "c.detect", "c.read", "c.post", "total")}
    # each round's stamps: the first of each kind after the step before it (a datagram is in
    # the peer's socket before the sendto returns: loopback delivers inside the call)
    for i in range(rounds):
        a = bisect.bisect_left(marks["s0"], starts[i])
        b = bisect.bisect_left(sm["r0"], marks["s0"][a]) if a < len(marks["s0"]) else len(sm["r0"])
        c = bisect.bisect_left(sm["s0"], sm["r1"][b]) if b < len(sm["r0"]) else len(sm["s0"])
        d = bisect.bisect_left(marks["r0"], sm["s0"][c]) if c < len(sm["s0"]) else len(marks["r0"])
        if d >= len(marks["r0"]) or marks["r1"][d] > ends[i]:
            continue
        c0, c1, sr0, sr1 = marks["s0"][a], marks["s1"][a], sm["r0"][b], sm["r1"][b]
        ss0, ss1, cr0, cr1 = sm["s0"][c], sm["s1"][c], marks["r0"][d], marks["r1"][d]
        for k, v in (("c.pre", c0 - starts[i]), ("c.sendto", c1 - c0), ("s.detect", sr0 - c1),
                     ("s.read", sr1 - sr0), ("s.work", ss0 - sr1), ("s.sendto", ss1 - ss0),
                     ("c.detect", cr0 - ss1), ("c.read", cr1 - cr0), ("c.post", ends[i] - cr1),
                     ("total", ends[i] - starts[i])):
            steps[k].append(v)
    med = {k: statistics.median(v) / 1000 for k, v in steps.items() if v}
    print(" ".join(f"{k}={v:.2f}" for k, v in med.items()), f"(us; {len(steps['total'])} of {rounds} matched;"
          f" sum of steps {sum(v for k, v in med.items() if k != 'total'):.1f})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
