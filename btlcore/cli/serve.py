"""``btl serve``: receive and verify transfers until interrupted (SIGINT, SIGTERM) or
``--count`` messages, answering each run's FIN with a report.

With ``--count``, reaching the count does not end the server at once: the run's FIN is
still to come (the client waits for its report), so the server serves on until it has
answered that FIN, or for ``peer_timeout`` if none comes."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from .. import addresses
from ..run import open as open_transport
from ..transport import Transport
from ..verify import TAG_DATA, TAG_FILE, TAG_FIN, TAG_REPORT, Verifier, decode_json, encode_json
from . import backend_options
from .args import TRACE_HELP, add_common, build_config, tool_plugins, trace_file


def add_parser(sub: Any) -> None:
    sp = sub.add_parser("serve", help="receive and verify transfers until interrupted or --count")
    add_common(sp)
    sp.add_argument("--backend", default=os.environ.get("BTL_BACKEND", "udp"))
    sp.add_argument("--option", action="append", metavar="NAME=VALUE", help="a backend option; repeatable")
    sp.add_argument("--count", type=int, default=0, help="stop after this many messages")
    sp.add_argument("--out", metavar="DIR", help="write received files into DIR")
    sp.add_argument("--trace", metavar="FILE", help=TRACE_HELP)
    backend_options.add_groups(sp, "serve")
    sp.set_defaults(func=run)


class _Server:
    """The handlers of one serving transport: data, file chunks, and each run's FIN."""

    __slots__ = ("args", "t", "verifier", "out_dir", "reports", "stop", "reached_at", "answered")

    def __init__(self, args: argparse.Namespace, t: Transport, verifier: Verifier) -> None:
        self.args = args
        self.t = t
        self.verifier = verifier
        self.out_dir = Path(args.out) if args.out else None
        self.reports = 0
        self.stop = False
        self.reached_at: float | None = None  # when --count was reached
        self.answered = False  # the FIN of the run that reached --count was answered
        t.on(TAG_DATA, self.on_data)
        t.on(TAG_FILE, self.on_file)
        t.on(TAG_FIN, self.on_fin)

    def on_data(self, peer: Any, tag: int, data: bytes) -> None:
        self.verifier.on_data(data)
        if self.args.count and self.reached_at is None and self.verifier.delivered >= self.args.count:
            self.reached_at = time.monotonic()

    def on_file(self, peer: Any, tag: int, data: bytes) -> None:
        v = self.verifier
        if v.file_out is None and self.out_dir is not None and v.file_hash is None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            v.file_out = (self.out_dir / ".incoming").open("wb")
        v.on_file(data)

    def on_fin(self, peer: Any, tag: int, data: bytes) -> None:
        fin = decode_json(data)
        out = self.verifier.file_out
        if out is not None and self.out_dir is not None:
            out.close()
            name = Path((fin.get("file") or {}).get("name") or "received.bin").name
            (self.out_dir / ".incoming").replace(self.out_dir / name)
        report = self.verifier.report(fin)
        self.t.send(peer, TAG_REPORT, encode_json(report))
        self.reports += 1
        if self.reached_at is not None:
            self.answered = True
        if self.args.json:
            print(json.dumps({"event": "report", **report, "stats": self.t.stats()}), flush=True)
        else:
            print(f"run from {addresses.text(self.t.device, peer.address)}: {report['messages_delivered']} messages, "
                  f"{report['bytes_delivered']} bytes, verified: {'yes' if report['verified'] else 'NO'}"
                  + "".join(f"\n  error: {e}" for e in report["errors"]), flush=True)


def _announce(args: argparse.Namespace, t: Transport) -> None:
    if args.json:
        print(json.dumps({"event": "listening", "backend": args.backend, "address": t.address.hex(),
                          "address_text": t.address_text}), flush=True)
        return
    words = backend_options.format_address(args.backend, t.address)
    if words:  # what clients type (--peer, connect()), and the hex that any backend takes
        print(f"btl serve: backend {args.backend}, address {words} (hex {t.address.hex()})", flush=True)
    else:
        print(f"btl serve: backend {args.backend}, address {t.address.hex()}", flush=True)


def run(args: argparse.Namespace) -> int:
    cfg = build_config(args)
    backend_options.check_foreign(args)
    options = backend_options.device_options(args.backend, "serve", args)
    t = open_transport(args.backend, config=cfg, plugins=tool_plugins(args), trace=trace_file(args), **options)
    verifier = Verifier(ordered=cfg.ordered)
    server = _Server(args, t, verifier)
    signal.signal(signal.SIGTERM, lambda *_: setattr(server, "stop", True))
    _announce(args, t)
    grace = cfg.peer_timeout  # after --count: how long the run's FIN may take to come
    try:
        while not server.stop:
            t.progress(timeout=0.05)
            if server.reached_at is not None and (
                    server.answered or time.monotonic() - server.reached_at > grace):
                break
    except KeyboardInterrupt:
        pass
    if server.reached_at is not None and not server.answered:
        # no FIN came: judge what arrived without resetting it (a FIN arriving while
        # close() flushes is still answered from the same counts)
        report = verifier.report({"messages": args.count}, reset=False)
        if args.json:
            print(json.dumps({"event": "count reached", **report}), flush=True)
        else:
            print(f"{report['messages_delivered']} messages received, verified: "
                  f"{'yes' if report['verified'] else 'NO'}", flush=True)
    t.close()  # flushes: the last report reaches its client
    if args.json:
        print(json.dumps({"event": "stopped", "reports": server.reports, "stats": t.stats()}), flush=True)
    return 0
