"""What an event loop needs to drive a :class:`~btlcore.transport.Transport` from its own
callbacks, instead of blocking in ``progress(timeout)``: :class:`Driving`, mixed into the
Transport, so that a driver (``btlcore.aio``'s, or a third framework's) calls public methods.

The protocol a driver follows (``btlcore/aio/driver.py`` is the reference):

* when a device descriptor (``device.fds()``) is readable: :meth:`Driving.run_pass`;
* after a pass: if :meth:`Driving.pass_due`, another pass soon (at ``next_deadline()``,
  which spaces the retries of a device that pushed back); else a timer at
  :meth:`Driving.timer_deadline` (None: only input wakes it).  Passes are bounded (``recv_budget``
  datagrams in, 64 send rounds out), so a driver that runs them one per loop callback never
  starves its loop;
* after ``send``/``put`` outside a pass: :meth:`Driving.post_sends` (the first datagrams leave
  from the caller, a loop iteration sooner than with a pass), unless :attr:`Driving.backlogged`;
* to hand queued messages (tags without a handler) to its own waiters:
  :meth:`Driving.recv_nowait` and :meth:`Driving.requeue`.

A pass never blocks, and everything it calls back (handlers, send callbacks, peer events)
runs inside it, in the driver's thread.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from . import checks
from .device import DeviceOps
from .protocol.engine import Engine

if TYPE_CHECKING:
    from .transport import Message


class _Driven(Protocol):
    """The transport's insides the driver surface delegates to (Transport has them)."""

    engine: Engine
    device: DeviceOps
    _backlog: deque[tuple[int, Any, Any]]
    _inbox: deque[Message]

    @property
    def _stats_interval(self) -> float: ...
    @property
    def _last_stats(self) -> float: ...

    def now(self) -> float: ...
    def _pass(self, now: float | None = None, receive: bool = True, timer: float | None = None) -> int: ...
    def _flush_sends(self, now: float) -> None: ...


class Driving:
    """The driver surface of a Transport (see the module docstring for the protocol)."""

    __slots__ = ()

    def run_pass(self: _Driven, timer: float | None = None) -> int:
        """One progress pass that never waits (``progress(0)`` without its argument checks);
        returns the number of events dispatched.  ``timer``: the :meth:`timer_deadline` read
        after the last pass if nothing but input happened since (``inf`` for None): the pass
        does not compute it again (input never makes a timer due at once)."""
        return self._pass(None, True, timer)

    def post_sends(self: _Driven) -> None:
        """Post now what the engine has ready to send (what ``send`` or ``put`` just queued
        from outside a pass); receives and dispatches nothing."""
        self._flush_sends(self.now())

    @property
    def backlogged(self: _Driven) -> bool:
        """The device refused datagrams that wait to be posted again (a pass retries them;
        ``next_deadline()`` says when)."""
        return bool(self._backlog)

    def pass_due(self: _Driven) -> bool:
        """Whether a pass has work now, whatever the timers say: events not yet dispatched,
        datagrams ready to send, or a backlog."""
        engine = self.engine
        return bool(self._backlog) or bool(engine.events) or engine.has_work()

    def timer_deadline(self: _Driven) -> float | None:
        """When a timer next needs a pass (the engine's; sooner, a datagram a fault holds, or
        the periodic stats line), on the transport's clock: ``next_deadline()`` for less when
        :meth:`pass_due` is False."""
        timer: float | None = self.engine.next_deadline()
        next_due = self.device.next_due
        held = None if next_due is None else next_due()
        if held is not None and (timer is None or held < timer):
            timer = held
        if self._stats_interval:
            due = self._last_stats + self._stats_interval
            if timer is None or due < timer:
                timer = due
        return timer

    @property
    def queued(self: _Driven) -> int:
        """How many received messages wait for ``recv`` (tags without a handler)."""
        return len(self._inbox)

    def recv_nowait(self: _Driven, tag: int | None = None) -> Message | None:
        """The oldest queued message (of ``tag``, if given), or None: ``recv`` without
        progressing.  Its bytes no longer count against its peer's receive window."""
        if tag is not None:
            checks.tag(tag)
        inbox = self._inbox
        if not inbox:
            return None
        if tag is None:
            msg = inbox.popleft()
        else:
            for i, msg in enumerate(inbox):
                if msg.tag == tag:
                    del inbox[i]
                    break
            else:
                return None
        peer = msg.peer
        self.engine.set_unconsumed(peer, peer.unconsumed - len(msg.data))
        return msg

    def requeue(self: _Driven, msg: Message) -> None:
        """Put ``msg`` (from :meth:`recv_nowait`) back at the front of the queue, counted
        against its peer's window again: a waiter that took it was cancelled."""
        self._inbox.appendleft(msg)
        peer = msg.peer
        self.engine.set_unconsumed(peer, peer.unconsumed + len(msg.data))
