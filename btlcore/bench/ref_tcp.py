"""Reference: kernel TCP on loopback.

* Stream: the sender writes 1 MiB buffers (``sendall``) for a fixed time on a fresh connection
  per trial, then shuts down; the receiver reads into a 1 MiB buffer until EOF.  Goodput is
  bytes over the span from the first byte read to EOF.
* Ping-pong with TCP_NODELAY: 64 B or 8 KiB to an echo server and back, reading exactly the
  message length; blocking sockets, or both sides busy-polling non-blocking ones.  A trial's
  figure is its median round trip (mean and p99 kept beside it).
"""

from __future__ import annotations

import socket
import time
from typing import Any

from .harness import LOOPBACK_V4, Result, add_samples, loopback, measured, rtt_extras, run_pair, wait_msg
from .profiles import Profile

SECTION = "tcp"
CHUNK = 1 << 20


def _listener(host: str) -> socket.socket:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    ls = socket.socket(fam, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((loopback(host), 0))
    ls.listen(8)
    return ls


def _connect(host: str, port: int) -> socket.socket:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.connect((loopback(host), port))
    return s


# -- stream ---------------------------------------------------------------------------------

def stream_receiver(ctl: Any, host: str = LOOPBACK_V4) -> None:
    ls = _listener(host)
    ctl.send(ls.getsockname()[1])
    buf = bytearray(CHUNK)
    pc = time.perf_counter
    while True:
        msg = wait_msg(ctl, 60.0)
        if msg == "stop":
            break
        conn, _ = ls.accept()
        recv_into = conn.recv_into
        n = recv_into(buf)
        t0 = pc()
        first, total = n, n
        while n:
            n = recv_into(buf)
            total += n
        span = pc() - t0
        conn.close()
        ctl.send(((total - first) / span if span > 0 else 0.0, total))
    ls.close()


def stream_sender(ctl: Any, seconds: float, trials: int, warmup: int, host: str = LOOPBACK_V4) -> list[float]:
    port = wait_msg(ctl)
    payload = bytes(CHUNK)
    pc = time.perf_counter
    out: list[float] = []
    for i in range(warmup + trials):
        ctl.send("trial")
        s = _connect(host, port)
        sendall = s.sendall
        end = pc() + seconds
        sent = 0
        while pc() < end and sent < (64 << 30):
            sendall(payload)
            sent += CHUNK
        s.shutdown(socket.SHUT_WR)
        goodput, total = wait_msg(ctl, 30.0)
        s.close()
        if total != sent:
            raise RuntimeError(f"TCP stream lost bytes: sent {sent}, received {total}")
        if i >= warmup:
            out.append(goodput)
    ctl.send("stop")
    return out


def stream(profile: Profile, host: str = LOOPBACK_V4) -> Result:
    _, r = run_pair(stream_receiver, stream_sender, server_kw={"host": host},
                    client_kw={"seconds": profile.stream_seconds, "trials": profile.trials,
                               "warmup": profile.warmup, "host": host},
                    deadline=profile.deadline)
    return measured("ref.tcp_stream", SECTION, "kernel TCP stream, 1 MiB sends", "B/s", r, send_size=CHUNK)


# -- ping-pong ------------------------------------------------------------------------------

def _recv_exact(recv_into: Any, mv: memoryview, size: int, busy: bool) -> int:
    got = 0
    while got < size:
        if busy:
            try:
                n = recv_into(mv[got:size])
            except BlockingIOError:
                continue
        else:
            n = recv_into(mv[got:size])
        if not n:
            return got
        got += n
    return got


def echo_server(ctl: Any, size: int, busy: bool, host: str = LOOPBACK_V4) -> int:
    ls = _listener(host)
    ctl.send(ls.getsockname()[1])
    conn, _ = ls.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if busy:
        conn.setblocking(False)
    buf = bytearray(size)
    mv = memoryview(buf)
    recv_into, send = conn.recv_into, conn.send
    echoed = 0
    while True:
        if _recv_exact(recv_into, mv, size, busy) < size:
            break  # EOF: the client is done
        sent = 0
        while sent < size:
            try:
                sent += send(mv[sent:])
            except BlockingIOError:
                pass
        echoed += 1
    conn.close()
    ls.close()
    return echoed


def pingpong_client(ctl: Any, size: int, busy: bool, seconds: float, max_iters: int, trials: int,
                    warmup: int, host: str = LOOPBACK_V4) -> dict[str, list[float]]:
    port = wait_msg(ctl)
    s = _connect(host, port)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if busy:
        s.setblocking(False)
    payload = memoryview(bytes(size))
    buf = bytearray(size)
    mv = memoryview(buf)
    send, recv_into = s.send, s.recv_into
    pc = time.perf_counter
    out: dict[str, list[float]] = {"median": [], "mean": [], "p99": []}
    for i in range(warmup + trials):
        samples: list[float] = []
        end = pc() + seconds
        while len(samples) < max_iters:
            t0 = pc()
            sent = 0
            while sent < size:
                try:
                    sent += send(payload[sent:])
                except BlockingIOError:
                    pass
            if _recv_exact(recv_into, mv, size, busy) != size:
                raise RuntimeError("the echo server closed the connection")
            t1 = pc()
            samples.append(t1 - t0)
            if t1 >= end:
                break
        if i >= warmup:
            add_samples(out, samples)
    s.close()
    return out


def pingpong(profile: Profile, size: int, busy: bool, host: str = LOOPBACK_V4) -> Result:
    mode = "busy" if busy else "blocking"
    _, r = run_pair(echo_server, pingpong_client, server_kw={"size": size, "busy": busy, "host": host},
                    client_kw={"size": size, "busy": busy, "seconds": profile.rtt_seconds,
                               "max_iters": profile.rtt_max_iters, "trials": profile.trials,
                               "warmup": profile.warmup, "host": host},
                    deadline=profile.deadline)
    return measured(f"ref.tcp_rtt.{size}.{mode}", SECTION, f"TCP_NODELAY ping-pong {size} B, {mode}", "s",
                    r["median"], better="lower", size=size, mode=mode, **rtt_extras(r))
