"""btlcore.aio on the fabric's virtual clock (btlcore_sim.vloop): an asyncio application runs
on simulated time, far faster than real time and the same every run."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

import btlcore
import btlcore.aio
from btlcore_sim import Fabric, LinkModel
from btlcore_sim.vloop import VirtualLoop, run


async def _echo_session(fabric: Fabric, rounds: int, pause: float, size: int = 3000) -> list[tuple[float, int]]:
    """A client that sends, awaits the echo, sleeps ``pause``; returns (time, length) per round."""
    log: list[tuple[float, int]] = []
    async with btlcore.aio.open("sim", fabric=fabric, name="a") as a, \
            btlcore.aio.open("sim", fabric=fabric, name="b") as b:
        async def echo(peer: Any, tag: int, data: bytes) -> None:
            await b.send(peer, 2, data)

        b.on(1, echo)
        peer = a.connect(b.address)
        for i in range(rounds):
            await a.send(peer, 1, bytes([i % 256]) * size)
            msg = await a.recv(2)
            assert msg.data == bytes([i % 256]) * size
            log.append((fabric.now, len(msg.data)))
            await asyncio.sleep(pause)
    return log


def test_thirty_seconds_of_protocol_time_in_a_fraction_of_that(btl_fabric, btl_loop) -> None:
    btl_fabric.default_model = LinkModel(delay=1e-3, loss=0.02)
    wall = time.perf_counter()
    log = btl_loop.run_until_complete(_echo_session(btl_fabric, 30, 1.0))
    wall = time.perf_counter() - wall
    assert len(log) == 30 and btl_fabric.now >= 30.0
    assert log[1][0] - log[0][0] >= 1.0  # the sleeps were virtual seconds
    assert wall < 15.0  # (typically well under a second: no wall time is slept)


def _seeded_run(seed: int, pcap: Path) -> tuple[list[tuple[float, int]], str, dict[str, Any]]:
    fabric = Fabric(seed=seed, default=LinkModel(delay=1e-3, jitter=2e-4, loss=0.05, reorder=0.02), pcap=pcap)
    log = run(_echo_session(fabric, 10, 0.5, size=20_000), fabric)
    fabric.close()
    return log, hashlib.sha256(pcap.read_bytes()).hexdigest(), fabric.totals()


def test_a_seeded_run_is_the_same_every_time(tmp_path: Path) -> None:
    first = _seeded_run(5, tmp_path / "1.pcapng")
    again = _seeded_run(5, tmp_path / "2.pcapng")
    other = _seeded_run(6, tmp_path / "3.pcapng")
    assert first == again  # packet for packet: the capture's bytes and every virtual time
    assert first[2]["dropped"] > 0
    assert other[1] != first[1]


def test_asyncio_timeouts_run_on_virtual_time(btl_fabric, btl_loop) -> None:
    async def main() -> float:
        async with btlcore.aio.open("sim", fabric=btl_fabric) as t:
            start = btl_fabric.now
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(t.recv(9), 120.0)  # two minutes of nothing
            return btl_fabric.now - start

    assert btl_loop.run_until_complete(main()) == pytest.approx(120.0)


def test_a_dead_peer_fails_a_send_within_peer_timeout_of_virtual_time(btl_fabric, btl_loop) -> None:
    cfg = btlcore.Config.build({"peer_timeout": 3.0})

    async def main() -> tuple[type[BaseException], float]:
        a = btlcore.aio.open("sim", fabric=btl_fabric, config=cfg)
        b = btlcore.aio.open("sim", fabric=btl_fabric, config=cfg)
        peer = a.connect(b.address)
        await a.wait_connected(peer)
        btl_fabric.partition(btl_fabric.now, None, [a.address])  # b is gone for good
        start = btl_fabric.now
        with pytest.raises(btlcore.PeerError) as failed:
            await a.send(peer, 1, b"anyone?")
        took = btl_fabric.now - start
        a.sync.close(flush=False)
        b.sync.close(flush=False)
        return type(failed.value), took

    kind, took = btl_loop.run_until_complete(main())
    assert issubclass(kind, btlcore.PeerError) and 3.0 <= took < 10.0


def test_a_wait_nothing_can_end_raises_instead_of_hanging() -> None:
    fabric = Fabric()

    async def main() -> None:
        await asyncio.get_running_loop().create_future()  # nobody will ever set it

    with pytest.raises(RuntimeError, match="can never happen"):
        run(main(), fabric)


def test_the_loop_checks_its_fabric() -> None:
    with pytest.raises(TypeError, match="btlcore_sim.Fabric"):
        VirtualLoop("fabric")  # type: ignore[arg-type]
    loop = VirtualLoop(Fabric())
    with pytest.raises(ValueError, match="not a NIC of this loop's fabric"):
        loop.btl_watch(Fabric().open_device(), lambda: None)
    loop.close()
