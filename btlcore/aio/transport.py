"""The asyncio face of a transport: the same engine on the same device, driven by the loop.

A :class:`Transport` here wraps a :class:`btlcore.Transport` (``.sync``) and a driver
(:mod:`.driver`): the loop runs the progress passes (on input, at deadlines, after new
work), and the calls below are coroutines that wait for what the passes bring.

Cancellation (every ``await`` here may be cancelled, and leaves the transport consistent):

* ``send``/``put`` cancelled while waiting for room in the send buffer: nothing was queued.
  Cancelled after the message was accepted: it stays queued and goes out (delivered once,
  if the peer lives); only the wait for its acknowledgement ends.  A message cannot be taken
  back once accepted: the peer may already hold part of it.
* ``recv`` cancelled: no message is lost; one handed to the cancelled call in the same loop
  iteration goes back to the front of the queue.
* ``wait_connected``, ``flush`` cancelled: nothing changes (the handshake goes on).
* ``close`` cancelled: the transport is released at once (as ``abort``), the pending work
  failing with ``TransportClosed``.

Threads: everything here runs in the loop's thread.  From another thread use
``loop.call_soon_threadsafe`` (or ``asyncio.run_coroutine_threadsafe``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections import deque
from collections.abc import AsyncIterator, Callable
from types import CoroutineType
from typing import Any

from .. import checks
from ..errors import PeerClosed, PeerUnreachable, TransportClosed, WouldBlock
from ..protocol.peers import Peer, PeerState
from ..transport import Message
from ..transport import Transport as SyncTransport
from .driver import Driver, PumpedDriver, Timer, driver_for

AsyncHandler = Callable[[Peer, int, bytes], Any]
"""A handler: a plain function, or a coroutine function (run as a task)."""
PeerHandler = Callable[[str, Peer, BaseException | None], Any]


def _settle(fut: asyncio.Future[None], exc: BaseException | None) -> None:
    """A send's callback: its future gets the outcome (unless its waiter left)."""
    if not fut.done():
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)


def _wake_all(waiters: list[asyncio.Future[None]]) -> None:
    for fut in waiters:
        if not fut.done():
            fut.set_result(None)
    waiters.clear()


class Transport:
    """A btlcore transport under asyncio.  Make it with :func:`btlcore.aio.open`, inside a
    running loop; ``async with`` closes it."""

    def __init__(self, sync: SyncTransport, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.sync = sync
        self.loop = loop or asyncio.get_running_loop()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._recv_waiters: deque[tuple[int | None, asyncio.Future[Message]]] = deque()
        self._room: dict[Peer, list[asyncio.Future[None]]] = {}  # senders waiting for "writable"
        self._connecting: dict[Peer, list[asyncio.Future[None]]] = {}
        self._flushers: list[asyncio.Future[None]] = []
        self._user_peer_handler: PeerHandler | None = None
        self._closing = False
        self._woke = False  # a pass settled an awaited send or woke a waiter (see _after_pass)
        sync.on_peer(self._peer_event)
        self.driver: Driver | PumpedDriver = driver_for(sync, self.loop, self._after_pass, self._report)
        self.driver.kick()

    # -- what the sync transport has --------------------------------------------------

    @property
    def address(self) -> bytes:
        return self.sync.address

    @property
    def address_text(self) -> str:
        """:attr:`address` as people type it (udp ``HOST:PORT``); ``connect`` takes it."""
        return self.sync.address_text

    @property
    def closed(self) -> bool:
        return self.sync.closed

    @property
    def peers(self) -> list[Peer]:
        return self.sync.peers

    def now(self) -> float:
        """The transport's clock (virtual on the simulator): what ``timeout`` counts in."""
        return self.sync.now()

    def stats(self) -> dict[str, int]:
        return self.sync.stats()

    def expose(self, buffer: Any) -> int:
        return self.sync.expose(buffer)

    def unexpose(self, key: int) -> None:
        self.sync.unexpose(key)

    # -- connecting ---------------------------------------------------------------------

    def connect(self, address: bytes | str) -> Peer:
        """The peer at ``address`` (bytes, or its ``address_text``), at once: the handshake
        goes on in the background; the first send waits for it, or :meth:`wait_connected`."""
        self._check_open()
        peer = self.sync.connect(address)
        self.driver.kick()
        return peer

    async def wait_connected(self, peer: Peer, timeout: float | None = None) -> None:
        """Return once ``peer``'s handshake completed; raise what failed it
        (``PeerUnreachable`` after ``handshake_timeout``...), or ``TimeoutError`` after
        ``timeout`` seconds of the transport's clock."""
        if not isinstance(peer, Peer):
            raise TypeError(f"peer must be a btlcore.Peer (from connect()), not {type(peer).__name__}")
        timeout = checks.seconds(timeout, "timeout", optional=True)
        deadline = None if timeout is None else self.now() + timeout
        while True:
            self._check_open()
            state = peer.state
            if state is PeerState.ESTABLISHED:
                return
            if state is not PeerState.CONNECTING:
                raise _peer_error(peer)
            left = None if deadline is None else max(0.0, deadline - self.now())
            await self._wait_on(self._connecting.setdefault(peer, []), left, "handshake")

    # -- sending ------------------------------------------------------------------------

    async def send(self, peer: Peer, tag: int, data: Any) -> None:
        """Send ``data`` with ``tag``; return once the peer acknowledged all of it, or raise
        what failed it (``PeerUnreachable``, ``PeerClosed``, ``PeerRestarted``,
        ``TransportClosed``, ``MessageTooLarge``...).  While the peer's send buffer is full,
        wait for room (nothing is queued meanwhile).  Do not modify ``data`` until it returns.
        Cancelled: see the module docstring."""
        fut: asyncio.Future[None] = self.loop.create_future()
        callback = functools.partial(self._settle, fut)
        try:  # (the common case, room in the buffer, without a coroutine more)
            self.sync.send(peer, tag, data, callback)
        except WouldBlock:
            await self._queue(peer, tag, data, callback, full=True)
        else:
            self.driver.sent()
        await fut

    async def submit(self, peer: Peer, tag: int, data: Any) -> asyncio.Future[None]:
        """Queue ``data`` as :meth:`send` does, waiting for room while the send buffer is
        full, and return at once after: the future returned completes when the peer has
        acknowledged the message (with the error that failed it otherwise).  For a writer
        that wants back-pressure without waiting a round trip per message.  Not awaiting the
        future is fine: its error is marked retrieved (peer events report failures too)."""
        fut: asyncio.Future[None] = self.loop.create_future()
        await self._queue(peer, tag, data, functools.partial(_settle_quietly, fut))
        return fut

    async def _queue(self, peer: Peer, tag: int, data: Any, callback: Callable[[BaseException | None], None],
                     full: bool = False) -> None:
        """Hand the message to the transport, waiting for room while the send buffer is full
        (what :meth:`send` and :meth:`submit` share; ``full``: the caller just found it full,
        so wait before trying again)."""
        while True:
            if full:
                await self._wait_on(self._room.setdefault(peer, []), None, "room")
            try:
                self.sync.send(peer, tag, data, callback)
                break
            except WouldBlock:
                full = True
        self.driver.sent()

    def send_nowait(self, peer: Peer, tag: int, data: Any) -> asyncio.Future[None]:
        """Queue ``data`` now, or raise ``WouldBlock`` (nothing queued) when the send buffer
        is full; the future returned completes as :meth:`submit`'s.  Usable from a plain
        handler: a reply queued there leaves in the same pass, its ACK riding on it."""
        fut: asyncio.Future[None] = self.loop.create_future()
        self.sync.send(peer, tag, data, functools.partial(_settle_quietly, fut))
        self.driver.sent()
        return fut

    async def put(self, peer: Peer, key: int, offset: int, data: Any) -> None:
        """Emulated RDMA write into the peer's exposed region ``key`` (see
        :meth:`btlcore.Transport.put`); returns once it landed, raises ``PutError`` if the
        peer refused it, else as :meth:`send`."""
        fut: asyncio.Future[None] = self.loop.create_future()
        callback = functools.partial(self._settle, fut)
        while True:
            try:
                self.sync.put(peer, key, offset, data, callback)
                break
            except WouldBlock:
                await self._wait_on(self._room.setdefault(peer, []), None, "room")
        self.driver.sent()
        await fut

    async def flush(self, timeout: float | None = None) -> bool:
        """Wait until every message sent is acknowledged (or its peer failed): True, or
        False once ``timeout`` (default ``flush_timeout``) passed."""
        sync = self.sync
        timeout = checks.seconds(timeout, "timeout", optional=True)
        timeout = sync.config.flush_timeout if timeout is None else timeout
        deadline = self.now() + timeout
        while sync.engine.has_outstanding():
            left = deadline - self.now()
            if left <= 0:
                return False
            try:
                await self._wait_on(self._flushers, left, "flush")
            except TimeoutError:
                return not sync.engine.has_outstanding()
        sync.engine.ack_now()  # what we owe our peers goes now, not after ack_delay
        self.driver.run_now()
        return True

    # -- receiving ----------------------------------------------------------------------

    async def recv(self, tag: int | None = None, timeout: float | None = None) -> Message:
        """The next message (of ``tag``, if given) among those of tags without a handler;
        ``TimeoutError`` after ``timeout`` seconds of the transport's clock,
        ``TransportClosed`` once closed.  Messages wait in a queue held against the sender's
        window: a slow reader slows its senders down (their ``send`` waits for room)."""
        if tag is not None:
            checks.tag(tag)
        timeout = checks.seconds(timeout, "timeout", optional=True)
        msg = self._take(tag)
        if msg is not None:
            return msg
        self._check_open()
        fut: asyncio.Future[Message] = self.loop.create_future()
        entry = (tag, fut)
        self._recv_waiters.append(entry)
        timer = None if timeout is None else self.driver.call_at(self.now() + timeout, functools.partial(
            _expire, fut, f"no message within {timeout:g} s"))
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.sync.requeue(fut.result())  # handed over as we were cancelled: not lost
            raise
        finally:
            if timer is not None:
                timer.cancel()
            try:
                self._recv_waiters.remove(entry)
            except ValueError:
                pass

    async def messages(self, tag: int | None = None) -> AsyncIterator[Message]:
        """``async for m in t.messages(tag)``: messages as they come, until the transport
        closes."""
        while True:
            try:
                yield await self.recv(tag)
            except TransportClosed:
                return

    def on(self, tag: int, handler: AsyncHandler | None) -> None:
        """``handler(peer, tag, data)`` for each message of ``tag``: a plain function runs in
        the pass that delivered the message; a coroutine function runs as a task.  Either's
        exception goes to the loop's exception handler (never swallowed); ``None``
        unregisters (the tag's messages go to :meth:`recv` again)."""
        self.sync.on(tag, None if handler is None else self._wrap(handler, f"handler for tag {tag}"))

    def on_peer(self, handler: PeerHandler | None) -> None:
        """``handler(event, peer, exc)`` for peer events (``"failed"``, ``"restarted"``,
        ``"closed"``, ``"writable"``; see :meth:`btlcore.Transport.on_peer`), a plain function
        or a coroutine function (run as a task)."""
        self._user_peer_handler = None if handler is None else self._wrap(handler, "peer handler")

    # -- closing ------------------------------------------------------------------------

    async def close(self, flush: bool = True) -> None:
        """Flush (up to ``flush_timeout``, if ``flush``), send CLOSE to every peer and wait
        for their acknowledgement (up to ``close_timeout``), then release the device; what
        is left fails with ``TransportClosed``.  Cancelled: released at once."""
        if self.sync.closed or self._closing:
            return
        self._closing = True
        try:
            if flush:
                await self.flush()
            await self._close_peers()
        except BaseException:
            self.abort()
            raise
        self._release()

    def abort(self) -> None:
        """Release the transport now: no flush, no CLOSE exchange; pending sends, receives
        and waits fail with ``TransportClosed``."""
        if not self.sync.closed:
            self._closing = True
            self._release()

    async def __aenter__(self) -> Transport:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close(flush=exc[0] is None)

    # -- inside -------------------------------------------------------------------------

    async def _close_peers(self) -> None:
        sync = self.sync
        sync.engine.start_close(self.now(), None)
        self.driver.kick()
        deadline = self.now() + sync.config.close_timeout
        while sync.engine.closing() and self.now() < deadline:
            try:
                await self._wait_on(self._flushers, deadline - self.now(), "close")
            except TimeoutError:
                return

    def _release(self) -> None:
        self.driver.stop()
        # the engine closed first: the sync close then has nothing left to wait for (a CLOSE
        # unacknowledged past close_timeout, or a peer connected meanwhile, would block the loop)
        self.sync.engine.close()
        try:
            self.sync.close(flush=False)
        finally:
            self._fail_waiters(TransportClosed("transport closed"))
            for task in list(self._tasks):
                task.cancel()

    def _fail_waiters(self, exc: BaseException) -> None:
        for _, fut in self._recv_waiters:
            if not fut.done():
                fut.set_exception(exc)
        for group in (*self._room.values(), *self._connecting.values(), self._flushers):
            _wake_all(group)
        self._room.clear()
        self._connecting.clear()

    def _check_open(self) -> None:
        if self.sync.closed or self._closing:
            raise TransportClosed("transport is closed")

    async def _wait_on(self, group: list[asyncio.Future[None]], timeout: float | None, what: str) -> None:
        """Wait until ``group`` is woken (or ``timeout``: TimeoutError); the caller then
        looks again at what it waits for."""
        fut: asyncio.Future[None] = self.loop.create_future()
        group.append(fut)
        timer: Timer | None = None
        if timeout is not None:
            timer = self.driver.call_at(self.now() + timeout, functools.partial(
                _expire, fut, f"{what}: not done within {timeout:g} s"))
        try:
            await fut
        finally:
            if timer is not None:
                timer.cancel()
            if not fut.done():
                fut.cancel()
            try:
                group.remove(fut)
            except ValueError:
                pass
        if self.sync.closed:
            raise TransportClosed("transport is closed")

    def _settle(self, fut: asyncio.Future[None], exc: BaseException | None) -> None:
        """An awaited send's callback: its task will run in the loop's next iteration."""
        self._woke = True
        _settle(fut, exc)

    def _after_pass(self) -> bool:
        """After each pass: hand out queued messages, wake flushers and handshake waiters.
        True if a task waiting here was woken (it runs in the next iteration, and may send:
        the driver then sets its timer after it, once)."""
        if self._recv_waiters and self.sync.queued:
            self._hand_out()
        if self._flushers:  # (they look again: cheaper than deciding here which may go)
            _wake_all(self._flushers)
            self._woke = True
        if self._connecting:
            for peer in [p for p in self._connecting if p.state is not PeerState.CONNECTING]:
                _wake_all(self._connecting.pop(peer))
                self._woke = True
        woke = self._woke
        self._woke = False
        return woke

    def _hand_out(self) -> None:
        for tag, fut in list(self._recv_waiters):
            if fut.done():
                continue
            msg = self._take(tag)
            if msg is None:
                if tag is None:
                    return
                continue
            fut.set_result(msg)
            self._woke = True
            if not self.sync.queued:
                return

    def _take(self, tag: int | None) -> Message | None:
        """The oldest queued message (of ``tag``), no longer held against its peer's window."""
        msg = self.sync.recv_nowait(tag)
        if msg is not None and self.sync.engine.has_work():
            self.driver.kick()  # the window opened: the ACK that says so goes now
        return msg

    def _peer_event(self, event: str, peer: Peer, exc: BaseException | None) -> None:
        # (the sync transport logged it, and calls this as its user's handler)
        waiters = self._room.pop(peer, None)
        if waiters:
            _wake_all(waiters)  # writable, or failed/closed: the senders look again
        if self._user_peer_handler is not None:
            self._user_peer_handler(event, peer, exc)

    def _wrap(self, handler: Callable[..., Any], what: str) -> Callable[..., None]:
        """``handler`` as the sync transport calls it: a coroutine it returns runs as a task
        whose exception reaches the loop's exception handler."""
        if not callable(handler):
            raise TypeError(f"{what} must be a function or a coroutine function, not "
                            f"{type(handler).__name__}")

        def call(*args: Any) -> None:
            result = handler(*args)
            if type(result) is CoroutineType or inspect.iscoroutine(result):  # (a future: not ours)
                task = self.loop.create_task(result)
                self._tasks.add(task)
                task.add_done_callback(functools.partial(self._task_done, what))

        return call

    def _task_done(self, what: str, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.loop.call_exception_handler({
                "message": f"btlcore: {what} raised", "exception": task.exception(), "task": task,
                "transport": self})

    def _report(self, exc: BaseException) -> None:
        self.loop.call_exception_handler({
            "message": "btlcore: a handler raised during a progress pass", "exception": exc,
            "transport": self})

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<btlcore.aio.Transport {self.sync.backend} {self.address_text} {state}>"


def _settle_quietly(fut: asyncio.Future[None], exc: BaseException | None) -> None:
    """:func:`_settle` for a future its caller may never await (``submit``,
    ``send_nowait``): an error is marked seen at once, or asyncio would log it when the future
    is freed (an awaiter still gets it)."""
    if not fut.done():
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)
            fut.exception()


def _expire(fut: asyncio.Future[Any], message: str) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(message))


def _peer_error(peer: Peer) -> BaseException:
    if peer.error is not None:
        return peer.error
    if peer.state is PeerState.CLOSED:
        return PeerClosed(f"peer {peer.address.hex()}: the connection is closed")
    return PeerUnreachable(f"peer {peer.address.hex()} has failed")
