"""The public face of btlcore: a :class:`Transport` joins the sans-I/O engine to a device.

Typical use::

    with btlcore.open("udp") as t:
        peer = t.connect(other_address)
        t.on(7, lambda peer, tag, data: print(data))
        t.send(peer, 7, b"hello", callback=lambda exc: print("acked" if exc is None else exc))
        btlcore.run_until([t], lambda: done, timeout=5)

Each :meth:`Transport.progress` pass: reap send completions, take received datagrams into
the engine, run due timers, dispatch deliveries and completion callbacks, then post what the
engine wants sent (retransmissions, new segments and the handlers' replies with the ACKs
riding on them, standalone ACKs, handshakes; anything the device pushes back waits in a
backlog, never lost).  Callbacks run from ``progress``, never from inside the engine, so
they may call ``send`` freely.  On a device whose wait reports input readiness (UDP),
``progress(timeout)`` sends first, waits, then reads only what the wait said is there.

Threads: a transport belongs to one thread, the first that drives it (any call below but
:meth:`Transport.wake`); a call from another thread raises ``RuntimeError`` naming both
threads, before touching any state.  :meth:`Transport.wake` is the one call any thread may
make: it returns a ``progress(timeout)`` blocked in the owner thread.

Logging: connection events go to the ``btlcore.transport`` logger, nothing per packet above DEBUG.
"""

from __future__ import annotations

import logging
import threading
from _thread import get_ident
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, cast

import attrs

from . import addresses, checks
from ._moved import moved_to_run
from .config import Config
from .device import Channel, DeviceOps
from .driving import Driving
from .errors import TransportClosed, WouldBlock
from .lives import this_life
from .progress import Progress
from .protocol.engine import Engine
from .protocol.events import Event
from .protocol.peers import Callback, Peer, PeerState
from .protocol.stats import path_state, stats_json, stats_line
from .registry import tool_plugin_manager
from .taps import TracePath, filtered_post, frame_hooks, open_trace

Handler = Callable[[Peer, int, bytes], Any]
PeerHandler = Callable[[str, Peer, BaseException | None], Any]
# a device's sends as the transport calls them: the engine names channels by number (Channel's
# values as plain ints, no enum per datagram), which a device typed for Channel takes as is
_Post = Callable[[int, Any, Any], bool]
_PostMany = Callable[[Sequence[tuple[int, Any, Any]]], int]

log = logging.getLogger("btlcore.transport")

_INF = float("inf")


@attrs.define(slots=True, frozen=True)
class Message:
    """A message taken with :meth:`Transport.recv` (tags that have no handler)."""

    peer: Peer
    tag: int
    data: bytes


class Transport(Driving):
    """A reliable transport on one device.  Create it with :func:`btlcore.open`.

    One thread owns it: the first that drives it (``connect``, ``send``, ``put``,
    ``progress``, ``recv``, ``flush``, ``close``, :func:`run_until`); when that thread has
    ended, the next caller takes it over.  Any other thread gets ``RuntimeError`` naming
    both threads, before any state is touched (``on``, ``expose`` and the other
    registrations are checked the same way once there is an owner, but do not claim it).
    :meth:`wake` is the one call any thread may make."""

    def __init__(self, device: DeviceOps, config: Config | None = None, *, seed: int | None = None,
                 plugins: Sequence[Any] = (), trace: TracePath | None = None) -> None:
        if config is not None and not isinstance(config, Config):
            raise TypeError(f"config must be a btlcore.Config or None, not {type(config).__name__}")
        self.config = config or Config.build()
        self.device = device
        self.backend = device.backend
        caps = device.capabilities()
        self.capabilities = caps
        self.now: Callable[[], float] = device.clock()
        want = self.config.mtu or caps.mtu
        data_info = device.create_channel(Channel.DATA, min(want, caps.mtu))
        prio_want = max(self.config.priority_limit, 256)
        prio_info = device.create_channel(Channel.PRIORITY, min(prio_want, data_info.mtu))
        use_crc = self.config.crc == "on" or (self.config.crc == "auto" and not caps.integrity)
        self.address: bytes = bytes(device.local_address())
        self.seed, rng, incarnation = this_life(caps, self.address, seed)
        self.engine = Engine(  # (tracer: None unless asked; it observes the congestion control, btlcore/trace.py)
            self.config, address=self.address, resolve=device.resolve, data_mtu=data_info.mtu,
            priority_mtu=prio_info.mtu, crc=use_crc, rng=rng, now=self.now(), incarnation=incarnation,
            reply_dest=device.reply_dest, wrap_cc=tracer.wrap_cc if (tracer := open_trace(trace)) else None)
        # the device's hooks the guard uses besides reply_dest: a peer's sources, ICMP unreachables
        if caps.reports_source:
            self.engine.guard.peer_sources = device.peer_sources
        # the pass (progress.py): the engine, the device's calls and the handlers, in slots
        pg = self._progress = Progress(self.engine, self, device, self.now, self.config.recv_budget,
                                       self.config.stats_interval, Message)
        if device.post_send_many is not None and caps.gather_sends:
            # the device sends a datagram given as [header, payload]: bulk payloads stay
            # views of the user's message (no copy); _flush_sends joins them for anyone who
            # must see one buffer (send filters, frame hooks, the backlog)
            self.engine.enable_gather()
        pg.post = cast("_Post", device.post_send)  # (_Post: why the cast)
        pg.many = cast("_PostMany | None", device.post_send_many)  # None: one by one
        # a device that reports each datagram's source is read through poll_recv_from
        pg.poll_from = device.poll_recv_from if caps.reports_source else None
        # a device whose sends complete inside post_send (UDP's sendto) has nothing to reap: no call per pass
        pg.poll_completions = None if caps.sends_complete_at_once else device.poll_completions
        # a device whose wait() returns at once when input is already there (real-time,
        # readiness-based, as epoll) lets progress(timeout) wait before it reads
        self._wait_first = pg.wait_first = not caps.virtual_time and caps.wait_wakes_on_input
        self._backlog: deque[tuple[int, Any, Any]] = pg.backlog  # (shared with the pass)
        self._handlers: dict[int, Handler] = pg.handlers
        self._inbox: deque[Message] = pg.inbox
        # the engine's peer events go through _peer_event (it logs them) to the user's handler
        pg.peer_handler = self._peer_event
        # send(): the compiled pass's (Progress.send: the fast path, Transport._send_checked
        # for the rest), bound on the instance so that a send costs no interpreted frame; a
        # subclass that overrides send keeps its own
        if type(self).send is Transport.send:
            self.send = pg.send  # type: ignore[method-assign]
        if type(self).progress is Transport.progress:  # (likewise progress: Progress.progress)
            self.progress = pg.progress  # type: ignore[method-assign]
        self._user_peer_handler: PeerHandler | None = None
        self._owner: int | None = None  # get_ident() of the owning thread (None: not yet driven)
        self._owner_thread: threading.Thread | None = None
        self._wake_device = getattr(device, "wake", None)
        self._peers = self.engine.peers_by_addr  # (the engine keeps this one dict)
        self._closed = False
        self._pm = tool_plugin_manager([*plugins, *([tracer] if tracer else [])])
        pg.frame_sent, pg.frame_received, frame_filter = frame_hooks(self._pm)
        if pg.frame_sent is not None:
            pg.many = None
        if frame_filter is not None:
            self.add_send_filter(lambda channel, data: False not in frame_filter(
                transport=self, channel=Channel(channel), data=bytes(data)))
        self._pm.hook.btl_transport_opened(transport=self)
        log.debug("transport opened: backend %s, address %s", self.backend, self.address.hex())

    # ------------------------------------------------------------------ threads

    def _claim(self) -> None:
        """The slow path of the thread check: take an unowned transport (or one whose
        owner thread has ended), or refuse a call from a thread that is not the owner."""
        me = threading.current_thread()
        owner = self._owner_thread
        if self._owner is None or owner is None or not owner.is_alive():
            self._owner, self._owner_thread = get_ident(), me
            return
        if self._owner == get_ident():  # pragma: no cover - the caller compared already
            return
        raise checks.foreign_thread(self.address, owner, self._owner, me)

    def _check_thread(self) -> None:
        """For the calls that register things: refused from a foreign thread once there is an
        owner, but they do not claim the transport (set it up here, drive it there)."""
        if self._owner is not None and get_ident() != self._owner:
            self._claim()
            self._owner = self._owner_thread = None  # (the owner had ended: still unclaimed)

    def wake(self) -> None:
        """End the wait of a ``progress(timeout)`` now blocked in the owner thread (``recv``,
        ``flush`` and ``run_until`` check their condition and wait on).  The one call that is
        safe from any thread; a wake with nobody waiting makes the next wait return at once.
        On virtual time it does nothing (waits there take no wall time)."""
        wake = self._wake_device
        if wake is not None and not self._closed:
            wake()

    # ------------------------------------------------------------------ API

    def connect(self, address: bytes | str) -> Peer:
        """The peer at ``address``: the other side's ``transport.address`` (bytes), or its
        ``address_text`` (``HOST:PORT`` on udp; hex on any backend)."""
        if get_ident() != self._owner:
            self._claim()
        address = checks.connectable(addresses.parse(self.device, address), self.device, self.engine.peers_by_addr)
        return self.engine.connect(address, self.now())

    @property
    def address_text(self) -> str:
        """:attr:`address` as people type it (udp ``HOST:PORT``); ``connect`` takes it."""
        return addresses.text(self.device, self.address)

    def _check_peer(self, peer: Any) -> None:
        raise checks.not_our_peer(peer, Peer, self.address)

    def send(self, peer: Peer, tag: int, data: Any, callback: Callback | None = None,
             timeout: float | None = None) -> None:
        """Send ``data`` (any bytes-like; do not modify it until the callback) with ``tag``.

        ``callback(None)`` fires once the peer acknowledged every byte; ``callback(exc)``
        if the peer died or restarted first, or the transport closed.  Bad arguments raise
        ``TypeError``/``ValueError`` here, and nothing is queued.

        Back-pressure: when the peer's send buffer (``send_buffer`` bytes of messages not yet
        completed) is not empty and ``data`` does not fit, :class:`WouldBlock` is raised and
        nothing is queued -- at once with ``timeout=None``, else after progressing up to
        ``timeout`` seconds waiting for room.  ``on_peer`` reports ``"writable"`` when room
        returns."""
        self._progress.send(peer, tag, data, callback, timeout)  # (the instance's own: see __init__)

    def _send_checked(self, peer: Any, tag: Any, data: Any, callback: Any, timeout: Any) -> None:
        """:meth:`send` past its fast path (progress.py's ``Progress.send``): the thread
        check, the arguments' checks with their errors, a waiting send (``timeout``)."""
        if get_ident() != self._owner:
            self._claim()
        checks.tag(tag)
        checks.data(data)
        checks.function(callback, "callback")
        try:
            mine = self._peers.get(peer.address) is peer
        except (AttributeError, TypeError):  # not a Peer at all
            mine = False
        if not mine:
            self._check_peer(peer)
        if timeout is None:
            self.engine.send(peer, tag, data, callback, self.now())
        else:
            self._send_waiting(peer, tag, data, callback, checks.seconds(timeout) or 0.0, None, 0)

    def _send_waiting(self, peer: Peer, tag: int, data: Any, callback: Callback | None, timeout: float,
                      put_key: int | None, put_offset: int) -> None:
        """A send (or put) that may wait ``timeout`` seconds for room in the peer's send
        buffer, driving progress meanwhile (ACKs drain it); WouldBlock once that passed."""
        engine = self.engine
        deadline = self.now() + timeout
        while True:
            try:
                engine.send(peer, tag, data, callback, self.now(), put_key=put_key, put_offset=put_offset)
                return
            except WouldBlock:
                left = deadline - self.now()
                if left <= 0:
                    raise
            self.progress(left)

    def on(self, tag: int, handler: Handler | None) -> None:
        """Register ``handler(peer, tag, data)`` for messages with ``tag`` (active-message
        style); ``None`` unregisters, and messages of that tag go to :meth:`recv` again."""
        self._check_thread()
        checks.tag(tag)
        checks.function(handler, "handler")
        if handler is None:
            self._handlers.pop(tag, None)
        else:
            self._handlers[tag] = handler

    def on_put(self, handler: Callable[[Peer, int, int, int], Any] | None,
               on_error: Callable[[Peer, int, int, int], Any] | None = None) -> None:
        """``handler(peer, key, offset, length)`` after a put into an exposed region landed;
        ``on_error`` for a put that named an unknown key or did not fit (its sender's callback
        gets a :class:`PutError`)."""
        self._check_thread()
        checks.function(handler, "handler")
        checks.function(on_error, "on_error")
        self._progress.put_handler = handler
        self._progress.put_error_handler = on_error

    def on_peer(self, handler: PeerHandler | None) -> None:
        """``handler(event, peer, exc)``, once per event about a peer:

        * ``"failed"``: nothing was heard from the peer for ``peer_timeout`` (or it never
          answered the handshake); ``exc`` says why, and its pending sends failed with it;
        * ``"restarted"``: the peer came back as a new incarnation (``exc`` None); what was
          pending toward its old life failed with ``PeerRestarted``;
        * ``"closed"``: the peer closed the connection gracefully (its ``close()`` or
          ``disconnect()``), within one round trip of its CLOSE (``exc`` None); its pending
          sends failed with ``PeerClosed``;
        * ``"writable"``: a send refused with ``WouldBlock`` may be retried: the peer's send
          buffer drained to half (``exc`` None).
        """
        self._check_thread()
        checks.function(handler, "handler")
        self._user_peer_handler = handler

    def _peer_event(self, event: str, peer: Peer, exc: BaseException | None) -> None:
        """Every peer event passes here: logged, then given to the user's handler."""
        if event == "failed":
            log.warning("peer %s failed: %s", peer.address.hex(), exc)
        elif event == "closed":  # an orderly end, as a transport's own close: DEBUG
            log.debug("peer %s closed the connection", peer.address.hex())
        elif event == "writable":
            log.debug("peer %s writable", peer.address.hex())
        else:
            log.info("peer %s %s", peer.address.hex(), event)
        handler = self._user_peer_handler
        if handler is not None:
            handler(event, peer, exc)

    def recv(self, timeout: float | None = None) -> Message | None:
        """The next message of a tag without handler, progressing until one arrives or
        ``timeout`` passes (``None``: wait for ever).  Returns None on timeout."""
        if get_ident() != self._owner:
            self._claim()
        timeout = checks.seconds(timeout, "timeout", optional=True)
        if self._inbox:
            return self._take()
        deadline = None if timeout is None else self.now() + timeout
        while not self._inbox:
            self.progress()
            if self._inbox:
                break
            now = self.now()
            if deadline is not None and now >= deadline:
                return None
            self._wait(deadline)
        return self._take()

    def _take(self) -> Message:
        """The oldest queued message, its bytes no longer held against its peer's window."""
        msg = self._inbox.popleft()
        peer = msg.peer
        self.engine.set_unconsumed(peer, peer.unconsumed - len(msg.data))
        return msg

    def expose(self, buffer: Any) -> int:
        """Expose a writable buffer for puts; send the returned key to the peers."""
        self._check_thread()
        checks.writable(buffer, "buffer")
        return self.engine.expose(buffer)

    def unexpose(self, key: int) -> None:
        """Stop accepting puts into region ``key`` (an unknown key is ignored)."""
        self._check_thread()
        checks.integer(key, "key", checks.KEY_MAX, "keys (from expose())")
        self.engine.unexpose(key)

    def put(self, peer: Peer, key: int, offset: int, data: Any, callback: Callback | None = None,
            timeout: float | None = None) -> None:
        """Emulated RDMA write: place ``data`` at ``offset`` in the peer's region ``key``.
        The callback fires once, when every byte is acknowledged and the peer's put status
        is back: with None if the put landed, a :class:`PutError` if the peer refused it
        (unknown key, out of bounds, region unexposed while it arrived), or the error that
        failed the peer (as for :meth:`send`).  A put counts against the send buffer as a
        send does (``WouldBlock``, ``timeout``: see :meth:`send`)."""
        if get_ident() != self._owner:
            self._claim()
        checks.integer(key, "key", checks.KEY_MAX, "keys (from expose())")
        checks.integer(offset, "offset", checks.OFFSET_MAX, "put offsets")
        checks.data(data)
        checks.function(callback, "callback")
        if type(peer) is not Peer or self.engine.peers_by_addr.get(peer.address) is not peer:
            self._check_peer(peer)
        if timeout is None:
            self.engine.send(peer, 0, data, callback, self.now(), put_key=key, put_offset=offset)
        else:
            self._send_waiting(peer, 0, data, callback, checks.seconds(timeout) or 0.0, key, offset)

    def add_send_filter(self, keep: Callable[[int, bytes], bool]) -> None:
        """Fault injection on any backend: ``keep(channel, datagram)`` returning False drops
        the datagram as if the network had lost it (it still counts as sent).  Used by the
        conformance suite's loss tests and by fault-script plugins; costs nothing when no
        filter is installed."""
        self._check_thread()
        checks.function(keep, "keep", optional=False)
        self._post = filtered_post(self._post, keep)
        self._many = None

    @property
    def peers(self) -> list[Peer]:
        return list(self.engine.peers_by_addr.values())

    # ------------------------------------------------------------------ progress

    def progress(self, timeout: float = 0.0) -> int:
        """One pass of protocol work; returns the number of events dispatched.  With a
        ``timeout``, waits (in the OS, or in virtual time) up to that long for something to
        do when the pass found nothing."""
        return self._progress.progress(timeout)  # (the instance's own: see __init__)

    def _progress_checked(self, timeout: float) -> int:
        """:meth:`progress` past its fast path (progress.py's ``Progress.progress``): the
        thread check, the timeout's checks with their errors, a device that reads first."""
        if get_ident() != self._owner:
            self._claim()
        try:  # the default (0.0) costs the one comparison it always did
            wait = timeout > 0
        except TypeError:  # not a number
            wait = checks.seconds(timeout) > 0  # type: ignore[operator]  # (raises)
        if wait:  # about to block anyway: the full check (bool, inf)
            if type(timeout) is not float or timeout == _INF:
                timeout = checks.seconds(timeout)  # type: ignore[assignment]
            if self._wait_first:
                return self._progress.wait_pass(timeout)
        elif timeout:  # negative, NaN
            checks.seconds(timeout)
        n = self._progress.run()
        if n == 0 and wait:
            deadline = self.next_deadline()
            self.device.wait(min(self.now() + timeout, _INF if deadline is None else deadline))
            n = self._progress.run()
        return n

    def _pass(self, now: float | None = None, receive: bool = True, timer: float | None = None) -> int:
        """Receive, run due timers, dispatch events, send (progress.py).  ``timer``: the
        engine's next timer if the caller knows it (``None``: ask the engine)."""
        return self._progress.run(now, receive, timer)

    def _flush_sends(self, now: float) -> None:
        self._progress.flush_sends(now)

    def _dispatch(self, events: list[Event]) -> int:
        return self._progress.dispatch(events)

    def next_deadline(self) -> float | None:
        """When this transport next needs a progress pass (None: only on input)."""
        return self._progress.next_deadline()

    # the pass's device calls, as attributes of the transport: whoever wraps one (the
    # tracer, a send filter, a test's spy) wraps what the pass calls

    @property
    def _post(self) -> _Post:
        return self._progress.post

    @_post.setter
    def _post(self, post: _Post) -> None:
        self._progress.post = post

    @property
    def _many(self) -> _PostMany | None:
        return self._progress.many

    @_many.setter
    def _many(self, many: _PostMany | None) -> None:
        self._progress.many = many

    @property
    def _poll(self) -> Callable[[int], Sequence[Any]]:
        return self._progress.poll

    @_poll.setter
    def _poll(self, poll: Callable[[int], Sequence[Any]]) -> None:
        self._progress.poll = poll

    @property
    def _poll_from(self) -> Callable[[int], tuple[Sequence[Any], Sequence[Any]]] | None:
        return self._progress.poll_from

    @_poll_from.setter
    def _poll_from(self, poll_from: Callable[[int], tuple[Sequence[Any], Sequence[Any]]] | None) -> None:
        self._progress.poll_from = poll_from

    @property
    def _poll_completions(self) -> Callable[[], int] | None:
        return self._progress.poll_completions

    @property
    def _stats_interval(self) -> float:
        return self._progress.stats_interval

    @property
    def _last_stats(self) -> float:
        return self._progress.last_stats

    def _wait(self, deadline: float | None) -> None:
        own = self.next_deadline()
        if own is not None and (deadline is None or own < deadline):
            deadline = own
        self.device.wait(deadline)

    # ------------------------------------------------------------------ stats and close

    def stats(self) -> dict[str, int]:
        """The transport's counters by name (usnic's names; see docs/api.md)."""
        return self.engine.stats()

    def peer_stats(self, peer: Peer) -> dict[str, Any]:
        if type(peer) is not Peer or self.engine.peers_by_addr.get(peer.address) is not peer:
            self._check_peer(peer)
        return {**peer.counters.as_dict(), **path_state(peer)}

    def stats_line(self) -> str:
        return stats_line(f"btlcore[{self.backend} {self.address.hex()}]", self.stats())

    def stats_json(self) -> str:
        return stats_json(self.stats(), backend=self.backend, address=self.address.hex())

    def flush(self, timeout: float | None = None) -> bool:
        """Progress until every message is acknowledged (or its peer failed); True if all
        were, False if ``timeout`` (default ``flush_timeout``) passed first."""
        if get_ident() != self._owner:
            self._claim()
        timeout = checks.seconds(timeout, "timeout", optional=True)
        timeout = self.config.flush_timeout if timeout is None else timeout
        deadline = self.now() + timeout
        while True:
            self._pass()
            if not self.engine.has_outstanding():
                # what we owe our peers goes now, not after ack_delay: their last messages
                # complete without a retransmission
                self.engine.ack_now()
                self._pass()
                return True
            if self.now() >= deadline:
                return False
            self._wait(deadline)

    def _closing(self, peer: Peer | None) -> None:
        """Send CLOSE (to ``peer``, or to every peer) and progress until each is
        acknowledged or ``close_timeout`` passed (the engine gives up by then)."""
        engine = self.engine
        engine.start_close(self.now(), peer)
        deadline = self.now() + self.config.close_timeout
        while True:
            self._pass()
            if not engine.closing(peer) or self.now() >= deadline:
                return
            self._wait(deadline)

    def disconnect(self, peer: Peer, flush: bool = True) -> None:
        """Close the connection with ``peer`` alone (usnic's ``del_procs``): flush what was
        sent to it (up to ``flush_timeout``, if ``flush``), then send a CLOSE, resent until
        acknowledged or ``close_timeout``.  What is still pending fails with
        ``PeerClosed``; the peer reports ``on_peer("closed", ...)``.  A later
        ``connect()`` to its address starts a new connection; nothing late of the old one
        is taken for the new one's."""
        checks.flag(flush, "flush")
        if get_ident() != self._owner:
            self._claim()
        if type(peer) is not Peer or self.engine.peers_by_addr.get(peer.address) is not peer:
            self._check_peer(peer)
        if self._closed:
            raise TransportClosed("transport is closed")
        if flush:
            deadline = self.now() + self.config.flush_timeout
            while True:
                self._pass()
                if not peer.has_outstanding() or peer.state is PeerState.FAILED \
                        or self.now() >= deadline:
                    break
                self._wait(deadline)
            self.engine.ack_now()
        self._closing(peer)

    def close(self, flush: bool = True) -> None:
        """Flush (up to ``flush_timeout``), send CLOSE to every connected peer (resent until
        acknowledged, up to ``close_timeout``), fail what is left, release the device."""
        checks.flag(flush, "flush")
        if self._closed:
            return
        if get_ident() != self._owner:
            self._claim()
        if flush:
            self.flush()
        try:
            self._closing(None)
        finally:
            self._closed = True
            self.engine.close()
        self._dispatch(self.engine.take_events())
        try:
            self._pm.hook.btl_transport_closed(transport=self, stats=self.stats())
        finally:
            self.device.close()
            log.debug("transport closed: backend %s, address %s", self.backend, self.address.hex())

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(flush=exc[0] is None)


def __getattr__(name: str) -> Any:
    """``open`` and ``run_until`` moved to :mod:`btlcore.run` (a warning for one release)."""
    return moved_to_run(name)
