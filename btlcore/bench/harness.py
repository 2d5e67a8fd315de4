"""Trials, their statistics, and two pinned processes on loopback.

Rules every measurement keeps:

* Each figure is the median of several trials after a warm-up trial, reported with its spread
  (min/max and the inter-quartile range), because figures on shared cores drift.
* The two ends of a measurement run in two processes pinned to different cores
  (``os.sched_setaffinity``), as a real deployment would; the parent only coordinates.
* Everything is bounded: each trial in time *and* count, each process pair by a hard deadline
  after which both are killed and the measurement reports an error instead of hanging.
* Traffic goes to 127.0.0.1 or ::1 only (:func:`loopback`).
"""

from __future__ import annotations

import ipaddress
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

LOOPBACK_V4 = "127.0.0.1"
LOOPBACK_V6 = "::1"


class BenchError(RuntimeError):
    """A measurement failed (a side raised, or the pair overran its deadline)."""


class Skip(Exception):
    """Raised by a measurement that cannot run here; the message is the reason."""


def loopback(host: str) -> str:
    """Return ``host`` if it is a loopback address; refuse anything else.

    Every socket the benchmarks bind, connect or send to goes through this check."""
    if host == "localhost":
        return host
    try:
        ok = ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"benchmarks send to loopback only, not to {host!r}")
    return host


# -- statistics -----------------------------------------------------------------------------

def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max and quartiles of the trial values."""
    vals = sorted(float(v) for v in values)
    if not vals:
        raise ValueError("no trial values")
    if len(vals) >= 2:
        q1, _, q3 = statistics.quantiles(vals, n=4, method="inclusive")
    else:
        q1 = q3 = vals[0]
    return {"median": statistics.median(vals), "min": vals[0], "max": vals[-1], "q1": q1, "q3": q3,
            "n": len(vals)}


@dataclass
class Result:
    """One measured figure (or the reason it was not measured).

    ``values`` are the per-trial figures in base units (bytes/s, seconds, a plain count or
    ratio); ``unit`` says which: ``B/s``, ``s``, ``B``, ``1/s`` or ``x`` (a plain number)."""

    id: str
    section: str
    name: str
    unit: str
    better: str = "higher"  # or "lower"
    values: list[float] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.skipped is None and self.error is None and bool(self.values)

    @property
    def median(self) -> float | None:
        return self.stats.get("median") if self.ok else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def measured(id: str, section: str, name: str, unit: str, values: Iterable[float], *,
             better: str = "higher", **extra: Any) -> Result:
    vals = [float(v) for v in values]
    return Result(id, section, name, unit, better, vals, summarize(vals), dict(extra))


def skipped(id: str, section: str, name: str, unit: str, reason: str, *, better: str = "higher") -> Result:
    return Result(id, section, name, unit, better, skipped=reason)


def failed(id: str, section: str, name: str, unit: str, error: str, *, better: str = "higher") -> Result:
    return Result(id, section, name, unit, better, error=error)


def guarded(id: str, section: str, name: str, unit: str, fn: Callable[[], Result], *,
            better: str = "higher") -> Result:
    """Run one measurement; turn :class:`Skip` and failures into a result that says why."""
    try:
        return fn()
    except Skip as exc:
        return skipped(id, section, name, unit, str(exc), better=better)
    except Exception as exc:  # one broken measurement must not stop the run
        return failed(id, section, name, unit, f"{type(exc).__name__}: {exc}", better=better)


# -- cores ----------------------------------------------------------------------------------

def core_pair() -> tuple[int, int]:
    """Two different cores to pin the two ends to (the same one if only one is allowed)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    if len(cpus) >= 2:
        return cpus[0], cpus[1]
    return cpus[0], cpus[0]


def pin(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


# -- two processes --------------------------------------------------------------------------

def _context() -> Any:
    # fork is cheap (about 10 ms) and needs no re-import; spawn elsewhere.
    return mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")


CPROFILE_ENV = "BTL_BENCH_CPROFILE"
"""A directory: the btlcore sides of each measurement write cProfile stats there (``--cprofile``)."""
LABEL_ENV = "BTL_BENCH_LABEL"


def _profiled(fn: Callable[..., Any], ctl: Any, kwargs: Mapping[str, Any]) -> Any:
    """``fn(ctl, **kwargs)``, under cProfile if asked to and ``fn`` measures btlcore."""
    where = os.environ.get(CPROFILE_ENV)
    target = kwargs.get("fn", fn)
    if not where or not getattr(target, "__module__", "").startswith("btlcore.bench.btl_"):
        return fn(ctl, **kwargs)
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    try:
        return fn(ctl, **kwargs)
    finally:
        prof.disable()
        os.makedirs(where, exist_ok=True)
        base = os.path.join(where, f"{os.environ.get(LABEL_ENV, 'btl')}.{target.__name__}")
        prof.dump_stats(base + ".prof")
        with open(base + ".txt", "w") as f:
            pstats.Stats(prof, stream=f).sort_stats("tottime").print_stats(30)


def _child(fn: Callable[..., Any], cpu: int | None, ctl: Any, out: Any, kwargs: Mapping[str, Any]) -> None:
    try:
        pin(cpu)
        value = _profiled(fn, ctl, kwargs)
        out.send(("ok", value))
    except Skip as exc:
        out.send(("skip", str(exc)))
    except BaseException as exc:  # report everything to the parent, then exit
        out.send(("err", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"))
    finally:
        out.close()


def run_pair(server: Callable[..., Any], client: Callable[..., Any], *,
             server_kw: Mapping[str, Any] | None = None, client_kw: Mapping[str, Any] | None = None,
             deadline: float = 30.0, grace: float = 1.0) -> tuple[Any, Any]:
    """Run ``server(ctl, **server_kw)`` and ``client(ctl, **client_kw)`` in two processes pinned
    to different cores, joined by the duplex pipe ``ctl``.  Return (server value, client value).

    The client drives the measurement and returns its figures; the server returns when the
    client tells it to stop (or is terminated ``grace`` seconds after the client is done; its
    value is then None).  Both are killed after ``deadline`` seconds and BenchError raised."""
    ctx = _context()
    ctl_s, ctl_c = ctx.Pipe(duplex=True)
    out_s_r, out_s_w = ctx.Pipe(duplex=False)
    out_c_r, out_c_w = ctx.Pipe(duplex=False)
    cpu_s, cpu_c = core_pair()
    ps = ctx.Process(target=_child, args=(server, cpu_s, ctl_s, out_s_w, dict(server_kw or {})),
                     name=f"bench-{server.__name__}", daemon=True)
    pc = ctx.Process(target=_child, args=(client, cpu_c, ctl_c, out_c_w, dict(client_kw or {})),
                     name=f"bench-{client.__name__}", daemon=True)
    ps.start()
    pc.start()
    for c in (out_s_w, out_c_w, ctl_s, ctl_c):
        c.close()
    end = time.monotonic() + deadline
    results: dict[str, Any] = {}
    pending = {out_s_r: "server", out_c_r: "client"}
    try:
        while "client" not in results:
            left = end - time.monotonic()
            if left <= 0:
                raise BenchError(f"{client.__name__}/{server.__name__} overran its {deadline:g} s deadline")
            ready = mpc.wait(list(pending), timeout=left)
            for conn in [c for c in pending if c in ready]:
                who = pending.pop(conn)
                try:
                    results[who] = conn.recv()
                except EOFError:
                    results[who] = ("err", f"the {who} process died (exit code "
                                           f"{(ps if who == 'server' else pc).exitcode})")
                if results[who][0] == "skip":
                    raise Skip(results[who][1])
                if results[who][0] == "err":
                    raise BenchError(f"{who} failed: {results[who][1]}")
        if "server" not in results and out_s_r.poll(grace):
            try:
                results["server"] = out_s_r.recv()
            except EOFError:
                pass
    finally:
        for p in (pc, ps):
            p.join(timeout=0.2 if p is ps else grace)
            if p.is_alive():
                p.terminate()
                p.join(timeout=1.0)
            if p.is_alive():
                p.kill()
                p.join()
        for c in (out_s_r, out_c_r):
            c.close()
    sv = results.get("server")
    return (sv[1] if sv and sv[0] == "ok" else None), results["client"][1]


def _alone(ctl: Any, fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
    return fn(**kwargs)


def _idle(ctl: Any) -> None:
    return None


def run_alone(fn: Callable[..., Any], kwargs: Mapping[str, Any] | None = None, *, deadline: float = 60.0) -> Any:
    """Run ``fn(**kwargs)`` in a child process pinned to one core, killed after ``deadline``
    seconds (BenchError).  For in-process measurements (the simulator, scale), so that a
    livelock or a heap grown by one measurement cannot reach the next one or the caller."""
    _, value = run_pair(_idle, _alone, client_kw={"fn": fn, "kwargs": dict(kwargs or {})},
                        deadline=deadline, grace=0.1)
    return value


def wait_msg(ctl: Any, timeout: float = 10.0) -> Any:
    """Receive one control message from the other side, or raise after ``timeout``."""
    if not ctl.poll(timeout):
        raise BenchError(f"no control message from the other side within {timeout:g} s")
    return ctl.recv()


def add_samples(out: dict[str, list[float]], samples: Sequence[float]) -> None:
    """Append one trial's median, mean and 99th percentile of per-iteration times to ``out``."""
    xs = sorted(samples)
    out["median"].append(statistics.median(xs))
    out["mean"].append(sum(xs) / len(xs))
    out["p99"].append(xs[min(len(xs) - 1, int(len(xs) * 0.99))])


def rtt_extras(r: Mapping[str, list[float]]) -> dict[str, float]:
    """The medians over trials of the per-trial mean and p99, for a round-trip result."""
    return {"mean": statistics.median(r["mean"]), "p99": statistics.median(r["p99"])}


def _cpu_times() -> tuple[int, int] | None:
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(fields[:8]), fields[3] + fields[4]  # total, idle + iowait


def contention(window: float = 0.3) -> str | None:
    """A warning if other processes keep the CPUs busy (more than a quarter of their time over
    ``window`` seconds, while this run is idle): figures are then low and noisy, ratios less
    so.  None if the machine is quiet (or /proc/stat cannot be read)."""
    a = _cpu_times()
    time.sleep(window)
    b = _cpu_times()
    if a is None or b is None or b[0] == a[0]:
        return None
    busy = 1.0 - (b[1] - a[1]) / (b[0] - a[0])
    if busy > 0.25:
        n = os.cpu_count() or 1
        return (f"other processes kept the {n} CPUs {busy:.0%} busy just before or after the run; "
                "absolute figures are low and noisy, compare ratios within this run only")
    return None


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    import platform
    import socket
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import btlcore

    return {"python": platform.python_version(), "load": list(os.getloadavg()),
            "build": "compiled" if btlcore.compiled else "pure",
            "implementation": platform.python_implementation(),
            "platform": platform.platform(), "cpus": cpus, "cpu_model": model,
            "pinned_cores": list(core_pair()), "hostname": socket.gethostname(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
