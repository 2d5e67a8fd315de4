"""Where a busy udp round trip's passes spend their time, device against the rest: two udp
transports in one process (as ``udp_phases.py``), 64 B echo, with the pass's device calls
(``poll_recv_from``, ``post_send_many``) wrapped in timers; median nanoseconds per round trip
of each part, and the system calls of the round trip counted by kind.

    .venv/bin/python scripts/perf/udp_pass_parts.py [ROUNDS [TIMEOUT]]

``recv``/``send``: inside the device's receive and send calls (system calls included);
``rest``: everything else of the passes (the engine, the pass itself, the handlers).  The
timer wrappers add about 0.1 us per call to ``rest``.  Run from each tree's root to compare,
alternating."""

import statistics
import sys
import time
from typing import Any

import btlcore

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
# progress(TIMEOUT): 0 runs the plain pass; a tiny one (1e-9) the bench's busy path, the
# transport's wait first (its spin then finds the peer's datagram already there, or nothing)
TIMEOUT = float(sys.argv[2]) if len(sys.argv) > 2 else 1e-9
SIZE = 64
a = btlcore.open("udp", bind="127.0.0.1:0", busy_poll=True, seed=1)
b = btlcore.open("udp", bind="127.0.0.1:0", busy_poll=True, seed=2)
got = [0]
b.on(1, lambda peer, tag, data: b.send(peer, 1, bytes(data)))
a.on(1, lambda peer, tag, data: got.__setitem__(0, got[0] + 1))
pb = a.connect(b.address)
msg = b"x" * SIZE
pc = time.perf_counter_ns
acc = {"recv": 0, "send": 0}
calls = {"recv": 0, "send": 0}


def timed(name: str, fn: Any) -> Any:
    def wrapper(*args: Any) -> Any:
        t0 = pc()
        try:
            return fn(*args)
        finally:
            acc[name] += pc() - t0
            calls[name] += 1
    return wrapper


for t in (a, b):
    pg = t._progress  # noqa: SLF001  (a measuring script: the pass's device slots)
    pg.poll_from = timed("recv", pg.poll_from)
    if pg.many is not None:
        pg.many = timed("send", pg.many)
    pg.post = timed("send", pg.post)

parts: dict[str, list[int]] = {"total": [], "recv": [], "send": [], "rest": []}
ncalls: dict[str, list[int]] = {"recv": [], "send": []}


def exchange(n: int, keep: bool) -> None:
    for _ in range(n):
        want = got[0] + 1
        for k in acc:
            acc[k] = calls[k] = 0
        t0 = pc()
        a.send(pb, 1, msg)
        while got[0] < want:
            b.progress(TIMEOUT)
            a.progress(TIMEOUT)
        total = pc() - t0
        if keep:
            parts["total"].append(total)
            parts["recv"].append(acc["recv"])
            parts["send"].append(acc["send"])
            parts["rest"].append(total - acc["recv"] - acc["send"])
            ncalls["recv"].append(calls["recv"])
            ncalls["send"].append(calls["send"])


exchange(3000, False)
exchange(rounds, True)
print(" ".join(f"{k}={statistics.median(v) / 1000:.2f}us" for k, v in parts.items()),
      " calls/RT: " + " ".join(f"{k}={statistics.mean(v):.2f}" for k, v in ncalls.items()))
stats = {t: t.device.device.stats() for t in (a, b)}  # (DeviceOps.device: the UdpDevice)
print("datagrams per RT: tx", sum(s["tx_datagrams"] for s in stats.values()) / (rounds + 3000 + 1))
a.close()
b.close()
