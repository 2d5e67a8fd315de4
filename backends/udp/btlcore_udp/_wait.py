"""Waiting: ``wait`` blocks until a socket is readable or a deadline passes (epoll, with the
deadline in a timerfd; where there is none, select for sub-millisecond waits), and ``wake``
makes a wait blocked in another thread return.  ``open_waiting`` sets up the poller, the
deadline timer and the wake descriptor for a device."""

from __future__ import annotations

import os
import select
import socket
import time
from typing import Any, Final

from ._errors import drain_errqueue, recv_failed
from ._state import UdpState
from ._timer import DeadlineTimer, open_timer

# (Final: compiled, a constant, not a lookup in the module's dict at every use -- POLL_EVENTS
# at every look of a busy wait's spin)
FINE_WAIT: Final = 0.05  # waits shorter than this go through select (microseconds, not ms)
SELECT_FD_LIMIT: Final = 1024  # FD_SETSIZE: select cannot take larger descriptors
POLL_ERR: Final[int] = getattr(select, "EPOLLERR", select.POLLERR)  # the same bit (8) in both
MAX_TIMER: Final = 86400.0  # waits longer than this (a day) go through the poller's own timeout
#: a busy wait reading its sockets reads the one it did not last hear from every this many turns
SPIN_OTHER_EVERY: Final = 4
POLL_EVENTS: Final = 4  # the descriptors in a device's poller: two sockets, the wake fd, the timerfd
#: read from a static, compiled (``time.monotonic`` is a lookup in the module's dict on every
#: call: a quarter of a busy wait's empty look, where the deadline is read once per look)
_MONOTONIC: Final = time.monotonic


def open_waiting(socks: list[socket.socket]) -> tuple[int, int, Any, float, list[int] | None,
                                                    DeadlineTimer | None]:
    """The wake descriptors (read, write: one eventfd, or a pipe's two ends) by which another
    thread makes a blocked wait return; a poller over both sockets and the wake descriptor
    (epoll, or poll), with its timeout's scale from seconds; the descriptors for ``select``
    (None if one is too large for it); and the deadline timer, in the epoll set (None: no
    timerfd, or no epoll)."""
    if hasattr(os, "eventfd"):
        wake_r = wake_w = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    else:  # pragma: no cover - non-Linux
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
    fds = [sock.fileno() for sock in socks] + [wake_r]
    poller: Any
    if hasattr(select, "epoll"):
        poller = select.epoll()
        for fd in fds:
            poller.register(fd, select.EPOLLIN)
        scale = 1.0  # epoll takes seconds
    else:  # pragma: no cover - non-Linux
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        scale = 1000.0  # poll takes milliseconds
    timer = open_timer() if hasattr(select, "epoll") else None
    if timer is not None:
        poller.register(timer.fd, select.EPOLLIN)
    return wake_r, wake_w, poller, scale, (fds if max(fds) < SELECT_FD_LIMIT else None), timer


def is_epoll(poller: Any) -> bool:
    """Whether ``poller`` is an epoll (whose zero-timeout look takes ``maxevents``)."""
    return hasattr(select, "epoll") and isinstance(poller, select.epoll)


def look(device: UdpState) -> Any:
    """A zero-timeout poll of the device's poller, as a busy wait spins on it.  Epoll's with
    ``maxevents`` the device's four descriptors: by default it allocates room for 1023
    answers on every call, a fifth of a spin's cost."""
    if device._epoll:
        return device._poll(0, POLL_EVENTS)  # (the poller's bound poll: no lookup by name)
    return device._poll(0)  # pragma: no cover - non-Linux


def wait(device: UdpState, deadline: float | None) -> None:
    """Block until a socket is readable or ``deadline`` (monotonic) passes; in busy-poll
    mode spin instead of sleeping: reading the sockets themselves (``spin``: the read that
    finds a datagram is the read of it), or with GRO on a zero-timeout poll (input that
    arrived during the spin is marked ``device._lone``: poll_recv reads it with one call;
    input already there at the first look is a backlog, read batched).

    The deadline goes in the device's timerfd (``_timer.py`` says why: a wait's own
    timeout costs a trap to the hypervisor on arming and on cancelling), re-armed only when
    it moved, and epoll sleeps with no timeout.  Without a timerfd: epoll counts in whole
    milliseconds, rounding up (a 200 us wait, the core's ACK delay, would sleep 1.07 ms), so
    short waits block in ``select``, which keeps microseconds and says which socket is
    readable.  A plain function the core calls directly (as post_send): no wrapper on the
    wait of every pass."""
    if device.closed:
        return
    poller = device._poller
    events: Any
    if device._spin_reads:
        if device._caught is None:  # (else the last spin's datagram waits for poll_recv)
            spin(device, deadline)
        return
    if device._busy_poll:
        events = look(device)
        device._lone = False  # input there at the first look: a backlog, read in a batch
        if not events:
            while not (events := look(device)):
                if deadline is not None and _MONOTONIC() >= deadline:
                    device._ready = (False, False)
                    return
            # the input arrived while we spun: one datagram, nearly always (a round trip's),
            # which poll_recv reads the cheap way
            device._lone = True
    elif deadline is None:
        timer = device._timer
        if timer is not None and timer.at is not None:
            timer.disarm()
        events = poller.poll(-1)
    else:
        timeout = deadline - _MONOTONIC()
        if timeout <= 0:
            events = poller.poll(0)
        elif (timer := device._timer) is not None and timeout < MAX_TIMER:
            # input already there (a bulk receiver's usual case) needs no timer: looked for
            # first while the last wait found it so (a round trip's waits sleep: no look)
            events = poller.poll(0) if timer.found else None
            if not events:
                if deadline != timer.at:
                    timer.arm(deadline)
                events = poller.poll(-1)  # (the timerfd ends it at the deadline)
                timer.found = False
            else:
                timer.found = True
        elif timeout < FINE_WAIT and device._select_fds:
            # select's answer is enough: a pending error also shows as readable, and the
            # read that gets it drains the error queue (no second call to ask epoll)
            ready, _, _ = select.select(device._select_fds, (), (), timeout)
            device._ready = (device._prio_fd in ready, device._data_fd in ready)
            if ready and device._wake_r in ready:  # woken by another thread (wake())
                drain_wake(device)
            return
        else:
            events = poller.poll(timeout * device._poll_scale)
    device._ready = readiness(device, events)  # what poll_recv needs to read


def spin(device: UdpState, deadline: float | None) -> None:
    """A busy wait on a device whose sockets are out of the poller (``_spin_reads``): read
    the hot socket (the last datagram's) on every turn and the other one on every
    ``SPIN_OTHER_EVERY``-th, as a raw UDP echo spins on its socket, until a datagram comes or
    ``deadline`` passes; the poller (the wake descriptor, the timer) is looked at with the
    other socket.  The read that finds the datagram is the read of it (``device._caught``,
    which poll_recv takes first): no zero-timeout epoll that saw it, and no epoll callback in
    the sender's system call when it arrives.  A datagram found by the first read was already
    there (a reply that came early, or a backlog: poll_recv reads once more to tell); one
    found after an empty read arrived while we spun (``_lone``: a round trip's, read alone)."""
    hot = device._hot
    recv_hot, recv_other = device._recv_from[hot], device._recv_from[1 - hot]  # (bound once a wait)
    size = device._recv_size
    turns = 0
    while True:
        turns += 1
        if _read(device, recv_hot, size, hot):
            break
        if turns % SPIN_OTHER_EVERY == 1:
            if _read(device, recv_other, size, 1 - hot):
                hot = device._hot = 1 - hot
                break
            if device.closed:  # closed by another thread (its reads fail: EBADF)
                device._ready = (False, False)
                return
            events = look(device)
            if events:  # woken by another thread (readiness() drains the wake descriptor)
                readiness(device, events)
                device._ready = (False, False)
                return
        if deadline is not None and _MONOTONIC() >= deadline:
            device._ready = (False, False)
            return
    device._lone = turns > 1
    device._ready = (hot == 0, hot == 1)


def _read(device: UdpState, recv: Any, size: int, channel: int) -> bool:
    """One non-blocking read of ``channel``'s socket for the spin (``recv``: its bound
    ``recvfrom``): True if it read a datagram (``device._caught``); an ICMP error it reports
    is counted and drained."""
    try:
        device._caught = recv(size)
        return True
    except BlockingIOError:
        return False
    except OSError:  # an ICMP error reported by this read (IP_RECVERR)
        recv_failed(device, device._socks[channel], 0)
        return False


def readiness(device: UdpState, events: Any) -> tuple[bool, bool]:
    """(priority readable, data readable) from epoll's answer; queued ICMP errors
    (EPOLLERR) are read here, or epoll would report the socket for ever."""
    prio = data = False
    prio_fd = device._prio_fd
    fd: int
    mask: int
    for fd, mask in events:
        if fd == prio_fd:
            prio = True
        elif fd == device._wake_r:
            drain_wake(device)
            continue
        elif device._timer is not None and fd == device._timer.fd:
            device._timer.fired()
            continue
        else:
            data = True
        if mask & POLL_ERR:
            drain_errqueue(device, device._socks[0] if fd == prio_fd else device._socks[1])
    return prio, data


def wake(device: UdpState) -> None:
    """Make a wait blocked in another thread return now (thread-safe: one write to the
    wake descriptor; a full pipe or a closed device is ignored)."""
    if device.closed:
        return
    try:
        os.write(device._wake_w, b"\x01\0\0\0\0\0\0\0")
    except (BlockingIOError, OSError):
        pass


def drain_wake(device: UdpState) -> None:
    try:
        while os.read(device._wake_r, 4096):
            if device._wake_r == device._wake_w:  # an eventfd: one read resets it
                return
    except (BlockingIOError, OSError):
        pass
