"""Receive memory that costs nothing until a datagram is written into it.

Why: a device's receive buffers are sized for the worst case (256 datagrams of 64 KiB for
``recvmmsg``, a 4 MiB arena for ``recv_into``), but most devices never see that much at once;
zeroed by Python or ctypes, those buffers cost 20 MB of resident memory per device at open.
An anonymous ``mmap`` is given pages by the kernel one by one, where the kernel or we first
write, so resident memory follows the traffic a device actually had.
"""

from __future__ import annotations

import mmap


def lazy_buffer(size: int) -> mmap.mmap:
    """``size`` zero bytes, writable, whose pages the kernel provides on first write.

    Transparent huge pages are refused for it: one 100-byte datagram must cost one 4 KiB
    page, not 2 MiB."""
    buf = mmap.mmap(-1, size)
    advice = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if advice is not None:
        try:
            buf.madvise(advice)
        except OSError:  # pragma: no cover - a kernel without transparent huge pages
            pass
    return buf
