"""Engine-only send side, no device: median ns per ``Engine.send`` + ``datagrams_to_send``
of one message (the sender's cost to queue it and cut its segments), per ``datagrams_to_send``
that carries one standalone ACK (the receiver's ack_pass), and per ``next_deadline()`` after
a send (the timer refresh the driver asks for).

    .venv/bin/python scripts/perf/engine_send.py SIZE ITERS

Prints ``send=NS ack=NS deadline=NS segs=N`` (segs: datagrams per message).  SIZE above the
MTU's payload (9000 B datagrams) is chunked: 65000 B is 8 segments.  Every message is
delivered and acknowledged before the next, so windows never close.  Run from the
repository root; compare trees side by side."""
import statistics
import sys
import time

from btlcore import Config
from btlcore.testing.enginepair import EnginePair

size = int(sys.argv[1]) if len(sys.argv) > 1 else 64
iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
net = EnginePair(Config(), mtu=9000, priority_mtu=9000, crc=True)
net.handshake()
a, b = net.a, net.b
pa = net.pa
msg = bytes(size)
now = net.now
pc = time.perf_counter_ns
send_ns: list[int] = []
ack_ns: list[int] = []
deadline_ns: list[int] = []
segs = 0
for _ in range(iters):
    now += 1e-5
    t0 = pc()
    a.send(pa, 1, msg, None, now)
    out = a.datagrams_to_send(now)
    t1 = pc()
    a.next_deadline()
    t2 = pc()
    send_ns.append(t1 - t0)
    deadline_ns.append(t2 - t1)
    segs = len(out)
    b.receive_datagrams([bytes(d) if not isinstance(d, list) else b"".join(d) for _, _, d in out], now)
    b.take_events()
    b.ack_now()  # the ACK owed, due at once: one standalone ACK in the next pass
    t0 = pc()
    acks = b.datagrams_to_send(now)
    t1 = pc()
    ack_ns.append(t1 - t0)
    for _, _, d in acks:
        a.receive_datagram(bytes(d), None, now)
    a.take_events()
    if (t := a.next_deadline()) is not None and t <= now:
        a.handle_timer(now)
    if (t := b.next_deadline()) is not None and t <= now:
        b.handle_timer(now)
skip = iters // 10
print(f"send={statistics.median(send_ns[skip:]):.0f} ack={statistics.median(ack_ns[skip:]):.0f} "
      f"deadline={statistics.median(deadline_ns[skip:]):.0f} segs={segs}")
