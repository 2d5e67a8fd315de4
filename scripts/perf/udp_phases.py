"""Where a udp round trip's CPU goes, pass by pass: two udp transports in one process, busy
polling, 64 B echo; the median nanoseconds of each kind of call.

    .venv/bin/python scripts/perf/udp_phases.py [ROUNDS]

``send`` is the client's send(); ``b_active`` the echo side's pass that receives and replies,
``b_idle`` its next pass; ``a_active`` the client's pass that receives the reply, ``a_idle``
its pass that sends the request.  Both ends in one process: no scheduler between them, so
the figures move little with machine load.  Run from the repository root of each tree to
compare, alternating."""

import statistics
import sys
import time

import btlcore

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
a = btlcore.open("udp", bind="127.0.0.1:0", busy_poll=True, seed=1)
b = btlcore.open("udp", bind="127.0.0.1:0", busy_poll=True, seed=2)
got = [0]
b.on(1, lambda peer, tag, data: b.send(peer, 1, bytes(data)))
a.on(1, lambda peer, tag, data: got.__setitem__(0, got[0] + 1))
pb = a.connect(b.address)
msg = b"x" * 64
pc = time.perf_counter_ns
times: dict[str, list[int]] = {"send": [], "b_active": [], "b_idle": [], "a_active": [], "a_idle": []}


def exchange(n: int, keep: bool) -> None:
    for _ in range(n):
        want = got[0] + 1
        t0 = pc()
        a.send(pb, 1, msg)
        t1 = pc()
        if keep:
            times["send"].append(t1 - t0)
        while got[0] < want:
            t0 = pc()
            nb = b.progress(0)
            t1 = pc()
            na = a.progress(0)
            t2 = pc()
            if keep:
                times["b_active" if nb else "b_idle"].append(t1 - t0)
                times["a_active" if na else "a_idle"].append(t2 - t1)


exchange(3000, False)
exchange(rounds, True)
medians = {k: statistics.median(v) for k, v in times.items() if v}
print(" ".join(f"{k}={v:.0f}" for k, v in medians.items()), f"sum={sum(medians.values()) / 1000:.1f}us")
a.close()
b.close()
