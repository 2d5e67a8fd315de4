"""Waiting: ``wait`` blocks until a socket is readable or a deadline passes (epoll, or
select for sub-millisecond waits), and ``wake`` makes a wait blocked in another thread
return.  ``open_waiting`` sets up the poller and the wake descriptor for a device."""

from __future__ import annotations

import os
import select
import socket
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._device import UdpDevice

FINE_WAIT = 0.05  # waits shorter than this go through select (microseconds, not ms)
SELECT_FD_LIMIT = 1024  # FD_SETSIZE: select cannot take larger descriptors
POLL_ERR = getattr(select, "EPOLLERR", select.POLLERR)  # the same bit (8) in both


def open_waiting(socks: list[socket.socket]) -> tuple[int, int, Any, float, list[int] | None]:
    """The wake descriptors (read, write: one eventfd, or a pipe's two ends) by which another
    thread makes a blocked wait return; a poller over both sockets and the wake descriptor
    (epoll, or poll), with its timeout's scale from seconds; and the descriptors for
    ``select`` (None if one is too large for it)."""
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
    return wake_r, wake_w, poller, scale, (fds if max(fds) < SELECT_FD_LIMIT else None)


def wait(device: UdpDevice, deadline: float | None) -> None:
    """Block until a socket is readable or ``deadline`` (monotonic) passes; in busy-poll
    mode spin on a zero-timeout poll instead of sleeping.

    epoll counts in whole milliseconds, rounding up: a 200 us wait (the core's ACK
    delay) would sleep 1.07 ms.  Short waits therefore block in ``select``, which keeps
    microseconds (about 60 us late here) and says which socket is readable.  A plain function
    installed as the method and as the hook (as post_send): no wrapper on the wait of every
    pass."""
    if device.closed:
        return
    poll = device._poller.poll
    if device._busy_poll:
        monotonic = time.monotonic
        while not (events := poll(0)):
            if deadline is not None and monotonic() >= deadline:
                device._ready = (False, False)
                return
    elif deadline is None:
        events = poll(-1)
    else:
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            events = poll(0)
        elif timeout < FINE_WAIT and device._select_fds:
            # select's answer is enough: a pending error also shows as readable, and the
            # read that gets it drains the error queue (no second call to ask epoll)
            ready, _, _ = select.select(device._select_fds, (), (), timeout)
            device._ready = (device._prio_fd in ready, device._data_fd in ready)
            if ready and device._wake_r in ready:  # woken by another thread (wake())
                device._drain_wake()
            return
        else:
            events = poll(timeout * device._poll_scale)
    device._ready = device._readiness(events)  # what poll_recv needs to read


def readiness(device: UdpDevice, events: Any) -> tuple[bool, bool]:
    """(priority readable, data readable) from epoll's answer; queued ICMP errors
    (EPOLLERR) are read here, or epoll would report the socket for ever."""
    prio = data = False
    prio_fd = device._prio_fd
    for fd, mask in events:
        if fd == prio_fd:
            prio = True
        elif fd == device._wake_r:
            device._drain_wake()
            continue
        else:
            data = True
        if mask & POLL_ERR:
            device._drain_errqueue(device._socks[0] if fd == prio_fd else device._socks[1])
    return prio, data


def wake(device: UdpDevice) -> None:
    """Make a wait blocked in another thread return now (thread-safe: one write to the
    wake descriptor; a full pipe or a closed device is ignored)."""
    if device.closed:
        return
    try:
        os.write(device._wake_w, b"\x01\0\0\0\0\0\0\0")
    except (BlockingIOError, OSError):
        pass


def drain_wake(device: UdpDevice) -> None:
    try:
        while os.read(device._wake_r, 4096):
            if device._wake_r == device._wake_w:  # an eventfd: one read resets it
                return
    except (BlockingIOError, OSError):
        pass
