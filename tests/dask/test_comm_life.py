"""btl:// comms when things go wrong or get big: a peer process killed (idle or busy) or
closing, heartbeats during a large transfer on another comm, a transport inherited across
fork()."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from daskkit import comm_pair, raises_closed, run

pytest.importorskip("distributed")

from distributed.comm import CommClosedError, connect  # noqa: E402

from btlcore.dask import ForkedTransport  # noqa: E402

# a listener in its own process: echoes, prints its address, and on "exit" closes itself
SERVER = textwrap.dedent("""
    import asyncio, sys
    from distributed.comm import listen, CommClosedError

    async def main():
        done = asyncio.Event()
        async def handle(comm):
            while True:
                try:
                    msg = await comm.read()
                except CommClosedError:
                    return
                if msg == "exit":
                    done.set()
                    return
                await comm.write(msg)
        listener = await listen("btl://127.0.0.1", handle)
        print(listener.contact_address, flush=True)
        await done.wait()
        listener.stop()
        await listener.endpoint.close()

    asyncio.run(main())
""")


def _server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "BTL_PEER_TIMEOUT": "1.5"})
    assert proc.stdout is not None
    addr = proc.stdout.readline().strip()
    assert addr.startswith("btl://"), addr
    return proc, addr


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "busy"])
def test_a_killed_peer_process_fails_its_comms_promptly(monkeypatch: pytest.MonkeyPatch, busy: bool) -> None:
    monkeypatch.setenv("BTL_PEER_TIMEOUT", "1.5")
    proc, addr = _server()
    try:
        async def main() -> float:
            comm = await connect(addr)
            await comm.write("hello")
            assert await comm.read() == "hello"
            loop = asyncio.get_running_loop()
            if busy:  # the peer dies while a large message is on its way to it
                writer = asyncio.ensure_future(comm.write(b"x" * (64 << 20)))
                await asyncio.sleep(0.05)
            os.kill(proc.pid, signal.SIGKILL)
            start = loop.time()
            await raises_closed(comm.read())  # idle: keepalive finds the death
            if busy:
                try:
                    await asyncio.wait_for(writer, 20)
                except CommClosedError:
                    pass
                await raises_closed(comm.write("more"))
            return loop.time() - start

        took = run(main())
        assert took < 15  # peer_timeout is 1.5 s; generous for noisy cores
    finally:
        proc.kill()
        proc.wait()


def test_a_peer_process_that_closes_ends_its_comms_at_once() -> None:
    proc, addr = _server()
    try:
        async def main() -> None:
            a = await connect(addr)
            b = await connect(addr)
            await a.write("exit")  # the server stops and closes its transport
            await raises_closed(b.read())
            await raises_closed(a.read())

        run(main())
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_heartbeats_flow_during_a_large_transfer_on_another_comm() -> None:
    size = 192 << 20

    async def main() -> tuple[int, int]:
        big_a, big_b, listener = await comm_pair()
        # a second comm between the same two transports: the same btlcore peer
        hb_a = await connect(listener.contact_address)
        assert hb_a._link is big_a._link
        blob = os.urandom(1 << 20) * (size >> 20)
        received: list[Any] = []
        beats_during = 0

        async def take_big() -> None:
            received.append(await big_b.read())

        async def beat(server: Any) -> None:
            nonlocal beats_during
            for k in range(100_000):
                await hb_a.write({"op": "heartbeat", "k": k})
                assert await server.read() == {"op": "heartbeat", "k": k}
                if received:
                    return
                beats_during += 1

        taker = asyncio.ensure_future(take_big())
        sender = asyncio.ensure_future(big_a.write(blob))
        server = await _server_side(listener, hb_a)
        await asyncio.gather(beat(server), sender, taker)
        assert bytes(received[0]) == blob
        return beats_during, size

    beats, _ = run(main())
    # heartbeats were answered while the large message was still in flight
    assert beats >= 10


async def _server_side(listener: Any, client: Any) -> Any:
    """The listener side of ``client``'s comm (the one with the same comm id on its link)."""
    for _ in range(2000):
        for link in listener.endpoint.links.values():
            comm = link.comms.get(client.comm_id * 2 + 1)
            if comm is not None and comm.remote_info:
                return comm
        await asyncio.sleep(0.005)
    raise AssertionError("no server side comm")


def test_a_transport_inherited_across_fork_fails_clearly_in_the_child() -> None:
    async def setup() -> tuple[Any, Any, Any]:
        return await comm_pair()

    loop = asyncio.new_event_loop()
    try:
        a, b, listener = loop.run_until_complete(setup())
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: every use of the parent's comm must raise, and say why
            os.close(r)
            out = b"no error"
            try:
                asyncio.new_event_loop().run_until_complete(a.write("from the child"))
            except ForkedTransport as exc:
                out = str(exc).encode()
            except BaseException as exc:  # noqa: BLE001
                out = repr(exc).encode()
            os.write(w, out)
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            said = f.read().decode()
        os.waitpid(pid, 0)
        assert "inherited across fork()" in said and str(pid) in said, said
        # the parent's comm is untouched
        loop.run_until_complete(a.write("from the parent"))
        assert loop.run_until_complete(b.read()) == "from the parent"
        loop.run_until_complete(a.close())
        listener.stop()
        loop.run_until_complete(asyncio.sleep(0.05))
    finally:
        loop.close()
