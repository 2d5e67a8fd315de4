"""Engine-only bulk, no device: mean ns per data segment in the receiving engine.

    .venv/bin/python scripts/perf/engine_bulk_rx.py single|batch MTU NMSGS

``single``: Engine.receive_datagram per datagram; ``batch``: Engine.receive_datagrams per
send pass.  Environment: CRC=0 (no CRC32C), REUSE=1 (datagrams as views of buffers, as a
device that reuses them: chunks are copied), ACKT=1 (print the sender's ACK handling per
data segment instead).  Run from the repository root; compare trees side by side."""
import os
import sys
import time

from btlcore import Config
from btlcore.protocol.events import MessageReceived
from btlcore.testing.enginepair import EnginePair

mode = sys.argv[1]
mtu = int(sys.argv[2])
nmsgs = int(sys.argv[3])
# every message queued at once: a send buffer that takes them all (trees before it had none);
# the sender unpaced (cc=aimd, the default of the trees before bbr; CC=bbr to measure it): a
# paced sender hands over a datagram or two per step, and the figure would then be per-call
# overhead, not a segment's receive cost
opts = {"cc": os.environ.get("CC", "aimd")} if "cc" in Config.names() else {}
cfg = Config(send_buffer=1 << 40, **opts) if "send_buffer" in Config.names() else Config()
net = EnginePair(cfg, mtu=mtu, priority_mtu=min(mtu, 9000), crc=os.environ.get("CRC","1")=="1")
net.handshake()
a, b = net.a, net.b
pa, pb = net.pa, net.pb
msg = bytes(1 << 20)
now = net.now
pc = time.perf_counter_ns
rx_ns = nseg = ack_ns = 0
for _ in range(nmsgs):
    a.send(pa, 1, msg, None, now)
got = 0
while got < nmsgs:
    now += 1e-5
    out = [bytes(d) if not isinstance(d, list) else b"".join(d) for _, _, d in a.datagrams_to_send(now)]
    if os.environ.get("REUSE") == "1":
        out = [memoryview(bytearray(d)) for d in out]
    if out:
        if mode == "batch" and hasattr(b, "receive_datagrams"):
            t0 = pc()
            b.receive_datagrams(out, now)
            rx_ns += pc() - t0
        else:
            t0 = pc()
            for d in out:
                b.receive_datagram(d, None, now)
            rx_ns += pc() - t0
        nseg += len(out)
    got += sum(1 for e in b.take_events() if type(e) is MessageReceived)
    now += 1e-5
    if (t := b.next_deadline()) is not None and t <= now:
        b.handle_timer(now)
    for _, _, d in b.datagrams_to_send(now):
        d = bytes(d)
        t0 = pc()
        a.receive_datagram(d, None, now)
        ack_ns += pc() - t0
    a.take_events()
    if (t := a.next_deadline()) is not None and t <= now:
        a.handle_timer(now)
print(f"{(ack_ns if os.environ.get('ACKT') else rx_ns) / nseg:.0f}")
