"""Per-datagram cost of the UDP device against the raw socket, on loopback, in one process.

``python -m btlcore_udp.selftest`` prints a table; :func:`measure` returns the
numbers (microseconds per datagram, medians of ``trials``) for scripts and notes.  Nothing
here asserts a speed: figures drift with the machine, so compare them side by side.

How: the sender posts ``count`` datagrams into a receiving socket with a receive buffer big
enough to hold them all (forced past rmem_max when we are root), timing the send loop;
then the receiver drains them, timing the receive loop.  Both are wall-clock times of a
single thread, which on an idle machine is its CPU time, syscalls included.
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from btlcore.device import Channel
from btlcore.registry import open_device

from ._sockets import SO_RCVBUFFORCE, UDP_SEGMENT, gso_supported

RCVBUF = 256 << 20


def _drain_raw(sock: socket.socket, buf: bytearray) -> int:
    n = 0
    recv_into = sock.recv_into
    while True:
        try:
            recv_into(buf)
        except BlockingIOError:
            return n
        n += 1


def _drain_poll(poll: Callable[[int], Sequence[Any]]) -> int:
    """Datagrams a device's bound ``poll_recv`` hands over until it has none left."""
    n = 0
    while True:
        got = poll(256)
        if not got:
            return n
        n += len(got)


def _send_each(send: Callable[[bytes, Any], Any], payload: bytes, dest: Any, count: int) -> list[Any]:
    """``count`` calls of a raw ``sendto``."""
    return [send(payload, dest) for _ in range(count)]


def _post_each(post: Callable[[Channel, Any, Any], bool], dest: Any, payload: bytes, count: int) -> list[bool]:
    """``count`` calls of the device's bound ``post_send``, as the core makes them."""
    return [post(Channel.DATA, dest, payload) for _ in range(count)]


def _sendmsg_runs(sock: socket.socket, runs: list[list[bytes]], cmsg: list[tuple[int, int, bytes]],
                  dest: Any) -> list[int]:
    """One GSO ``sendmsg`` per run of segments."""
    return [sock.sendmsg(r, cmsg, 0, dest) for r in runs]


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def _big_rcvbuf(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
    except OSError:
        pass


Record = Callable[[str, float, int], None]


def _raw_trial(record: Record, raw_tx: socket.socket, raw_rx: socket.socket, batch: list[bytes],
               have_gso: bool) -> None:
    """The raw socket's figures for one trial: ``sendto`` / ``recv_into`` each datagram,
    then (with GSO) one ``sendmsg`` per run of segments."""
    payload, size, count = batch[0], len(batch[0]), len(batch)
    raw_dest = raw_rx.getsockname()
    buf = bytearray(65536)
    secs, _ = _timed(partial(_send_each, raw_tx.sendto, payload, raw_dest, count))
    record(f"send.raw.{size}", secs, count)
    secs, got = _timed(lambda: _drain_raw(raw_rx, buf))
    record(f"recv.raw.{size}", secs, max(got, 1))
    if have_gso:
        per = min(64, 65507 // size)
        cmsg = [(socket.IPPROTO_UDP, UDP_SEGMENT, size.to_bytes(2, "little"))]
        runs = [batch[i:i + per] for i in range(0, count, per)]
        secs, _ = _timed(partial(_sendmsg_runs, raw_tx, runs, cmsg, raw_dest))
        record(f"send.raw_gso.{size}", secs, count)
        secs, got = _timed(lambda: _drain_raw(raw_rx, buf))
        record(f"recv.raw_after_gso.{size}", secs, max(got, 1))


def _gro_trial(record: Record, tx: Any, rx_gro: Any, batch: list[bytes]) -> None:
    """The GRO device's receive figures for one trial: after a GSO batch (glued), and after
    datagrams sent one by one (not glued)."""
    payload, size, count = batch[0], len(batch[0]), len(batch)
    gro_dest = tx.resolve(rx_gro.local_address())
    tx.device.post_send_batch(Channel.DATA, gro_dest, batch)
    drain_gro = partial(_drain_poll, rx_gro.poll_recv)
    secs, got = _timed(drain_gro)
    record(f"recv.device_gro_after_gso.{size}", secs, max(got, 1))
    for _ in range(count):
        tx.post_send(Channel.DATA, gro_dest, payload)
    secs, got = _timed(drain_gro)
    record(f"recv.device_gro_plain.{size}", secs, max(got, 1))


def measure(sizes: tuple[int, ...] = (1472, 8972), count: int = 2000, trials: int = 7,
            host: str = "127.0.0.1") -> dict[str, float]:
    """Microseconds per datagram for each method and size; keys like ``send.raw.1472``."""
    results: dict[str, list[float]] = {}

    def record(key: str, seconds: float, n: int) -> None:
        results.setdefault(key, []).append(seconds / n * 1e6)

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    tx = open_device("udp", {"host": host, "rcvbuf": RCVBUF, "gso": "auto"})
    rx = open_device("udp", {"host": host, "rcvbuf": RCVBUF})  # recvmmsg where libc has it
    rx_plain = open_device("udp", {"host": host, "rcvbuf": RCVBUF, "recvmmsg": "off"})
    try:
        rx_gro = open_device("udp", {"host": host, "rcvbuf": RCVBUF, "gro": True})
    except Exception:  # an old kernel: no GRO figures
        rx_gro = None
    raw_tx = socket.socket(family, socket.SOCK_DGRAM)
    raw_rx = socket.socket(family, socket.SOCK_DGRAM)
    try:
        raw_tx.bind((host, 0))
        raw_rx.bind((host, 0))
        raw_rx.setblocking(False)
        _big_rcvbuf(raw_rx)
        dest = tx.resolve(rx.local_address())
        have_gso = gso_supported(raw_tx) and tx.device.stats()["gso"]
        for size in sizes:
            payload = b"\xa5" * size
            batch = [payload] * count
            for _ in range(trials):
                _raw_trial(record, raw_tx, raw_rx, batch, have_gso)
                # the device, through the bound hook functions the core calls
                post = tx.post_send
                secs, _ = _timed(partial(_post_each, post, dest, payload, count))
                record(f"send.device.{size}", secs, count)
                drain_device = partial(_drain_poll, rx.poll_recv)
                secs, got = _timed(drain_device)
                record(f"recv.device.{size}", secs, max(got, 1))
                plain_dest = tx.resolve(rx_plain.local_address())
                for _ in range(count):
                    post(Channel.DATA, plain_dest, payload)
                secs, got = _timed(partial(_drain_poll, rx_plain.poll_recv))
                record(f"recv.device_recv_into.{size}", secs, max(got, 1))
                # the device's batch send, GSO off then on
                tx.device._gso = False
                secs, _ = _timed(partial(tx.device.post_send_batch, Channel.DATA, dest, batch))
                record(f"send.batch_nogso.{size}", secs, count)
                drain_device()
                if have_gso:
                    tx.device._gso = True
                    secs, _ = _timed(partial(tx.device.post_send_batch, Channel.DATA, dest, batch))
                    record(f"send.batch_gso.{size}", secs, count)
                    secs, got = _timed(drain_device)
                    record(f"recv.device_after_gso.{size}", secs, max(got, 1))
                if have_gso and rx_gro is not None:
                    _gro_trial(record, tx, rx_gro, batch)
        lost = tx.device.stats()["tx_datagrams"] - rx.device.stats()["rx_datagrams"]
        lost -= rx_plain.device.stats()["rx_datagrams"]
        if rx_gro is not None:
            lost -= rx_gro.device.stats()["rx_datagrams"]
    finally:
        rx_plain.close()
        if rx_gro is not None:
            rx_gro.close()
        tx.close()
        rx.close()
        raw_tx.close()
        raw_rx.close()
    out = {key: round(statistics.median(values), 3) for key, values in sorted(results.items())}
    out["lost_datagrams"] = float(lost)
    return out


def recv_alternatives(size: int = 1472, count: int = 2000, trials: int = 7) -> dict[str, float]:
    """Microseconds per datagram for pure-Python ways to receive: ``recv_into`` of a fixed
    buffer, ``recv_into`` of an arena slice (the device's way), ``recvfrom_into``,
    ``recvmsg_into``, and ``recv`` (a new bytes object each time)."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    _big_rcvbuf(rx)
    addr = rx.getsockname()
    payload = b"x" * size
    buf = bytearray(65536)
    arena = memoryview(bytearray(4 << 20))

    def fixed() -> int:
        return _drain_raw(rx, buf)

    def arena_slices() -> int:
        n = off = 0
        views = []
        while True:
            try:
                k = rx.recv_into(arena[off:], 65536)
            except BlockingIOError:
                return n
            views.append(arena[off:off + k])
            off = off + k if off + k + 65536 < len(arena) else 0
            n += 1

    def _loop(call: Callable[[], Any]) -> int:
        n = 0
        while True:
            try:
                call()
            except BlockingIOError:
                return n
            n += 1

    methods: dict[str, Callable[[], int]] = {
        "recv_into": fixed,
        "recv_into_arena": arena_slices,
        "recvfrom_into": lambda: _loop(lambda: rx.recvfrom_into(buf)),
        "recvmsg_into": lambda: _loop(lambda: rx.recvmsg_into([buf])),
        "recv_bytes": lambda: _loop(lambda: rx.recv(65536)),
    }
    results: dict[str, list[float]] = {}
    try:
        for _ in range(trials):
            for name, fn in methods.items():
                for _ in range(count):
                    tx.sendto(payload, addr)
                secs, got = _timed(fn)
                results.setdefault(name, []).append(secs / max(got, 1) * 1e6)
    finally:
        rx.close()
        tx.close()
    return {k: round(statistics.median(v), 3) for k, v in results.items()}


_ECHO = r"""
import sys, time
from btlcore.registry import open_device
ops = open_device("udp", {"host": sys.argv[1], "busy_poll": sys.argv[2] == "1"})
print(ops.local_address().hex(), flush=True)
peer = ops.resolve(bytes.fromhex(sys.stdin.readline().strip()))
deadline = time.monotonic() + float(sys.argv[3])
done = False
while not done and time.monotonic() < deadline:
    ops.wait(deadline)
    for m in ops.poll_recv(16):
        if bytes(m) == b"stop":
            done = True
            break
        ops.post_send(0, peer, m)
ops.close()
"""


def latency(busy_poll: bool, rounds: int = 3000, size: int = 64, host: str = "127.0.0.1",
            limit: float = 30.0) -> dict[str, float]:
    """Round trip of a ``size``-byte datagram through an echoing second process, both ends
    the UDP device (priority channel), blocking in epoll or busy-polling.  Microseconds."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", _ECHO, host, "1" if busy_poll else "0",
                              str(limit)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ops = open_device("udp", {"host": host, "busy_poll": busy_poll})
    rtts: list[float] = []
    try:
        assert child.stdout is not None and child.stdin is not None
        peer = ops.resolve(bytes.fromhex(child.stdout.readline().strip()))
        child.stdin.write(ops.local_address().hex() + "\n")
        child.stdin.flush()
        payload = b"l" * size
        deadline = time.monotonic() + limit
        for _ in range(rounds):
            t0 = time.perf_counter()
            ops.post_send(Channel.PRIORITY, peer, payload)
            while not ops.poll_recv(1):
                if time.monotonic() > deadline:
                    raise TimeoutError("echo process stopped answering")
                ops.wait(deadline)
            rtts.append(time.perf_counter() - t0)
        ops.post_send(Channel.PRIORITY, peer, b"stop")
        child.wait(10)
    finally:
        ops.close()
        if child.poll() is None:
            child.kill()
            child.wait(5)
    rtts.sort()
    body = rtts[rounds // 10:]  # the first tenth warms up
    body.sort()
    return {"median_us": round(body[len(body) // 2] * 1e6, 1),
            "p99_us": round(body[int(len(body) * 0.99)] * 1e6, 1)}


def main() -> None:
    figures = measure()
    print("us per datagram, loopback, one process (median of 7 trials of 2000)")
    for key, value in figures.items():
        print(f"  {key:28s} {value:8.3f}")
    print("pure-Python receive alternatives at 1472 B:")
    for key, value in recv_alternatives().items():
        print(f"  {key:28s} {value:8.3f}")
    for busy in (False, True):
        print(f"64 B round trip between two processes, busy_poll={busy}: {latency(busy)}")


if __name__ == "__main__":
    main()
