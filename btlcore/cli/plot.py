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
    sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .. import plot, timeseq

    try:
        plot.output_format(args.output)
        flow = plot.plot(args.source, args.output, sender=args.flow, title=args.title)
    except (OSError, timeseq.SourceError, ImportError) as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {args.output}: {flow.summary()}")
    return 0
