"""Kernel TCP (cubic, bbr) and btlcore over UDP on a real link, side by side.

Two network namespaces joined by a veth pair; ``tc netem`` on each end's egress gives the
one-way delay, and on the sender's side the rate and a queue of about one BDP; an nftables
rule on the receiver's input drops that share of TCP and UDP packets at random::

    [ns A] sender 10.232.0.1 --netem delay, rate--> <--netem delay-- [ns B] 10.232.0.2 receiver
                                                                     nft: numgen random drop

Each sender runs in its own process inside A (``ip netns exec``), each receiver inside B:
kernel TCP is a small socket sender with ``TCP_CONGESTION`` set (no iperf3 needed), and
btlcore is ``btl transfer --backend udp`` toward ``btl serve``.  Goodput is the bytes the
receiver got over the time it took (TCP: first to last byte at the sink; btlcore: the
transfer's own wall time, all messages verified).  The 10.232.0.x addresses exist only
inside the two namespaces, which are removed afterwards.

Needs Linux, root, ``ip`` and ``tc`` (iproute2), ``nft`` (nftables), the sch_netem module
and the congestion control modules; :func:`unavailable` says what is missing, and
:func:`compare` then returns ``{"skipped": reason}``.

``python -m btlcore.bench.veth`` runs it alone (``--full`` for the larger set, ``--trials N``
for N runs of each sender per cell, taking turns; the full set's default is 3).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

SUBNET = "10.232.0"
TCP_PORT = 5301
UDP_PORT = 5302
CMD_TIMEOUT = 30.0
CHUNK = 1 << 16
PACKAGES = {"ip": "iproute2", "tc": "iproute2", "nft": "nftables"}
QUICK = {"paths": [(100.0, 0.005)], "losses": [0.0, 0.01, 0.05], "seconds": 3.0, "trials": 1}
FULL = {"paths": [(100.0, 0.00005), (100.0, 0.005), (1000.0, 0.001)], "losses": [0.0, 0.01, 0.05, 0.1],
        "seconds": 5.0, "trials": 3}
RATIO = "btlcore / kernel bbr"  # the row of per-trial ratios, where both ran


def _run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, input=input, capture_output=True, text=True, timeout=CMD_TIMEOUT)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def unavailable() -> str | None:
    """Why the comparison cannot run here, or None."""
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/ns/net"):
        return "no Linux network namespaces on this system"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
    for tool, package in PACKAGES.items():
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (apt-get install {package})"
    return None


def kernel_algorithms() -> list[str]:
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            return f.read().split()
    except OSError:
        return []


class VethPath:
    """The two namespaces and the link between them (a context manager that removes them)."""

    def __init__(self, rate_mbps: float, delay: float) -> None:
        tag = f"{os.getpid() % 100000}"
        self.ns = {"a": f"btlrgA{tag}", "b": f"btlrgB{tag}"}
        self.dev = {"a": f"brg{tag}a", "b": f"brg{tag}b"}
        self.ip = {"a": f"{SUBNET}.1", "b": f"{SUBNET}.2"}
        self.rate_mbps, self.delay = rate_mbps, delay
        self.shaper = ""

    def __enter__(self) -> VethPath:
        try:
            self._create()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def _create(self) -> None:
        for ns in self.ns.values():
            _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", self.dev["a"], "netns", self.ns["a"], "type", "veth", "peer", "name",
             self.dev["b"], "netns", self.ns["b"])
        for side in "ab":
            _run("ip", "-n", self.ns[side], "link", "set", "lo", "up")
            _run("ip", "-n", self.ns[side], "addr", "add", f"{self.ip[side]}/24", "dev", self.dev[side])
            _run("ip", "-n", self.ns[side], "link", "set", self.dev[side], "up")
        bdp = self.rate_mbps * 1e6 / 8 * 2 * self.delay
        delay = f"{self.delay * 1e6:.0f}us"
        rate = f"{self.rate_mbps:g}mbit"
        if self._tc("a", "netem", "delay", delay, "rate", rate, "limit", str(max(100, int(bdp / 1500) + 1))):
            self._tc("b", "netem", "delay", delay, "limit", "100000")
            self.shaper = f"netem: {self.delay * 1e3:g} ms each way, {rate}"
            return
        # no sch_netem in this kernel: the rate alone (tbf), no added delay
        limit = max(128 << 10, int(bdp))
        if not self._tc("a", "tbf", "rate", rate, "burst", "32kb", "limit", str(limit)):
            raise RuntimeError("tc can set neither netem nor tbf here")
        self.delay = 0.0
        self.shaper = f"tbf {rate}, queue {limit >> 10} KiB; no netem in this kernel, so no added delay"

    def _tc(self, side: str, *qdisc: str) -> bool:
        r = _run("ip", "netns", "exec", self.ns[side], "tc", "qdisc", "replace", "dev", self.dev[side], "root",
                 *qdisc, check=False)
        return r.returncode == 0

    def set_loss(self, p: float) -> None:
        """Drop a share ``p`` of the TCP and UDP packets that reach B (0: none)."""
        ns = self.ns["b"]
        _run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "btlregloss", check=False)
        if p > 0:
            _run("ip", "netns", "exec", ns, "nft", "-f", "-", input=(
                "table inet btlregloss {\n chain input {\n  type filter hook input priority 0;\n"
                f"  meta l4proto {{ tcp, udp }} numgen random mod 100000 < {round(p * 100000)} drop\n }}\n}}\n"))

    def exec_args(self, side: str, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns[side], *args]

    def destroy(self) -> None:
        for ns in self.ns.values():
            _run("ip", "netns", "del", ns, check=False)


def _tcp_run(path: VethPath, cc: str, seconds: float) -> float:
    """Kernel TCP with ``cc`` for ``seconds``: Mb/s at the sink."""
    py = sys.executable
    sink = subprocess.Popen(path.exec_args("b", py, "-m", "btlcore.bench.veth", "tcp-sink", path.ip["b"],
                                           str(TCP_PORT)), stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None
        sink.stdout.readline()  # "listening"
        _run(*path.exec_args("a", py, "-m", "btlcore.bench.veth", "tcp-source", path.ip["b"], str(TCP_PORT), cc,
                             str(seconds)))
        out = json.loads(sink.stdout.readline())
    finally:
        sink.kill()
        sink.wait()
    return float(out["bytes"]) * 8 / float(out["seconds"]) / 1e6


def _btl_run(path: VethPath, seconds: float) -> float:
    """btlcore over UDP, about ``seconds`` of link time in 1 MiB messages: verified Mb/s."""
    py = sys.executable
    messages = max(8, int(path.rate_mbps * 1e6 / 8 * seconds / (1 << 20)))
    server = subprocess.Popen(path.exec_args("b", py, "-m", "btlcore.cli", "serve", "--backend", "udp", "--bind",
                                             f"{path.ip['b']}:{UDP_PORT}"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert server.stdout is not None
        server.stdout.readline()  # the address line: it is listening
        r = subprocess.run(path.exec_args("a", py, "-m", "btlcore.cli", "transfer", "--backend", "udp", "--peer",
                                          f"{path.ip['b']}:{UDP_PORT}", "--messages", str(messages), "--size", "1M",
                                          "--seed", "1", "--timeout", str(20 * seconds), "--json"),
                           capture_output=True, text=True, timeout=30 * seconds + 30)
        if not r.stdout.strip():
            raise RuntimeError(f"btl transfer printed no report (exit {r.returncode}): {r.stderr.strip()[-300:]}")
        out = json.loads(r.stdout)
    finally:
        server.kill()
        server.wait()
    if not out.get("verified"):
        raise RuntimeError(f"btlcore transfer not verified: {out.get('errors')}")
    return float(out["goodput_mbps"])


def compare(quick: bool = True, log: TextIO | None = None, trials: int | None = None) -> dict[str, Any]:
    """Every sender on every path and loss rate of the quick (or full) set, ``trials`` times
    (default: the set's), the senders taking turns within each trial so that a load that
    comes and goes falls on all of them: each cell is the median of its runs, ``runs`` has
    them all, and the :data:`RATIO` row the median of btlcore's ratio to kernel bbr trial by
    trial (a single run of btlcore at 1 Gb/s and 5% loss spread over 410-807 Mb/s)."""
    spec = QUICK if quick else FULL
    n = int(spec["trials"] if trials is None else trials)  # type: ignore[call-overload]
    if n < 1:
        raise ValueError(f"trials must be at least 1, not {n}")
    why = unavailable()
    if why:
        return {"skipped": why}
    algos = [a for a in ("cubic", "bbr") if a in kernel_algorithms()]
    seconds = float(spec["seconds"])  # type: ignore[arg-type]
    paths_out: list[dict[str, Any]] = []
    try:
        for rate, delay in spec["paths"]:  # type: ignore[attr-defined]
            if any(p["rate_mbps"] == rate and not p["delay"] for p in paths_out):
                continue  # (no netem here: a path differing only in its delay was measured)
            with VethPath(rate, delay) as path:
                runs: dict[str, list[list[float | None]]] = {f"kernel {a}": [] for a in algos}
                runs["btlcore udp"] = []
                for p in spec["losses"]:  # type: ignore[attr-defined]
                    path.set_loss(p)
                    for name in runs:
                        runs[name].append([])
                    for _ in range(n):
                        for a in algos:
                            runs[f"kernel {a}"][-1].append(_guarded(lambda a=a: _tcp_run(path, a, seconds), log))
                        runs["btlcore udp"][-1].append(_guarded(lambda: _btl_run(path, seconds), log))
                    if log is not None:
                        print(f"veth {rate:g} Mb/s {path.delay * 1e3:g} ms loss {p:.0%}: "
                              + ", ".join(f"{k} {_median(v[-1]) or 0:.1f} Mb/s" for k, v in runs.items()),
                              file=log, flush=True)
            mbps: dict[str, list[float | None]] = {k: [_median(c) for c in v] for k, v in runs.items()}
            if "kernel bbr" in runs:
                mbps[RATIO] = [_median([b / k if b and k else None for b, k in zip(bc, kc, strict=True)])
                               for bc, kc in zip(runs["btlcore udp"], runs["kernel bbr"], strict=True)]
            paths_out.append({"rate_mbps": rate, "delay": path.delay, "shaper": path.shaper, "trials": n,
                              "losses": list(spec["losses"]), "mbps": mbps, "runs": runs})  # type: ignore[call-overload]
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return {"skipped": f"the veth pair could not be set up: {exc}"}
    missing = [a for a in ("cubic", "bbr") if a not in algos]
    return {"setup": "Two network namespaces joined by veth; tc netem delay each way, netem rate and a queue of "
                     "about one BDP (at least 100 packets) at the sender (or tbf where the kernel has no netem); "
                     f"nftables random loss on the receiver's input (TCP and UDP); {seconds:g} s per run, MTU 1500; "
                     f"the median of {n} run{'s' if n > 1 else ''} per cell, the senders taking turns"
                     + (f"; kernel {', '.join(missing)} not available" if missing else "") + ".",
            "paths": paths_out}


def _median(values: Sequence[float | None]) -> float | None:
    """The median of the runs that gave a figure (None: none did)."""
    got = sorted(v for v in values if v is not None)
    if not got:
        return None
    mid = len(got) // 2
    return got[mid] if len(got) % 2 else (got[mid - 1] + got[mid]) / 2


def _guarded(fn: Any, log: TextIO | None) -> float | None:
    try:
        return float(fn())
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
        if log is not None:
            print(f"veth: a run failed: {exc}", file=log, flush=True)
        return None


# ---------------------------------------------------------------------------------- the two TCP ends


def tcp_sink(host: str, port: int) -> None:
    """Accept one connection; print the bytes it carried and first-to-last-byte seconds."""
    ls = socket.create_server((host, port), reuse_port=False)
    print("listening", flush=True)
    conn, _ = ls.accept()
    buf = bytearray(1 << 20)
    total, first, last = 0, 0.0, 0.0
    while True:
        n = conn.recv_into(buf)
        if not n:
            break
        last = time.monotonic()
        if not total:
            first = last
        total += n
    print(json.dumps({"bytes": total, "seconds": max(last - first, 1e-9)}), flush=True)


def tcp_source(host: str, port: int, cc: str, seconds: float) -> None:
    """Connect with congestion control ``cc`` and send for ``seconds``."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    s.connect((host, port))
    data = bytes(CHUNK)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        s.sendall(data)
    s.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["tcp-sink"]:
        tcp_sink(args[1], int(args[2]))
        return 0
    if args[:1] == ["tcp-source"]:
        tcp_source(args[1], int(args[2]), args[3], float(args[4]))
        return 0
    trials = int(args[args.index("--trials") + 1]) if "--trials" in args else None
    print(json.dumps(compare(quick="--full" not in args, log=sys.stderr, trials=trials), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
