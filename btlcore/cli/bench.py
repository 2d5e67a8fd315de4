"""``btl bench``: the benchmarks of :mod:`btlcore.bench`.  Every argument after ``bench``
goes to their runner, which parses its own options (``btl bench --help``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


def add_parser(sub: Any) -> None:
    sp = sub.add_parser("bench", help="benchmarks against raw UDP, kernel TCP and aioquic "
                        "(--quick, --json, --profile, --only, ...: see 'btl bench --help')",
                        add_help=False)
    sp.set_defaults(func=run, rest=[])


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """``btl bench ...``: the command, and everything after it (the runner's arguments)."""
    argv = list(argv)
    if argv and argv[0] == "bench":
        return ["bench"], argv[1:]
    return argv, []


def run(args: argparse.Namespace) -> int:
    from ..bench.runner import main as bench_main

    return int(bench_main(list(args.rest)) or 0)
