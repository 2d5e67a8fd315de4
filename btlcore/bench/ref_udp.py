"""Reference: raw UDP on loopback, no reliability.

* Blast: one process sends datagrams of one size as fast as it can for a fixed time; the other
  drains them with ``recv_into`` into one buffer.  Goodput is what *arrived*, over the span from
  the first arrival to the last; the loss is reported beside it (PERF-NOTES: loopback loses only
  when the receiver falls behind).  The receive buffer is 64 MiB (SO_RCVBUFFORCE when allowed,
  else SO_RCVBUF, capped by net.core.rmem_max; the granted size is reported).
* Ping-pong: one message of 64 B or 8 KiB to an echo server and back, blocking sockets or both
  sides busy-polling non-blocking ones.  A trial's figure is its median round trip (mean
  and p99 kept beside it).
"""

from __future__ import annotations

import select
import socket
import statistics
import time
from typing import Any

from .harness import LOOPBACK_V4, Result, add_samples, loopback, measured, rtt_extras, run_pair, wait_msg
from .profiles import Profile

SECTION = "raw_udp"
RCVBUF = 64 << 20
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)


def set_buffers(sock: socket.socket, rcvbuf: int = 0, sndbuf: int = 0) -> tuple[int, int]:
    """Ask for large socket buffers; return what the kernel granted (it reports double)."""
    for size, force, plain in ((rcvbuf, SO_RCVBUFFORCE, socket.SO_RCVBUF),
                               (sndbuf, SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        if size:
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, size)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, plain, size)
    return (sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 2,
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 2)


def udp_socket(host: str = LOOPBACK_V4) -> socket.socket:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.socket(fam, socket.SOCK_DGRAM)


# -- blast ----------------------------------------------------------------------------------

def _drain(sock: socket.socket, buf: bytearray) -> None:
    try:
        while True:
            sock.recv_into(buf)
    except BlockingIOError:
        pass


def blast_receiver(ctl: Any, size: int, rcvbuf: int, host: str = LOOPBACK_V4) -> None:
    s = udp_socket(host)
    granted, _ = set_buffers(s, rcvbuf=rcvbuf)
    s.bind((loopback(host), 0))
    s.setblocking(False)
    ctl.send((s.getsockname()[1], granted))
    buf = bytearray(max(size, 65536))
    recv_into = s.recv_into
    pc = time.perf_counter
    while True:
        msg = wait_msg(ctl, 60.0)
        if msg == "stop":
            break
        _drain(s, buf)
        ctl.send("ready")
        c0 = time.process_time()
        count = nbytes = first_n = 0
        t_first = t_last = 0.0
        done = None
        while True:
            try:
                while True:
                    n = recv_into(buf)
                    t_last = pc()
                    if not count:
                        t_first, first_n = t_last, n
                    count += 1
                    nbytes += n
            except BlockingIOError:
                pass
            if done is not None:
                # the sender has finished: stop once nothing more arrives for 20 ms
                if not select.select([s], [], [], 0.02)[0]:
                    break
                continue
            r = select.select([s, ctl], [], [], 1.0)[0]
            if ctl in r:
                done = ctl.recv()
        span = t_last - t_first
        goodput = (nbytes - first_n) / span if span > 0 else 0.0
        ctl.send((count, nbytes, goodput, span, (time.process_time() - c0) / count if count else 0.0))
    s.close()


def blast_sender(ctl: Any, size: int, seconds: float, max_count: int, trials: int, warmup: int,
                 host: str = LOOPBACK_V4) -> dict[str, Any]:
    port, granted = wait_msg(ctl)
    s = udp_socket(host)
    s.connect((loopback(host), port))
    payload = bytes(size)
    send = s.send
    pc = time.perf_counter
    goodput: list[float] = []
    loss: list[float] = []
    send_rate: list[float] = []
    send_cpu: list[float] = []
    recv_cpu: list[float] = []
    for i in range(warmup + trials):
        ctl.send("trial")
        wait_msg(ctl)
        sent = failed = 0
        c0 = time.process_time()
        t0 = pc()
        end = t0 + seconds
        while sent < max_count:
            for _ in range(32):
                try:
                    send(payload)
                except OSError:  # ENOBUFS / EAGAIN: the datagram was not sent
                    failed += 1
            sent += 32
            if pc() >= end:
                break
        t1 = pc()
        cpu = time.process_time() - c0
        sent -= failed
        ctl.send(("done", sent))
        count, nbytes, gput, span, rcpu = wait_msg(ctl, 30.0)
        if i >= warmup:
            send_cpu.append(cpu / sent if sent else 0.0)
            recv_cpu.append(rcpu)
            goodput.append(gput)
            loss.append(1.0 - count / sent if sent else 0.0)
            send_rate.append(sent * size / (t1 - t0))
    ctl.send("stop")
    s.close()
    return {"goodput": goodput, "loss": loss, "send_rate": send_rate, "rcvbuf": granted,
            "send_cpu": send_cpu, "recv_cpu": recv_cpu}


def blast(profile: Profile, size: int, host: str = LOOPBACK_V4) -> Result:
    _, r = run_pair(blast_receiver, blast_sender,
                    server_kw={"size": size, "rcvbuf": RCVBUF, "host": host},
                    client_kw={"size": size, "seconds": profile.blast_seconds,
                               "max_count": profile.blast_max_datagrams, "trials": profile.trials,
                               "warmup": profile.warmup, "host": host},
                    deadline=profile.deadline)
    return measured(f"ref.udp_blast.{size}", SECTION, f"raw UDP blast, {size} B datagrams", "B/s",
                    r["goodput"], loss=r["loss"], loss_median=sorted(r["loss"])[len(r["loss"]) // 2],
                    send_rate=r["send_rate"], rcvbuf=r["rcvbuf"], datagram=size,
                    send_cpu_per_datagram=statistics.median(r["send_cpu"]),
                    recv_cpu_per_datagram=statistics.median(r["recv_cpu"]))


# -- ping-pong ------------------------------------------------------------------------------

def echo_server(ctl: Any, busy: bool, host: str = LOOPBACK_V4) -> int:
    s = udp_socket(host)
    s.bind((loopback(host), 0))
    ctl.send(s.getsockname()[1])
    buf = bytearray(65536)
    mv = memoryview(buf)
    recvfrom_into, sendto = s.recvfrom_into, s.sendto
    echoed = 0
    if busy:
        s.setblocking(False)
    while True:
        if busy:
            while True:
                try:
                    n, addr = recvfrom_into(buf)
                    break
                except BlockingIOError:
                    pass
        else:
            n, addr = recvfrom_into(buf)
        if n == 0:  # the client's stop datagram
            break
        sendto(mv[:n], addr)
        echoed += 1
    s.close()
    return echoed


def pingpong_client(ctl: Any, size: int, busy: bool, seconds: float, max_iters: int, trials: int,
                    warmup: int, host: str = LOOPBACK_V4) -> dict[str, list[float]]:
    port = wait_msg(ctl)
    s = udp_socket(host)
    s.connect((loopback(host), port))
    payload = bytes(size)
    buf = bytearray(65536)
    send, recv_into = s.send, s.recv_into
    pc = time.perf_counter
    if busy:
        s.setblocking(False)
    out: dict[str, list[float]] = {"median": [], "mean": [], "p99": []}
    for i in range(warmup + trials):
        samples: list[float] = []
        end = pc() + seconds
        while len(samples) < max_iters:
            t0 = pc()
            send(payload)
            if busy:
                while True:
                    try:
                        got = recv_into(buf)
                        break
                    except BlockingIOError:
                        pass
            else:
                got = recv_into(buf)
            t1 = pc()
            if got != size:
                raise RuntimeError(f"echo returned {got} B, sent {size} B")
            samples.append(t1 - t0)
            if t1 >= end:
                break
        if i >= warmup:
            add_samples(out, samples)
    for _ in range(3):
        try:
            s.send(b"")
        except OSError:  # the server has gone: ICMP port unreachable
            break
    s.close()
    return out


def pingpong(profile: Profile, size: int, busy: bool, host: str = LOOPBACK_V4) -> Result:
    mode = "busy" if busy else "blocking"
    _, r = run_pair(echo_server, pingpong_client, server_kw={"busy": busy, "host": host},
                    client_kw={"size": size, "busy": busy, "seconds": profile.rtt_seconds,
                               "max_iters": profile.rtt_max_iters, "trials": profile.trials,
                               "warmup": profile.warmup, "host": host},
                    deadline=profile.deadline)
    return measured(f"ref.udp_rtt.{size}.{mode}", SECTION, f"UDP ping-pong {size} B, {mode}", "s",
                    r["median"], better="lower", size=size, mode=mode, **rtt_extras(r))
