"""``btl wireshark``: where btlcore's Wireshark dissector is, and installing it."""

from __future__ import annotations

import argparse
from typing import Any

from .. import wireshark
from .args import UsageError


def add_parser(sub: Any) -> None:
    sp = sub.add_parser("wireshark", help="the Wireshark/tshark dissector for btlcore (Lua): its path, or install it")
    what = sp.add_mutually_exclusive_group()
    what.add_argument("--path", action="store_true", help="print the dissector's path (the default)")
    what.add_argument("--install", action="store_true",
                      help="copy it into your Wireshark Lua plugin folder (as tshark reports it, "
                           "else ~/.local/lib/wireshark/plugins)")
    sp.add_argument("--dest", metavar="DIR", help="with --install: copy it into DIR instead")
    sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.dest and not args.install:
        raise UsageError("--dest goes with --install")
    if not args.install:
        print(wireshark.path())
        return 0
    target = wireshark.install(args.dest)
    print(f"installed {target}")
    print("Wireshark and tshark load it at their next start (protocol 'btl', e.g. -Y btl.type==1)")
    return 0
