"""btlcore over the UDP backend, two pinned processes on loopback.

* Bulk: the sender keeps ``DEPTH`` messages of 1 MiB in flight for a fixed time, then waits
  for every completion callback (a completion means the last byte was ACKed); goodput is
  completed bytes over that time, so reliability is paid for in full.  The datagram size is
  set with ``Config(mtu=...)``.  From the counters of both ends: transmissions per data segment
  and standalone ACKs per data segment; and each end's CPU time per data segment (the
  receiver's includes its idle polling: it never sleeps longer than 1 ms).
* Round trip: 64 B or 8 KiB to an echo handler and back, one at a time; blocking is
  ``progress(timeout>0)`` (the transport sleeps in epoll until a datagram comes), busy-poll
  is the same on a device opened with ``busy_poll=True`` (it spins on a zero-timeout poll),
  on both sides.  A trial's figure is its median round trip; mean and p99 are kept beside it
  (retransmission stalls show there).

Control between the two processes goes in-band, on tags of its own (stats request, stop), so
the receiver never has to poll the control pipe on its hot path.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from . import btl_adapter as A
from .harness import LOOPBACK_V4, BenchError, Result, add_samples, measured, rtt_extras, run_pair, wait_msg
from .profiles import Profile

SECTION = "btl_udp"
TAG_DATA = 1
TAG_CTRL = 2
MESSAGE = 1 << 20
DEPTH = 8
BLOCKING_TIMEOUT = 0.05
LINGER = 0.05


def _serve(t: Any, stop: list[bool], timeout: float, limit: float) -> None:
    end = time.monotonic() + limit
    n = 0
    while not stop[0]:
        A.progress(t, timeout)
        n += 1
        if not n & 1023 and time.monotonic() > end:
            raise BenchError("btlcore server ran past its time limit")
    # linger, so that the ACK of the stop message (perhaps a delayed one) leaves before close
    A.run_until([t], lambda: False, LINGER)


def _stop(t: Any, peer: Any) -> None:
    """Tell the server to stop, wait for that message's ACK, and close."""
    done: list[Any] = []
    A.send(t, peer, TAG_CTRL, b"stop", callback=done.append)
    A.run_until([t], lambda: bool(done), 2.0)
    A.close(t)


def bulk_receiver(ctl: Any, mtu: int, limit: float, host: str = LOOPBACK_V4) -> dict[str, Any]:
    t = A.open_udp(host, mtu=mtu)
    got = [0, 0]
    stop = [False]

    def on_data(peer: Any, tag: int, data: Any) -> None:
        got[0] += len(data)
        got[1] += 1

    def on_ctrl(peer: Any, tag: int, data: Any) -> None:
        if bytes(data) == b"stats":
            ctl.send((got[0], A.stats(t), time.process_time()))
        else:
            stop[0] = True

    A.on(t, TAG_DATA, on_data)
    A.on(t, TAG_CTRL, on_ctrl)
    ctl.send(A.address(t))
    try:
        _serve(t, stop, 0.001, limit)
    finally:
        A.close(t)
    return {"bytes": got[0], "messages": got[1]}


def bulk_sender(ctl: Any, mtu: int, seconds: float, max_messages: int, trials: int, warmup: int,
                limit: float, host: str = LOOPBACK_V4) -> dict[str, Any]:
    t = A.open_udp(host, mtu=mtu)
    peer = A.connect(t, wait_msg(ctl))
    msg = bytes(MESSAGE)
    pc = time.perf_counter
    state = {"outstanding": 0, "done": 0, "errors": 0}

    def completed(exc: BaseException | None) -> None:
        state["outstanding"] -= 1
        if exc is None:
            state["done"] += 1
        else:
            state["errors"] += 1

    def ask_stats() -> tuple[int, dict[str, float], float]:
        A.send(t, peer, TAG_CTRL, b"stats")
        end = time.monotonic() + 10
        while not ctl.poll():
            A.progress(t, 0.001)
            if time.monotonic() > end:
                raise BenchError("the btlcore receiver did not answer a stats request")
        reply: tuple[int, dict[str, float], float] = ctl.recv()  # what bulk_receiver sends back
        return reply

    goodput: list[float] = []
    tx_per_seg: list[float] = []
    acks_per_seg: list[float] = []
    resends: list[float] = []
    send_cpu: list[float] = []
    recv_cpu: list[float] = []
    for i in range(warmup + trials):
        r0_bytes, r0, rc0 = ask_stats()
        s0 = A.stats(t)
        c0 = time.process_time()
        state.update(done=0, errors=0)
        posted = 0
        t0 = pc()
        end = t0 + seconds
        hard = t0 + limit
        while True:
            now = pc()
            while state["outstanding"] < DEPTH and posted < max_messages and now < end:
                state["outstanding"] += 1
                posted += 1
                A.send(t, peer, TAG_DATA, msg, callback=completed)
            A.progress(t, 0.0)
            if state["outstanding"] == 0 and (now >= end or posted >= max_messages):
                break
            if now > hard:
                raise BenchError(f"btlcore bulk trial did not complete within {limit:g} s")
        dt = pc() - t0
        cpu = time.process_time() - c0
        if state["errors"]:
            raise BenchError(f"{state['errors']} btlcore sends failed")
        r1_bytes, r1, rc1 = ask_stats()
        s = A.delta(A.stats(t), s0)
        r = A.delta(r1, r0)
        if r1_bytes - r0_bytes < state["done"] * MESSAGE:
            raise BenchError("the receiver got fewer bytes than were completed")
        if i >= warmup:
            goodput.append(state["done"] * MESSAGE / dt)
            segs = A.data_segments(s)
            first = segs - s.get("num_resends", 0)
            tx_per_seg.append(segs / first if first else 0.0)
            acks_per_seg.append(r.get("num_ack_sends", 0) / segs if segs else 0.0)
            resends.append(s.get("num_resends", 0))
            send_cpu.append(cpu / segs if segs else 0.0)
            recv_cpu.append((rc1 - rc0) / segs if segs else 0.0)
    _stop(t, peer)
    return {"goodput": goodput, "tx_per_seg": tx_per_seg, "acks_per_seg": acks_per_seg, "resends": resends,
            "send_cpu": send_cpu, "recv_cpu": recv_cpu}


def _upper_median(xs: Sequence[float]) -> float:
    """The middle sample (the upper one of an even count): always a value that was measured."""
    return sorted(xs)[len(xs) // 2]


def bulk(profile: Profile, mtu: int, host: str = LOOPBACK_V4) -> Result:
    A.require("UDP backend")
    limit = profile.deadline * 0.8
    _, r = run_pair(bulk_receiver, bulk_sender, server_kw={"mtu": mtu, "limit": limit, "host": host},
                    client_kw={"mtu": mtu, "seconds": profile.btl_bulk_seconds,
                               "max_messages": profile.btl_bulk_max_messages, "trials": profile.trials,
                               "warmup": profile.warmup, "limit": limit, "host": host},
                    deadline=profile.deadline)
    return measured(f"btl.udp_bulk.{mtu}", SECTION, f"btlcore UDP bulk, 1 MiB messages, {mtu} B datagrams",
                    "B/s", r["goodput"], datagram=mtu, depth=DEPTH,
                    tx_per_segment=_upper_median(r["tx_per_seg"]), acks_per_segment=_upper_median(r["acks_per_seg"]),
                    resends=r["resends"], send_cpu_per_datagram=_upper_median(r["send_cpu"]),
                    recv_cpu_per_datagram=_upper_median(r["recv_cpu"]))


def echo_server(ctl: Any, busy: bool, limit: float, host: str = LOOPBACK_V4) -> int:
    t = A.open_udp(host, busy_poll=busy)
    stop = [False]
    count = [0]

    def on_data(peer: Any, tag: int, data: Any) -> None:
        A.send(t, peer, TAG_DATA, bytes(data))
        count[0] += 1

    def on_ctrl(peer: Any, tag: int, data: Any) -> None:
        stop[0] = True

    A.on(t, TAG_DATA, on_data)
    A.on(t, TAG_CTRL, on_ctrl)
    ctl.send(A.address(t))
    try:
        _serve(t, stop, BLOCKING_TIMEOUT, limit)
    finally:
        A.close(t)
    return count[0]


def rtt_client(ctl: Any, size: int, busy: bool, seconds: float, max_iters: int, trials: int, warmup: int,
               limit: float, host: str = LOOPBACK_V4) -> dict[str, list[float]]:
    t = A.open_udp(host, busy_poll=busy)
    peer = A.connect(t, wait_msg(ctl))
    payload = bytes(size)
    replies = [0]

    def on_data(p: Any, tag: int, data: Any) -> None:
        if len(data) != size:
            raise BenchError(f"echo returned {len(data)} B, sent {size} B")
        replies[0] += 1

    A.on(t, TAG_DATA, on_data)
    progress, send = t.progress, t.send
    pc = time.perf_counter
    out: dict[str, list[float]] = {"median": [], "mean": [], "p99": []}
    for i in range(warmup + trials):
        samples: list[float] = []
        t_start = pc()
        end = t_start + seconds
        hard = t_start + limit
        while len(samples) < max_iters:
            want = replies[0] + 1
            t0 = pc()
            send(peer, TAG_DATA, payload)
            while replies[0] < want:
                progress(timeout=BLOCKING_TIMEOUT)
                if pc() > hard:
                    raise BenchError("btlcore echo did not come back")
            t1 = pc()
            samples.append(t1 - t0)
            if t1 >= end:
                break
        if i >= warmup:
            add_samples(out, samples)
    _stop(t, peer)
    return out


def rtt(profile: Profile, size: int, busy: bool, host: str = LOOPBACK_V4) -> Result:
    A.require("UDP backend")
    mode = "busy" if busy else "blocking"
    limit = profile.deadline * 0.8
    _, r = run_pair(echo_server, rtt_client, server_kw={"busy": busy, "limit": limit, "host": host},
                    client_kw={"size": size, "busy": busy, "seconds": profile.rtt_seconds,
                               "max_iters": profile.rtt_max_iters, "trials": profile.trials,
                               "warmup": profile.warmup, "limit": limit, "host": host},
                    deadline=profile.deadline)
    return measured(f"btl.udp_rtt.{size}.{mode}", SECTION, f"btlcore UDP round trip {size} B, {mode}", "s",
                    r["median"], better="lower", size=size, mode=mode, **rtt_extras(r))
