"""How an asyncio loop drives a :class:`~btlcore.transport.Transport`: no thread, no blocking
wait.  A progress pass runs

* on input: ``loop.add_reader`` on each of the device's file descriptors (``btl_device_fds``);
* at the engine's next deadline: one ``loop.call_at``, re-armed only when the deadline moves
  earlier (a timer that fires early runs a pass and re-arms: cheaper than re-arming per pass);
* soon after new work (a send, a connect): one ``loop.call_soon``, shared by every call made
  in the same loop iteration.

Each callback runs one pass, bounded by the transport (``recv_budget`` datagrams in, at most
64 send rounds out); a pass that leaves work asks for another through ``call_soon``, so a bulk
transfer never starves the loop's other tasks.

The seams, kept small so that a loop on another clock can drive it (the simulator's virtual
time, #14): :class:`Driver` reads time only through the transport's own clock (``now``) and
converts a deadline to the loop's clock by difference (``loop.time() + (deadline - now())``),
which holds for any loop whose clock runs at the device's rate (asyncio's and uvloop's
monotonic clocks for udp and verbs; a loop on the fabric's clock for the simulator).  Input
readiness comes only from ``device.fds()``.  A device with no descriptor on a loop whose clock
is not its own (the simulator under a real-time loop) is driven by :class:`Pump` instead.

A loop on a device's own clock (``btlcore_sim.vloop``, on the simulator's) says so with
``loop.btl_clock`` (the device's ``now``: deadlines then go to ``loop.call_at``, and no pump
runs) and ``loop.btl_watch(device, run)`` / ``btl_unwatch(device)``: it runs the pass when
frames land for that device as it moves its clock.  Without ``btl_watch`` a descriptor-less
device is polled every ``POLL_INTERVAL`` of its clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any

from ..transport import Transport

_INF = float("inf")
#: a device with neither descriptors nor virtual time is polled this often (seconds)
POLL_INTERVAL = 0.0005
#: the simulator's pump, after QUIET_ROUNDS rounds that only moved the clock, runs one round
#: per QUIET_ROUND of the loop's time until something happens (idle keepalives do not spin)
QUIET_ROUNDS = 16
QUIET_ROUND = 0.001
#: a timer armed for a deadline that has since moved later is moved too when it would fire
#: before this share of the wait is over (a round trip's retransmit and probe times move by a
#: round trip each: left alone, the timer would wake the loop for nothing once a round trip);
#: else it is left to fire early and re-arm (no re-arming per pass for far deadlines)
EARLY_SHARE = 0.5
#: added to a timer's delay on a loop that rounds delays to the nearest millisecond (uvloop,
#: libuv's timers): unpadded, a deadline under half a millisecond away fires at once, and the
#: re-check re-arms it at once, spinning the loop until the deadline (asyncio rounds its waits
#: up: no pad).  Timers are thus as late as asyncio's (a millisecond at most), never early.
ROUNDING_PAD = 0.0005


def timer_pad(loop: asyncio.AbstractEventLoop) -> float:
    """What :class:`Driver` adds to a delay on ``loop`` (see ``ROUNDING_PAD``)."""
    return ROUNDING_PAD if type(loop).__module__.partition(".")[0] == "uvloop" else 0.0


class Timer:
    """A callback at a time of the transport's clock; ``cancel()`` stops it."""

    __slots__ = ("when", "callback", "cancelled", "handle")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False
        self.handle: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self.handle is not None:
            self.handle.cancel()

    def __lt__(self, other: Timer) -> bool:
        return self.when < other.when


class Driver:
    """Runs ``transport``'s passes from ``loop``; ``after_pass`` is called after each (the
    asyncio layer hands out what the pass delivered), ``on_error`` with what a pass raised (a
    user's plain handler)."""

    __slots__ = ("transport", "loop", "now", "_after", "_on_error", "_fds", "_timer", "_timer_at",
                 "_soon", "_stopped", "_passing", "_watched", "_arming", "_pad", "_known")

    def __init__(self, transport: Transport, loop: asyncio.AbstractEventLoop,
                 after_pass: Callable[[], bool], on_error: Callable[[BaseException], None]) -> None:
        self.transport = transport
        self.loop = loop
        self.now: Callable[[], float] = transport.now
        self._after = after_pass
        self._on_error = on_error
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._soon: asyncio.Handle | None = None
        self._stopped = False
        self._passing = False
        self._arming = False  # an _arm_now is scheduled
        self._pad = timer_pad(loop)
        # the transport's timer_deadline() as read after the last pass or send (inf: none),
        # None once something else may have moved it: the next input pass skips reading it
        self._known: float | None = None
        self._fds = list(transport.device.fds())
        # a loop on the device's own virtual clock (btlcore_sim.vloop) says when frames land
        watch = None if self._fds else getattr(loop, "btl_watch", None)
        self._watched = watch is not None
        if watch is not None:
            watch(transport.device, self._run)
        hint = transport.device.readable
        for fd in self._fds:
            if hint is None:
                loop.add_reader(fd, self._run)
            else:  # the device is told which descriptor woke us: no need to ask the OS
                loop.add_reader(fd, self._readable, hint, fd)

    # -- the seams ----------------------------------------------------------------------

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """``callback()`` at ``when`` on the transport's clock (virtual on the simulator),
        never before: a loop whose timers fire early (uvloop rounds to milliseconds) is
        asked again for the rest."""
        timer = Timer(when, callback)
        self._schedule(timer)
        return timer

    def _schedule(self, timer: Timer) -> None:
        delay = max(0.0, timer.when - self.now()) + self._pad
        timer.handle = self.loop.call_at(self.loop.time() + delay, self._due, timer)

    def _due(self, timer: Timer) -> None:
        if timer.cancelled:
            return
        if self.now() < timer.when:
            self._schedule(timer)
            return
        timer.callback()

    def kick(self) -> None:
        """A pass soon (new work was queued); many kicks in one iteration make one pass."""
        self._known = None
        if self._soon is None and not self._stopped:
            self._soon = self.loop.call_soon(self._run)

    def sent(self) -> None:
        """A message was queued: its first datagrams leave now, from the caller (a round
        trip is one loop iteration shorter than with a pass later), the rest in a pass."""
        t = self.transport
        if self._passing:
            return  # queued by a handler inside a pass: the pass sends it
        if self._stopped or t.backlogged:
            self.kick()
            return
        t.post_sends()
        if t.engine.has_work():
            self.kick()
            return
        if self._arming:
            self._known = None  # (read again, with the timer set, after this iteration's tasks)
            return
        deadline = t.timer_deadline()  # (what a send adds: its retransmit timeout)
        self._known = _INF if deadline is None else deadline
        now = self.now()
        if deadline is not None and deadline < self._timer_at:
            if deadline <= now:
                self.kick()
            else:
                self._set_timer(deadline, now)

    def run_now(self) -> None:
        """A pass now, from a coroutine (what must leave before the next step: close's ACKs)."""
        self._run()

    def stop(self) -> None:
        """No more passes: readers removed, timers cancelled (before the device closes)."""
        if self._stopped:
            return
        self._stopped = True
        for fd in self._fds:
            self.loop.remove_reader(fd)
        if self._watched:
            self.loop.btl_unwatch(self.transport.device)  # type: ignore[attr-defined]
        if self._timer is not None:
            self._timer.cancel()
        if self._soon is not None:
            self._soon.cancel()

    # -- passes -------------------------------------------------------------------------

    def _run(self, timer: float | None = None) -> None:
        """One pass, then the timer; ``timer``: the transport's timer deadline if known."""
        if self._stopped:
            return
        self._soon = None
        self._known = None
        t = self.transport
        self._passing = True
        try:
            t.run_pass(timer)
        except Exception as exc:  # a plain handler raised: to the loop's handler, and go on
            self._on_error(exc)
        finally:
            self._passing = False
        woke = self._after()
        if t.closed:
            return
        if t.pass_due():
            self._arm(t.next_deadline())  # work left: a pass soon (a backlog: a retry later)
        elif woke:
            self._arm_after()  # a woken task may send first: one timer for both, after it
        else:
            deadline = t.timer_deadline()
            self._known = _INF if deadline is None else deadline
            self._arm(deadline)

    def _arm_after(self) -> None:
        """Set the timer once the tasks woken by this pass have run (the ACK a reply would
        have waited for rides on the request they send next: no timer is set for it only to
        fire for nothing, which costs a loop wakeup per round trip)."""
        if not self._arming:
            self._arming = True
            self.loop.call_soon(self._arm_now)

    def _arm_now(self) -> None:
        self._arming = False
        t = self.transport
        if self._stopped or t.closed:
            return
        if t.pass_due():
            self._arm(t.next_deadline())
            return
        deadline = t.timer_deadline()
        self._known = _INF if deadline is None else deadline
        self._arm(deadline)

    def _readable(self, hint: Callable[[int], None], fd: int) -> None:
        if not self._stopped:
            hint(fd)
            self._run(self._known)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = float("inf")
        if self._stopped or self._arming:
            return  # (tasks woken by a pass run first: _arm_now then sets the timer)
        t = self.transport
        deadline = t.next_deadline()
        if deadline is not None and deadline > self.now():
            self._arm(deadline)  # armed for a deadline that has moved later: no pass yet
            return
        self._run()

    def _arm(self, deadline: float | None) -> None:
        if deadline is None:
            return  # (a timer already armed stays: it fires early, harmlessly)
        now = self.now()
        woken = self._fds or self._watched  # input wakes a pass
        if deadline <= now or not woken:
            if not woken and deadline > now:  # no input to wake us: poll until then
                deadline = min(deadline, now + POLL_INTERVAL)
                self._set_timer(deadline, now)
                return
            self.kick()
            return
        at = self._timer_at
        if deadline < at or (deadline > at and at - now < (deadline - now) * EARLY_SHARE):
            self._set_timer(deadline, now)

    def _set_timer(self, deadline: float, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = self.loop.call_at(self.loop.time() + (deadline - now) + self._pad, self._fire)


class Pump:
    """Drives every transport of one virtual clock (the simulator's fabric) from a real-time
    loop: each round, one pass of each transport; when none had anything to do, the clock
    moves to the earliest deadline (the transports', or a :meth:`call_at` timer's) through the
    device's ``wait``, which lands the frames due by then.  Virtual time thus runs whenever
    the transports wait, as fast as the CPU allows: timeouts of this API are in the
    transport's clock, ``asyncio.sleep`` in the loop's.  The pump stops when nothing is
    pending anywhere, and a kick (a send, a connect, a timer) restarts it."""

    __slots__ = ("loop", "now", "members", "_timers", "_seq", "_soon", "_wait", "_idle", "_quiet", "_slow")

    def __init__(self, loop: asyncio.AbstractEventLoop, now: Callable[[], float],
                 wait: Callable[[float | None], None]) -> None:
        self.loop = loop
        self.now = now
        self._wait = wait
        self.members: dict[PumpedDriver, None] = {}
        self._timers: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._soon: asyncio.Handle | None = None
        self._idle = 0
        self._quiet = 0  # rounds in a row that only moved the clock
        self._slow = False  # the next round waits QUIET_ROUND (a kick brings it forward)

    def kick(self) -> None:
        if self._soon is None or self._slow:
            if self._soon is not None:
                self._soon.cancel()  # (new work: no more waiting out a quiet stretch)
            self._slow = False
            self._soon = self.loop.call_soon(self._round)

    def _next_round(self) -> None:
        """The next round: at once, or after QUIET_ROUND of the loop's time once rounds have
        only moved the clock for a while (idle transports whose keepalives never end): the
        loop's other tasks then get the CPU, and virtual time runs at most a deadline per
        QUIET_ROUND."""
        if self._quiet < QUIET_ROUNDS:
            self.kick()
        elif self._soon is None:
            self._slow = True
            self._soon = self.loop.call_later(QUIET_ROUND, self._round)

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(when, callback)
        heapq.heappush(self._timers, (when, next(self._seq), timer))
        self.kick()
        return timer

    def _round(self) -> None:
        self._soon = None
        self._slow = False
        busy = False
        for member in list(self.members):
            busy = member.run() or busy
        now = self.now()
        timers = self._timers
        while timers and (timers[0][2].cancelled or timers[0][0] <= now):
            _, _, timer = heapq.heappop(timers)
            if not timer.cancelled:
                timer.callback()
                busy = True
        if busy:
            self._idle = self._quiet = 0
            self.kick()
            return
        self._quiet += 1
        wake: float | None = timers[0][0] if timers else None
        for member in self.members:
            d = member.transport.next_deadline()
            if d is not None and (wake is None or d < wake):
                wake = d
        before = self.now()
        self._wait(wake)  # lands what is due by then (at once if frames landed meanwhile)
        if wake is None and self.now() == before:
            self._idle += 1
            if self._idle > 2:  # nothing pending anywhere: asleep until a kick
                self._idle = 0
                return
        else:
            self._idle = 0
        self._next_round()


class PumpedDriver:
    """A :class:`Driver`'s interface on a :class:`Pump` (virtual time, no descriptors)."""

    __slots__ = ("transport", "loop", "now", "pump", "_after", "_on_error", "_stopped")

    def __init__(self, transport: Transport, loop: asyncio.AbstractEventLoop, pump: Pump,
                 after_pass: Callable[[], bool], on_error: Callable[[BaseException], None]) -> None:
        self.transport = transport
        self.loop = loop
        self.now = transport.now
        self.pump = pump
        self._after = after_pass
        self._on_error = on_error
        self._stopped = False
        pump.members[self] = None
        pump.kick()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        return self.pump.call_at(when, callback)

    def kick(self) -> None:
        if not self._stopped:
            self.pump.kick()

    def sent(self) -> None:
        self.kick()

    def run_now(self) -> None:
        self.run()

    def stop(self) -> None:
        self._stopped = True
        self.pump.members.pop(self, None)

    def run(self) -> bool:
        """One pass; True if it did something (events, or work left for another pass)."""
        t = self.transport
        if self._stopped or t.closed:
            return False
        try:
            n = t.run_pass()
        except Exception as exc:
            self._on_error(exc)
            n = 1
        self._after()
        deadline = t.next_deadline()
        return n > 0 or (deadline is not None and deadline <= t.now())


_PUMPS: dict[tuple[int, Any], Pump] = {}


def driver_for(transport: Transport, loop: asyncio.AbstractEventLoop, after_pass: Callable[[], bool],
               on_error: Callable[[BaseException], None]) -> Driver | PumpedDriver:
    """The driver of ``transport`` on ``loop``: a :class:`Driver` where the device has
    descriptors or real time (or the loop runs on the device's clock: ``loop.btl_clock``, the
    hook a virtual-time loop sets), else a member of the loop's :class:`Pump` for its clock."""
    caps = transport.capabilities
    on_own_clock = getattr(loop, "btl_clock", None) == transport.now
    if not caps.virtual_time or on_own_clock or transport.device.fds():
        return Driver(transport, loop, after_pass, on_error)
    key = (id(loop), transport.now)
    pump = _PUMPS.get(key)
    if pump is None or pump.loop is not loop or pump.loop.is_closed():
        pump = _PUMPS[key] = Pump(loop, transport.now, transport.device.wait)
    for stale in [k for k, p in _PUMPS.items() if p.loop.is_closed()]:
        del _PUMPS[stale]
    return PumpedDriver(transport, loop, pump, after_pass, on_error)
