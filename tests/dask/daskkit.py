"""Helpers for the Dask comm tests: run a coroutine on a fresh loop, make a connected comm
pair, wait for a condition, expect CommClosedError."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
    """Run ``coro`` on a new loop, failing (not hanging) after ``timeout`` seconds."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def comm_pair(addr: str = "btl://127.0.0.1", deserialize: bool = True) -> tuple[Any, Any, Any]:
    """(client comm, server comm, listener) over btl://, handshake done on both sides."""
    from distributed.comm import connect, listen

    q: asyncio.Queue[Any] = asyncio.Queue()

    async def handle(comm: Any) -> None:
        await q.put(comm)

    listener = await listen(addr, handle, deserialize=deserialize)
    client = await connect(listener.contact_address, deserialize=deserialize)
    server = await asyncio.wait_for(q.get(), 10)
    return client, server, listener


async def eventually(check: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    """Poll ``check`` until true; fail after ``timeout`` (generous: noisy shared cores)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        if loop.time() > end:
            raise AssertionError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(0.005)


async def raises_closed(aw: Awaitable[Any]) -> None:
    from distributed.comm import CommClosedError

    with pytest.raises(CommClosedError):
        await asyncio.wait_for(aw, 20)
