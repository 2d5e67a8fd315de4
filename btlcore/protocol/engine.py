"""The protocol engine: reliable, exactly-once delivery over unreliable datagrams, sans I/O.

Bytes and ``now`` go in; datagrams to send and the next deadline come out.  Nothing here
touches a socket, a thread, a sleep or a clock: :class:`btlcore.transport.Transport` (or a
test, see :mod:`btlcore.testing.enginepair`) drives it::

    engine.receive_datagrams(batch, now)    # what the device delivered (or receive_datagram)
    engine.handle_timer(now)                # when now >= engine.next_deadline()
    for channel, dest, buf in engine.datagrams_to_send(now, budget):
        device.post_send(channel, dest, buf)
    for event in engine.take_events(): ...   # deliveries and completions (events.py)

:class:`Engine` is the facade: it builds the shared :class:`~.state.EngineState` and the
parts over it, wires them, and holds no protocol logic of its own beyond handing work to
them (see :mod:`btlcore.protocol` for where each thing happens).  The parts do not inherit
from one another; each gets the state and, at construction, the bound methods of the parts
it calls::

    state      = EngineState(config, ...)         # shared containers, constants, now, closed
    packetizer = Packetizer(state)                # uses nothing else
    recovery   = Recovery(state, packetizer)      # resends with packetizer.stamp
    handshake  = Handshake(state, packetizer, recovery)   # fail_messages, build_hello
    recovery.wire(confirm=handshake.confirm, lifecycle=lifecycle)  # an ACK confirms; timers
    guard      = Guard(state, handshake._restart_peer, recovery.fail_peer)  # notices, challenges, sources
    versions   = Versions(state, recovery.fail_peer)  # VERSION replies, in and out
    lifecycle  = Lifecycle(state, recovery)       # keepalive, CLOSE, disconnect
    receiver   = Receiver(state, recovery, handshake, versions, lifecycle, guard)

Hot entry points with nothing to add are the parts' own bound methods, set on the engine at
construction (no delegating call): ``receive_datagrams`` (the receiver's),
``next_deadline``, ``cached_deadline`` and ``handle_timer`` (recovery's), ``enable_gather`` (the packetizer's).
Within the engine, the parts are attributes typed as their classes and their methods are
called directly (``self.packetizer.send_pass(...)``): compiled with mypyc, a C call, where a
bound method kept in an attribute is a generic Python call.
The engine's public attributes (``config``, ``address``, ``incarnation``, ``data_mtu``,
``peers_by_addr``, ``peers_by_conn``, ``counters``, ``events``, ``regions``, ...) are the
state's own objects, never rebound (``take_events`` empties the one events list); ``closed``
and ``now`` are read from the state.
"""

from __future__ import annotations

import random
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Protocol

from ..config import Config
from ..errors import BtlDeprecationWarning, MessageTooLarge, PeerUnreachable, TransportClosed, WouldBlock
from .congestion import CongestionControl
from .events import Event, legacy
from .guard import Guard
from .handshake import Handshake
from .lifecycle import Lifecycle
from .packetizer import Packetizer
from .peers import Callback, Frame, OutMessage, Peer, PeerEvent, PeerState
from .receive import Receiver
from .recovery import Recovery
from .sampled import SamplingRecovery
from .state import EngineState
from .stats import aggregate
from .versions import Versions
from .wire import (
    CR_CLOSED,
    CR_DISCONNECT,
    PUT_LEN,
    T_DATA,
    U32_MASK,
)

_FAILED: Final = PeerState.FAILED
_ESTABLISHED: Final = PeerState.ESTABLISHED
_CLOSING: Final = PeerState.CLOSING
_CLOSED: Final = PeerState.CLOSED

_MEMORYVIEW: Final = memoryview  # (compiled: read from a static, not looked up in builtins per send)
_UNSET: Final[Any] = object()  # receive_datagram's now, not given: the old (data, now) form


class _ReceiveDatagrams(Protocol):  # Receiver.receive_datagrams
    def __call__(self, batch: Iterable[Any], now: float, sources: Sequence[Any] | None = None) -> None: ...


class _NextDeadline(Protocol):  # Recovery.next_deadline
    def __call__(self, pending_work: bool = True) -> float | None: ...


class Engine:
    """One local endpoint talking to any number of peers over one device."""

    __slots__ = (
        "state", "packetizer", "recovery", "handshake", "receiver", "versions", "lifecycle", "guard",
        "config", "address", "incarnation", "data_mtu", "priority_mtu", "crc", "peers_by_addr",
        "peers_by_conn", "counters", "events", "regions",
        "receive_datagrams", "next_deadline", "cached_deadline", "handle_timer", "enable_gather",
        "_resending", "_sending", "_acking", "_hello", "_timed", "_touched",
        "_deadlines", "_actions", "_control", "_replies",
        "_max_message_size", "_send_buffer", "_max_resends", "_window",
    )

    # the parts' own bound methods (see the module docstring)
    receive_datagrams: _ReceiveDatagrams
    next_deadline: _NextDeadline
    cached_deadline: Callable[[], float | None]
    handle_timer: Callable[[float], None]
    enable_gather: Callable[[], None]

    def __init__(self, config: Config, *, address: bytes, resolve: Callable[[bytes], Any],
                 data_mtu: int, priority_mtu: int, crc: bool, rng: random.Random, now: float,
                 incarnation: int | None = None, reply_dest: Callable[[Any], Any] | None = None,
                 wrap_cc: Callable[[CongestionControl], CongestionControl] | None = None) -> None:
        # reply_dest: a datagram's observed source -> a dest (the device's reply_dest hook),
        # so that handshake and VERSION replies go to where a datagram came from; wrap_cc:
        # the congestion controller -> an observed one (btlcore.trace; None: not traced)
        # The parts are attributes typed as their classes, and the engine calls their methods
        # directly (self.packetizer.send_pass(...)): compiled, a C call; a bound method kept
        # in an attribute would be a generic Python call with its arguments boxed.
        state = self.state = EngineState(
            config, address=address, resolve=resolve, data_mtu=data_mtu, priority_mtu=priority_mtu,
            crc=crc, rng=rng, now=now, incarnation=incarnation, reply_dest=reply_dest, wrap_cc=wrap_cc)
        packetizer = self.packetizer = Packetizer(state)
        recovery: Recovery = (Recovery if state.sampler is None else SamplingRecovery)(state, packetizer)
        self.recovery = recovery
        handshake = self.handshake = Handshake(state, packetizer, recovery)
        lifecycle = self.lifecycle = Lifecycle(state, recovery)
        recovery.wire(confirm=handshake.confirm, lifecycle=lifecycle)
        guard = self.guard = Guard(state, handshake._restart_peer, recovery.fail_peer)
        guard.wire(on_hello=handshake.on_hello)
        handshake.wire_guard(guard.challenge, guard.learn_remote, guard.foreign)
        versions = self.versions = Versions(state, recovery.fail_peer)
        receiver = self.receiver = Receiver(state, recovery, handshake, versions, lifecycle, guard)
        self.config, self.address, self.incarnation = state.config, state.address, state.incarnation
        self.data_mtu, self.priority_mtu, self.crc = state.data_mtu, state.priority_mtu, state.crc
        self.peers_by_addr, self.peers_by_conn = state.peers_by_addr, state.peers_by_conn
        self.counters, self.events, self.regions = state.counters, state.events, state.regions
        self.receive_datagrams = receiver.receive_datagrams
        self.next_deadline = recovery.next_deadline
        self.cached_deadline = recovery.cached_deadline
        self.handle_timer = recovery.handle_timer
        self.enable_gather = packetizer.enable_gather
        self._resending, self._sending, self._acking, self._hello = \
            state.resending, state.sending, state.acking, state.hello
        self._timed, self._touched, self._deadlines, self._actions = \
            state.timed, state.touched, state.deadlines, state.actions
        self._control, self._replies = state.control, state.replies
        # config values read per send, in typed slots (Config's attributes are dict lookups)
        self._max_message_size: int = config.max_message_size
        self._send_buffer: int = config.send_buffer
        self._max_resends: int = config.max_resends_per_pass
        self._window: int = config.window  # (set_unconsumed: per recv() of the driver)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self.state.closed

    @property
    def now(self) -> float:
        """The ``now`` of the last entry point called."""
        return self.state.now

    def connect(self, address: bytes, now: float) -> Peer:
        """Return the peer at ``address``, starting a handshake if it is new."""
        state = self.state
        state.now = now
        if state.closed:
            raise TransportClosed("transport is closed")
        peer = self.peers_by_addr.get(address)
        if peer is None:
            peer = self.handshake.new_peer(bytes(address), state.resolve(bytes(address)))
        elif peer.state is PeerState.FAILED or peer.state is PeerState.CLOSED:
            self.handshake.reset_peer(peer)  # connecting again after a failure or a close: a new connection
        peer.inbound_since = None  # the application holds it now: never swept
        if peer.state is PeerState.CONNECTING and peer.hello_next is None and not peer.confirmed:
            self.handshake.start_hello(peer, now)
        return peer

    def send(self, peer: Peer, tag: int, data: Any, callback: Callback | None, now: float,
             put_key: int | None = None, put_offset: int = 0) -> OutMessage:
        """Queue a message (or, with ``put_key``, a put) for ``peer``."""
        shared = self.state
        shared.now = now
        if shared.closed:
            raise TransportClosed("transport is closed")
        state = peer.state
        if state is _FAILED or state is _CLOSING or state is _CLOSED:
            raise peer.error or PeerUnreachable(f"peer {peer.address.hex()} has failed")
        if not 0 <= tag <= 0xFFFF:
            raise ValueError(f"tag {tag} is out of range: tags are 0 to 65535")
        view: Any
        if type(data) is bytes:
            view = data  # flat already: a view only if it is chunked (below)
        else:
            view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
        size = len(view)
        if size > peer.max_message:  # ours, and the peer's once its handshake told it
            if size > self._max_message_size:
                raise MessageTooLarge(
                    f"message of {size} bytes exceeds max_message_size={self._max_message_size}")
            raise MessageTooLarge(f"message of {size} bytes exceeds the peer's max_message_size="
                                  f"{peer.max_message} (advertised in its handshake)")
        queued = peer.send_queued  # back-pressure: an empty buffer takes any message
        if queued and queued + size > self._send_buffer:
            peer.send_blocked = True  # (a PeerWritable event once it drains to half)
            peer.counters.num_send_blocks += 1
            raise WouldBlock(f"peer {peer.address.hex()}: {size} bytes do not fit in the send buffer "
                             f"({queued} of send_buffer={self.config.send_buffer} bytes queued); "
                             "retry once it is writable")
        peer.send_queued = queued + size
        extra = PUT_LEN if put_key is not None else 0
        chunked = size > peer.single_cap - extra  # (the peer's largest datagram, once known)
        if chunked and type(view) is bytes:
            view = _MEMORYVIEW(view)  # its chunks are views of it, not copies
        peer.msg_counter += 1
        msg = OutMessage(tag, view, callback, peer.msg_counter & U32_MASK, chunked, put_key, put_offset)
        queue = peer.queue
        if isinstance(queue, tuple):  # made on first use: an idle peer holds no deque (~770 B),
            queue = peer.queue = deque()  # and kept once emptied (not one per message)
        queue.append(msg)
        peer.counters.num_msgs_sent += 1
        if state is _ESTABLISHED:
            self._sending[peer] = None
        elif peer.hello_next is None and not peer.confirmed:
            self.handshake.start_hello(peer, now)
        return msg

    def set_unconsumed(self, peer: Peer, nbytes: int) -> None:
        """The driver holds ``nbytes`` of ``peer``'s delivered messages that its application
        has not taken yet (Transport's ``recv()`` queue): they shrink the receive window we
        advertise (to zero at ``recv_buffer``).  O(1); when the window has opened by a
        quarter of ``window`` or more since the last ACK (or from zero), an ACK carries the
        news at once, so a sender stopped by a zero window resumes."""
        before = peer.unconsumed
        peer.unconsumed = nbytes
        if nbytes >= before:
            return  # (a smaller window: the next ACK says so)
        was = peer.adv_window
        if was < self._window and peer.remote_known and not self.state.closed:
            now = self.packetizer.advertised_window(peer)
            if now > was and (was == 0 or now - was >= self._window >> 2):
                peer.ack_now = True
                self._acking[peer] = None
                self._touched[peer] = None

    def expose(self, buffer: Any) -> int:
        """Expose a writable buffer to puts from peers; returns its key."""
        view = memoryview(buffer).cast("B")
        if view.readonly:
            raise ValueError("a put target must be writable (bytearray, memoryview of one, ...)")
        key = self.state.next_region
        self.state.next_region += 1
        self.regions[key] = view
        return key

    def unexpose(self, key: int) -> None:
        self.regions.pop(key, None)

    def start_close(self, now: float, peer: Peer | None = None) -> None:
        """Begin a graceful close (after the driver's flush): of every peer (the transport
        closes; then :meth:`close` once :meth:`closing` is False), or of ``peer`` alone (a
        disconnect).  A CLOSE goes to each, resent until acknowledged or ``close_timeout``;
        what is still pending fails now (see :mod:`.lifecycle`)."""
        self.state.now = now
        if self.state.closed:
            return
        if peer is not None:
            self.lifecycle.start_close(peer, CR_DISCONNECT, now)
            return
        for p in list(self.peers_by_addr.values()):
            self.lifecycle.start_close(p, CR_CLOSED, now)

    def closing(self, peer: Peer | None = None) -> bool:
        """True while our CLOSE to ``peer`` (or to any peer) awaits its acknowledgement."""
        if peer is not None:
            return peer.state is _CLOSING
        return self.lifecycle.closing()

    def close(self) -> None:
        """Fail everything still pending and refuse new work."""
        if self.state.closed:
            return
        self.state.closed = True
        for peer in list(self.peers_by_addr.values()):
            if peer.state not in (PeerState.FAILED, PeerState.CLOSED):
                self.recovery.fail_messages(peer, TransportClosed("transport closed before the peer acknowledged"))
                peer.transition(PeerEvent.CLOSED)
        self._resending.clear()
        self._sending.clear()
        self._acking.clear()
        self._hello.clear()
        self._control.clear()
        self._timed.clear()
        self._touched.clear()
        self._deadlines.clear()
        self._actions.clear()

    def has_outstanding(self) -> bool:
        """True while some message is unsent or unacknowledged (what close() flushes)."""
        return any(p.has_outstanding() for p in self.peers_by_addr.values()
                   if p.state is not PeerState.FAILED)

    def has_work(self) -> bool:
        """True if a send pass would produce something right now."""
        if self._resending or self._sending or self._control:
            return True
        if self._acking:  # (the looks first: compiled, an empty walk still sets up an iterator)
            for peer in self._acking:
                if peer.ack_now:
                    return True
        if self._hello:
            for peer in self._hello:
                if peer.hello_reply:
                    return True
        return bool(self._replies)

    def ack_now(self) -> None:
        """Owe no ACK: make every pending standalone ACK due at once (close/flush, so that
        the peers' last messages complete without waiting for their retransmit timer)."""
        for peer in self._acking:
            peer.ack_now = True
            self._touched[peer] = None

    def stats(self) -> dict[str, int]:
        return aggregate(self.counters, (p.counters for p in self.peers_by_addr.values()))

    def get_timer(self, pending_work: bool = True) -> float | None:
        """Deprecated: :meth:`next_deadline`."""
        warnings.warn("Engine.get_timer() is deprecated: use next_deadline()", BtlDeprecationWarning, stacklevel=2)
        return self.next_deadline(pending_work)

    def take_events(self) -> list[Event]:
        """The events since the last call, in order (see :mod:`btlcore.protocol.events`)."""
        events = self.events  # (shared with the parts: emptied, never replaced)
        out = events[:]
        events.clear()
        return out

    def drain_events(self) -> list[tuple[Any, ...]]:
        """Deprecated: :meth:`take_events`, as the last release's ``(EV_*, ...)`` tuples."""
        warnings.warn("Engine.drain_events() is deprecated: use take_events() (typed events)",
                      BtlDeprecationWarning, stacklevel=2)
        return [legacy(event) for event in self.take_events()]

    def receive_datagram(self, data: Any, source: Any = None, now: Any = _UNSET) -> None:
        """Process one datagram from the device, which saw it come from ``source`` (an
        address as the device reports it, or None).  Malformed, corrupted, stale and unknown
        datagrams are dropped and counted; nothing here raises on bad input.  (The form of
        the last release, ``receive_datagram(data, now)``, still works, with a warning.)"""
        if now is _UNSET:
            warnings.warn("Engine.receive_datagram(data, now) is deprecated: pass "
                          "receive_datagram(data, source, now)", BtlDeprecationWarning, stacklevel=2)
            source, now = None, source
        data_type: int  # (typed: compiled, the test below is a C comparison)
        try:
            data_type = data[1]
        except IndexError:
            data_type = -1
        if data_type == T_DATA:  # the one receive path for data (the receiver's, a C call compiled)
            self.receiver.receive_datagrams((data,), now, None if source is None else (source,))
        else:  # (anything else: checked and handed on by type, without the data path's set-up)
            state = self.state
            state.now = now
            if not state.closed:
                self.receiver.dispatch(data, source, now)

    def datagrams_to_send(self, now: float, budget: int = 1 << 30,
                          resends: bool = True) -> list[tuple[int, Any, Frame]]:
        """Up to ``budget`` datagrams to post now, as ``(channel, dest, datagram)``.

        The engine counts them as sent, and never changes a datagram it handed out (a
        retransmission re-stamps a copy), so the device may keep one without copying.  A
        driver calling it several times in one progress pass asks for ``resends`` only the
        first time, so that ``max_resends_per_pass`` holds per pass."""
        self.state.now = now
        out: list[tuple[int, Any, Frame]] = []
        if self._resending and resends:
            cap = self._max_resends
            self.recovery.resend_pass(out, now, budget if budget < cap else cap)
        if self._sending and len(out) < budget:
            self.packetizer.send_pass(out, now, budget)
        if self._acking and len(out) < budget:
            self.packetizer.ack_pass(out, now, budget)
        if self._hello and len(out) < budget:
            self.handshake.hello_pass(out, now, budget)
        if self._control and len(out) < budget:
            self.lifecycle.control_pass(out, now, budget)
        replies = self._replies
        if replies and len(out) < budget:  # VERSION replies (owed to no peer)
            take = budget - len(out)
            out.extend(replies[:take])
            del replies[:take]
        return out

    def path_error(self, dest: Any, now: float) -> bool:
        """The device read an ICMP port unreachable for ``dest`` (a resolved peer address,
        or a source): it hastens the failure of a peer that has also gone silent, never
        more (ICMP is easy to forge; see guard.py).  True if a peer was failed."""
        self.state.now = now
        if self.state.closed:
            return False
        return self.guard.path_error(dest, now)
