"""The progress bar of a long run."""

from __future__ import annotations

import sys
import time


class Progress:
    """A one-line progress bar on a terminal (never with --json, never when piped)."""

    __slots__ = ("total", "enabled", "last", "start")

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = max(1, total)
        self.enabled = enabled and sys.stderr.isatty()
        self.last = 0.0
        self.start = time.monotonic()

    def update(self, done: int, nbytes: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and done < self.total:
            return
        self.last = now
        frac = min(1.0, done / self.total)
        bar = "#" * int(frac * 30)
        rate = nbytes / max(1e-9, now - self.start) / 1e6
        sys.stderr.write(f"\r[{bar:<30}] {frac:6.1%} {done}/{self.total} msgs {rate:8.1f} MB/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
