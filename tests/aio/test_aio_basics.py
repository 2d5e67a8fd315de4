"""btlcore.aio's round trips, handlers, timeouts and addresses, on both loops and backends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import btlcore
import btlcore.aio
from btlcore.errors import MessageTooLarge, PutError, TransportClosed

pytestmark = pytest.mark.anyio
Opener = Callable[..., btlcore.aio.Transport]

SIZES = [1, 1000, 9000, 65536, 256 * 1024]


async def test_request_reply_every_size_with_a_coroutine_handler(opener: Opener) -> None:
    async with opener() as a, opener() as b:
        async def echo(peer: btlcore.Peer, tag: int, data: bytes) -> None:
            await asyncio.sleep(0)  # a real coroutine: it awaits before answering
            await b.send(peer, 8, bytes(reversed(data)))

        b.on(7, echo)
        peer = a.connect(b.address_text)
        await a.wait_connected(peer, timeout=10)
        for size in SIZES:
            data = bytes(i % 251 for i in range(size))
            await a.send(peer, 7, data)
            reply = await a.recv(8, timeout=10)
            assert reply.peer is peer and reply.tag == 8 and reply.data == data[::-1]


async def test_send_returns_once_acknowledged(opener: Opener) -> None:
    async with opener() as a, opener() as b:
        peer = a.connect(b.address)
        await a.send(peer, 3, b"z" * 100_000)  # (the first send waits for the handshake)
        assert a.stats()["num_msgs_completed"] == 1
        assert peer.state is btlcore.PeerState.ESTABLISHED
        assert (await b.recv(timeout=10)).data == b"z" * 100_000


async def test_many_concurrent_senders(opener: Opener) -> None:
    """40 tasks, 25 messages each, through a small send buffer: every message arrives once."""
    async with opener(send_buffer=32 * 1024) as a, opener() as b:
        peer = a.connect(b.address_text)
        got: list[bytes] = []
        b.on(5, lambda p, tag, data: got.append(bytes(data)))

        async def sender(k: int) -> None:
            for i in range(25):
                await a.send(peer, 5, f"{k}:{i}:".encode() + b"x" * (100 * (i % 20)))

        await asyncio.wait_for(asyncio.gather(*(sender(k) for k in range(40))), 60)
        await b.flush(5)
        assert len(got) == 1000
        assert sorted(got) == sorted(f"{k}:{i}:".encode() + b"x" * (100 * (i % 20))
                                     for k in range(40) for i in range(25))
        for k in range(40):  # each sender's messages in its own order (ordered delivery)
            mine = [int(m.split(b":")[1]) for m in got if m.startswith(f"{k}:".encode())]
            assert mine == list(range(25))


async def test_messages_iterates_until_closed(opener: Opener) -> None:
    a, b = opener(), opener()
    peer = a.connect(b.address)
    for i in range(5):
        await a.send(peer, 1, bytes([i]))
    seen = []

    async def reader() -> None:
        async for m in b.messages(1):
            seen.append(m.data)

    task = asyncio.ensure_future(reader())
    while len(seen) < 5:
        await asyncio.sleep(0.001)
    await b.close()
    await asyncio.wait_for(task, 10)  # ends: the transport closed
    assert seen == [bytes([i]) for i in range(5)]
    await a.close()


async def test_recv_filters_by_tag_and_times_out_in_the_transports_clock(opener: Opener) -> None:
    async with opener() as a, opener() as b:
        peer = a.connect(b.address)
        await a.send(peer, 1, b"one")
        await a.send(peer, 2, b"two")
        assert (await b.recv(2, timeout=10)).data == b"two"
        assert (await b.recv(timeout=10)).data == b"one"
        before = b.now()
        with pytest.raises(TimeoutError):
            await b.recv(1, timeout=0.2)
        assert b.now() - before >= 0.2  # virtual seconds on sim, real ones on udp


async def test_plain_and_coroutine_handler_exceptions_reach_the_loops_handler(
        opener: Opener, caught: list[dict[str, Any]]) -> None:
    async with opener() as a, opener() as b:
        class Boom(Exception):
            pass

        def plain(peer: btlcore.Peer, tag: int, data: bytes) -> None:
            raise Boom("plain " + data.decode())

        async def coro(peer: btlcore.Peer, tag: int, data: bytes) -> None:
            await asyncio.sleep(0)
            raise Boom("coroutine " + data.decode())

        b.on(1, plain)
        b.on(2, coro)
        peer = a.connect(b.address)
        await a.send(peer, 1, b"x")
        await a.send(peer, 2, b"y")
        for _ in range(1000):
            if len(caught) >= 2:
                break
            await asyncio.sleep(0.005)
        messages = sorted(str(c["exception"]) for c in caught)
        assert messages == ["coroutine y", "plain x"]
        assert all(isinstance(c["exception"], Boom) for c in caught)
        await a.send(peer, 3, b"still works")  # the transport goes on
        assert (await b.recv(3, timeout=10)).data == b"still works"


async def test_peer_events_reach_plain_and_coroutine_handlers(opener: Opener) -> None:
    a, b = opener(), opener()
    events: list[tuple[str, bytes]] = []

    async def on_peer(event: str, peer: btlcore.Peer, exc: BaseException | None) -> None:
        events.append((event, peer.address))

    a.on_peer(on_peer)
    peer = a.connect(b.address)
    await a.send(peer, 1, b"x")
    await b.close()
    for _ in range(2000):
        if events:
            break
        await asyncio.sleep(0.005)
    assert events == [("closed", b.address)]
    await a.close()


async def test_errors_come_from_the_call(opener: Opener) -> None:
    async with opener(max_message_size=1000) as a, opener() as b:
        peer = a.connect(b.address)
        with pytest.raises(MessageTooLarge):
            await a.send(peer, 1, b"x" * 1001)
        with pytest.raises(TypeError, match="tag"):
            await a.send(peer, "1", b"x")  # type: ignore[arg-type]
        await a.send(peer, 1, b"fine")
    with pytest.raises(TransportClosed):
        await a.send(peer, 1, b"after close")
    with pytest.raises(TransportClosed):
        await a.recv()
    with pytest.raises(TransportClosed):
        a.connect(b.address)


async def test_address_text_round_trips(opener: Opener, backend: str) -> None:
    async with opener() as a, opener() as b:
        text = b.address_text
        if backend == "udp":
            host, _, port = text.rpartition(":")
            assert host == "127.0.0.1" and port.isdigit()
        else:
            assert text.startswith("sim:") and text[4:].isdigit()
        assert a.connect(text) is a.connect(b.address) is a.connect(b.address.hex())
        with pytest.raises(ValueError, match="address"):
            a.connect("not an address")


def test_open_needs_a_running_loop() -> None:
    with pytest.raises(RuntimeError, match="running event loop"):
        btlcore.aio.open("sim")


async def test_futures_nobody_awaits_stay_quiet(opener: Opener, caught: list[dict[str, Any]]) -> None:
    """send_nowait/submit futures that fail unawaited log nothing; one awaited still raises;
    a plain handler returning such a future is not taken for a coroutine."""
    import gc

    async with opener(peer_timeout=0.5) as a:
        b = opener()
        b.on(1, lambda peer, tag, data: b.send_nowait(peer, 2, data))  # returns a future
        peer = a.connect(b.address)
        await a.send(peer, 1, b"ping")
        assert (await a.recv(2, timeout=10)).data == b"ping"
        failed: list[str] = []
        a.on_peer(lambda event, p, exc: failed.append(event))
        b.abort()
        ignored = a.send_nowait(peer, 3, b"x" * 1000)
        kept = await a.submit(peer, 3, b"y")
        with pytest.raises(btlcore.PeerUnreachable):
            await asyncio.wait_for(kept, 60)
        assert ignored.done() and failed == ["failed"]
        del ignored, kept
        gc.collect()
        await asyncio.sleep(0.01)
    assert caught == []


async def test_a_bulk_transfer_leaves_the_loop_to_other_tasks(opener: Opener) -> None:
    """Each loop callback does one bounded pass: while 16 MiB move in 1400-byte datagrams
    (12,000 of them; a pass takes at most recv_budget=256 in), a task that only yields keeps
    running (it would not, were a pass to run the whole transfer)."""
    async with opener(mtu=1400) as a, opener(mtu=1400) as b:
        peer = a.connect(b.address)
        await a.wait_connected(peer, timeout=10)
        ticks = 0
        done = False

        async def ticker() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        sends = [asyncio.ensure_future(a.send(peer, 1, bytes(1 << 20))) for _ in range(16)]
        got = 0
        while got < 16:
            got += len((await b.recv(1, timeout=30)).data) >> 20
        await asyncio.gather(*sends)
        done = True
        await task
        assert b.stats()["num_total_recvs"] >= 12_000
        assert ticks >= 12_000 // 256, ticks  # at least one turn per receiving pass


async def test_bad_arguments_are_refused_naming_them(opener: Opener) -> None:
    async with opener() as a:
        peer = a.connect(a.address)  # (ourselves: never used)
        with pytest.raises(TypeError, match="tag"):
            await a.recv("7")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="tag"):
            await a.recv(70000)
        with pytest.raises(ValueError, match="timeout"):
            await a.recv(1, timeout=-1)
        with pytest.raises(TypeError, match="timeout"):
            await a.wait_connected(peer, timeout="1")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="peer"):
            await a.wait_connected(b"x")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="timeout"):
            await a.flush(float("nan"))


async def test_idle_simulated_transports_do_not_spin_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a real-time loop, sim transports whose only deadlines are keepalives let the pump
    slow down to a round per millisecond (instead of spinning the CPU through virtual time)."""
    from btlcore.aio import driver
    from btlcore_sim.fabric import Fabric

    rounds = 0
    original = driver.Pump._round

    def counted(self: driver.Pump) -> None:
        nonlocal rounds
        rounds += 1
        original(self)

    monkeypatch.setattr(driver.Pump, "_round", counted)
    fabric = Fabric(seed=3)
    async with btlcore.aio.open("sim", fabric=fabric) as a, btlcore.aio.open("sim", fabric=fabric) as b:
        peer = a.connect(b.address)
        await a.send(peer, 1, b"x")
        rounds = 0
        await asyncio.sleep(0.5)  # wall time; the peers idle (keepalives every peer_timeout / 3)
        assert rounds < 1500, rounds  # (unthrottled: a round per ~50-100 us, 5000+)
        assert peer.state is btlcore.PeerState.ESTABLISHED  # keepalives kept it up meanwhile
        await a.send(peer, 1, b"y")  # and a kick brings the pace back at once
        assert (await b.recv(1, timeout=5)).data == b"x"


async def test_a_delay_fault_on_udp_is_released_on_time_by_the_loop() -> None:
    """The loop arms its timer from the engine's deadline; a datagram a delay fault holds
    (btlcore.faults on a real backend) must be due there too, not wait for the next timer."""
    import time

    from btlcore.faults import Faults

    plan = Faults(seed=1)
    plan.delay(0.3, direction="send", type="DATA", nth=1)
    cfg = btlcore.Config(rto_min=5.0, rto_max=5.0, rto_initial=5.0, tlp=False)  # (no other timer)
    async with btlcore.aio.open("udp", config=cfg, faults=plan) as a, \
            btlcore.aio.open("udp", config=cfg) as b:
        peer = a.connect(b.address)
        await a.wait_connected(peer, timeout=10)
        start = time.monotonic()
        await a.send(peer, 7, b"held back")
        m = await b.recv(7, timeout=10)
        assert m.data == b"held back"
        assert time.monotonic() - start < 2.5  # at 0.3 s, not at the keepalive (3.3 s) or the RTO (5 s)


async def test_a_conversation_does_not_wake_the_loop_for_timers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Request/reply on udp: the timer the driver keeps at the engine's deadline (retransmit,
    probe, delayed ACK) moves with the conversation instead of firing for nothing once per
    round trip (as it did), and on uvloop (delays rounded to the millisecond) it does not
    spin the loop until a deadline under a millisecond away (it fired ~10 times per round
    trip).  Counted, not timed: a loaded machine may make a few fire for real."""
    from btlcore.aio import driver

    fired = 0
    original = driver.Driver._fire

    def counted(self: driver.Driver) -> None:
        nonlocal fired
        fired += 1
        original(self)

    monkeypatch.setattr(driver.Driver, "_fire", counted)
    rounds = 300
    async with btlcore.aio.open("udp") as a, btlcore.aio.open("udp") as b:
        b.on(1, lambda peer, tag, data: b.send_nowait(peer, 1, data))
        peer = a.connect(b.address_text)
        await a.wait_connected(peer, timeout=10)
        for _ in range(20):  # RTT estimates settle
            await a.send(peer, 1, b"x" * 64)
            await a.recv(1, timeout=10)
        fired = 0
        for _ in range(rounds):
            await a.send(peer, 1, b"x" * 64)
            assert (await a.recv(1, timeout=10)).data == b"x" * 64
        assert fired < rounds // 3, fired


def test_timer_pad_only_where_delays_are_rounded_to_the_millisecond() -> None:
    from btlcore.aio.driver import ROUNDING_PAD, timer_pad

    loop = asyncio.new_event_loop()
    try:
        assert timer_pad(loop) == 0.0  # asyncio rounds its waits up: never early
    finally:
        loop.close()
    uvloop = pytest.importorskip("uvloop")
    uv = uvloop.new_event_loop()
    try:
        assert timer_pad(uv) == ROUNDING_PAD > 0
    finally:
        uv.close()


async def test_put_returns_once_landed_and_a_refused_put_raises(opener: Opener) -> None:
    """#13 item 1: ``await t.put(...)`` returns once the bytes are in the peer's exposed
    region, and a put the peer refuses (outside its region) raises ``PutError``."""
    async with opener() as a, opener() as b:
        region = bytearray(300_000)
        key = b.expose(region)
        peer = a.connect(b.address)
        data = bytes(i % 253 for i in range(200_000))
        await a.put(peer, key, 50_000, data)
        assert region[50_000:250_000] == data and not any(region[:50_000]) and not any(region[250_000:])
        with pytest.raises(PutError):
            await a.put(peer, key, 299_000, b"y" * 2000)  # runs past the region's end
        assert region[299_000:] == bytes(1000)  # refused whole: nothing written
