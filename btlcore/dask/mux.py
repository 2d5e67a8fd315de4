"""Many Dask comms over one btlcore peer: the :class:`Endpoint` (one transport) and its
:class:`Link` s (one per peer), which multiplex comms by id and schedule their chunks.

Why this shape: a btlcore peer delivers its messages in order, so a 1 GB message sent whole
would hold every later message of the peer, heartbeats included, until its last byte.  So a
link sends each Dask message as chunks (:mod:`.frames`), takes one chunk per comm in turn
(round robin), and keeps at most ``limit`` bytes of them accepted and not yet acknowledged by
btlcore: a small message of another comm waits for at most that much, and a message of at
most ``SMALL`` bytes may go past the limit at once.

Sends here are btlcore's non-blocking ``send`` with a completion callback, called from the
loop's thread (inside a progress pass, or followed by a ``kick`` of the loop's driver so the
pass runs soon): a write returns once its last chunk was *accepted*, not acknowledged.

The link never raises into the transport's pass: what cannot be parsed fails the link's
comms (a peer speaking another version), and is logged.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import BtlError, WouldBlock
from ..protocol.peers import Peer
from . import frames as fr

if TYPE_CHECKING:
    from ..aio import Transport as AioTransport
    from .comm import BTLComm

log = logging.getLogger("btlcore.dask")

#: bytes of chunks a link keeps accepted by btlcore and not yet acknowledged
LIMIT = 4 << 20
#: a message chunk this small may go past LIMIT (heartbeats, task messages)
SMALL = 64 << 10


class ForkedTransport(RuntimeError):
    """A comm or listener made before ``fork()`` was used in the child: its btlcore
    transport belongs to the parent (the sockets are shared, the state is not)."""


class Endpoint:
    """One btlcore transport on one loop: a listener's, or the outgoing one this process
    uses on that loop.  ``accept(link, comm_id)`` makes the comm for an OPEN (a listener),
    or is None (OPENs are refused)."""

    __slots__ = ("t", "sync", "links", "accept", "pid", "address_text", "comms", "on_idle", "chunk",
                 "limit", "rndv", "regions", "__weakref__")

    def __init__(self, t: AioTransport, accept: Callable[[Link, int], BTLComm | None] | None = None,
                 chunk: int | None = None, limit: int | None = None) -> None:
        self.t = t
        self.sync = t.sync
        self.links: dict[Peer, Link] = {}
        self.accept = accept
        self.pid = os.getpid()
        self.address_text = t.address_text
        self.comms = 0  # open comms on every link: a stopped listener closes at zero
        self.on_idle: Callable[[], None] | None = None
        self.chunk = fr.CHUNK if chunk is None else chunk
        self.limit = LIMIT if limit is None else limit
        self.rndv: int | None = fr.RNDV_MIN
        self.regions: dict[int, BTLComm] = {}  # exposed for a rendezvous message: key -> its comm
        t.on(fr.TAG, self._on_message)
        t.on_peer(self._on_peer)
        self.sync.on_put(self._on_put)

    def check_process(self) -> None:
        if self.pid != os.getpid():
            raise ForkedTransport(
                f"btl: this comm's btlcore transport ({self.address_text}) was opened in process "
                f"{self.pid} and inherited across fork() by process {os.getpid()}; a transport "
                "cannot be shared between processes: connect again in the child")

    def link(self, peer: Peer) -> Link:
        link = self.links.get(peer)
        if link is None:
            link = self.links[peer] = Link(self, peer)
        return link

    def kick(self) -> None:
        """What was queued outside a pass leaves now (its first datagrams, from the caller:
        a round trip one loop iteration shorter), the rest in a pass soon."""
        self.t.driver.sent()

    def comm_gone(self) -> None:
        self.comms -= 1
        if self.comms == 0 and self.on_idle is not None:
            self.on_idle()

    def _on_message(self, peer: Peer, tag: int, data: bytes) -> None:
        self.link(peer).receive(data)

    def expose(self, buffer: Any, comm: BTLComm) -> int:
        key = self.sync.expose(buffer)
        self.regions[key] = comm
        return key

    def unexpose(self, key: int) -> None:
        if self.regions.pop(key, None) is not None and not self.sync.closed:
            self.sync.unexpose(key)

    def _on_put(self, peer: Peer, key: int, offset: int, length: int) -> None:
        comm = self.regions.get(key)
        if comm is not None:
            comm.landed(length)

    def _on_peer(self, event: str, peer: Peer, exc: BaseException | None) -> None:
        link = self.links.get(peer)
        if link is None:
            return
        if event == "writable":
            link.writable()
            return
        del self.links[peer]
        why = f"btl peer {peer_text(self, peer)} {event}"
        link.fail(f"{why}: {exc}" if exc is not None else why)

    async def close(self) -> None:
        for link in list(self.links.values()):
            link.fail("btl: the transport closed")
        self.links.clear()
        await self.t.close()

    def abort(self) -> None:
        for link in list(self.links.values()):
            link.fail("btl: the transport closed")
        self.links.clear()
        self.t.abort()


def peer_text(endpoint: Endpoint, peer: Peer) -> str:
    """A peer's address as Dask writes it (``btl://HOST:PORT``)."""
    from ..addresses import text

    return "btl://" + text(endpoint.sync.device, peer.address)


class Link:
    """One btlcore peer of an endpoint: the comms over it (by opener and id), their chunks
    scheduled round robin, and the bytes in flight."""

    __slots__ = ("endpoint", "peer", "comms", "ready", "control", "in_flight", "blocked", "error",
                 "next_id", "text", "_send")

    def __init__(self, endpoint: Endpoint, peer: Peer) -> None:
        self.endpoint = endpoint
        self.peer = peer
        # key: id * 2 + (1 if the peer opened it); weak: a comm dropped unclosed is closed (_dropped)
        self.comms: weakref.WeakValueDictionary[int, BTLComm] = weakref.WeakValueDictionary()
        self.ready: deque[BTLComm] = deque()  # comms with chunks to send, in turn
        self.control: deque[bytes] = deque()  # OPEN/ACCEPT/CLOSE refused for room: first out
        self.in_flight = 0
        self.blocked = False
        self.error: str | None = None
        self.next_id = 1
        self.text = peer_text(endpoint, peer)
        self._send = endpoint.sync.send

    # -- comms ----------------------------------------------------------------------------

    def add(self, comm: BTLComm, comm_id: int | None = None) -> int:
        """Register ``comm``: one we open (``comm_id`` None: a new id, OPEN sent), or one the
        peer opened with ``comm_id`` (ACCEPT sent)."""
        opener = comm_id is None
        if comm_id is None:
            comm_id = self.next_id
            self.next_id = (self.next_id + 1) & 0xFFFFFFFF or 1
            self.post_control(fr.control(fr.OPEN, comm_id, True, bytes([fr.VERSION])))
        else:
            self.post_control(fr.control(fr.ACCEPT, comm_id, False))
        key = comm_id * 2 + (0 if opener else 1)
        self.comms[key] = comm
        comm.finalizer = weakref.finalize(comm, self._dropped, comm_id, opener, repr(comm))
        self.endpoint.comms += 1
        return comm_id

    def _dropped(self, comm_id: int, opener: bool, name: str) -> None:
        """A comm was garbage-collected without being closed (as the tcp comm's finalizer,
        close it): its peer is told, from the loop's thread."""
        try:
            self.endpoint.t.loop.call_soon_threadsafe(self._forget, comm_id, opener, name)
        except RuntimeError:  # (the loop is closed: nothing to tell anyone)
            pass

    def _forget(self, comm_id: int, opener: bool, name: str) -> None:
        log.warning("Closing dangling comm in %s", name)
        self.endpoint.comm_gone()
        if self.error is None and not self.endpoint.t.closed:
            self.post_control(fr.control(fr.CLOSE, comm_id, opener))

    def remove(self, comm: BTLComm, tell: bool) -> None:
        """``comm`` ends (closed or aborted here, or by the peer): forget it; ``tell``: send
        CLOSE so the peer's side ends too."""
        key = comm.comm_id * 2 + (0 if comm.opener else 1)
        if self.comms.get(key) is comm:
            del self.comms[key]
            comm.detach()
            self.endpoint.comm_gone()
            if tell and self.error is None:
                self.post_control(fr.control(fr.CLOSE, comm.comm_id, comm.opener))
        if comm in self.ready:
            self.ready.remove(comm)

    def write(self, comm: BTLComm, frames: Sequence[Any]) -> asyncio.Future[None] | None:
        """Queue one Dask message of ``comm``; None if every chunk was accepted at once, else
        a future done when they are (or failed with the comm's end)."""
        if not comm.outq and not self.ready and not self.control and not self.blocked:
            whole = fr.single_chunk(frames, comm.comm_id, comm.opener, self.endpoint.chunk)
            if whole is not None and self._post(whole):  # (the usual small message: out at once)
                self.endpoint.kick()
                return None
        out = fr.Outgoing(frames, comm.comm_id, comm.opener, self.endpoint.chunk, self.endpoint.rndv)
        comm.outq.append(out)
        if len(comm.outq) == 1:
            self.ready.append(comm)
        self.pump()
        self.endpoint.kick()
        if not comm.outq or comm.outq[-1] is not out:
            return None  # gone already: the fast path of a small message
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        comm.writers.append((out, fut))
        return fut

    # -- sending --------------------------------------------------------------------------

    def post_control(self, msg: bytes) -> None:
        if self.control or not self._post(msg):
            self.control.append(msg)
        self.endpoint.kick()

    def _post(self, msg: Any, put: tuple[int, int] | None = None) -> bool:
        """One btlcore send (or, with ``put`` = (key, offset), a put); False when refused for
        room (WouldBlock).  A failed peer fails the link (its event follows; this just does
        not wait for it)."""
        if self.error is not None:
            return True  # (dropped: the comms have failed already)
        try:
            done = functools.partial(self._done, len(msg))
            if put is None:
                self._send(self.peer, fr.TAG, msg, done)
            else:
                self.endpoint.sync.put(self.peer, put[0], put[1], msg, done)
        except WouldBlock:
            self.blocked = True
            return False
        except BtlError as exc:
            self.endpoint.links.pop(self.peer, None)
            self.fail(f"btl peer {self.text}: {exc}")
            return True
        self.in_flight += len(msg)
        return True

    def _done(self, size: int, exc: BaseException | None) -> None:
        self.in_flight -= size
        if self.blocked or self.ready:
            self.blocked = False
            self.pump()

    def writable(self) -> None:
        self.blocked = False
        self.pump()

    def pump(self) -> None:
        """Send control messages, then chunks, one comm at a time in turn, while btlcore
        takes them and the bytes in flight stay within ``limit`` (small chunks excepted)."""
        control, ready = self.control, self.ready
        while control and not self.blocked:
            if self._post(control[0]):
                control.popleft()
        limit = self.endpoint.limit
        while ready and not self.blocked and self.error is None:
            comm = ready[0]
            out = comm.outq[0]
            if out.waiting:  # a rendezvous waiting for READY: out of turn until it comes
                ready.popleft()
                continue
            if self.in_flight >= limit and out.next_size() > SMALL and not self._small_first():
                return  # wait for acknowledgements
            comm = ready[0]
            out = comm.outq[0]
            if out.putting:
                key, offset, view = out.peek_put()
                if not self._post(view, (key, offset)):
                    return
                out.pop_put(view.nbytes)
            elif self._post(out.peek()):
                out.pop()
            else:
                return
            if out.waiting:
                continue  # (the next turn takes it out of the ring)
            if out.done:
                comm.outq.popleft()
                comm.sent(out)
            if comm.outq:
                ready.rotate(-1)
            else:
                ready.popleft()

    def _small_first(self) -> bool:
        """Bring a comm whose next chunk is small to the front; False if there is none."""
        ready = self.ready
        for k, comm in enumerate(ready):
            if not comm.outq[0].waiting and comm.outq[0].next_size() <= SMALL:
                ready.rotate(-k)
                return True
        return False

    # -- receiving ------------------------------------------------------------------------

    def receive(self, data: Any) -> None:
        """One btlcore message of this layer from the peer."""
        try:
            kind, flags, comm_id = fr.parse_header(data)
            key = comm_id * 2 + (1 if flags & fr.OPENER else 0)
            if kind == fr.DATA:
                comm = self.comms.get(key)
                if comm is not None:  # (else: one we ended; its last chunks are dropped)
                    comm.take_chunk(data, flags)
            elif kind == fr.OPEN:
                self._open(comm_id, data)
            elif kind == fr.READY:
                comm = self.comms.get(key)
                if comm is not None and comm.outq and comm.outq[0].waiting:
                    comm.outq[0].ready(fr.parse_keys(data))
                    if comm not in self.ready:
                        self.ready.append(comm)
                    self.pump()
            elif kind == fr.CLOSE:
                comm = self.comms.get(key)
                if comm is not None:
                    self.remove(comm, tell=False)
                    comm.ended("the peer closed the comm", by_peer=True)
            else:
                comm = self.comms.get(key)
                if comm is not None:
                    comm.answered(kind == fr.ACCEPT, bytes(data[fr.HEADER.size:]).decode("utf-8", "replace"))
        except fr.FramingError as exc:
            log.warning("btl: dropping the link with %s: %s", self.text, exc)
            self.endpoint.links.pop(self.peer, None)
            self.fail(f"btl peer {self.text} sent what this side cannot parse: {exc}")

    def _open(self, comm_id: int, data: Any) -> None:
        version = data[fr.HEADER.size] if len(data) > fr.HEADER.size else 0
        accept = self.endpoint.accept
        if version != fr.VERSION:
            why = f"btl dask comm version {version} is not supported (this side speaks {fr.VERSION})"
        elif accept is None:
            why = "not listening (the listener was stopped)"
        else:
            if accept(self, comm_id) is not None:
                return
            why = "not listening (the listener was stopped)"
        self.post_control(fr.control(fr.REFUSE, comm_id, False, why.encode()))

    def fail(self, why: str) -> None:
        """The peer failed, closed or restarted (or the transport closed): every comm ends."""
        if self.error is not None:
            return
        self.error = why
        comms = list(self.comms.values())
        self.comms.clear()
        self.ready.clear()
        self.control.clear()
        for comm in comms:
            comm.detach()
            self.endpoint.comm_gone()
            comm.ended(why, by_peer=True)
