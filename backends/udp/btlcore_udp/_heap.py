"""Keep freed heap memory in the process (glibc ``mallopt``), as Open MPI does for leave_pinned.

Why: a 1 MiB message is reassembled into a fresh 1 MiB buffer, and each 64 KiB segment is a
fresh buffer on the sending side.  With glibc's defaults the heap top is given back to the
kernel as soon as such buffers are freed (``M_TRIM_THRESHOLD``) and large buffers are
``mmap``-ed one by one, so the next allocation page-faults on every 4 KiB page again: on the
benchmark VM that cost 0.37 ms per MiB, two thirds of the receiver's time at 65000 B
datagrams.  Raising both thresholds keeps those pages mapped for the next buffer.

Process-wide and applied once; a no-op where libc has no ``mallopt`` (musl, macOS).  The
price: up to ``TRIM_THRESHOLD`` of freed memory stays in the process (its RSS does not fall
after a burst of large messages)."""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 256 << 20
MMAP_THRESHOLD = 32 << 20  # glibc's ceiling on 64-bit (HEAP_MAX_SIZE / 2); larger is refused

_applied: bool | None = None


def keep_heap() -> bool:
    """Apply the thresholds (once per process); True if libc took them."""
    global _applied
    if _applied is None:
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            _applied = False
        else:
            mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            mallopt.restype = ctypes.c_int
            # the mmap threshold first: setting either one ends glibc's dynamic adjustment
            _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) \
                and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _applied
