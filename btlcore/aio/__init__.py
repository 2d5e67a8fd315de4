"""btlcore under asyncio (and uvloop): the same transports, driven by the event loop.

::

    async with btlcore.aio.open("udp") as t:
        peer = t.connect(other_address_text)     # at once; the handshake goes on
        await t.wait_connected(peer)             # optional: the first send waits anyway
        await t.send(peer, 7, b"hello")          # returns once acknowledged; raises on failure
        msg = await t.recv(7)

No thread: the loop reads the device's descriptors (``add_reader``) and wakes at the
engine's deadlines (``call_at``); each loop callback does one bounded progress pass.  On the
simulator (no descriptor, virtual time) the transports of one fabric are pumped together,
virtual time running whenever they wait.  See :mod:`btlcore.aio.transport` for the API and
what a cancelled call leaves behind, :mod:`btlcore.aio.driver` for how the loop drives it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ..config import Config
from ..run import open as _open_sync
from ..transport import Message
from .transport import Transport

__all__ = ["Message", "Transport", "open"]


def open(backend: str | None = None, *, config: Config | None = None, seed: int | None = None,
         plugins: Sequence[Any] = (), **options: Any) -> Transport:
    """Open a transport for the running loop, taking what :func:`btlcore.open` takes; use it
    as ``async with btlcore.aio.open(...) as t:`` (or close it with ``await t.close()``)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("btlcore.aio.open() needs a running event loop: call it from a "
                           "coroutine (asyncio.run(main()))") from None
    sync = _open_sync(backend, config=config, seed=seed, plugins=plugins, **options)
    try:
        return Transport(sync, loop)
    except BaseException:
        sync.close(flush=False)
        raise
