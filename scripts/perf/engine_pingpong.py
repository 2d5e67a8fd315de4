"""Engine-only ping-pong, no device: median ns per Engine.receive_datagram of a message
whose piggy-backed ACK acknowledges the one it answers.

    .venv/bin/python scripts/perf/engine_pingpong.py SIZE ITERS

Run from the repository root; compare trees side by side."""
import os
import statistics
import sys
import time

from btlcore import Config
from btlcore.protocol.events import MessageReceived
from btlcore.testing.enginepair import EnginePair

size = int(sys.argv[1]) if len(sys.argv) > 1 else 64
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
# cc=aimd, the default of the trees before bbr (CC=bbr to measure bbr's per-ACK cost beside)
net = EnginePair(Config(**({"cc": os.environ.get("CC", "aimd")} if "cc" in Config.names() else {})),
                 mtu=9000, priority_mtu=9000, crc=True)
net.handshake()
a, b = net.a, net.b
pa, pb = net.pa, net.pb
msg = bytes(size)
now = net.now
pc = time.perf_counter_ns
times = []
for _ in range(iters):
    now += 1e-5
    a.send(pa, 1, msg, None, now)
    out = a.datagrams_to_send(now)
    for _, _, d in out:
        d = bytes(d) if not isinstance(d, list) else b"".join(d)
        t0 = pc()
        b.receive_datagram(d, None, now)
        t1 = pc()
        times.append(t1 - t0)
    ev = b.take_events()
    assert ev and type(ev[-1]) is MessageReceived, ev
    now += 1e-5
    b.send(pb, 1, msg, None, now)
    out = b.datagrams_to_send(now)
    for _, _, d in out:
        d = bytes(d) if not isinstance(d, list) else b"".join(d)
        t0 = pc()
        a.receive_datagram(d, None, now)
        t1 = pc()
        times.append(t1 - t0)
    a.take_events()
times = times[len(times) // 10:]
print(f"{statistics.median(times):.0f}")
