"""``btl demo``: two nodes in this process on a lossy simulated link, every byte verified.

The link (loss, reorder, duplicates, corruption, delay, rate) is the simulator backend's
demo preset, asked for through its local-pair hook: this module names no link knob.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from ..verify import FRAME, make_messages
from . import backend_options
from .args import add_common, build_config
from .report import report
from .transfer import run_local

BACKEND = "sim"
DEFAULT_SEED = 2026
TIMEOUT = 120.0
"""Virtual seconds."""


def add_parser(sub: Any) -> None:
    sp = sub.add_parser("demo", help="two simulated nodes, lossy link, every byte verified")
    add_common(sp)
    sp.add_argument("--seed", type=int)
    backend_options.add_groups(sp, "demo", names=[BACKEND], with_backend_flag=False)
    sp.set_defaults(func=run)


def _messages(seed: int) -> tuple[list[bytes], int, int]:
    """400 small and 40 large messages in shuffled order, re-framed so that indexes follow
    the send order; and the two counts."""
    small = list(make_messages(seed, 400, 8, 4096))
    large = list(make_messages(seed + 1, 40, 64 << 10, 1 << 20))
    messages = small + large
    random.Random(seed).shuffle(messages)
    messages = [FRAME.pack(i, *FRAME.unpack_from(m)[1:]) + m[FRAME.size:] for i, m in enumerate(messages)]
    return messages, len(small), len(large)


def run(args: argparse.Namespace) -> int:
    seed = args.seed if args.seed is not None else DEFAULT_SEED
    messages, n_small, n_large = _messages(seed)
    cfg = build_config(args)
    pair = backend_options.local_pair(BACKEND, "demo", args, {}, seed)
    if not args.json:
        print(f"btlcore demo: two nodes on {pair.description}; {n_small} small and {n_large} "
              f"large messages (seed {seed})")
    return report(args.json, run_local(BACKEND, pair, messages, cfg, seed, TIMEOUT, args.json), "demo")
