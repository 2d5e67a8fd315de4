"""``btl transfer``: verified messages (or a file) over a backend, either with both ends in
this process (a backend with a local pair: the simulator) or toward a ``btl serve``.

Each message carries its index and a CRC32C of its body, so the receiver checks
exactly-once, intact and in-order delivery without trusting the transport.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config import Config
from ..device import LocalPair
from ..errors import PeerError, WouldBlock
from ..run import open as open_transport
from ..run import run_until
from ..transport import Transport
from ..verify import (
    FILE_CHUNK,
    TAG_DATA,
    TAG_FILE,
    TAG_FIN,
    TAG_REPORT,
    Verifier,
    decode_json,
    encode_json,
    file_chunks,
    file_meta,
    make_messages,
)
from . import backend_options
from .args import TRACE_HELP, UsageError, add_common, build_config, size_range, tool_plugins, trace_file
from .progress import Progress
from .report import report

IN_FLIGHT_CAP = 256
"""Toward a server, at most this many unacknowledged messages (bounds memory)."""


def add_parser(sub: Any) -> None:
    sp = sub.add_parser("transfer", help="send verified messages (or a file) over a backend")
    add_common(sp)
    sp.add_argument("--backend", default=os.environ.get("BTL_BACKEND", "sim"))
    sp.add_argument("--peer", help="the server's address (udp: HOST:PORT; any backend: the hex 'btl serve' prints)")
    sp.add_argument("--option", action="append", metavar="NAME=VALUE", help="a backend option; repeatable")
    sp.add_argument("--messages", type=int, default=1000)
    sp.add_argument("--size", default="8-65536", help="N or MIN-MAX bytes per message (uniform, seeded)")
    sp.add_argument("--file", help="send this file (udp/verbs); it arrives byte-identical")
    sp.add_argument("--unordered", action="store_true", help="unordered delivery (usnic's and SRD's contract)")
    sp.add_argument("--seed", type=int)
    sp.add_argument("--trace", metavar="FILE", help=TRACE_HELP)
    sp.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds (virtual on sim)")
    sp.add_argument("--mtu", type=int, help="largest datagram, bytes (the device option 'mtu'; 9000 on sim)")
    backend_options.add_groups(sp, "transfer")
    sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # every check of the command line first: a mistake is the first line printed, not one
    # after "seed N"
    cfg = build_config(args, **({"ordered": False} if args.unordered else {}))
    backend_options.check_foreign(args)
    options = backend_options.device_options(args.backend, "transfer", args)
    if args.mtu:
        options["mtu"] = args.mtu
    if args.messages < 0:
        raise UsageError(f"--messages: expected a count >= 0, got {args.messages}")
    if args.timeout <= 0:
        raise UsageError(f"--timeout: expected seconds > 0, got {args.timeout:g}")
    lo, hi = size_range(args.size, cfg.max_message_size)
    local = backend_options.runs_locally(args.backend)
    if local and args.file:
        raise UsageError(f"--file needs a 'btl serve' peer (a backend such as udp or verbs); "
                         f"--backend {args.backend} runs both ends in this process")
    if not local and not args.peer:
        raise UsageError(f"--peer is required with --backend {args.backend} "
                         f"(the address 'btl serve --backend {args.backend}' printed)")
    address = None if local else backend_options.parse_address(args.backend, args.peer)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    if not args.json:
        print(f"seed {seed}", file=sys.stderr)
    if local:
        messages = list(make_messages(seed, args.messages, lo, hi))
        pair = backend_options.local_pair(args.backend, "transfer", args, options, seed)
        result = run_local(args.backend, pair, messages, cfg, seed, args.timeout, args.json,
                           trace=trace_file(args), plugins=tool_plugins(args))
    else:
        assert address is not None
        result = run_remote(args, options, cfg, seed, address, (lo, hi))
        if result.get("server_failed") and not args.json:
            # the server died or went silent: one line, no summary of a run that cannot end
            print(f"btl transfer: error: {result['server_failed']}", file=sys.stderr)
            return 1
    return report(args.json, result, "transfer")


# ---------------------------------------------------------------------------------- both ends here


def run_local(backend: str, pair: LocalPair, messages: list[bytes], cfg: Config, seed: int,
              timeout: float, json_out: bool, trace: str | None = None,
              plugins: list[Any] | None = None) -> dict[str, Any]:
    """Send ``messages`` from one end of ``pair`` to the other, verifying every byte (both
    ends traced to ``trace``, and, with ``plugins``, the sender seen by them)."""
    a = open_transport(backend, config=cfg, trace=trace, plugins=plugins or (), **pair.options[0])
    b = open_transport(backend, config=cfg, trace=trace, **pair.options[1])
    verifier = Verifier(ordered=cfg.ordered)
    b.on(TAG_DATA, lambda p, t, d: verifier.on_data(d))
    done: list[BaseException | None] = []
    total = len(messages)
    progress = Progress(total, not json_out)
    peer = a.connect(b.address)
    writable: list[bool] = []
    a.on_peer(lambda event, p, exc: writable.append(True) if event == "writable" else None)
    t0 = time.perf_counter()
    start = a.now()
    sent_bytes = 0

    def finished() -> bool:
        progress.update(verifier.delivered, verifier.bytes_delivered)
        return len(done) == total and verifier.delivered >= total

    try:
        for m in messages:
            while True:
                try:
                    a.send(peer, TAG_DATA, m, done.append)
                    break
                except WouldBlock:  # the send buffer is full: both ends progress until it drains
                    writable.clear()
                    run_until([a, b], lambda: bool(writable) or finished(),
                              timeout=max(0.0, start + timeout - a.now()))
            sent_bytes += len(m)
        run_until([a, b], finished, timeout=max(0.0, start + timeout - a.now()))
        timed_out = False
    except TimeoutError:
        timed_out = True
    except PeerError as exc:  # a send after the receiver failed
        done.append(exc)
        timed_out = False
    progress.close()
    wall = time.perf_counter() - t0
    rep = verifier.report({"messages": total})
    errors = [repr(e) for e in done if e is not None]
    if timed_out:
        rep["errors"].append(f"timed out after {timeout:g} virtual seconds")
    if errors:
        rep["errors"].append(f"{len(errors)} sends failed: {errors[0]}")
    sim_time = a.now() if a.capabilities.virtual_time else None
    stats, rstats = a.stats(), b.stats()
    path = _path(a, peer)
    lines = [a.stats_line(), b.stats_line()]
    a.close()
    b.close()
    extra = dict(pair.finish())
    elapsed = sim_time if sim_time is not None else wall
    return {
        "backend": backend, "seed": seed,
        "messages_sent": total, "messages_delivered": rep["messages_delivered"],
        "bytes_sent": sent_bytes, "bytes_delivered": rep["bytes_delivered"],
        "verified": rep["verified"] and not timed_out and not errors and len(done) == total,
        "ordered": cfg.ordered, "sim_time_s": sim_time, "wall_time_s": wall,
        "goodput_mbps": _goodput(rep["bytes_delivered"], elapsed),
        "errors": rep["errors"], **extra,
        "stats": stats, "receiver_stats": rstats, "stats_line": lines,
        "path": path,  # what the sender knew of the path at the end (Transport.peer_stats)
    }


def _path(t: Transport, peer: Any) -> dict[str, Any]:
    """What the sender knew of the path at the end (``Transport.peer_stats``, counters aside;
    nothing if the peer was replaced: the server restarted)."""
    try:
        path = {k: v for k, v in t.peer_stats(peer).items() if not k.startswith(("num_", "max_"))}
    except ValueError:
        return {}
    path["num_spurious_retrans"] = t.stats().get("num_spurious_retrans", 0)
    return path


def _goodput(delivered: int, elapsed: float) -> float | None:
    """Mbit/s of verified delivery; None (no goodput line) when nothing was delivered."""
    return delivered * 8 / elapsed / 1e6 if delivered and elapsed > 0 else None


# ---------------------------------------------------------------------------------- toward a server


def _source(args: argparse.Namespace, seed: int, fin: dict[str, Any],
            sizes: tuple[int, int]) -> tuple[Iterator[tuple[int, bytes]], int]:
    """What to send (tagged messages, or a file's chunks), and how many for the progress bar."""
    if args.file:
        path = Path(args.file)
        if not path.is_file():
            raise UsageError(f"--file: {path} is not a readable file")
        fin["file"] = file_meta(path)
        total = max(1, (fin["file"]["size"] + FILE_CHUNK - 1) // FILE_CHUNK)
        return ((TAG_FILE, c) for c in file_chunks(path)), total
    lo, hi = sizes
    fin["messages"] = args.messages
    return ((TAG_DATA, m) for m in make_messages(seed, args.messages, lo, hi)), args.messages


def _connect(args: argparse.Namespace, options: dict[str, Any], cfg: Config,
             address: bytes) -> tuple[Transport, Any]:
    t = open_transport(args.backend, config=cfg, plugins=tool_plugins(args), trace=trace_file(args), **options)
    try:
        return t, t.connect(address)
    except ValueError as exc:
        t.close()
        raise UsageError(f"--peer: {exc}") from None


def run_remote(args: argparse.Namespace, options: dict[str, Any], cfg: Config, seed: int,
               address: bytes, sizes: tuple[int, int]) -> dict[str, Any]:
    """Send to the ``btl serve`` at ``--peer``; its report says what arrived intact.

    A server that dies ends the run within ``peer_timeout``: with data outstanding the
    transport declares it failed; once everything is acknowledged, the report is due at
    once (the server answers the FIN in the pass that delivers it), so a wait for it longer
    than ``peer_timeout`` means the server is gone."""
    t, peer = _connect(args, options, cfg, address)
    reports: list[dict[str, Any]] = []
    t.on(TAG_REPORT, lambda p, tag, d: reports.append(decode_json(d)))
    failed: list[str] = []

    def on_peer(event: str, p: Any, exc: BaseException | None) -> None:
        if event == "writable" or (event == "closed" and reports):
            return  # back-pressure, or a counted serve closing once it reported: no failure
        failed.append(f"server {event}: {exc}" if exc else f"server {p.address.hex()} {event}")
    t.on_peer(on_peer)
    done: list[BaseException | None] = []
    fin: dict[str, Any] = {"ordered": cfg.ordered, "messages": 0, "file": None}
    t0 = time.perf_counter()
    source, progress_total = _source(args, seed, fin, sizes)
    progress = Progress(progress_total, not args.json)
    sent = [0, 0]  # bytes, messages
    deadline = time.monotonic() + args.timeout
    timed_out = False
    try:
        for tag, m in source:
            try:  # the send buffer full: wait for room, progressing, until the run's deadline
                t.send(peer, tag, m, done.append, timeout=max(0.0, deadline - time.monotonic()))
            except WouldBlock:
                raise TimeoutError from None
            sent[0] += len(m)
            sent[1] += 1
            while sent[1] - len(done) >= IN_FLIGHT_CAP and not failed:
                t.progress(timeout=0.01)
                progress.update(len(done), sent[0])
                if time.monotonic() > deadline:
                    raise TimeoutError
            if failed:
                break
        if not failed:
            _send_fin(t, peer, fin, done, deadline)
            sent[1] += 1
        acked_at: list[float] = []

        def reported() -> bool:
            progress.update(len(done), sent[0])
            if failed or reports:
                return len(done) == sent[1] or bool(failed)
            if len(done) == sent[1]:  # all acknowledged: the report is due now
                if not acked_at:
                    acked_at.append(time.monotonic())
                elif time.monotonic() - acked_at[0] > cfg.peer_timeout:
                    failed.append(f"server {peer.address.hex()} acknowledged the run but sent no "
                                  f"report within peer_timeout ({cfg.peer_timeout:g} s)")
                    return True
            return False

        # progress in short waits, not one long run_until: an idle transport has no timer,
        # and the report's deadline must be checked even when nothing arrives
        while not failed and not reported():
            if time.monotonic() > deadline:
                raise TimeoutError
            t.progress(timeout=0.1)
    except TimeoutError:
        timed_out = True
    except PeerError as exc:  # a send after the server failed
        failed.append(f"server failed: {exc}")
    progress.close()
    wall = time.perf_counter() - t0
    stats, line, path = t.stats(), t.stats_line(), _path(t, peer)
    t.close(flush=not failed)
    result = _remote_result(args, seed, cfg, fin, reports, done, timed_out, wall, sent, stats, line)
    result["path"] = path
    if failed:
        result["server_failed"] = failed[0]
        result["errors"].insert(0, failed[0])
        result["verified"] = False
    return result


def _send_fin(t: Transport, peer: Any, fin: dict[str, Any], done: list[BaseException | None],
              deadline: float) -> None:
    """The FIN, waiting for room as the messages do (they may have filled the send buffer)."""
    try:
        t.send(peer, TAG_FIN, encode_json(fin), done.append, timeout=max(0.0, deadline - time.monotonic()))
    except WouldBlock:
        raise TimeoutError from None


def _remote_result(args: argparse.Namespace, seed: int, cfg: Config, fin: dict[str, Any],
                   reports: list[dict[str, Any]], done: list[BaseException | None], timed_out: bool,
                   wall: float, sent: list[int], stats: dict[str, int], line: str) -> dict[str, Any]:
    errors = [repr(e) for e in done if e is not None]
    rep: dict[str, Any] = reports[0] if reports else {"verified": False, "errors": ["no report from the server"],
                                          "messages_delivered": 0, "bytes_delivered": 0}
    result_errors = list(rep.get("errors", []))
    if timed_out:
        result_errors.append(f"timed out after {args.timeout:g} s")
    if errors:
        result_errors.append(f"{len(errors)} sends failed: {errors[0]}")
    return {
        "backend": args.backend, "seed": seed, "peer": args.peer,
        "messages_sent": fin["messages"] if not args.file else sent[1] - 1,
        "messages_delivered": rep.get("messages_delivered", 0),
        "bytes_sent": sent[0], "bytes_delivered": rep.get("bytes_delivered", 0),
        "verified": bool(rep.get("verified")) and not timed_out and not errors,
        "ordered": cfg.ordered, "sim_time_s": None, "wall_time_s": wall,
        "goodput_mbps": _goodput(rep.get("bytes_delivered", 0), wall),
        "file": rep.get("file"), "errors": result_errors,
        "stats": stats, "stats_line": [line],
    }
