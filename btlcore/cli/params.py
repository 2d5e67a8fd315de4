"""``btl params``: every protocol parameter, its default, allowed values and variable."""

from __future__ import annotations

import argparse
from typing import Any

from ..config import Config


def add_parser(sub: Any) -> None:
    sp = sub.add_parser("params", help="every protocol parameter, its default and allowed values")
    sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    for name, default, allowed, doc in Config.describe():
        print(f"{name:28} default {default!r:<12} {doc}; {allowed}  (BTL_{name.upper()})")
    return 0
