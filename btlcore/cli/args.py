"""Parsing shared by the ``btl`` commands: the one-line usage error, sizes, ``--set`` and
``--option`` pairs, and the options every protocol-running command takes."""

from __future__ import annotations

import argparse
from typing import Any

import attrs

from ..config import Config


class UsageError(Exception):
    """A mistake on the command line: reported in one line, exit status 2."""


def add_common(sp: argparse.ArgumentParser) -> None:
    """``--set`` and ``--json``: taken by every command that runs the protocol."""
    sp.add_argument("--set", action="append", metavar="NAME=VALUE",
                    help="a protocol parameter (see 'btl params'); repeatable")
    sp.add_argument("--json", action="store_true", help="print one JSON object")


def parse_bytes(text: str) -> int:
    """``4096``, ``64K``, ``1M``, ``2G``: a byte count; ``ValueError`` otherwise."""
    text = text.strip().lower()
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:], 1)
    if mult != 1:
        text = text[:-1]
    value = int(text) * mult
    if value < 0:
        raise ValueError(text)
    return value


def size_range(text: str, largest: int) -> tuple[int, int]:
    """``--size N`` or ``MIN-MAX``: 1 byte up to ``largest`` (the largest message)."""
    try:
        if "-" in text:
            lo_s, hi_s = text.split("-", 1)
            lo, hi = parse_bytes(lo_s), parse_bytes(hi_s)
        else:
            lo = hi = parse_bytes(text)
    except ValueError:
        raise UsageError(f"--size: expected N or MIN-MAX bytes (suffixes K, M), got {text!r}") from None
    if lo < 1 or hi < lo:
        raise UsageError(f"--size: expected 1 <= MIN <= MAX bytes, got {text!r}")
    if hi > largest:
        raise UsageError(f"--size: {hi} bytes is more than the largest message, {largest} bytes "
                         f"(max_message_size; raise it with --set max_message_size=N)")
    return lo, hi


def name_value_pairs(items: list[str] | None, flag: str) -> list[tuple[str, str]]:
    """Repeated ``NAME=VALUE`` arguments of ``flag``, in order."""
    pairs = []
    for item in items or []:
        if "=" not in item:
            raise UsageError(f"{flag}: expected NAME=VALUE, got {item!r}")
        name, value = item.split("=", 1)
        pairs.append((name.strip(), value))
    return pairs


def build_config(args: argparse.Namespace, **extra: Any) -> Config:
    """The protocol parameters: defaults, ``BTL_*`` variables, then ``--set``, then ``extra``."""
    cfg = Config.from_strings(name_value_pairs(args.set, "--set"), Config.build())
    return attrs.evolve(cfg, **extra) if extra else cfg


#: what ``--trace FILE`` says on ``btl transfer`` and ``btl serve``
TRACE_HELP = ("write an event trace of the run to FILE, JSON lines (btlcore.trace; 'btl plot FILE' draws it); "
              "a FILE ending in .pcap gets a pcap of every datagram sent and received instead")


def tool_plugins(args: argparse.Namespace) -> list[Any]:
    """Tool plugins the command line asks for (``--trace FILE.pcap``: a pcap of every datagram,
    what ``--trace`` wrote before the event trace)."""
    if getattr(args, "trace", None) and args.trace.endswith(".pcap"):
        from btlcore_plugins.pcap import PcapTracer

        return [PcapTracer(args.trace)]
    return []


def trace_file(args: argparse.Namespace) -> str | None:
    """The event trace file ``--trace FILE`` asks for (None: none, or a .pcap)."""
    trace: str | None = getattr(args, "trace", None)
    return trace if trace and not trace.endswith(".pcap") else None
