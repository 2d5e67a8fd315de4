"""A wait's deadline as a ``timerfd`` in the poller's set, instead of the timeout of the wait.

Why: on the virtual machines we measure on, a short wait's own timeout is the dearest part of
a blocking round trip.  ``select``/``epoll_wait`` arm a kernel timer when they sleep and cancel
it when input wakes them; when that timer is due before the next scheduler tick (the tail-loss
probe's 0.5-3 ms, the ACK delay's 0.2 ms), each arming and each cancelling reprograms the
CPU's timer device, a trap to the hypervisor.  Raw UDP ping-pong on loopback, two processes
on their own cores, median round trip: select with a 0.5 ms timeout 87 us, with 50 ms 70 us,
with a timerfd re-armed at 0.5 ms before each wait and no timeout 45 us.  The timerfd is
re-armed only when the deadline moved (one call, no cancelling on wake-up), and the wait
sleeps with no timeout of its own.  Input then wakes it as before; the deadline wakes it by
making the timerfd readable.

``timerfd_settime`` is reached through ctypes (``os.timerfd_*`` arrive in Python 3.13); where
libc lacks it the device waits with a timeout as before.  The timer is one-shot and absolute
on ``CLOCK_MONOTONIC``, the clock of ``time.monotonic``, so a deadline is passed as is."""

from __future__ import annotations

import ctypes
import os
from typing import Any

CLOCK_MONOTONIC = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC
TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("interval", _Timespec), ("value", _Timespec)]


def _libc() -> tuple[Any, Any] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None
    create.restype = settime.restype = ctypes.c_int
    return create, settime


_CALLS = _libc()


class DeadlineTimer:
    """One timerfd, armed at the deadline of the device's next wait.  ``at`` is the deadline
    it is armed for (None: disarmed, or it fired); ``found``: the last wait found input
    already there (the wait then looks before it arms)."""

    __slots__ = ("fd", "at", "found", "_spec", "_ptr", "_settime")

    def __init__(self, fd: int, settime: Any) -> None:
        self.fd = fd
        self.at: float | None = None
        self.found = True
        self._spec = _Itimerspec()
        self._ptr = ctypes.byref(self._spec)
        self._settime = settime

    def arm(self, deadline: float) -> None:
        """Make the fd readable at ``deadline`` (monotonic seconds; > 0), once."""
        value = self._spec.value
        sec = int(deadline)
        value.sec = sec
        value.nsec = int((deadline - sec) * 1e9) or 1  # (0, 0) would disarm
        if self._settime(self.fd, TFD_TIMER_ABSTIME, self._ptr, None) != 0:  # pragma: no cover
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self.at = deadline

    def fired(self) -> None:
        """The fd was readable: read it, so that it is not until the deadline after the next
        arming (a wait would return at once for ever)."""
        self.at = None
        try:
            os.read(self.fd, 8)
        except OSError:  # (BlockingIOError: read already)
            pass

    def disarm(self) -> None:
        value = self._spec.value
        value.sec = value.nsec = 0
        self._settime(self.fd, 0, self._ptr, None)
        self.at = None

    def close(self) -> None:
        os.close(self.fd)


def open_timer() -> DeadlineTimer | None:
    """A disarmed deadline timer, or None where the system has no timerfd."""
    if _CALLS is None:  # pragma: no cover - not Linux
        return None
    create, settime = _CALLS
    fd = create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
    if fd < 0:  # pragma: no cover - out of descriptors, or a seccomp filter
        return None
    return DeadlineTimer(fd, settime)
