"""Record the golden captures: ``python tests/regression/record.py [--only NAME ...] [--out DIR]``.

Runs every scenario of ``scenarios.py`` and stores, per scenario, ``NAME.pcapng.gz`` (the
fabric's capture, gzip with no timestamp so equal runs give equal files) and ``NAME.json``
(counters and what the application observed) in ``golden/`` beside this file.  Run it only
when the protocol changes on purpose, and say why in the commit message (see README.md).
Run as a script, it imports its sibling modules from its own directory.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from scenarios import SCENARIOS, run_scenario  # type: ignore[import-not-found]

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"


def capture(name: str) -> tuple[bytes, dict[str, Any]]:
    """Run scenario ``name``; return its raw pcapng bytes and its record (as stored JSON
    reads back: a JSON round trip, so the two compare equal)."""
    with tempfile.TemporaryDirectory(prefix=f"golden-{name}-") as tmp:
        path = Path(tmp) / f"{name}.pcapng"
        record = run_scenario(name, path)
        raw = path.read_bytes()
    return raw, json.loads(dumps(record))


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, indent=1) + "\n"


def load(name: str, directory: Path = GOLDEN_DIR) -> tuple[bytes, dict[str, Any]]:
    """The stored capture and record of scenario ``name``."""
    raw = gzip.decompress((directory / f"{name}.pcapng.gz").read_bytes())
    record = json.loads((directory / f"{name}.json").read_text())
    return raw, record


def store(name: str, raw: bytes, record: dict[str, Any], directory: Path = GOLDEN_DIR) -> int:
    """Write scenario ``name``'s files; return the bytes written."""
    directory.mkdir(parents=True, exist_ok=True)
    packed = gzip.compress(raw, compresslevel=9, mtime=0)
    (directory / f"{name}.pcapng.gz").write_bytes(packed)
    text = dumps(record)
    (directory / f"{name}.json").write_text(text)
    return len(packed) + len(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=sorted(SCENARIOS),
                        help="record these scenarios only (default: all)")
    parser.add_argument("--out", type=Path, default=GOLDEN_DIR,
                        help=f"directory to write to (default: {GOLDEN_DIR})")
    args = parser.parse_args(argv)
    total = 0
    for name in args.only or list(SCENARIOS):
        raw, record = capture(name)
        size = store(name, raw, record, args.out)
        total += size
        print(f"{name}: {len(raw)} B capture, {size} B stored", file=sys.stderr)
    print(f"{total} B in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
