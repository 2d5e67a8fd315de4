"""Dask's btl:// comm (btlcore/dask): the checks Dask's own comm tests make of its tcp and ucx
comms, written for btl -- ping-pong, large and many frames, many comms at once, close and abort
from each side, connect to nothing, listener addresses, the handshake -- plus what btl adds:
one btlcore peer under many comms, TLS refused, back-pressure."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from daskkit import comm_pair, eventually, raises_closed, run

distributed = pytest.importorskip("distributed")
np = pytest.importorskip("numpy")

from distributed.comm import CommClosedError, connect, listen, parse_address, parse_host_port  # noqa: E402
from distributed.comm.registry import get_backend  # noqa: E402
from distributed.protocol import Serialized, deserialize, serialize, to_serialize  # noqa: E402

from btlcore.dask import BTLBackend, BTLComm  # noqa: E402
from btlcore.dask import mux as mux_module  # noqa: E402
from btlcore.testing.hosts import has_ipv6_loopback  # noqa: E402


def test_the_entry_point_gives_dask_the_btl_backend() -> None:
    assert isinstance(get_backend("btl"), BTLBackend)
    b = get_backend("btl")
    assert b.get_address_host_port("127.0.0.1:7000") == ("127.0.0.1", 7000)
    assert b.resolve_address("localhost:7000") == "127.0.0.1:7000"
    assert b.get_local_address_for("127.0.0.1:7000") == "127.0.0.1"
    assert b.get_address_host("[::1]:7000") == "::1"


def test_ping_pong_and_many_clients_at_once() -> None:
    async def main() -> None:
        async def handle(comm: Any) -> None:
            try:
                assert parse_address(comm.peer_address)[0] == "btl"
                msg = await comm.read()
                await comm.write({"op": "pong", "data": msg["data"]})
                assert (await comm.read())["op"] == "foobar"
            finally:
                await comm.close()

        listener = await listen("btl://127.0.0.1", handle, xxx="ignored")
        got = []

        async def client(key: int, delay: float = 0) -> None:
            comm = await connect(listener.contact_address, xxx="ignored")
            try:
                assert comm.peer_address == listener.contact_address
                await comm.write({"op": "ping", "data": key})
                await comm.write({"op": "foobar"})
                if delay:
                    await asyncio.sleep(delay)
                assert await comm.read() == {"op": "pong", "data": key}
                got.append(key)
            finally:
                await comm.close()

        await client(1234)
        await asyncio.gather(*(client(i, 0.05) for i in range(40)))
        assert sorted(got) == sorted([1234, *range(40)])
        # forty comms, one btlcore peer between the two transports
        assert len(listener.endpoint.sync.peers) == 1
        listener.stop()

    run(main())


def test_listener_addresses() -> None:
    async def main() -> None:
        async def handle(comm: Any) -> None:
            await comm.close()

        listeners = [await listen(a, handle) for a in ["btl://127.0.0.1"] * 8 + ["btl://0.0.0.0", "btl://"]]
        for ln in listeners[:8]:
            host, port = parse_host_port(parse_address(ln.listen_address)[1])
            assert host == "127.0.0.1" and 1023 < port < 65535
            assert ln.contact_address == ln.listen_address
        assert len({ln.listen_address for ln in listeners}) == len(listeners)
        for ln in listeners[8:]:
            assert parse_host_port(parse_address(ln.listen_address)[1])[0] == "0.0.0.0"
            host = parse_host_port(parse_address(ln.contact_address)[1])[0]
            assert host not in ("0.0.0.0", "")
        fixed = await listen("btl://127.0.0.1:0", handle)
        port = parse_host_port(fixed.listen_address[len("btl://"):])[1]
        fixed.stop()
        for ln in listeners:
            ln.stop()
        await eventually(lambda: all(ln.endpoint.t.closed for ln in listeners), what="stopped listeners closed")
        again = await listen(f"btl://127.0.0.1:{port}", handle)  # a stopped listener frees its port
        assert again.listen_address == f"btl://127.0.0.1:{port}"
        again.stop()

    run(main())



@pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback here")
def test_ipv6_addresses() -> None:
    async def main() -> None:
        a, b, listener = await comm_pair("btl://[::1]")
        assert listener.listen_address.startswith("btl://[::1]:")
        assert a.peer_address == b.local_address == listener.contact_address
        assert a.local_address == b.peer_address and a.local_address.startswith("btl://[::1]:")
        await a.write("over IPv6")
        assert await b.read() == "over IPv6"
        await a.close()
        await raises_closed(b.read())
        listener.stop()

    run(main())


def test_comm_addresses_repr_and_handshake() -> None:
    async def main() -> None:
        a, b, listener = await comm_pair()
        assert a.peer_address == b.local_address == listener.contact_address
        assert a.local_address == b.peer_address
        assert isinstance(a, BTLComm) and a.extra_info == {}
        for comm in (a, b):
            assert comm.remote_info["address"] == comm.peer_address
            assert comm.local_info["address"] == comm.local_address
            assert "pickle-protocol" in comm.handshake_options
            assert comm.same_host
        assert a.local_address in repr(b) and b.local_address in repr(a) and "closed" not in repr(a)
        await a.close()
        assert "closed" in repr(a)
        b.abort()
        listener.stop()

    run(main())


def _big_message(n: int) -> dict[str, Any]:
    blob = os.urandom(1 << 20) * (n >> 20)
    return {"op": "update", "x": blob, "to_ser": [to_serialize(blob)], "ser": Serialized(*serialize(blob)),
            "arr": to_serialize(np.arange(n // 8, dtype="u8")), "small": b"abc"}


@pytest.mark.parametrize("deserialize_flag", [True, False])
def test_large_and_many_frames_round_trip(deserialize_flag: bool) -> None:
    async def main() -> None:
        a, b, listener = await comm_pair(deserialize=deserialize_flag)
        msg = _big_message(8 << 20)
        await a.write(msg)
        got = await b.read()
        await b.write(got)
        back = await a.read()
        for out in (back,):
            assert out["x"] == msg["x"] and out["small"] == b"abc" and out["op"] == "update"
            if deserialize_flag:
                assert bytes(out["ser"]) == msg["x"] and bytes(out["to_ser"][0]) == msg["x"]
                assert (out["arr"] == np.arange(1 << 20, dtype="u8")).all()
            else:
                assert isinstance(out["ser"], Serialized)
                assert deserialize(out["ser"].header, out["ser"].frames) == msg["x"]
        # many frames in one message, many messages in a row
        many = {"parts": [to_serialize(np.full(1000 + i, i, dtype="i4")) for i in range(300)]}
        for _ in range(3):
            await b.write(many)
        for _ in range(3):
            out = await a.read()
            parts = out["parts"]
            if not deserialize_flag:
                parts = [deserialize(p.header, p.frames) for p in parts]
            assert [int(p.sum()) for p in parts] == [i * (1000 + i) for i in range(300)]
        await a.close()
        await b.close()
        listener.stop()

    run(main())


def test_many_comms_at_once_share_one_peer_in_both_directions() -> None:
    async def main() -> None:
        async def echo(comm: Any) -> None:
            while True:
                try:
                    msg = await comm.read()
                except CommClosedError:
                    return
                await comm.write(msg)

        listener = await listen("btl://127.0.0.1", echo)
        comms = await asyncio.gather(*(connect(listener.contact_address) for _ in range(50)))
        assert len({(c.comm_id, c.opener) for c in comms}) == 50

        async def talk(i: int, comm: Any) -> None:
            for k in range(10):
                await comm.write({"i": i, "k": k, "pad": b"x" * (i * 997)})
                assert await comm.read() == {"i": i, "k": k, "pad": b"x" * (i * 997)}

        await asyncio.gather(*(talk(i, c) for i, c in enumerate(comms)))
        assert len(listener.endpoint.links) == 1 and len(listener.endpoint.sync.peers) == 1
        await asyncio.gather(*(c.close() for c in comms))
        listener.stop()

    run(main())


@pytest.mark.parametrize("side", ["client", "server"])
def test_close_from_each_side(side: str) -> None:
    async def main() -> None:
        a, b, listener = await comm_pair()
        first, other = (a, b) if side == "client" else (b, a)
        await other.write({"before": "close"})  # what was sent before the close is still read
        await asyncio.sleep(0)
        first_read = asyncio.ensure_future(first.read())
        other_read = asyncio.ensure_future(other.read())
        await asyncio.sleep(0.05)
        assert (await first_read) == {"before": "close"}
        await first.close()
        await raises_closed(other_read)
        for comm in (first, other):
            await raises_closed(comm.read())
            await raises_closed(comm.write({}))
            assert comm.closed()
        await other.close()
        await first.close()  # twice: nothing
        listener.stop()

    run(main())


@pytest.mark.parametrize("side", ["client", "server"])
def test_abort_from_each_side(side: str) -> None:
    async def main() -> None:
        a, b, listener = await comm_pair()
        first, other = (a, b) if side == "client" else (b, a)
        pending = asyncio.ensure_future(first.read())
        await asyncio.sleep(0.01)
        first.abort()
        await raises_closed(pending)
        await raises_closed(other.read())
        await raises_closed(first.write({"x": 1}))
        first.abort()
        other.abort()
        # the process's outgoing transport carries new comms as before
        c, d, listener2 = await comm_pair()
        await c.write(1)
        assert await d.read() == 1
        for comm in (c, d):
            await comm.close()
        listener.stop()
        listener2.stop()

    run(main())


def test_the_server_closing_at_once_is_seen_by_the_client() -> None:
    async def main() -> None:
        async def handle(comm: Any) -> None:
            await comm.close()

        listener = await listen("btl://127.0.0.1", handle)
        comm = await connect(listener.contact_address)
        with pytest.raises(CommClosedError):
            await comm.write({})
            await asyncio.wait_for(comm.read(), 20)
        comm = await connect(listener.contact_address)
        await raises_closed(comm.read())
        listener.stop()

    run(main())


def test_connect_to_nothing_fails_with_dasks_error_within_its_timeout() -> None:
    async def main() -> None:
        async def handle(comm: Any) -> None:
            pass

        ln = await listen("btl://127.0.0.1", handle)
        addr = ln.contact_address
        ln.stop()
        await eventually(lambda: ln.endpoint.t.closed, what="listener closed")
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(OSError, match="Timed out trying to connect"):
            await connect(addr, timeout=0.5)
        assert loop.time() - start < 10

    run(main())


def test_a_stopped_listener_refuses_new_comms_and_keeps_old_ones() -> None:
    async def main() -> None:
        a, b, listener = await comm_pair()
        listener.stop()
        with pytest.raises(OSError):
            await connect(listener.contact_address, timeout=0.5)
        await a.write("still here")
        assert await b.read() == "still here"
        await a.close()
        await raises_closed(b.read())
        await eventually(lambda: listener.endpoint.t.closed, what="idle stopped listener closed")

    run(main())


def test_cancelled_read_aborts_the_comm_as_tcp_does() -> None:
    async def main() -> None:
        a, b, listener = await comm_pair()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(b.read(), 0.01)
        assert b.closed()
        await raises_closed(a.read())
        listener.stop()

    run(main())


def test_tls_on_btl_is_refused_clearly() -> None:
    import ssl

    ctx = ssl.create_default_context()

    async def main() -> None:
        with pytest.raises(RuntimeError, match="btlcore does not encrypt"):
            await connect("btl://127.0.0.1:9", ssl_context=ctx)
        with pytest.raises(RuntimeError, match="btlcore does not encrypt"):
            await listen("btl://127.0.0.1", lambda comm: None, ssl_context=ctx)
        with pytest.raises(RuntimeError, match="tls://"):
            await listen("btl://127.0.0.1", lambda comm: None, require_encryption=True)

    run(main())


def test_write_returns_when_accepted_and_in_flight_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    peak = [0]
    real = mux_module.Link._post

    def watch(self: Any, msg: Any, put: Any = None) -> bool:
        ok = real(self, msg, put)
        peak[0] = max(peak[0], self.in_flight)
        return ok

    monkeypatch.setattr(mux_module.Link, "_post", watch)

    async def main() -> None:
        a, b, listener = await comm_pair()
        a._link.endpoint.limit = 2 << 20
        blob = os.urandom(1 << 20) * 24
        reader = asyncio.ensure_future(b.read())
        await a.write(blob)  # returns once the last chunk is accepted ...
        assert a._link.in_flight > 0 or reader.done()  # ... not necessarily acknowledged
        assert await reader == blob
        # never more than the limit, plus one chunk, accepted and unacknowledged
        assert peak[0] <= (2 << 20) + (1 << 20) + 4096
        await a.close()
        await b.close()
        listener.stop()

    run(main())


def test_large_messages_go_by_rendezvous_in_order_and_release_their_regions() -> None:
    async def main() -> None:
        a, b, listener = await comm_pair()
        big = [np.full(3 << 20, i, dtype="u1") for i in range(3)]
        for i in range(3):  # large and small messages interleaved on one comm keep their order
            await a.write({"big": to_serialize(big[i]), "i": i})
            await a.write({"small": i})
        for i in range(3):
            got = await b.read()
            assert got["i"] == i and (got["big"] == i).all() and got["big"].flags.writeable
            assert await b.read() == {"small": i}
        puts = listener.endpoint.sync.stats()["num_puts_delivered"]
        assert puts >= 9  # three messages of 3 MiB, 1 MiB a put
        assert not listener.endpoint.regions  # every region unexposed once its message landed
        # the receiver aborts while a rendezvous is landing: both ends closed, regions released
        writer = asyncio.ensure_future(a.write({"big": to_serialize(np.ones(64 << 20, dtype="u1"))}))
        await eventually(lambda: bool(listener.endpoint.regions), what="a rendezvous under way")
        b.abort()
        assert not listener.endpoint.regions
        try:
            await asyncio.wait_for(writer, 20)
        except CommClosedError:
            pass
        await raises_closed(a.read())
        listener.stop()

    run(main())


def test_a_comm_dropped_without_close_is_closed_for_its_peer_as_tcp_does() -> None:
    import gc

    async def main() -> None:
        a, b, listener = await comm_pair()
        client_side = a._link.endpoint
        assert client_side.comms == 1 and listener.endpoint.comms == 1
        del a
        gc.collect()
        await raises_closed(b.read())  # the peer was told
        assert client_side.comms == 0 and listener.endpoint.comms == 0
        listener.stop()

    run(main())


def test_a_frame_dask_splits_into_shards_is_joined_without_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frame larger than Dask's shard size travels as shards; a rendezvous lands them back to
    back in one buffer, so Dask joins them as views (as on tcp), never by copying them all."""
    import importlib

    serialize_module = importlib.import_module("distributed.protocol.serialize")

    copies: list[int] = []
    original = serialize_module.host_array_from_buffers

    def counted(buffers: Any) -> Any:
        copies.append(len(buffers))
        return original(buffers)

    monkeypatch.setattr(serialize_module, "host_array_from_buffers", counted)
    monkeypatch.setattr(BTLComm, "max_shard_size", 1 << 20)  # (Dask's: 64 MiB, read at import)

    async def main() -> None:
        a, b, listener = await comm_pair()
        data = np.arange(5 << 20, dtype="u1")  # five shards
        await a.write({"x": to_serialize(data)})
        got = await b.read()
        assert (got["x"] == data).all()
        await a.close()
        await b.close()
        listener.stop()

    run(main())
    assert copies == []
