"""``btl plot``: a time-sequence graph of a transfer, from a capture or a trace, as PNG or SVG."""

from __future__ import annotations

import argparse
from typing import Any

from .args import UsageError


def add_parser(sub: Any) -> None:
    sp = sub.add_parser(
        "plot", help="draw a time-sequence (Stevens) graph from a capture (pcap/pcapng) or a trace (--trace)",
        description="Data segments, retransmissions, the ACK line, SACK blocks and the simulator's drops "
                    "with their causes over time; cwnd and RTT below when the source is a trace.")
    sp.add_argument("source", metavar="CAPTURE_OR_TRACE", help="a pcap/pcapng file or a JSON-lines trace")
    sp.add_argument("-o", "--output", required=True, metavar="FILE", help="the image: FILE.png or FILE.svg")
    sp.add_argument("--flow", metavar="SENDER",
                    help="draw the flow whose sender's address contains SENDER (default: the busiest)")
    sp.add_argument("--title", help="the graph's title")
    sp.add_argument("--time", metavar="FROM:TO",
                    help="only this window, in ms from the start (either side may be empty)")
    sp.set_defaults(func=run)


def _span(text: str | None) -> tuple[float, float] | None:
    """``--time FROM:TO`` (ms) as seconds."""
    if text is None:
        return None
    lo, sep, hi = text.partition(":")
    try:
        if not sep:
            raise ValueError
        span = (float(lo) / 1e3 if lo.strip() else 0.0, float(hi) / 1e3 if hi.strip() else float("inf"))
    except ValueError:
        raise UsageError(f"--time: expected FROM:TO in milliseconds (e.g. 10:25, or 10: to the end), "
                         f"got {text!r}") from None
    if span[0] > span[1]:
        raise UsageError(f"--time: FROM must not be after TO, got {text!r}")
    return span


def run(args: argparse.Namespace) -> int:
    from .. import plot, timeseq

    span = _span(args.time)
    try:
        plot.output_format(args.output)
        flow = plot.plot(args.source, args.output, sender=args.flow, title=args.title, span=span)
    except (OSError, timeseq.SourceError, ImportError) as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {args.output}: {flow.summary()}")
    return 0
