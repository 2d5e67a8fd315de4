"""The progress pass of a :class:`~btlcore.transport.Transport`, apart so that mypyc compiles it.

One pass (:meth:`Progress.run`): reap send completions, take received datagrams (and their
sources) into the engine, run due timers, dispatch the engine's events to the application's
handlers, then post what the engine wants sent (anything the device pushes back waits in
``backlog``, never lost).  :meth:`Progress.wait_pass` is ``progress(timeout)`` on a device
whose wait reports input readiness (UDP): send and run due timers, wait, then receive.

Why a module of its own: ``transport.py`` is the public face (argument checks, settable
attributes that tests and the tracer replace), which stays pure Python; this is the part
that runs on every pass, where compiled code calls the compiled engine directly (C calls,
typed locals) instead of through the interpreter.  The transport holds one
:class:`Progress` and forwards its device calls' attributes to it (``Transport._post`` and
the others are properties), so that whoever wraps them wraps what the pass calls.
"""

from __future__ import annotations

import sys
from _thread import get_ident
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final

from .device import Channel
from .protocol.engine import Engine
from .protocol.events import Event, MessageReceived, PeerFailed, PeerWritable, PutLanded, PutRefused, SendCompleted
from .protocol.events import PeerClosed as PeerClosedEvent
from .protocol.events import PeerRestarted as PeerRestartedEvent
from .protocol.peers import Peer
from .protocol.receive import Receiver
from .protocol.recovery import Recovery

# (Final, all of these: compiled, a module-level name that is not Final is looked up in the
# module's dict at every use -- a send, a pass, an event -- where a Final is a constant or a
# static)
#: how soon to post again after the device refused a datagram (its send queue was full)
BACKLOG_RETRY: Final = 50e-6
#: passes this close to a refresh go on Engine.cached_deadline (timers run this late at most)
TIMER_SLACK: Final = 100e-6
#: ICMP unreachables are asked for this often (they only hasten a silent peer's failure)
PATH_ERROR_INTERVAL: Final = 1e-3
SEND_ROUNDS: Final = 64  # datagrams_to_send calls per pass at most: a pass must end even if the engine always has work
_INF: Final = float("inf")
_GET_IDENT: Final = get_ident
_MESSAGE_RECEIVED: Final = MessageReceived  # (events.py is pure Python: its classes are module globals here)
_SEND_COMPLETED: Final = SendCompleted


def _flat(buf: Any) -> bytes:
    """A datagram as one bytes object (gathered ones come as a list of buffers)."""
    return b"".join(buf) if type(buf) is list else bytes(buf)


class Progress:
    """The pass of one transport: the engine, the device's calls and the application's
    handlers, in typed slots."""

    engine: Engine
    # the engine's parts whose methods are its entry points (Engine.next_deadline is
    # Recovery's bound method): called on them, the compiled pass makes C calls
    recovery: Recovery
    receiver: Receiver
    transport: Any  # (the frame hooks' ``transport=`` argument; its stats line)
    device: Any  # DeviceOps: wait(), and next_due, which a delay fault sets later
    now: Callable[[], float]
    post: Callable[[int, Any, Any], bool]
    many: Callable[[Sequence[tuple[int, Any, Any]]], int] | None
    poll: Callable[[int], Sequence[Any]]
    poll_from: Callable[[int], tuple[Sequence[Any], Sequence[Any]]] | None
    poll_completions: Callable[[], int] | None
    path_errors: Callable[[], Sequence[Any]] | None
    frame_sent: Any
    frame_received: Any
    backlog: deque[tuple[int, Any, Any]]
    handlers: dict[int, Any]
    inbox: deque[Any]
    message: Callable[[Any, int, Any], Any]  # transport.Message
    put_handler: Callable[[Any, int, int, int], Any] | None
    put_error_handler: Callable[[Any, int, int, int], Any] | None
    peer_handler: Callable[[str, Any, BaseException | None], Any] | None
    recv_budget: int
    stats_interval: float
    last_stats: float
    path_check_at: float
    timers_at: float
    wait_first: bool  # the device's wait returns at once on input: progress(timeout) waits first (wait_pass)

    def __init__(self, engine: Engine, transport: Any, device: Any, now: Callable[[], float],
                 recv_budget: int, stats_interval: float, message: Callable[[Any, int, Any], Any]) -> None:
        self.engine = engine
        self.recovery = engine.recovery
        self.receiver = engine.receiver
        self.transport = transport
        self.device = device
        self.now = now
        self.post = device.post_send
        self.many = None
        self.poll = device.poll_recv
        self.poll_from = None
        self.poll_completions = None
        self.path_errors = device.path_errors
        self.frame_sent = None
        self.frame_received = None
        self.backlog = deque()
        self.handlers = {}
        self.inbox = deque()
        self.message = message
        self.put_handler = None
        self.put_error_handler = None
        self.peer_handler = None
        self.recv_budget = recv_budget
        self.stats_interval = stats_interval
        self.last_stats = now()
        self.path_check_at = 0.0  # the next pass at or after this time asks for path errors
        self.timers_at = -_INF  # when a pass last refreshed the engine's timers
        self.wait_first = False  # (the transport sets it from the device's capabilities)

    def wait_pass(self, timeout: float) -> int:
        """``progress(timeout)`` on a device whose ``wait`` returns at once when input is
        already there: send and run due timers, wait, then receive.  Reading before the wait
        would cost a system call per socket that is nearly always empty (the wait asks the
        kernel anyway), and the timers are walked once per call instead of four times."""
        engine = self.engine
        now = self.now()
        # sends due (the one just queued): the cached timers serve this pass, recomputed
        # once, after the sends, before the wait (a refresh less per request sent)
        busy = bool(self.backlog) or bool(engine.events) or engine.has_work()
        timer = self.recovery.cached_deadline() if busy else self.recovery.next_deadline()
        if busy or (timer is not None and timer <= now):
            n = self.run(now, False, _INF if timer is None else timer)
            if n:
                return n
            timer = self.next_deadline()
        elif self.stats_interval:
            due = self.last_stats + self.stats_interval
            if timer is None or due < timer:
                timer = due
        deadline = now + timeout
        if timer is not None and timer < deadline:
            deadline = timer
        self.device.wait(deadline)
        # input cannot bring a timer forward: the one computed before the wait still holds
        return self.run(None, True, _INF if timer is None else timer)

    def progress(self, timeout: Any = 0.0) -> int:
        """``Transport.progress`` (the transport binds this on itself, as ``send``): from its
        owner thread, a float timeout above zero on a device that waits first goes straight to
        :meth:`wait_pass`, and no timeout (an int or float 0) to :meth:`run`; anything else
        (another thread, a timeout to check, a device that reads first) by the transport's
        ``_progress_checked``.  A busy round trip calls it once per message at each end: an
        interpreted frame less each time."""
        transport = self.transport
        if _GET_IDENT() == transport._owner:
            kind = type(timeout)
            if kind is float and 0.0 < timeout < _INF and self.wait_first:
                return self.wait_pass(timeout)
            if (kind is float or kind is int) and timeout == 0:
                return self.run()
        n: int = transport._progress_checked(timeout)
        return n

    def send(self, peer: Any, tag: Any, data: Any, callback: Any = None, timeout: Any = None) -> None:
        """``Transport.send`` (the transport binds this on itself): a message of bytes with
        an int tag to one of this transport's peers, from its owner thread, goes straight
        to the engine; anything else (another thread, arguments to check, a ``timeout`` to
        wait up to) goes by the transport's ``_send_checked``, which raises the wordy errors."""
        transport = self.transport
        if (type(peer) is not Peer or type(tag) is not int or type(data) is not bytes or timeout is not None
                or (callback is not None and not callable(callback)) or _GET_IDENT() != transport._owner
                or self.engine.peers_by_addr.get(peer.address) is not peer):
            transport._send_checked(peer, tag, data, callback, timeout)
            return
        self.engine.send(peer, tag, data, callback, self.now())

    def run(self, now: float | None = None, receive: bool = True, timer: float | None = None) -> int:
        """Receive, run due timers, dispatch events, send; the number of events dispatched.
        ``timer``: the engine's next timer if the caller knows it (``None``: ask the engine)."""
        engine = self.engine
        t = self.now() if now is None else now
        if receive:
            self._receive(t)
        if timer is None and t < self.timers_at + TIMER_SLACK:  # refreshed lately: the cached one will do
            timer = self.recovery.cached_deadline()
        elif timer is None:
            self.timers_at = t
            timer = self.recovery.next_deadline()
        if timer is not None and timer <= t:
            self.recovery.handle_timer(t)
        if self.stats_interval and self.last_stats + self.stats_interval <= t:
            self.last_stats = t
            print(self.transport.stats_line(), file=sys.stderr)
        # events first, then one send: a handler's reply (or the next request) leaves in
        # this pass, with the ACK of what it answers riding on it
        n = 0
        if engine.events:
            try:
                n = self.dispatch(engine.take_events())
            except BaseException:
                self.flush_sends(t)  # a raising handler must not hold back what is due
                raise
        self.flush_sends(t)
        return n

    def _receive(self, now: float) -> None:
        """Reap send completions, take datagrams (and their sources) into the engine."""
        engine = self.engine
        if self.poll_completions is not None:
            self.poll_completions()
        sources: Sequence[Any] | None = None
        if self.poll_from is not None:
            datagrams, sources = self.poll_from(self.recv_budget)
        else:
            datagrams = self.poll(self.recv_budget)
        if self.path_errors is not None and now >= self.path_check_at:
            self.path_check_at = now + PATH_ERROR_INTERVAL
            for dest in self.path_errors():  # (rare: the list is empty nearly always)
                engine.path_error(dest, now)
        if not datagrams:
            return
        hook = self.frame_received
        if hook is not None:
            for i, d in enumerate(datagrams):
                hook(transport=self.transport, data=bytes(d))
                engine.receive_datagram(d, None if sources is None else sources[i], now)
        else:
            self.receiver.receive_datagrams(datagrams, now, sources)  # the one receive path, one call

    def flush_sends(self, now: float) -> None:
        """Post the backlog, then what the engine has to send (a bounded number of rounds)."""
        post = self.post
        backlog = self.backlog
        engine = self.engine
        while backlog:
            channel, dest, buf = backlog[0]
            if not post(channel, dest, buf):
                engine.counters.num_send_pushbacks += 1
                return
            backlog.popleft()
        # the device's batch path (GSO...) when nothing needs to see datagrams one by one
        many = self.many
        for r in range(SEND_ROUNDS):
            out = engine.datagrams_to_send(now, 1 << 30, r == 0)
            if not out:
                return
            if many is not None:
                taken = many(out)
                if taken < len(out):
                    engine.counters.num_send_pushbacks += 1
                    backlog.extend([(c, d, _flat(b)) for c, d, b in out[taken:]])
                    return
            elif not self._post_each(out, now):
                return
            if not engine.has_work():
                return

    def _post_each(self, out: list[tuple[int, Any, Any]], now: float) -> bool:
        """Post ``out`` datagram by datagram (a send filter or a frame hook sees each one
        whole); False if the device pushed back (the rest went to the backlog)."""
        post = self.post
        sent_hook = self.frame_sent
        for i, (channel, dest, buf) in enumerate(out):
            if type(buf) is list:
                buf = b"".join(buf)
            if not post(channel, dest, buf):
                self.engine.counters.num_send_pushbacks += 1
                self.backlog.extend([(c, d, _flat(b)) for c, d, b in out[i:]])
                return False
            if sent_hook is not None:
                sent_hook(transport=self.transport, channel=Channel(channel), data=bytes(buf))
        return True

    def dispatch(self, events: list[Event]) -> int:
        """Hand ``events`` to the application; if a handler raises, the events after its
        one go back to the engine's queue (the next pass dispatches them) and it re-raises."""
        handlers = self.handlers
        for i, ev in enumerate(events):
            try:
                if type(ev) is _MESSAGE_RECEIVED:
                    # (data: a bytearray when reassembled from chunks; the public types say
                    # bytes, as they did, so that handlers typed so still check)
                    peer, tag, data = ev
                    handler = handlers.get(tag)
                    if handler is not None:
                        handler(peer, tag, data)
                    else:  # queued for recv(): held against the peer's receive window
                        self.inbox.append(self.message(peer, tag, data))
                        self.engine.set_unconsumed(peer, peer.unconsumed + len(data))
                elif type(ev) is _SEND_COMPLETED:
                    ev.callback(ev.error)
                else:
                    self._dispatch_other(ev)
            except BaseException:
                # a user callback raised: keep the events it did not get to, then re-raise
                self.engine.events[:0] = events[i + 1:]
                raise
        return len(events)

    def _dispatch_other(self, ev: Event) -> None:
        """The rarer events: puts and peer news."""
        if type(ev) is PutLanded:
            if self.put_handler is not None:
                self.put_handler(ev.peer, ev.key, ev.offset, ev.length)
        elif type(ev) is PutRefused:
            if self.put_error_handler is not None:
                self.put_error_handler(ev.peer, ev.key, ev.offset, ev.length)
        elif self.peer_handler is not None:
            if type(ev) is PeerFailed:
                self.peer_handler("failed", ev.peer, ev.error)
            elif type(ev) is PeerRestartedEvent:
                self.peer_handler("restarted", ev.peer, None)
            elif type(ev) is PeerClosedEvent:
                self.peer_handler("closed", ev.peer, None)
            elif type(ev) is PeerWritable:
                self.peer_handler("writable", ev.peer, None)

    def next_deadline(self) -> float | None:
        """When the transport next needs a progress pass (None: only on input)."""
        engine = self.engine
        if self.backlog:
            # the device pushed back: retry shortly (or when it wakes us), not "now" -- on
            # virtual time "now" would never let the clock reach the moment a slot frees
            timer = self.recovery.next_deadline(False)
            retry = self.now() + BACKLOG_RETRY
            return retry if timer is None or retry < timer else timer
        if engine.has_work() or engine.events:
            return self.now()
        timer = self.recovery.next_deadline()
        if self.stats_interval:  # the periodic stats line is due even when idle
            due = self.last_stats + self.stats_interval
            if timer is None or due < timer:
                timer = due
        next_due = self.device.next_due  # (faults' delays)
        held = next_due() if next_due is not None else None
        return timer if held is None or (timer is not None and timer <= held) else held
