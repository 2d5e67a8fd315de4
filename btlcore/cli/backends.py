"""``btl backends``: the backends found, and whether each can be used here (and why not)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .. import registry


def add_parser(sub: Any) -> None:
    sp = sub.add_parser("backends", help="the backends found, and whether each can be used here")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows = registry.list_backends()
    if args.json:
        print(json.dumps([{"name": r.name, "usable": r.usable, "reason": r.reason, "source": r.source}
                          for r in rows]))
        return 0
    for r in rows:
        state = "usable" if r.usable else "unavailable"
        print(f"{r.name:8} {state:12} {r.reason or ''}".rstrip())
    return 0
