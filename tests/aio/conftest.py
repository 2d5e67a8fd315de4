"""tests/aio: btlcore.aio on asyncio and on uvloop (anyio's pytest plugin runs each test on
both loops), over udp (the loop reads the sockets) and sim (no descriptor: the transports of
one fabric are pumped from the loop, virtual time running whenever they wait)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import btlcore
import btlcore.aio

LOOPS = [pytest.param(("asyncio", {}), id="asyncio")]
try:
    import uvloop

    LOOPS.append(pytest.param(("asyncio", {"loop_factory": uvloop.new_event_loop}), id="uvloop"))
except ImportError:  # pragma: no cover - the test extra installs it
    LOOPS.append(pytest.param(("asyncio", {}), id="uvloop", marks=pytest.mark.skip("uvloop not installed")))


@pytest.fixture(params=LOOPS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


@pytest.fixture(params=["udp", "sim"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


Opener = Callable[..., btlcore.aio.Transport]


@pytest.fixture
def opener(backend: str) -> Opener:
    """``opener(**config)``: a transport of the backend under test (sim: all on one fabric of
    the test's own), with ``Config`` parameters given as keywords."""
    fabric = None
    if backend == "sim":
        from btlcore_sim.fabric import Fabric

        fabric = Fabric(seed=7)

    def open_one(**params: Any) -> btlcore.aio.Transport:
        config = btlcore.Config.build(params) if params else None
        if fabric is not None:
            return btlcore.aio.open("sim", config=config, fabric=fabric)
        return btlcore.aio.open("udp", config=config)

    return open_one


@pytest.fixture
async def caught() -> AsyncIterator[list[dict[str, Any]]]:
    """What reaches the running loop's exception handler during the test."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    yield seen
    loop.set_exception_handler(old)
