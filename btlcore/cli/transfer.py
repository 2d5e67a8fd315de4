"""The ``btl`` command: the demo, verified transfers on any backend, a receiving server,
the backends found here, the protocol's parameters, and the benchmark.

Mistakes (a bad option, an unknown backend, an unreachable peer) print one line and exit 2;
a transfer that was not verified exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import registry
from .config import Config
from .errors import BtlError
from .transport import open as open_transport, run_until
from .verify import (
    FILE_CHUNK, TAG_DATA, TAG_FILE, TAG_FIN, TAG_REPORT, Verifier, decode_json, encode_json,
    file_chunks, file_meta, make_messages,
)


SIM_COALESCE = 20e-6


class UsageError(Exception):
    """A mistake on the command line: reported in one line, exit status 2."""


# ---------------------------------------------------------------------------------- helpers


def _prob(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"{name}: expected a probability from 0 to 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise UsageError(f"{name}: expected a probability from 0 to 1, got {text!r}")
    return value


def _size_range(text: str) -> tuple[int, int]:
    try:
        if "-" in text:
            lo_s, hi_s = text.split("-", 1)
            lo, hi = _bytes(lo_s), _bytes(hi_s)
        else:
            lo = hi = _bytes(text)
    except ValueError:
        raise UsageError(f"--size: expected N or MIN-MAX bytes (suffixes K, M), got {text!r}") from None
    if lo < 8 or hi < lo:
        raise UsageError(f"--size: expected 8 <= MIN <= MAX (a message carries an 8-byte frame), got {text!r}")
    return lo, hi


def _bytes(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:], 1)
    if mult != 1:
        text = text[:-1]
    value = int(text) * mult
    if value < 0:
        raise ValueError(text)
    return value


def _config(args: argparse.Namespace, **extra: Any) -> Config:
    pairs = []
    for item in args.set or []:
        if "=" not in item:
            raise UsageError(f"--set: expected NAME=VALUE, got {item!r}")
        name, value = item.split("=", 1)
        pairs.append((name.strip(), value))
    cfg = Config.from_strings(pairs, Config.build())
    if extra:
        import attrs

        cfg = attrs.evolve(cfg, **extra)
    return cfg


def _link_model(args: argparse.Namespace) -> Any:
    from .backends.sim import LinkModel

    kw: dict[str, Any] = {}
    if args.loss is not None:
        kw["loss"] = _prob(args.loss, "--loss")
    if args.burst is not None:
        try:
            p_s, n_s = args.burst.split(",")
            kw["burst"] = (_prob(p_s, "--burst P"), float(n_s))
        except ValueError:
            raise UsageError(f"--burst: expected P,LEN (loss rate, mean burst length), got {args.burst!r}") from None
    for name in ("reorder", "duplicate", "corrupt"):
        value = getattr(args, name)
        if value is not None:
            kw[name] = _prob(value, f"--{name}")
    if args.delay is not None:
        try:
            parts = [float(x) for x in args.delay.split(",")]
        except ValueError:
            raise UsageError(f"--delay: expected MS or MS,JITTER_MS, got {args.delay!r}") from None
        if len(parts) > 2 or any(x < 0 for x in parts):
            raise UsageError(f"--delay: expected MS or MS,JITTER_MS (>= 0), got {args.delay!r}")
        kw["delay"] = parts[0] / 1000
        if len(parts) == 2:
            kw["jitter"] = parts[1] / 1000
    if args.rate is not None:
        if args.rate <= 0:
            raise UsageError(f"--rate: expected a positive Mbit/s figure, got {args.rate}")
        kw["rate_mbps"] = args.rate
        kw["queue_limit"] = max(1 << 20, int(args.rate * 1e6 / 8 * 0.01))  # 10 ms of queue
    if kw.get("reorder") and not kw.get("delay"):
        kw["delay"] = 0.001  # netem's reorder needs a delay to overtake
    return LinkModel(**kw)


class Progress:
    """A one-line progress bar on a terminal (never with --json, never when piped)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = max(1, total)
        self.enabled = enabled and sys.stderr.isatty()
        self.last = 0.0
        self.start = time.monotonic()

    def update(self, done: int, nbytes: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and done < self.total:
            return
        self.last = now
        frac = min(1.0, done / self.total)
        bar = "#" * int(frac * 30)
        rate = nbytes / max(1e-9, now - self.start) / 1e6
        sys.stderr.write(f"\r[{bar:<30}] {frac:6.1%} {done}/{self.total} msgs {rate:8.1f} MB/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def _peer_address(backend: str, text: str) -> bytes:
    """``--peer``: ``HOST:PORT`` where the backend understands it, else the address as hex
    (what ``btl serve`` prints)."""
    plugin = registry.load_backend(backend)
    parse = getattr(plugin, "parse_peer", None)
    if parse is not None:
        try:
            return parse(text)
        except ValueError as exc:
            raise UsageError(f"--peer: {exc}") from None
    try:
        return bytes.fromhex(text.removeprefix("hex:").replace(":", ""))
    except ValueError:
        raise UsageError(f"--peer: expected the address {backend!r} printed (hex), got {text!r}") from None


def _backend_options(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    for item in getattr(args, "option", None) or []:
        if "=" not in item:
            raise UsageError(f"--option: expected NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        opts[k.strip()] = v
    if getattr(args, "bind", None):
        opts["bind"] = args.bind
    return opts


def _plugins(args: argparse.Namespace) -> list[Any]:
    """Tool plugins the command line asks for (``--trace FILE``)."""
    if getattr(args, "trace", None):
        from .plugins.pcap import PcapTracer

        return [PcapTracer(args.trace)]
    return []


# ---------------------------------------------------------------------------------- commands


def cmd_backends(args: argparse.Namespace) -> int:
    rows = registry.list_backends()
    if args.json:
        print(json.dumps([{"name": r.name, "usable": r.usable, "reason": r.reason, "source": r.source}
                          for r in rows]))
        return 0
    for r in rows:
        state = "usable" if r.usable else "unavailable"
        print(f"{r.name:8} {state:12} {r.reason or ''}".rstrip())
    return 0


def cmd_params(args: argparse.Namespace) -> int:
    for name, default, allowed, doc in Config.describe():
        print(f"{name:28} default {default!r:<12} {doc}; {allowed}  (BTL_{name.upper()})")
    return 0


def _run_sim_transfer(args: argparse.Namespace, messages: list[bytes], cfg: Config,
                      seed: int) -> dict[str, Any]:
    from .backends.sim import Fabric

    link = _link_model(args)
    # 20 us of interrupt coalescing, as a real NIC: receivers handle frames in batches
    fabric = Fabric(seed=seed, default=link, pcap=args.pcap, coalesce=SIM_COALESCE)
    mtu = args.mtu or 9000
    a = open_transport("sim", config=cfg, fabric=fabric, mtu=mtu, name="a")
    b = open_transport("sim", config=cfg, fabric=fabric, mtu=mtu, name="b")
    verifier = Verifier(ordered=cfg.ordered)
    b.on(TAG_DATA, lambda p, t, d: verifier.on_data(d))
    done: list[BaseException | None] = []
    total = len(messages)
    progress = Progress(total, not args.json)
    peer = a.connect(b.address)
    t0 = time.perf_counter()
    sent_bytes = 0
    for m in messages:
        a.send(peer, TAG_DATA, m, done.append)
        sent_bytes += len(m)

    def finished() -> bool:
        progress.update(verifier.delivered, verifier.bytes_delivered)
        return len(done) == total and verifier.delivered >= total

    try:
        run_until([a, b], finished, timeout=args.timeout)
        timed_out = False
    except TimeoutError:
        timed_out = True
    progress.close()
    wall = time.perf_counter() - t0
    report = verifier.report({"messages": total})
    errors = [repr(e) for e in done if e is not None]
    if timed_out:
        report["errors"].append(f"timed out after {args.timeout:g} virtual seconds")
    if errors:
        report["errors"].append(f"{len(errors)} sends failed: {errors[0]}")
    sim_time = fabric.now
    stats = a.stats()
    rstats = b.stats()
    a.close()
    b.close()
    if args.pcap:
        fabric.close_pcap()
    verified = report["verified"] and not timed_out and not errors and len(done) == total
    return {
        "backend": "sim",
        "seed": seed,
        "messages_sent": total,
        "messages_delivered": report["messages_delivered"],
        "bytes_sent": sent_bytes,
        "bytes_delivered": report["bytes_delivered"],
        "verified": verified,
        "ordered": cfg.ordered,
        "sim_time_s": sim_time,
        "wall_time_s": wall,
        "goodput_mbps": report["bytes_delivered"] * 8 / sim_time / 1e6 if sim_time > 0 else None,
        "errors": report["errors"],
        "link": {k: v for k, v in vars(args).items() if k in (
            "loss", "burst", "reorder", "duplicate", "corrupt", "delay", "rate", "mtu") and v is not None},
        "fabric": fabric.stats(),
        "stats": stats,
        "receiver_stats": rstats,
        "stats_line": [a.stats_line(), b.stats_line()],
    }


def _run_remote_transfer(args: argparse.Namespace, cfg: Config, seed: int) -> dict[str, Any]:
    if not args.peer:
        raise UsageError(f"--peer is required with --backend {args.backend} "
                         f"(the address 'btl serve --backend {args.backend}' printed)")
    address = _peer_address(args.backend, args.peer)
    options = _backend_options(args)
    if args.mtu:
        options["mtu"] = args.mtu
    t = open_transport(args.backend, config=cfg, plugins=_plugins(args), **options)
    reports: list[dict[str, Any]] = []
    t.on(TAG_REPORT, lambda p, tag, d: reports.append(decode_json(d)))
    done: list[BaseException | None] = []
    try:
        peer = t.connect(address)
    except ValueError as exc:
        raise UsageError(f"--peer: {exc}") from None
    fin: dict[str, Any] = {"ordered": cfg.ordered, "messages": 0, "file": None}
    t0 = time.perf_counter()
    sent_bytes = 0
    count = 0
    progress_total = args.messages
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            raise UsageError(f"--file: {path} is not a readable file")
        fin["file"] = file_meta(path)
        progress_total = max(1, (fin["file"]["size"] + FILE_CHUNK - 1) // FILE_CHUNK)
        source = ((TAG_FILE, c) for c in file_chunks(path))
    else:
        lo, hi = _size_range(args.size)
        fin["messages"] = args.messages
        source = ((TAG_DATA, m) for m in make_messages(seed, args.messages, lo, hi))
    progress = Progress(progress_total, not args.json)
    in_flight_cap = 256  # bound memory: at most this many unacknowledged messages
    deadline = time.monotonic() + args.timeout
    try:
        for tag, m in source:
            t.send(peer, tag, m, done.append)
            sent_bytes += len(m)
            count += 1
            while count - len(done) >= in_flight_cap:
                t.progress(timeout=0.01)
                progress.update(len(done), sent_bytes)
                if time.monotonic() > deadline:
                    raise TimeoutError
        t.send(peer, TAG_FIN, encode_json(fin), done.append)
        count += 1
        run_until([t], lambda: (progress.update(len(done), sent_bytes) or True) and len(done) == count
                  and bool(reports), timeout=max(1.0, deadline - time.monotonic()))
        timed_out = False
    except TimeoutError:
        timed_out = True
    progress.close()
    wall = time.perf_counter() - t0
    errors = [repr(e) for e in done if e is not None]
    report = reports[0] if reports else {"verified": False, "errors": ["no report from the server"],
                                         "messages_delivered": 0, "bytes_delivered": 0}
    result_errors = list(report.get("errors", []))
    if timed_out:
        result_errors.append(f"timed out after {args.timeout:g} s")
    if errors:
        result_errors.append(f"{len(errors)} sends failed: {errors[0]}")
    stats = t.stats()
    line = t.stats_line()
    t.close()
    verified = bool(report.get("verified")) and not timed_out and not errors
    return {
        "backend": args.backend,
        "seed": seed,
        "peer": args.peer,
        "messages_sent": fin["messages"] if not args.file else count - 1,
        "messages_delivered": report.get("messages_delivered", 0),
        "bytes_sent": sent_bytes,
        "bytes_delivered": report.get("bytes_delivered", 0),
        "verified": verified,
        "ordered": cfg.ordered,
        "sim_time_s": None,
        "wall_time_s": wall,
        "goodput_mbps": sent_bytes * 8 / wall / 1e6 if wall > 0 else None,
        "file": report.get("file"),
        "errors": result_errors,
        "stats": stats,
        "stats_line": [line],
    }


def _print_summary(result: dict[str, Any], title: str) -> None:
    s = result["stats"]
    mb = result["bytes_delivered"] / 1e6
    print(f"{title}: backend {result['backend']}, seed {result['seed']}")
    print(f"  messages: {result['messages_sent']} sent, {result['messages_delivered']} delivered "
          f"({mb:.2f} MB), {'ordered' if result['ordered'] else 'unordered'}")
    if result.get("sim_time_s") is not None:
        print(f"  time: {result['sim_time_s'] * 1000:.1f} ms simulated, {result['wall_time_s']:.2f} s wall")
    else:
        print(f"  time: {result['wall_time_s']:.2f} s")
    if result.get("goodput_mbps"):
        print(f"  goodput: {result['goodput_mbps']:.1f} Mbit/s")
    print(f"  sends {s['num_total_sends']}, resends {s['num_resends']} "
          f"({s['num_fast_retrans']} fast, {s['num_timeout_retrans']} timeout), "
          f"standalone ACKs received {s['num_ack_recvs']}")
    for line in result.get("stats_line", []):
        print(f"  {line}")
    if result.get("errors"):
        for err in result["errors"]:
            print(f"  error: {err}")
    print(f"  verified: {'yes' if result['verified'] else 'NO'}")


def cmd_transfer(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    if not args.json:
        print(f"seed {seed}", file=sys.stderr)
    cfg = _config(args, **({"ordered": False} if args.unordered else {}))
    if args.backend == "sim":
        if args.file:
            raise UsageError("--file needs a real backend (--backend udp or verbs) and a 'btl serve' peer")
        lo, hi = _size_range(args.size)
        messages = list(make_messages(seed, args.messages, lo, hi))
        result = _run_sim_transfer(args, messages, cfg, seed)
    else:
        for knob in ("loss", "burst", "reorder", "duplicate", "corrupt", "delay", "rate", "pcap"):
            # (--trace is the real backends' capture)
            if getattr(args, knob) is not None:
                raise UsageError(f"--{knob} applies to the simulator only (--backend sim)")
        result = _run_remote_transfer(args, cfg, seed)
    return _report(args, result, "transfer")


def _report(args: argparse.Namespace, result: dict[str, Any], title: str) -> int:
    """Print the result (one JSON object, or the human summary); exit 0 only if verified."""
    if args.json:
        result.pop("stats_line", None)
        print(json.dumps(result, sort_keys=True, default=str))
    else:
        _print_summary(result, title)
    return 0 if result["verified"] else 1


def cmd_demo(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else 2026
    ns = argparse.Namespace(
        loss="0.02", burst=None, reorder="0.01", duplicate="0.005", corrupt="0.002",
        delay="0.5,0.05", rate=1000.0, mtu=9000, pcap=args.pcap, timeout=120.0, json=args.json)
    rng = random.Random(seed)
    small = list(make_messages(seed, 400, 8, 4096))
    large = list(make_messages(seed + 1, 40, 64 << 10, 1 << 20))
    messages = small + large
    rng.shuffle(messages)
    # re-frame so that indexes follow the send order
    from .verify import FRAME

    messages = [FRAME.pack(i, *FRAME.unpack_from(m)[1:]) + m[FRAME.size:] for i, m in enumerate(messages)]
    if not args.json:
        print(f"btlcore demo: two nodes on the simulator, 2% loss, 1% reorder, 0.5% duplicates, "
              f"0.2% corruption, 0.5 ms delay, 1 Gbit/s; {len(small)} small and {len(large)} "
              f"large messages (seed {seed})")
    return _report(args, _run_sim_transfer(ns, messages, _config(args), seed), "demo")


def cmd_serve(args: argparse.Namespace) -> int:
    cfg = _config(args)
    t = open_transport(args.backend, config=cfg, plugins=_plugins(args), **_backend_options(args))
    verifier = Verifier(ordered=cfg.ordered)
    out_dir = Path(args.out) if args.out else None
    state = {"reports": 0, "stop": False}

    def on_file(peer: Any, tag: int, data: bytes) -> None:
        if verifier.file_out is None and out_dir is not None and verifier.file_hash is None:
            out_dir.mkdir(parents=True, exist_ok=True)
            verifier.file_out = (out_dir / ".incoming").open("wb")
        verifier.on_file(data)

    def on_fin(peer: Any, tag: int, data: bytes) -> None:
        fin = decode_json(data)
        out = verifier.file_out
        if out is not None:
            out.close()
            name = Path((fin.get("file") or {}).get("name") or "received.bin").name
            (out_dir / ".incoming").replace(out_dir / name)  # type: ignore[operator]
        report = verifier.report(fin)
        t.send(peer, TAG_REPORT, encode_json(report))
        state["reports"] += 1
        if args.json:
            print(json.dumps({"event": "report", **report}), flush=True)
        else:
            print(f"run from {peer.address.hex()}: {report['messages_delivered']} messages, "
                  f"{report['bytes_delivered']} bytes, verified: {'yes' if report['verified'] else 'NO'}"
                  + "".join(f"\n  error: {e}" for e in report["errors"]), flush=True)

    def on_data(peer: Any, tag: int, data: bytes) -> None:
        verifier.on_data(data)
        if args.count and verifier.delivered >= args.count:
            state["stop"] = True

    t.on(TAG_DATA, on_data)
    t.on(TAG_FILE, on_file)
    t.on(TAG_FIN, on_fin)
    signal.signal(signal.SIGTERM, lambda *_: state.__setitem__("stop", True))
    if args.json:
        print(json.dumps({"event": "listening", "backend": args.backend, "address": t.address.hex()}), flush=True)
    else:
        print(f"btl serve: backend {args.backend}, address {t.address.hex()}"
              + (f" ({registry.load_backend(args.backend).describe_address(t.address)})"
                 if hasattr(registry.load_backend(args.backend), "describe_address") else ""), flush=True)
    try:
        while not state["stop"]:
            t.progress(timeout=0.05)
    except KeyboardInterrupt:
        pass
    if args.count and verifier.delivered >= args.count and not state["reports"]:
        report = verifier.report({"messages": args.count})
        if not args.json:
            print(f"{report['messages_delivered']} messages received, verified: "
                  f"{'yes' if report['verified'] else 'NO'}")
    t.close()
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks").is_dir():
        raise UsageError("btl bench needs a source checkout (the benchmarks/ folder is not installed)")
    sys.path.insert(0, str(root))
    from benchmarks.runner import main as bench_main  # type: ignore[import-not-found]

    argv = (["--quick"] if args.quick else []) + (["--json"] if args.json else []) + list(args.rest or [])
    return int(bench_main(argv) or 0)


def _split_bench(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``btl bench ...``: everything after ``bench`` goes to the benchmark runner."""
    argv = list(argv)
    if argv and argv[0] == "bench":
        return ["bench"], argv[1:]
    return argv, []


# ---------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="btl", description="btlcore: reliable messaging over unreliable datagrams")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--set", action="append", metavar="NAME=VALUE",
                        help="a protocol parameter (see 'btl params'); repeatable")
        sp.add_argument("--json", action="store_true", help="print one JSON object")

    sp = sub.add_parser("demo", help="two simulated nodes, lossy link, every byte verified")
    common(sp)
    sp.add_argument("--seed", type=int)
    sp.add_argument("--pcap", metavar="FILE", help="write every frame (and every drop) to FILE")
    sp.set_defaults(func=cmd_demo)

    sp = sub.add_parser("transfer", help="send verified messages (or a file) over a backend")
    common(sp)
    sp.add_argument("--backend", default=os.environ.get("BTL_BACKEND", "sim"))
    sp.add_argument("--peer", help="the server's address (udp: HOST:PORT; any backend: the hex 'btl serve' prints)")
    sp.add_argument("--bind", help="local HOST:PORT (udp)")
    sp.add_argument("--option", action="append", metavar="NAME=VALUE", help="a backend option; repeatable")
    sp.add_argument("--messages", type=int, default=1000)
    sp.add_argument("--size", default="8-65536", help="N or MIN-MAX bytes per message (uniform, seeded)")
    sp.add_argument("--file", help="send this file (udp/verbs); it arrives byte-identical")
    sp.add_argument("--unordered", action="store_true", help="unordered delivery (usnic's and SRD's contract)")
    sp.add_argument("--seed", type=int)
    sp.add_argument("--trace", metavar="FILE", help="pcap of every datagram sent and received (udp/verbs)")
    sp.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds (virtual on sim)")
    sim = sp.add_argument_group("simulator link (--backend sim)")
    sim.add_argument("--loss", help="random loss probability")
    sim.add_argument("--burst", metavar="P,LEN", help="Gilbert-Elliott: long-run loss P, mean burst LEN frames")
    sim.add_argument("--reorder", help="probability a frame overtakes others")
    sim.add_argument("--duplicate", help="duplicate probability")
    sim.add_argument("--corrupt", help="bit-flip probability")
    sim.add_argument("--delay", metavar="MS[,JITTER_MS]", help="one-way delay and jitter")
    sim.add_argument("--rate", type=float, metavar="MBPS", help="link rate, Mbit/s (10 ms queue)")
    sim.add_argument("--mtu", type=int, help="largest datagram, bytes")
    sim.add_argument("--pcap", metavar="FILE", help="write every frame (and every drop) to FILE")
    sp.set_defaults(func=cmd_transfer)

    sp = sub.add_parser("serve", help="receive and verify transfers until interrupted or --count")
    common(sp)
    sp.add_argument("--backend", default=os.environ.get("BTL_BACKEND", "udp"))
    sp.add_argument("--bind", help="local HOST:PORT (udp; default 127.0.0.1, ephemeral port)")
    sp.add_argument("--option", action="append", metavar="NAME=VALUE", help="a backend option; repeatable")
    sp.add_argument("--count", type=int, default=0, help="stop after this many messages")
    sp.add_argument("--out", metavar="DIR", help="write received files into DIR")
    sp.add_argument("--trace", metavar="FILE", help="pcap of every datagram sent and received")
    sp.set_defaults(func=cmd_serve)

    sp = sub.add_parser("backends", help="the backends found, and whether each can be used here")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_backends)

    sp = sub.add_parser("params", help="every protocol parameter, its default and allowed values")
    sp.set_defaults(func=cmd_params)

    sp = sub.add_parser("bench", help="benchmarks against raw UDP, kernel TCP and aioquic "
                        "(--quick, --json, --profile, --only, ...: see 'btl bench --help')",
                        add_help=False)
    sp.set_defaults(func=cmd_bench, quick=False, json=False, rest=[])
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv, bench_rest = _split_bench(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command == "bench":
        args.rest = bench_rest
        args.quick = args.json = False  # the runner parses its own options
    try:
        return int(args.func(args) or 0)
    except (UsageError, BtlError, ValueError) as exc:
        print(f"btl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
