"""Errors on the send path and ICMP errors (IP_RECVERR), rare by nature: kept out of the
per-datagram functions of ``_send`` and ``_receive``, which call these only on a failure.

Plain functions taking the device first (its hot state, :class:`._state.UdpState`)."""

from __future__ import annotations

import errno
import logging
import socket
import sys
from collections.abc import Sequence
from typing import Any

from ._state import UdpState, nbytes

#: errors that mean "the send queue is full, try later"
PUSHBACK = (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS)
#: errors that mean GSO cannot be used on this path (no checksum offload, segment > MTU)
GSO_UNSUPPORTED = (errno.EIO, errno.EINVAL, errno.ENOPROTOOPT, errno.EOPNOTSUPP)
GSO_FAILURES_BEFORE_OFF = 3
MSG_ERRQUEUE = getattr(socket, "MSG_ERRQUEUE", 0x2000)
ERRQUEUE_BATCH = 64
ERRQUEUE_BUFFER = 512
#: send errors that mean "no route from the bound address to that destination"
UNREACHABLE = (errno.EINVAL, errno.ENETUNREACH, errno.EHOSTUNREACH)
REACH_CACHE = 4096  # destinations whose reachability is remembered (a HELLO flood stays bounded)

log = logging.getLogger("btlcore.udp")


def _send1(sock: socket.socket, data: Any, addr: Any) -> None:
    if type(data) is list:  # gathered: [header, payload], the kernel joins them
        sock.sendmsg(data, (), 0, addr)
    else:
        sock.sendto(data, addr)


def send_error(device: UdpState, exc: OSError, sock: socket.socket, data: Any, addr: Any) -> bool:
    """The send of ``data`` failed with ``exc``: True if it was sent after all or is to be
    counted as lost, False if the queue is full (the caller posts it again later)."""
    if device.closed:
        raise OSError(errno.EBADF, "udp: device is closed") from exc
    if exc.errno not in PUSHBACK:
        # With IP_RECVERR an ICMP error (a peer's closed port, a smaller path MTU) is
        # reported once, by whichever call comes next: clear it and try again, once.
        drain_errqueue(device, sock)
        try:
            _send1(sock, data, addr)
            device.tx_datagrams += 1
            device.tx_bytes += nbytes(data)
            return True
        except OSError as again:
            exc = again
    if exc.errno in PUSHBACK:
        device.tx_pushbacks += 1
        return False
    if exc.errno == errno.EMSGSIZE:
        raise OSError(errno.EMSGSIZE, f"udp: the kernel refused a {nbytes(data)}-byte datagram "
                      f"to {addr} as too large for the path; lower the 'mtu' option") from exc
    # Unreachable network, a firewall's EPERM: the datagram is lost as on a wire, and the
    # core's retransmission and peer timeout deal with it.  connect() refused peers
    # unreachable from the start; a route lost since is said once per destination.
    device.tx_errors += 1
    if exc.errno in UNREACHABLE:
        unreachable(device, addr, exc)
    return True


def unreachable(device: UdpState, addr: Any, exc: OSError) -> None:
    device.tx_unreachable += 1
    device.last_send_error = f"udp: cannot send from {device._bound_text()} to {addr[0]} port {addr[1]}: {exc.strerror}"
    if addr not in device._warned and len(device._warned) < REACH_CACHE:
        device._warned.add(addr)
        log.warning("%s (no route from the bound address; datagrams to it are lost until "
                    "the route returns, and the peer fails after peer_timeout)", device.last_send_error)


def recv_failed(device: UdpState, sock: Any, errors: int) -> int:
    """A read raised: count it and read the socket's error queue (the ICMP behind it), so
    the next read gets data again; return the poll's error count."""
    device.rx_errors += 1
    drain_errqueue(device, sock)
    return errors + 1


def drain_errqueue(device: UdpState, sock: Any) -> None:
    """Read and count the socket's queued ICMP errors (IP_RECVERR): left there, they take
    receive-buffer space and keep epoll reporting EPOLLERR."""
    for _ in range(ERRQUEUE_BATCH):
        try:
            _data, anc, _flags, dest = sock.recvmsg(ERRQUEUE_BUFFER, ERRQUEUE_BUFFER, MSG_ERRQUEUE)
        except (BlockingIOError, AttributeError):
            return
        except OSError:
            continue  # a pending error reported by this call: it is cleared now
        device.icmp_errors += 1
        # sock_extended_err.ee_errno first: a port unreachable is ECONNREFUSED
        if any(len(d) >= 4 and int.from_bytes(d[:4], sys.byteorder) == errno.ECONNREFUSED
               for _l, _t, d in anc) and len(device.port_unreachable) < ERRQUEUE_BATCH:
            device.port_unreachable.append(dest)


def gso_error(device: UdpState, exc: OSError, sock: socket.socket, iov: Sequence[Any], cmsg: Any,
               addr: Any, count: int, size: int) -> int | None:
    """A GSO send of ``count`` datagrams of ``size`` bytes (the buffers ``iov``) failed
    with ``exc``.  Returns the bytes sent after all, 0 if the run is lost (as on a wire),
    -1 if the caller should send it datagram by datagram, None if the send queue is
    full."""
    for attempt in range(2):
        if exc.errno in PUSHBACK:
            device.tx_pushbacks += 1
            return None
        if exc.errno in GSO_UNSUPPORTED and device._gso_mode == "auto":
            device.gso_fallbacks += 1
            device._gso_failures += 1
            if device._gso_failures >= GSO_FAILURES_BEFORE_OFF:
                device._gso = False
            return -1
        if exc.errno == errno.EMSGSIZE or exc.errno in GSO_UNSUPPORTED:
            raise OSError(exc.errno, f"udp: GSO send of {count} datagrams of "
                          f"{size} bytes to {addr} failed: {exc.strerror} (try "
                          "gso=off or a smaller mtu)") from exc
        if device.closed:
            raise OSError(errno.EBADF, "udp: device is closed") from exc
        if attempt == 0:  # perhaps an ICMP error reported by this call: clear it, retry
            drain_errqueue(device, sock)
            try:
                return int(sock.sendmsg(iov, cmsg, 0, addr))
            except OSError as again:
                exc = again
    device.tx_errors += count  # lost as on a wire: the core retransmits
    if exc.errno in UNREACHABLE:
        unreachable(device, addr, exc)
    return 0
