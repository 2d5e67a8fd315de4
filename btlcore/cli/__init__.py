"""The ``btl`` command: the demo, verified transfers on any backend, a receiving server,
the backends found here, the protocol's parameters, and the benchmark.

One module per command (``demo``, ``transfer``, ``serve``, ``backends``, ``params``,
``bench``, ``wireshark``, ``plot``), each with ``add_parser(subparsers)`` and ``run(args) -> exit status``.  A
backend's own flags (the simulator's link, UDP's local address) come from the backend through
the :class:`~btlcore.device.CliSpec` hooks (:mod:`.backend_options`): nothing here names them.

Mistakes (a bad option, an unknown backend, an unreachable peer) print one line and exit 2;
a transfer that was not verified exits 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import BtlError
from . import backends, bench, demo, params, plot, serve, transfer, wireshark
from .args import UsageError
from .progress import Progress

__all__ = ["Progress", "UsageError", "build_parser", "main"]

COMMANDS = (demo, transfer, serve, backends, params, bench, wireshark, plot)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="btl", description="btlcore: reliable messaging over unreliable datagrams")
    p.add_argument("--version", action="version", version=version_line(),
                   help="print btlcore's version and which build runs (compiled or pure Python), and exit")
    sub = p.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def version_line() -> str:
    """``btl --version``: the version, the build (mypyc-compiled or pure Python) and Python's."""
    import platform

    import btlcore

    build = "compiled (mypyc)" if btlcore.compiled else "pure Python"
    return f"btlcore {btlcore.__version__}, {build}, Python {platform.python_version()}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv, bench_rest = bench.split_argv(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.command == "bench":
        args.rest = bench_rest
    try:
        return int(args.func(args) or 0)
    except (UsageError, BtlError, ValueError) as exc:
        print(f"btl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
