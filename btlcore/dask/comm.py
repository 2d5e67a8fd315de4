"""One Dask comm over btlcore: :class:`BTLComm`, Dask's ``Comm`` on a :class:`~.mux.Link`.

Messages are serialized as Dask's tcp comm does (``to_frames``/``from_frames``: the same
handshake options, compression, offloading and shards), then cut into chunks by the link.

What the calls do, as Dask documents them:

* ``write`` returns once every chunk of the message was accepted by btlcore (back-pressure:
  it waits while the link's bytes in flight are at their limit), not when acknowledged;
* ``read`` returns the next message; after the comm ended, the messages that arrived before
  the end are still read, then ``CommClosedError``;
* ``close`` waits until what was written has been accepted, then tells the peer (CLOSE, sent
  after the data on the same ordered peer, so the peer reads everything first);
* ``abort`` ends at once: what was not yet sent is dropped, the peer is told.

A read or write cancelled midway aborts the comm (as the tcp comm does: the message may be
half sent or half taken).
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

import dask.utils
from distributed.comm import utils as _utils
from distributed.comm.core import Comm, CommClosedError
from distributed.protocol.utils import host_array

from . import frames as fr

if TYPE_CHECKING:
    from .mux import Link

# Dask's serialization, as its tcp comm calls it (typed here: Dask's are not annotated)
to_frames: Callable[..., Awaitable[list[Any]]] = _utils.to_frames
from_frames: Callable[..., Awaitable[Any]] = _utils.from_frames


class BTLComm(Comm):
    """A Dask comm multiplexed with others over one btlcore peer."""

    max_shard_size: ClassVar[int] = dask.utils.parse_bytes(dask.config.get("distributed.comm.shard"))

    def __init__(self, link: Link, local_addr: str, peer_addr: str, opener: bool, deserialize: bool = True):
        self._closed = False
        super().__init__(deserialize=deserialize)
        self._link = link
        self._local_addr = local_addr
        self._peer_addr = peer_addr
        self.opener = opener
        self.comm_id = 0
        self.outq: deque[fr.Outgoing] = deque()
        self.writers: list[tuple[fr.Outgoing, asyncio.Future[None]]] = []
        self._inbox: deque[list[Any]] = deque()
        self._incoming: fr.Incoming | None = None
        self._rndv: tuple[list[Any], list[int], int] | None = None  # buffers, keys, bytes due
        self._held: list[list[Any]] = []  # messages complete while a rendezvous is landing
        self._reader: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._opened: asyncio.Future[None] | None = None
        self._accepted = False
        self._why = ""
        self.finalizer: weakref.finalize[Any, Any] | None = None  # (set by the link)

    # -- Dask's interface ------------------------------------------------------------------

    @property
    def local_address(self) -> str:
        return self._local_addr

    @property
    def peer_address(self) -> str:
        return self._peer_addr

    def closed(self) -> bool:
        return self._closed

    @property
    def extra_info(self) -> dict[str, Any]:
        return {}

    async def read(self, deserializers: Any = None) -> Any:
        self._link.endpoint.check_process()
        while not self._inbox:
            if self._closed:
                raise CommClosedError(f"in {self!r}: {self._why}")
            self._reader = asyncio.get_running_loop().create_future()
            try:
                await self._reader
            except asyncio.CancelledError:
                self.abort()
                raise
            finally:
                self._reader = None
        frames = self._inbox.popleft()
        try:
            return await from_frames(frames, deserialize=self.deserialize, deserializers=deserializers,
                                     allow_offload=self.allow_offload)
        except EOFError:
            self.abort()
            raise CommClosedError("aborted stream on truncated data") from None

    async def write(self, msg: Any, serializers: Any = None, on_error: str | None = "message") -> int:
        self._link.endpoint.check_process()
        if self._closed:
            raise CommClosedError(f"in {self!r}: {self._why}")
        frames = await to_frames(
            msg, allow_offload=self.allow_offload, serializers=serializers, on_error=on_error,
            context={"sender": self.local_info, "recipient": self.remote_info, **self.handshake_options},
            frame_split_size=self.max_shard_size)
        if self._closed:  # (ended while serializing in a thread)
            raise CommClosedError(f"in {self!r}: {self._why}")
        waiter = self._link.write(self, frames)
        if waiter is not None:
            try:
                await waiter
            except asyncio.CancelledError:
                self.abort()
                raise
        return sum(memoryview(f).nbytes for f in frames)

    async def close(self) -> None:
        if self._closed:
            return
        if self.outq:
            self._drained = asyncio.get_running_loop().create_future()
            try:
                await self._drained
            except CommClosedError:
                return
            except asyncio.CancelledError:
                self.abort()
                raise
            finally:
                self._drained = None
        if not self._closed:
            self._link.remove(self, tell=True)
            self.ended("the comm was closed", by_peer=False)

    def abort(self) -> None:
        if self._closed:
            return
        self._link.remove(self, tell=True)
        self.ended("the comm was aborted", by_peer=False)

    # -- what the link calls ---------------------------------------------------------------

    def detach(self) -> None:
        """Ended through the link: nothing to do when garbage-collected."""
        if self.finalizer is not None:
            self.finalizer.detach()

    def sent(self, out: fr.Outgoing) -> None:
        """Every chunk of ``out`` was accepted: its writer returns."""
        writers = self.writers
        if writers and writers[0][0] is out:
            _, fut = writers.pop(0)
            if not fut.done():
                fut.set_result(None)
        if not self.outq and self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def take_chunk(self, data: Any, flags: int) -> None:
        """One DATA chunk of this comm: a message is complete at its LAST chunk."""
        if flags & fr.RNDV:
            self._rendezvous(data)
            return
        if flags & fr.FIRST:
            incoming = self._incoming = fr.Incoming(data)
            incoming.feed(incoming.first_payload())
        elif self._incoming is None:
            raise fr.FramingError("a DATA chunk with no message begun")
        else:
            incoming = self._incoming
            incoming.feed(memoryview(data)[fr.HEADER.size:])
        if flags & fr.LAST:
            if not incoming.complete:
                raise fr.FramingError("the LAST chunk of a message left frames missing")
            self._incoming = None
            self._deliver(incoming.frames())

    def _deliver(self, frames: list[Any]) -> None:
        if self._rndv is not None:  # (after the rendezvous message before it)
            self._held.append(frames)
            return
        self._inbox.append(frames)
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)

    def _rendezvous(self, data: Any) -> None:
        """A large message's prelude: expose a buffer per frame, answer READY with their keys."""
        if self._rndv is not None:
            raise fr.FramingError("a rendezvous message began before the last one landed")
        buffers = fr.Incoming(data).rndv_buffers(host_array)  # (as the tcp comm reads into)
        endpoint = self._link.endpoint
        keys = [endpoint.expose(b, self) for b in buffers if len(b)]
        self._rndv = (buffers, keys, sum(map(len, buffers)))
        self._link.post_control(fr.ready_message(self.comm_id, self.opener, keys))

    def landed(self, length: int) -> None:
        """A put into one of this comm's regions landed; the message is in at the last byte."""
        if self._rndv is None:
            return
        buffers, keys, due = self._rndv
        due -= length
        if due > 0:
            self._rndv = (buffers, keys, due)
            return
        self._release()
        held, self._held = self._held, []
        for frames in (buffers, *held):
            self._deliver(frames)

    def _release(self) -> None:
        if self._rndv is not None:
            for key in self._rndv[1]:
                self._link.endpoint.unexpose(key)
            self._rndv = None

    def answered(self, accepted: bool, why: str) -> None:
        """The listener's ACCEPT or REFUSE of our OPEN."""
        opened = self._opened
        if accepted:
            self._accepted = True
            if opened is not None and not opened.done():
                opened.set_result(None)
        else:
            self._link.remove(self, tell=False)
            self.ended(f"refused by {self._peer_addr}: {why}", by_peer=True)

    def ended(self, why: str, by_peer: bool) -> None:
        """The comm is over (here or at the peer, or its link failed): waiters wake."""
        if self._closed:
            return
        self._closed = True
        self._why = why
        self.outq.clear()
        self._release()
        exc = CommClosedError(f"in {self!r}: {why}")
        for fut in (self._reader, self._drained, self._opened, *(f for _, f in self.writers)):
            if fut is not None and not fut.done():
                if fut is self._reader:
                    fut.set_result(None)  # the reader looks again: the inbox first, then the error
                else:
                    fut.set_exception(exc)
                    fut.add_done_callback(_consume)  # (no "never retrieved" if its waiter left)
        self.writers.clear()

    async def opened(self) -> None:
        """Wait for the listener's ACCEPT (Connector.connect)."""
        if self._closed:
            raise CommClosedError(f"in {self!r}: {self._why}")
        if self._accepted:
            return
        self._opened = asyncio.get_running_loop().create_future()
        try:
            await self._opened
        except asyncio.CancelledError:
            self.abort()
            raise
        finally:
            self._opened = None


def _consume(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()
