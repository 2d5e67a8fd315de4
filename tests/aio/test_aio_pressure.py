"""Back-pressure, cancellation at every await, dead peers: what asyncio code gets wrong when it
writes this glue itself (#13)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import btlcore
import btlcore.aio
from btlcore.errors import PeerUnreachable, TransportClosed

pytestmark = pytest.mark.anyio
Opener = Callable[..., btlcore.aio.Transport]

BUFFER = 64 * 1024  # the sender's send_buffer and the receiver's recv_buffer
CHUNK = 16 * 1024


async def until(predicate: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    """Let the loop run until ``predicate()`` (wall-clock bound: generous, never asserted)."""
    for _ in range(int(seconds / 0.002)):
        if predicate():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"not within {seconds} s: {what}")


async def test_a_slow_consumer_makes_senders_wait_and_memory_stays_bounded(opener: Opener) -> None:
    async with opener(send_buffer=BUFFER) as a, opener(recv_buffer=BUFFER) as b:
        peer = a.connect(b.address)
        done: list[int] = []
        peak = {"queued": 0, "inbox": 0}

        def watch() -> None:
            peak["queued"] = max(peak["queued"], peer.send_queued)
            peak["inbox"] = max(peak["inbox"], sum(len(m.data) for m in b.sync._inbox))

        async def sender(k: int) -> None:
            for _i in range(10):
                await a.send(peer, 1, bytes([k]) * CHUNK)
                watch()
            done.append(k)

        senders = [asyncio.ensure_future(sender(k)) for k in range(8)]  # 8 x 16 KiB > 64 KiB
        # nobody reads: the receive window closes, then the send buffer fills, then senders wait
        await until(lambda: peer.send_queued + CHUNK > BUFFER, "the send buffer filled")
        for _ in range(50):
            await asyncio.sleep(0.002)
            watch()
        assert not done and not any(s.done() for s in senders)
        stalled = a.stats()["num_msgs_sent"]
        assert stalled <= 8  # the others wait in their senders, not in a queue
        # a slow consumer: one message at a time, yielding in between
        got = 0
        while got < 80:
            m = await b.recv(1, timeout=30)
            assert len(m.data) == CHUNK
            got += 1
            watch()
            await asyncio.sleep(0)
        await asyncio.wait_for(asyncio.gather(*senders), 30)
        assert sorted(done) == list(range(8))
        assert peak["queued"] <= BUFFER  # the send buffer (every message fits: none is alone)
        assert peak["inbox"] <= BUFFER + CHUNK  # the receive budget (one message beyond)
        assert a.stats()["num_send_blocks"] > 0


async def test_send_cancelled_while_waiting_for_room_queues_nothing(opener: Opener) -> None:
    async with opener(send_buffer=BUFFER) as a, opener(recv_buffer=BUFFER) as b:
        peer = a.connect(b.address)

        async def filler() -> None:
            while True:
                await a.submit(peer, 1, b"f" * CHUNK)  # returns once queued

        fill = asyncio.ensure_future(filler())
        # nobody reads: b's window closes, a's buffer fills, the filler waits for room
        def stuck() -> bool:
            # (waiting: the room it waits for is half the buffer, when "writable" fires; the
            # last chunk b took may leave a's buffer short of full by one)
            return (bool(a._room.get(peer)) and peer.send_queued > BUFFER // 2
                    and sum(len(m.data) for m in b.sync._inbox) >= BUFFER)

        while True:  # (stuck for good: b's window closed, and a's buffer full behind it)
            await until(stuck, "the filler waits for room")
            before = a.stats()["num_msgs_sent"]
            await asyncio.sleep(0.3)
            if stuck() and a.stats()["num_msgs_sent"] == before:
                break
        fill.cancel()  # (a send cancelled while waiting for room, too)
        with pytest.raises(asyncio.CancelledError):
            await fill
        sent = a.stats()["num_msgs_sent"]
        never = b"never" * (BUFFER // 5)  # (no room for it while a's buffer is not empty)
        blocked = asyncio.ensure_future(a.send(peer, 1, never))
        await asyncio.sleep(0.05)
        assert not blocked.done()
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        assert a.stats()["num_msgs_sent"] == sent  # nothing was queued for it
        while True:  # everything else arrives; the cancelled message never does
            try:
                m = await b.recv(1, timeout=1.0)
            except TimeoutError:
                break
            assert m.data != never
        assert a._room.get(peer, []) == []  # no waiter left behind


async def test_send_cancelled_after_acceptance_is_still_delivered_once(opener: Opener) -> None:
    async with opener() as a, opener() as b:
        peer = a.connect(b.address)
        task = asyncio.ensure_future(a.send(peer, 4, b"m" * 200_000))
        await asyncio.sleep(0)  # accepted (queued), its ACK not yet back
        assert a.stats()["num_msgs_sent"] == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        m = await b.recv(4, timeout=10)
        assert m.data == b"m" * 200_000
        assert await a.flush(10)
        assert a.stats()["num_msgs_completed"] == 1
        with pytest.raises(TimeoutError):
            await b.recv(4, timeout=0.3)  # exactly once


async def test_recv_cancelled_loses_no_message(opener: Opener) -> None:
    async with opener() as a, opener() as b:
        peer = a.connect(b.address)
        waiting = asyncio.ensure_future(b.recv(2))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await a.send(peer, 2, b"kept")
        assert (await b.recv(2, timeout=10)).data == b"kept"
        assert not b._recv_waiters


async def test_recv_cancelled_as_its_message_is_handed_over_puts_it_back(opener: Opener) -> None:
    """The race: a pass hands the message to the waiting recv, and the task is cancelled
    before it runs: the message goes back to the front of the queue."""
    async with opener() as a, opener() as b:
        peer = a.connect(b.address)
        await a.send(peer, 2, b"warm-up")
        assert (await b.recv(2, timeout=10)).data == b"warm-up"
        waiting = asyncio.ensure_future(b.recv(2))
        await asyncio.sleep(0.01)
        hand_out = b._hand_out

        def hand_out_then_cancel() -> None:
            hand_out()
            waiting.cancel()

        b._hand_out = hand_out_then_cancel  # type: ignore[method-assign]
        await a.send(peer, 2, b"first")
        await a.send(peer, 2, b"second")
        with pytest.raises(asyncio.CancelledError):
            await waiting
        b._hand_out = hand_out  # type: ignore[method-assign]
        assert (await b.recv(2, timeout=10)).data == b"first"
        assert (await b.recv(2, timeout=10)).data == b"second"
        assert all(p.unconsumed == 0 for p in b.peers)  # the window accounting is whole again


async def test_wait_connected_cancelled_leaves_the_handshake_going(opener: Opener) -> None:
    async with opener() as a, opener() as b:
        peer = a.connect(b.address)
        task = asyncio.ensure_future(a.wait_connected(peer))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await a.wait_connected(peer, timeout=10)
        assert peer.state is btlcore.PeerState.ESTABLISHED
        assert not a._connecting.get(peer)


async def test_close_cancelled_releases_at_once_and_fails_what_was_pending(opener: Opener) -> None:
    a, b = opener(flush_timeout=3600.0, peer_timeout=3600.0), opener()  # (a long close)
    peer = a.connect(b.address)
    await a.send(peer, 1, b"x")
    b.abort()  # nobody will acknowledge now
    pending = asyncio.ensure_future(a.send(peer, 1, b"y" * 10_000))
    closing = asyncio.ensure_future(a.close())
    for _ in range(3):
        await asyncio.sleep(0)
    assert not closing.done()  # flushing what nobody acknowledges
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert a.closed
    with pytest.raises(TransportClosed):
        await asyncio.wait_for(pending, 10)


async def test_a_dead_peer_raises_within_its_timeout(opener: Opener, backend: str) -> None:
    """The peer vanishes (no CLOSE): a send toward it raises PeerUnreachable once nothing was
    heard for peer_timeout, a wait on it as well, and it says so to on_peer."""
    async with opener(peer_timeout=1.0) as a:
        b = opener()
        peer = a.connect(b.address)
        await a.send(peer, 1, b"hello")
        events: list[str] = []
        a.on_peer(lambda event, p, exc: events.append(event))
        b.abort()
        started = a.now()
        with pytest.raises(PeerUnreachable):
            await asyncio.wait_for(a.send(peer, 1, b"x" * 50_000), 60)
        took = a.now() - started
        assert events == ["failed"]
        if backend == "sim":  # virtual time: exact enough to hold it to the rule
            assert 0.9 <= took <= 1.5, took
        with pytest.raises(PeerUnreachable):
            await a.send(peer, 1, b"again")


async def test_connect_to_nothing_fails_the_handshake_wait(opener: Opener) -> None:
    async with opener(handshake_timeout=0.5, peer_timeout=0.5) as a:
        gone = opener()
        address = gone.address
        gone.abort()
        peer = a.connect(address)
        with pytest.raises(PeerUnreachable):
            await asyncio.wait_for(a.wait_connected(peer), 60)
        with pytest.raises(TimeoutError):  # a wait of its own, shorter than the handshake's
            await a.wait_connected(a.connect(address), timeout=0.05)
