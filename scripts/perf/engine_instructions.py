"""Instructions per engine receive, both builds, under callgrind: the figures of
``engine_pingpong.py`` (64 B, per receive_datagram) and ``engine_bulk_rx.py`` (batch,
8972 B segments, per segment) as instruction counts, which load on the shared cores does
not move (wall-clock figures drift by 30% from run to run).  ``send`` and ``deadline``: the
same ping-pong, counting its ``datagrams_to_send`` calls (one message each) and the
``next_deadline`` calls a driver makes after each send pass and each receive instead.
``lossy0``, ``lossy1``, ``lossy5``, ``lossy10``: a bulk receiver as on the veth pair
(1500-byte datagrams in reused buffers, as the udp device hands them, bbr, 100 us each way)
with 0/1/5/10% of the data lost at random (seeded): everything the receiving engine does in
its passes (one where datagrams arrive or its timer is due: receive, timers, events, its ACKs,
the next deadline) per data segment received.  ``sender0``, ``sender10``: the same transfer's
sender instead (its timers, send passes, ACK receives and next deadlines) per data segment it
sent, resends included: the side whose core is full on the veth pair at 1 Gb/s.

    .venv/bin/python scripts/perf/engine_instructions.py [SCENARIO ...] [--pure-only|--compiled-only]

Each scenario runs in a fresh process under ``valgrind --tool=callgrind``, collecting only
inside the counted calls: they go through ``operator.call`` (a C function nothing else on
the path calls), and ``--toggle-collect=_operator_call`` counts what runs inside it.  With
``--child SCENARIO`` it is that process.  Run from the repository root."""

import operator
import os
import re
import subprocess
import sys
import tempfile
from typing import Any

#: scenario: (iterations, what the count is per)
SCENARIOS = {"pingpong": (2000, "receive (64 B, piggy-backed ACK)"),
             "send": (2000, "datagrams_to_send (one 64 B message)"),
             "deadline": (2000, "next_deadline (after a send pass or a receive, 64 B ping-pong)"),
             "bulk": (60, "data segment received (8972 B, batch)"),
             **{f"lossy{p}": (10, f"data segment received (1500 B, reused buffers, {p}% lost)")
                for p in (0, 1, 5, 10)},
             **{f"sender{p}": (10, f"data segment sent (1500 B, bbr, {p}% lost: the sender's passes)")
                for p in (0, 10)}}


def deadline(engine: Any, counted: bool) -> None:
    """A driver's look at the engine's next deadline (counted: through operator.call)."""
    if counted:
        operator.call(engine.next_deadline)
    else:
        engine.next_deadline()


def pingpong(iters: int, part: str = "pingpong") -> int:
    from btlcore import Config
    from btlcore.protocol.events import MessageReceived
    from btlcore.testing.enginepair import EnginePair
    net = EnginePair(Config(cc="aimd"), mtu=9000, priority_mtu=9000, crc=True)
    net.handshake()
    a, b, pa, pb, now = net.a, net.b, net.pa, net.pb, net.now
    msg = bytes(64)
    call = operator.call
    n = 0
    for i in range(iters + 200):  # (the first 200: warm-up, not counted)
        for x, y, px in ((a, b, pa), (b, a, pb)):
            now += 1e-5
            x.send(px, 1, msg, None, now)
            counted = i >= 200
            if counted and part == "send":
                out = call(x.datagrams_to_send, now)
                n += 1
            else:
                out = x.datagrams_to_send(now)
            if part == "deadline":  # (the sender's peer changed: a segment went)
                deadline(x, counted)
            for _, _, d in out:
                d = bytes(d) if not isinstance(d, list) else b"".join(d)
                if counted and part == "pingpong":
                    call(y.receive_datagram, d, None, now)
                    n += 1
                else:
                    y.receive_datagram(d, None, now)
            if part == "deadline":  # (the receiver's peer changed: it was ACKed, and owes an ACK)
                deadline(y, counted)
                n += 2 if counted else 0
            ev = y.take_events()
            assert ev and type(ev[-1]) is MessageReceived, ev
    return n


def bulk(nmsgs: int) -> int:
    from btlcore import Config
    from btlcore.protocol.events import MessageReceived
    from btlcore.testing.enginepair import EnginePair
    net = EnginePair(Config(send_buffer=1 << 40, cc="aimd"), mtu=9000, priority_mtu=9000, crc=True)
    net.handshake()
    a, b, pa, now = net.a, net.b, net.pa, net.now
    msg = bytes(1 << 20)
    for _ in range(nmsgs + 10):
        a.send(pa, 1, msg, None, now)
    call = operator.call
    got = n = 0
    while got < nmsgs + 10:
        now += 1e-5
        out = [bytes(d) if not isinstance(d, list) else b"".join(d) for _, _, d in a.datagrams_to_send(now)]
        if out:
            if got >= 10:  # (the first 10 messages: warm-up, not counted)
                call(b.receive_datagrams, out, now)
                n += len(out)
            else:
                b.receive_datagrams(out, now)
        got += sum(1 for e in b.take_events() if type(e) is MessageReceived)
        now += 1e-5
        if (t := b.next_deadline()) is not None and t <= now:
            b.handle_timer(now)
        for _, _, d in b.datagrams_to_send(now):
            a.receive_datagram(bytes(d), None, now)
        a.take_events()
        if (t := a.next_deadline()) is not None and t <= now:
            a.handle_timer(now)
    return n


def lossy(nmsgs: int, loss: float, sender: bool = False) -> int:
    """The receiver's side of a bulk transfer of 1 MiB messages over a lossy 100 us path
    (``sender``: the sender's side instead: its timers, send passes, ACK receives and next
    deadlines, per data segment it sent, resends included)."""
    import random

    from btlcore import Config
    from btlcore.protocol.events import MessageReceived
    from btlcore.testing.enginepair import EnginePair
    net = EnginePair(Config(send_buffer=1 << 40, cc="bbr"), mtu=1500, priority_mtu=1500, crc=True)
    net.handshake()
    a, b, pa, now = net.a, net.b, net.pa, net.now
    rng = random.Random(1)
    msg = bytes(1 << 20)
    warm = 2  # messages delivered before counting starts
    for _ in range(nmsgs + warm):
        a.send(pa, 1, msg, None, now)
    got = n = 0
    data: list[tuple[float, bytes]] = []  # (arrival time, datagram): 100 us each way
    acks: list[tuple[float, bytes]] = []
    wake: float | None = None  # the receiver's next timer
    call = operator.call
    counting = cr = ct = False  # counting: past the warm-up; cr, ct: the receiver's, the sender's calls

    while got < nmsgs + warm:
        now += 1e-5
        counting = got >= warm
        cr, ct = counting and not sender, counting and sender
        if (t := call(a.next_deadline) if ct else a.next_deadline()) is not None and t <= now:
            call(a.handle_timer, now) if ct else a.handle_timer(now)
        for _, _, d in call(a.datagrams_to_send, now) if ct else a.datagrams_to_send(now):
            n += ct
            if rng.random() >= loss:
                data.append((now + 1e-4, bytes(d) if not isinstance(d, list) else b"".join(d)))
        due = [memoryview(bytearray(d)) for t, d in data if t <= now]
        data = [(t, d) for t, d in data if t > now]
        # a pass of the receiver's (as Transport.progress: on input or at its timer only)
        if due or (wake is not None and wake <= now):
            if due:
                call(b.receive_datagrams, due, now) if cr else b.receive_datagrams(due, now)
                n += len(due) if cr else 0
            if wake is not None and wake <= now:  # (input never brings a timer forward)
                call(b.handle_timer, now) if cr else b.handle_timer(now)
            events = call(b.take_events) if cr else b.take_events()
            got += sum(1 for e in events if type(e) is MessageReceived)
            out = call(b.datagrams_to_send, now) if cr else b.datagrams_to_send(now)
            acks.extend((now + 1e-4, bytes(d)) for _, _, d in out)
            wake = call(b.next_deadline) if cr else b.next_deadline()
        for _, d in (x for x in acks if x[0] <= now):
            call(a.receive_datagram, d, None, now) if ct else a.receive_datagram(d, None, now)
        acks = [x for x in acks if x[0] > now]
        call(a.take_events) if ct else a.take_events()
    return n


def measure(scenario: str, pure: bool) -> tuple[int, int]:
    """(instructions inside the receive calls, receives) of one run under callgrind."""
    env = {k: v for k, v in os.environ.items() if k != "BTL_PURE"}
    if pure:
        env["BTL_PURE"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                              "--toggle-collect=_operator_call", sys.executable, "-W", "ignore",
                              __file__, "--child", scenario],
                             env=env, check=True, capture_output=True, text=True)
        n = int(run.stdout.split()[-1])
        with open(out) as f:
            total = re.search(r"^summary:\s+(\d+)", f.read(), re.M)
    assert total is not None, "no summary line in callgrind's output"
    return int(total.group(1)), n


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        iters = SCENARIOS[argv[1]][0]
        name = argv[1]
        print(bulk(iters) if name == "bulk" else lossy(iters, int(name[5:]) / 100)
              if name.startswith("lossy") else lossy(iters, int(name[6:]) / 100, sender=True)
              if name.startswith("sender") else pingpong(iters, name))
        return
    builds = [b for b in (False, True) if not (b and "--compiled-only" in argv or not b and "--pure-only" in argv)]
    names = [a for a in argv if not a.startswith("--")] or list(SCENARIOS)
    for name in names:
        got = {}
        for pure in builds:
            instr, n = measure(name, pure)
            got[pure] = instr / n
            print(f"{name} {'pure' if pure else 'compiled'}: {instr / n:,.0f} instructions per "
                  f"{SCENARIOS[name][1]} (n={n})", flush=True)
        if len(got) == 2:
            print(f"{name}: pure / compiled = {got[True] / got[False]:.2f}x", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
