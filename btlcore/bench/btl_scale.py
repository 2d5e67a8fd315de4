"""Scale: memory per idle peer, and what progress costs as the number of peers grows.

Both on the simulator, in this process.

* Memory per idle peer: one transport connects to N others, each connection is used once (so
  the handshake is done and both ends hold an established, idle peer), then ``tracemalloc``
  measures what was allocated and is still held.  Each connection leaves a peer at both ends,
  so the figure is the growth divided by 2N.  The N transports are made before the first
  snapshot and are not counted, nor are the simulator's link objects between them (made
  beforehand).
* Progress cost: with 1, 100 and 1000 idle connected peers, the time of one
  ``progress(timeout=0)`` call with nothing to do, and of one small message exchange with one
  active peer.  The target is a cost that grows with active peers, not with all peers.
* Keepalive cost (issue #11: idle peers cost nothing between probes; goal <= 1.1x): every
  established peer now holds a keepalive deadline (a PING after a third of ``peer_timeout``
  of silence).  The median of ``progress(timeout=0)`` with 1,000 idle peers, divided by the
  same with one peer, measured alternately in one process; the ratio is printed.
* Cost of a udp transport (issue #11: at most 2 MB and 20 ms each, so that 1,000 endpoints
  in one process are ordinary): N transports opened on loopback in this process, the
  growth of its resident memory (``/proc/self/statm``, which counts buffers that tracemalloc
  does not see, as the device's mmap-ed receive arenas) and the wall time, each per transport.
"""

from __future__ import annotations

import gc
import os
import resource
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from ..protocol.recovery import KEEPALIVE_FRACTION
from . import btl_adapter as A
from .harness import BenchError, Result, measured
from .profiles import Profile

SECTION = "btl_scale"
TAG = 1


def _reached(got: list[int], want: int) -> Callable[[], bool]:
    """Has the counter ``got[0]`` reached ``want``? (bound now, not when the loop moves on)"""
    return lambda: got[0] >= want


def _mesh(n: int) -> tuple[Any, Any, list[Any]]:
    """A fabric, a hub transport and ``n`` others (not yet connected)."""
    fab = A.fabric(seed=7, loss=0.0, delay=0.0001, rate_mbps=10_000.0)
    hub = A.open_sim(fab, name="hub")
    others = [A.open_sim(fab, name=f"p{i}") for i in range(n)]
    return fab, hub, others


def _connect_all(hub: Any, others: list[Any], timeout: float) -> list[Any]:
    done = [0]

    def cb(exc: BaseException | None) -> None:
        done[0] += 1

    for o in others:
        A.on(o, TAG, lambda p, t, d: None)
    peers = [A.connect(hub, A.address(o)) for o in others]
    for p in peers:
        A.send(hub, p, TAG, b"x", callback=cb)
    A.run_until([hub, *others], lambda: done[0] >= len(peers), timeout, wall=0.9 * timeout)
    if done[0] < len(peers):
        raise BenchError(f"only {done[0]} of {len(peers)} simulated peers answered")
    A.run_until([hub, *others], lambda: False, 0.01, wall=0.9 * timeout)  # let the last ACKs settle
    return peers


def memory_per_peer(profile: Profile) -> list[Result]:
    """Memory per peer at two moments: just after the exchange (the ACKs settled), and idle
    (after a keepalive interval of silence, a third of ``peer_timeout``: the keepalive gives
    back what the emptied send queue and tables still hold, ``Peer.shed``).  The goal of
    issue #11 is on the idle figure; the other shows what a peer costs while in use."""
    A.require("simulator")
    used: list[float] = []
    idle: list[float] = []
    n = profile.memory_peers
    for _ in range(max(1, min(profile.trials, 3))):
        fab, hub, others = _mesh(n)
        primed = A.prime_links(fab, [("hub", f"p{i}") for i in range(n)])
        quiet = hub.config.peer_timeout / KEEPALIVE_FRACTION * 1.05  # every peer PINGed or PINGing
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            peers = _connect_all(hub, others, profile.deadline)
            gc.collect()
            used.append((tracemalloc.get_traced_memory()[0] - before) / (2 * n))
            A.run_until([hub, *others], lambda: False, quiet, wall=0.9 * profile.deadline)
            gc.collect()
            idle.append((tracemalloc.get_traced_memory()[0] - before) / (2 * n))
        finally:
            tracemalloc.stop()
        if any(p.state.value != "established" for p in peers):
            raise BenchError("a simulated peer left ESTABLISHED while idle (keepalive failed)")
        del peers
        for t in (hub, *others):
            A.close(t)
    how = "tracemalloc growth / (2 x connections)"
    return [
        measured("btl.mem_per_peer", SECTION, f"memory per idle peer ({n} peers, after {quiet:.2g} s of silence)",
                 "B", idle, better="lower", peers=n, method=how, sim_links_excluded=primed),
        measured("btl.mem_per_peer_used", SECTION, f"memory per peer just after use ({n} peers)", "B", used,
                 better="lower", peers=n, method=how, sim_links_excluded=primed),
    ]


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _fd_room(want: int) -> int:
    """Raise the soft descriptor limit toward ``want`` (up to the hard one); return what fits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def udp_transport_cost(profile: Profile, host: str = "127.0.0.1") -> list[Result]:
    """Resident memory and open time per udp transport, ``profile.udp_transports`` of them
    opened per trial in this process.  Every trial's transports stay open until the end, so
    each trial's memory is new memory, not the freed heap of the one before."""
    A.require("UDP backend")
    trials = max(1, min(profile.trials, 3))
    fds = _fd_room(3 * profile.udp_transports * trials + 256)  # two sockets and an epoll each
    n = max(1, min(profile.udp_transports, (fds - 256) // (3 * trials)))
    mem: list[float] = []
    open_s: list[float] = []
    A.close(A.open_udp(host))  # imports, the backend's entry point, the heap settings
    opened: list[Any] = []
    try:
        for _ in range(trials):
            gc.collect()
            before = _rss()
            t0 = time.perf_counter()
            opened += [A.open_udp(host) for _ in range(n)]
            open_s.append((time.perf_counter() - t0) / n)
            mem.append((_rss() - before) / n)
    finally:
        for t in opened:
            A.close(t)
    return [
        measured("btl.udp_transport_mem", SECTION, f"resident memory per udp transport ({n} open)", "B", mem,
                 better="lower", transports=n, method="RSS growth / transports"),
        measured("btl.udp_transport_open", SECTION, f"time to open a udp transport ({n} open)", "s", open_s,
                 better="lower", transports=n),
    ]


def progress_cost(profile: Profile, n: int) -> list[Result]:
    A.require("simulator")
    fab, hub, others = _mesh(n)
    peers = _connect_all(hub, others, profile.deadline)
    pc = time.perf_counter
    idle: list[float] = []
    exchange: list[float] = []
    calls = profile.progress_calls
    got = [0]

    def cb(exc: BaseException | None) -> None:
        got[0] += 1

    for i in range(profile.warmup + profile.trials):
        samples = []
        for _ in range(calls):
            t0 = pc()
            A.progress(hub, 0.0)
            samples.append(pc() - t0)
        k = max(1, calls // 20)
        t0 = pc()
        for _ in range(k):
            want = got[0] + 1
            A.send(hub, peers[0], TAG, b"ping", callback=cb)
            A.run_until([hub, others[0]], _reached(got, want), 5.0, wall=0.9 * profile.deadline)
        ex = (pc() - t0) / k
        if i >= profile.warmup:
            idle.append(statistics.median(samples))
            exchange.append(ex)
    for t in (hub, *others):
        A.close(t)
    return [
        measured(f"btl.progress_idle.{n}", SECTION, f"progress(0), nothing to do, {n} idle peers", "s", idle,
                 better="lower", peers=n),
        measured(f"btl.progress_active.{n}", SECTION, f"one message exchange with 1 active of {n} peers", "s",
                 exchange, better="lower", peers=n),
    ]


KEEPALIVE_PEERS = 1000


def keepalive_cost(profile: Profile) -> list[Result]:
    """progress(0) with KEEPALIVE_PEERS idle peers (each with its keepalive deadline in the
    timer heap) against one peer: the two meshes measured in alternation (the ratio holds
    under a drifting load); ``progress_calls`` calls per sample, their median."""
    A.require("simulator")
    meshes = []
    for n in (1, KEEPALIVE_PEERS):
        fab, hub, others = _mesh(n)
        _connect_all(hub, others, profile.deadline)
        meshes.append((hub, others))
    pc = time.perf_counter
    ratios: list[float] = []
    many: list[float] = []
    for i in range(profile.warmup + profile.trials):
        medians = []
        for hub, _others in meshes:
            samples = []
            for _ in range(profile.progress_calls):
                t0 = pc()
                A.progress(hub, 0.0)
                samples.append(pc() - t0)
            medians.append(statistics.median(samples))
        if i >= profile.warmup:
            ratios.append(medians[1] / medians[0])
            many.append(medians[1])
    for hub, others in meshes:
        for t in (hub, *others):
            A.close(t)
    print(f"keepalive: progress(0) with {KEEPALIVE_PEERS} idle peers / with 1 peer = "
          f"{statistics.median(ratios):.3f}x (goal <= 1.1x; {statistics.median(many) * 1e6:.2f} us per call)")
    return [measured("btl.keepalive_idle_ratio", SECTION,
                     f"progress(0) with {KEEPALIVE_PEERS} idle peers (keepalive armed) / with 1 peer", "x",
                     ratios, better="lower", peers=KEEPALIVE_PEERS, goal=1.1)]
