"""``recvmmsg(2)`` through ctypes: many datagrams per system call, with no C extension.

Python's socket module has no ``recvmmsg``; calling libc's through ctypes costs about a
microsecond per call, but the call then takes up to ``slots`` datagrams, so for bulk traffic
the receive cost per datagram falls by about a third (``selftest.py`` measures it).

The receive buffer is one arena cut into fixed slots of ``slot_size`` bytes (the MTU plus
one, so that an oversize datagram shows as longer than the MTU and is dropped); message ``i``
of every call lands in slot ``i``.  Datagrams are returned as memoryviews of their slots,
valid until the next call.  The arena is an anonymous ``mmap``: the kernel gives it pages
only where a datagram is written, so 256 slots of 64 KiB cost nothing until traffic fills
them (a ctypes array would be zeroed, 16 MiB touched per device at open), and an idle or
lightly used device holds a few pages (:func:`._lazy.lazy_buffer`).

Each slot has a name buffer too, where the kernel writes the sender's address.
:meth:`RecvBatch.sources` turns a call's names into ``(host, port)`` tuples in bulk: the
raw bytes are compared in one go (one sender nearly always sent the whole batch), and a
cache maps them to the tuples the socket module would give, built once per sender: no Python
code runs per datagram.
"""

from __future__ import annotations

import ctypes
import errno
import socket
import struct
import sys
from typing import Any

from ._lazy import lazy_buffer

MSG_DONTWAIT = 0x40
MAX_ARENA = 16 << 20
NAME_SIZE = 32
"""Bytes of name buffer per slot: a sockaddr_in6 (28) rounded to whole 8-byte words."""
_WORDS = NAME_SIZE // 8
MAX_SENDERS = 4096
"""Sender addresses cached before the cache starts over (spoofed floods stay bounded)."""


def scoped(addr: tuple[str, int, int, int]) -> tuple[str, int, int, int]:
    """An IPv6 sender as this module names it: a scoped one's host with its zone,
    ``fe80::1%eth0`` (``recvfrom`` gives ``fe80::1``; the poll that reads a lone datagram
    that way names it so too, so that one sender has one name whichever way it was read)."""
    if not addr[3]:
        return addr
    host = socket.getnameinfo((addr[0], 0, 0, addr[3]), socket.NI_NUMERICHOST)[0]
    return (host, addr[1], addr[2], addr[3])


class _Senders(dict[Any, Any]):
    """Raw sender address (an integer for IPv4, bytes for IPv6) -> the ``sockaddr`` tuple,
    made on first sight."""

    def __init__(self, family: int) -> None:
        super().__init__()
        self.family = family

    def __missing__(self, key: Any) -> Any:
        if len(self) >= MAX_SENDERS:
            self.clear()
        if self.family == socket.AF_INET6:  # key: the name slot's bytes (a sockaddr_in6)
            raw = key
            host = socket.inet_ntop(socket.AF_INET6, raw[8:24])
            scope = int.from_bytes(raw[24:28], sys.byteorder)
            value: Any = scoped((host, int.from_bytes(raw[2:4], "big"),
                                 int.from_bytes(raw[4:8], "big"), scope))
        else:  # key: sockaddr_in's first word (family, port, IPv4 address) as an integer
            raw = key.to_bytes(8, sys.byteorder)
            value = (socket.inet_ntop(socket.AF_INET, raw[4:8]), int.from_bytes(raw[2:4], "big"))
        self[key] = value
        return value


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(_Iovec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    ]


class _Mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", _Msghdr), ("msg_len", ctypes.c_uint)]


def _libc_recvmmsg() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.recvmmsg
    except (OSError, AttributeError):
        return None
    # no argtypes: converting through them costs 0.4 us a call; the caller passes the
    # pointer as a ready c_void_p and the rest are small ints (c_int) or None (NULL)
    fn.restype = ctypes.c_int
    return fn


_RECVMMSG = _libc_recvmmsg()


def available() -> bool:
    return _RECVMMSG is not None


class RecvBatch:
    """Preallocated ``mmsghdr`` array and slots for ``recvmmsg``."""

    def __init__(self, slot_size: int, slots: int = 256, family: int = socket.AF_INET) -> None:
        if _RECVMMSG is None:
            raise OSError(errno.ENOSYS, "recvmmsg is not available from libc")
        slot_size = (slot_size + 63) & ~63
        slots = max(8, min(slots, MAX_ARENA // slot_size))
        self.slot_size = slot_size
        self.slots = slots
        self._memory = lazy_buffer(slot_size * slots)
        self._arena = (ctypes.c_char * (slot_size * slots)).from_buffer(self._memory)
        self._iovs = (_Iovec * slots)()
        self._msgs = (_Mmsghdr * slots)()
        self._names = (ctypes.c_char * (NAME_SIZE * slots))()
        names_base = ctypes.addressof(self._names)
        # Fill the arrays with struct rather than ctypes attribute by attribute: 30 times
        # faster, which matters to whoever opens many devices (the tests do).
        base = ctypes.addressof(self._arena)
        iov_base = ctypes.addressof(self._iovs)
        iov_size = ctypes.sizeof(_Iovec)
        iovs = memoryview(self._iovs).cast("B")
        msgs = memoryview(self._msgs).cast("B")
        hdr_size = ctypes.sizeof(_Mmsghdr)
        for i in range(slots):
            struct.pack_into("PN", iovs, i * iov_size, base + i * slot_size, slot_size)
            struct.pack_into("P", msgs, i * hdr_size + _Msghdr.iov.offset, iov_base + i * iov_size)
            struct.pack_into("N", msgs, i * hdr_size + _Msghdr.iovlen.offset, 1)
            struct.pack_into("P", msgs, i * hdr_size + _Msghdr.name.offset, names_base + i * NAME_SIZE)
            struct.pack_into("I", msgs, i * hdr_size + _Msghdr.namelen.offset, NAME_SIZE)
        self.view = memoryview(self._arena).cast("B")
        size = ctypes.sizeof(_Mmsghdr)
        assert size % 4 == 0 and _Mmsghdr.msg_len.offset % 4 == 0
        self._lens = memoryview(self._msgs).cast("B").cast("I")
        self._stride = size // 4
        self._len_at = _Mmsghdr.msg_len.offset // 4
        self._msgs_addr = ctypes.addressof(self._msgs)
        self._hdr_size = size
        self._ptrs = [ctypes.c_void_p(self._msgs_addr + i * size) for i in range(slots)]
        self._name_bytes = memoryview(self._names).cast("B")
        self._words = self._name_bytes.cast("Q")
        self._senders = _Senders(family)
        self._six = family == socket.AF_INET6

    def recv(self, fd: int, first: int, count: int) -> int:
        """Receive up to ``count`` datagrams into slots ``first``... without blocking.
        Returns how many; 0 when none is waiting; raises OSError on an error."""
        n: int = _RECVMMSG(fd, self._ptrs[first], count, MSG_DONTWAIT, None)
        if n >= 0:
            return n
        err = ctypes.get_errno()
        if err in (errno.EAGAIN, errno.EWOULDBLOCK):
            return 0
        if err == errno.EINTR:
            return 0
        raise OSError(err, f"recvmmsg: {errno.errorcode.get(err, err)}")

    def length(self, slot: int) -> int:
        return self._lens[slot * self._stride + self._len_at]

    def sources(self, first: int, count: int) -> list[Any]:
        """The senders of the datagrams in slots ``first`` to ``first + count - 1`` of the
        last call, as the socket module gives addresses: ``(host, port)`` for IPv4,
        ``(host, port, flowinfo, scope_id)`` for IPv6.

        Nearly always one peer sent the whole batch: one comparison of the name buffers
        (memcmp) finds that, and the answer is one sender repeated.  Otherwise IPv4 names are
        read as integers through one strided slice, IPv6 ones as bytes, and mapped through
        the cache."""
        if count == 1 and not self._six:  # a round trip's request or reply: the short way
            return [self._senders[self._words[first * _WORDS]]]
        if count <= 0:
            return []
        names = self._name_bytes[first * NAME_SIZE:(first + count) * NAME_SIZE].tobytes()
        one = names[:NAME_SIZE]
        if count == 1 or names == one * count:
            return [self._senders[one if self._six else self._words[first * _WORDS]]] * count
        if self._six:
            keys: Any = [names[i:i + NAME_SIZE] for i in range(0, len(names), NAME_SIZE)]
        else:
            keys = self._words[first * _WORDS:(first + count) * _WORDS:_WORDS].tolist()
        return list(map(self._senders.__getitem__, keys))
