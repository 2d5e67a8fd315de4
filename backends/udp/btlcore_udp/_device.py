"""The UDP device: two non-blocking UDP sockets, one per channel.

Why two sockets rather than one socket and a channel byte: they are usnic's two QPs.  Each
has its own kernel receive buffer, so a flood of bulk data filling the data socket's buffer
never drops an ACK queued on the priority socket, and ``poll_recv`` drains the priority
socket first, so ACKs are seen before the data that arrived with them.  The cost is a second
port, which the address carries.

The per-packet functions (``post_send``, ``post_send_batch``, ``poll_recv``) are written as
plain functions taking the device first and installed both as the device's methods and, in
``plugin.py``, as the hook implementations, so that the core's direct calls go straight into
them with no wrapper in between (a wrapper is another 0.1 us per datagram).

Receiving, three ways, each datagram returned as a memoryview valid until the next
``poll_recv``; a datagram longer than the MTU is dropped and counted, never delivered:

* ``recvmmsg`` through ctypes (``_mmsg``; the default where libc has it): up to 256
  datagrams per system call into fixed slots.  About a third cheaper per datagram than
* a ``recv_into`` loop (``recvmmsg=off``), packing datagrams back to back in one arena;
* with ``gro=true``, the data socket has UDP_GRO: a run the peer sent with GSO arrives glued
  in one ``recvmsg_into`` and is cut at the size the kernel reports, for a quarter of the
  cost; but each datagram that is not glued costs twice as much as with ``recv_into``.

Sending: ``sendto`` on the channel's socket.  ``post_send_batch`` sends runs of equal-size
datagrams to one destination as one ``sendmsg`` with UDP GSO (``UDP_SEGMENT``, given per call
as a control message, so single sends are never segmented); the kernel splits it into
datagrams, at a fraction of the per-datagram cost.  ``IP_RECVERR`` (option ``recverr``, on
by default) makes a full queue on the way out (a rate-limited qdisc) fail the send with
ENOBUFS, which ``post_send`` reports as back-pressure, instead of dropping it silently; the
ICMP errors it also reports (a peer's closed port) are read and counted, never raised.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import select
import socket
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any

from btlcore.device import Capabilities, Channel, ChannelInfo
from btlcore.errors import AddressUnreachable, ConfigError

from . import _address, _heap, _mmsg, _mtu, _route
from ._lazy import lazy_buffer
from ._options import MAX_PAYLOAD, UdpOptions

UDP_SEGMENT = getattr(socket, "UDP_SEGMENT", 103)  # Python 3.11 has no name for it
GSO_MAX_SEGMENTS = 64  # UDP_MAX_SEGMENTS in kernels before 6.9 (128 since); stay safe
UDP_GRO = getattr(socket, "UDP_GRO", 104)
GRO_BUFFER = 65536  # a GRO read may return up to 64 KiB of glued datagrams
GRO_CMSG_SPACE = socket.CMSG_SPACE(4)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
ARENA_BYTES = 4 << 20
#: errors that mean "the send queue is full, try later"
_PUSHBACK = (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS)
#: errors that mean GSO cannot be used on this path (no checksum offload, segment > MTU)
_GSO_UNSUPPORTED = (errno.EIO, errno.EINVAL, errno.ENOPROTOOPT, errno.EOPNOTSUPP)
_GSO_FAILURES_BEFORE_OFF = 3
IP_RECVERR = getattr(socket, "IP_RECVERR", 11)
IPV6_RECVERR = getattr(socket, "IPV6_RECVERR", 25)
MSG_ERRQUEUE = getattr(socket, "MSG_ERRQUEUE", 0x2000)
ERRQUEUE_BATCH = 64
MAX_ERRORS_PER_POLL = 8
FINE_WAIT = 0.05  # waits shorter than this go through select (microseconds, not ms)
SELECT_FD_LIMIT = 1024  # FD_SETSIZE: select cannot take larger descriptors
POLL_ERR = getattr(select, "EPOLLERR", select.POLLERR)  # the same bit (8) in both
ERRQUEUE_BUFFER = 512
PAIR_ATTEMPTS = 256  # ephemeral PORT whose PORT + 1 is taken: pick again, at most this often
#: send errors that mean "no route from the bound address to that destination"
_UNREACHABLE = (errno.EINVAL, errno.ENETUNREACH, errno.EHOSTUNREACH)
REACH_CACHE = 4096  # destinations whose reachability is remembered (a HELLO flood stays bounded)

log = logging.getLogger("btlcore.udp")


def _set_buffer(sock: socket.socket, opt: int, force_opt: int, want: int) -> int:
    """Ask for ``want`` bytes of socket buffer; force it past net.core.[rw]mem_max when we
    may (CAP_NET_ADMIN).  Returns what was granted, in the request's terms (Linux reports
    twice the usable size to account for its bookkeeping)."""
    sock.setsockopt(socket.SOL_SOCKET, opt, want)
    granted = sock.getsockopt(socket.SOL_SOCKET, opt) // 2
    if granted < want:
        try:
            sock.setsockopt(socket.SOL_SOCKET, force_opt, want)
            granted = sock.getsockopt(socket.SOL_SOCKET, opt) // 2
        except OSError:
            pass
    return granted


def gso_supported(sock: socket.socket) -> bool:
    try:
        sock.getsockopt(socket.IPPROTO_UDP, UDP_SEGMENT)
        return True
    except OSError:
        return False


def bind_sockaddr(family: int, host: str, port: int) -> Any:
    return socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM, 0, socket.AI_NUMERICHOST)[0][4]


def _is_wildcard(host: str) -> bool:
    return ipaddress.ip_address(host.split("%")[0]).is_unspecified


def _open_socket(opts: UdpOptions, port: int) -> socket.socket:
    sock = socket.socket(opts.family, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        if opts.family == socket.AF_INET6 and _is_wildcard(opts.host):
            # dual stack: [::] takes IPv4 peers too (as ::ffff:a.b.c.d), whatever the
            # system's net.ipv6.bindv6only says
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(bind_sockaddr(opts.family, opts.host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _bind_sockets(opts: UdpOptions) -> list[socket.socket]:
    """The priority and the data socket, bound as the options say: with ``paired`` (the
    default) on PORT and PORT + 1, also when PORT is ephemeral: the kernel picks the first,
    and if PORT + 1 is taken (or PORT is 65535) both are given back and it picks again."""
    host = opts.host
    attempts = PAIR_ATTEMPTS if opts.paired and opts.port == 0 else 1
    for _ in range(attempts):
        port = opts.port
        try:
            first = _open_socket(opts, port)
        except OSError as exc:
            raise OSError(exc.errno, f"udp: cannot bind {host} port {port}: {exc.strerror}") from exc
        data_port = opts.data_port
        if opts.paired:
            data_port = first.getsockname()[1] + 1
        try:
            if data_port > 65535:
                raise OSError(errno.EADDRINUSE, "no port + 1 above 65535")
            return [first, _open_socket(opts, data_port)]
        except OSError as exc:
            first.close()
            if exc.errno != errno.EADDRINUSE or attempts == 1:
                raise OSError(exc.errno, f"udp: cannot bind {host} port {data_port} (the data "
                              f"socket's): {exc.strerror}") from exc
    raise OSError(errno.EADDRINUSE, f"udp: no two free consecutive ports PORT, PORT + 1 on {host} "
                  f"in {PAIR_ATTEMPTS} tries (give 'data_port' to let the data socket take any port)")


def _nbytes(data: Any) -> int:
    """Length of a datagram given as one buffer or as a list of buffers (gathered)."""
    return len(data) if type(data) is not list else sum(map(len, data))


def _send1(sock: socket.socket, data: Any, addr: Any) -> None:
    if type(data) is list:  # gathered: [header, payload], the kernel joins them
        sock.sendmsg(data, (), 0, addr)
    else:
        sock.sendto(data, addr)


def post_send(device: UdpDevice, channel: Channel, dest: Any, data: Any) -> bool:
    """Send one datagram (one buffer, or a list of buffers sent as one datagram); False if
    the socket's send queue is full."""
    if type(data) is list:
        return _post_gathered(device, channel, dest, data)
    n = len(data)
    if n > device._mtus[channel]:
        raise ValueError(f"udp: datagram of {n} bytes exceeds the {Channel(channel).name} "
                         f"channel MTU of {device._mtus[channel]} bytes")
    try:
        device._sendto[channel](data, dest[channel])
    except OSError as exc:
        return device._send_error(exc, device._socks[channel], data, dest[channel])
    device.tx_datagrams += 1
    device.tx_bytes += n
    return True


def _post_gathered(device: UdpDevice, channel: Channel, dest: Any, data: list[Any]) -> bool:
    n = _nbytes(data)
    if n > device._mtus[channel]:
        raise ValueError(f"udp: datagram of {n} bytes exceeds the {Channel(channel).name} "
                         f"channel MTU of {device._mtus[channel]} bytes")
    sock = device._socks[channel]
    try:
        sock.sendmsg(data, (), 0, dest[channel])
    except OSError as exc:
        return device._send_error(exc, sock, data, dest[channel])
    device.tx_datagrams += 1
    device.tx_bytes += n
    return True


def post_send_batch(device: UdpDevice, channel: Channel, dest: Any, datagrams: Sequence[Any]) -> int:
    """Send ``datagrams`` in order to one destination; return how many were taken (a prefix;
    the caller posts the rest again later, as after ``post_send`` returned False).

    Runs of equal-size datagrams (the last of a run may be shorter) go out as one GSO send
    when GSO is on; everything else datagram by datagram.  A datagram may be a list of
    buffers (the engine's gathered [header, payload]): a GSO run then passes all their
    buffers in one iovec, which the kernel cuts at the segment size as usual."""
    mtu = device._mtus[channel]
    sock = device._socks[channel]
    addr = dest[channel]
    total = len(datagrams)
    sizes = list(map(_nbytes, datagrams))
    plain_until = 0  # datagrams before this index go one by one (after a GSO failure)
    # a GSO run needs two datagrams in one send: larger ones (65000 B) always go one by one
    gso_max = device._max_payload // 2 if device._gso else 0
    i = 0
    while i < total:
        size = sizes[i]
        if size > mtu:
            raise ValueError(f"udp: datagram {i} of the batch has {size} bytes, more than the "
                             f"{Channel(channel).name} channel MTU of {mtu} bytes")
        j = i + 1
        if 0 < size <= gso_max and i >= plain_until:
            limit = min(total, i + min(GSO_MAX_SEGMENTS, device._max_payload // size))
            while j < limit and sizes[j] == size:
                j += 1
            if j < limit and 0 < sizes[j] < size:  # a shorter (not empty) last one
                j += 1
        if j - i == 1:
            data = datagrams[i]
            try:
                if type(data) is list:  # (_send1, inlined: once per datagram at 65000 B)
                    sock.sendmsg(data, (), 0, addr)
                else:
                    sock.sendto(data, addr)
            except OSError as exc:
                if not device._send_error(exc, sock, datagrams[i], addr):
                    return i
                i = j
                continue
            device.tx_datagrams += 1
            device.tx_bytes += size
            i = j
            continue
        run = datagrams[i:j]
        iov = run
        for d in run:
            if type(d) is list:  # gathered datagrams: all the buffers, in order, as one iovec
                iov = []
                for d in run:
                    if type(d) is list:
                        iov += d
                    else:
                        iov.append(d)
                break
        cmsg = device._gso_cmsg.get(size)
        if cmsg is None:
            cmsg = device._gso_cmsg[size] = [(socket.IPPROTO_UDP, UDP_SEGMENT, struct.pack("=H", size))]
        try:
            nbytes = sock.sendmsg(iov, cmsg, 0, addr)
        except OSError as exc:
            sent = device._gso_error(exc, sock, iov, cmsg, addr, j - i, size)
            if sent is None:  # queue full
                return i
            if sent < 0:  # GSO refused here: this run again, datagram by datagram
                plain_until = j
                if not device._gso:  # ... and, turned off now, for the rest of the batch too
                    gso_max = 0
                continue
            nbytes = sent
        if nbytes:
            device.tx_datagrams += j - i
            device.tx_bytes += nbytes
            device.tx_gso_sends += 1
        i = j
    return total


def post_send_many(device: UdpDevice, items: Sequence[tuple[Any, Any, Any]]) -> int:
    """Post ``(channel, dest, data)`` items in order, each run of items for one channel and
    destination through :func:`post_send_batch` (GSO); return how many were taken (a prefix:
    the caller keeps the rest for later).  What a driver's flush loop needs in one call."""
    total = len(items)
    if total == 1:  # a reply, an ACK: the common case on a round trip
        channel, dest, data = items[0]
        return 1 if post_send(device, channel, dest, data) else 0
    i = 0
    while i < total:
        channel, dest, data = items[i]
        j = i + 1
        while j < total and items[j][0] == channel and items[j][1] is dest:
            j += 1
        if j - i == 1:
            if not post_send(device, channel, dest, data):
                return i
        else:
            took = post_send_batch(device, channel, dest, [item[2] for item in items[i:j]])
            if took < j - i:
                return i + took
        i = j
    return total


def _drain(device: UdpDevice, sock: socket.socket, out: list[Any], srcs: list[Any], budget: int,
           off: int) -> int:
    """``recvfrom_into`` datagrams back to back into the arena from ``off``, their senders
    into ``srcs``; return the new offset.  Stops when the socket is empty, ``out`` holds
    ``budget``, or the arena is full."""
    arena = device._arena
    limit = device._arena_limit
    size = device._recv_size
    mtu = device._recv_mtu
    recvfrom_into = sock.recvfrom_into
    append = out.append
    append_src = srcs.append
    errors = 0
    start = off
    while len(out) < budget and off <= limit:
        try:
            n, src = recvfrom_into(arena[off:], size)
        except BlockingIOError:
            break
        except OSError:  # an ICMP error reported by this call (IP_RECVERR)
            device.rx_errors += 1
            device._drain_errqueue(sock)
            errors += 1
            if errors >= MAX_ERRORS_PER_POLL:
                break
            continue
        if n > mtu:
            device.rx_oversize += 1
            continue
        append(arena[off:off + n])
        append_src(src)
        off += n
    device.rx_bytes += off - start
    return off


def _drain_mmsg(device: UdpDevice, sock: socket.socket, out: list[Any], srcs: list[Any],
                budget: int, slot: int) -> int:
    """Like :func:`_drain` with ``recvmmsg``: many datagrams per system call, each in its own
    slot of ``device._batch`` from ``slot`` on; return the next free slot.  The senders are
    read per call, in bulk (``RecvBatch.sources``)."""
    recv, view, lens, stride, at, size, slots, sources = device._mmsg_parts
    fd = sock.fileno()
    mtu = device._recv_mtu
    append = out.append
    nbytes = 0
    errors = 0
    while len(out) < budget and slot < slots:
        want = min(budget - len(out), slots - slot)
        try:
            k = recv(fd, slot, want)
        except OSError:  # an ICMP error reported by this call (IP_RECVERR)
            device.rx_errors += 1
            device._drain_errqueue(sock)
            errors += 1
            if errors >= MAX_ERRORS_PER_POLL:
                break
            continue
        had = len(out)
        for i in range(slot, slot + k):
            n = lens[i * stride + at]
            if n > mtu:
                device.rx_oversize += 1
                continue
            begin = i * size
            append(view[begin:begin + n])
            nbytes += n
        if len(out) - had == k:
            srcs += sources(slot, k)
        else:  # oversize datagrams were dropped: their senders go too
            srcs += [src for i, src in enumerate(sources(slot, k), slot)
                     if lens[i * stride + at] <= mtu]
        slot += k
        if k < want:  # the socket ran dry: spare the call that would say so
            break
    device.rx_bytes += nbytes
    return slot


def _drain_gro(device: UdpDevice, sock: socket.socket, out: list[Any], srcs: list[Any], budget: int,
               off: int) -> int:
    """Like :func:`_drain`, for a socket with UDP_GRO on: one ``recvmsg_into`` may return many
    datagrams glued together, with their size in a control message.  Those beyond the budget
    are copied to ``device._pending`` (their sender to ``device._pending_from``) and
    delivered first by the next poll."""
    arena = device._arena
    limit = device._arena_gro_limit
    mtu = device._recv_mtu
    recvmsg_into = sock.recvmsg_into
    append = out.append
    append_src = srcs.append
    errors = 0
    start = off
    while len(out) < budget and off <= limit:
        try:
            n, anc, flags, src = recvmsg_into([arena[off:off + GRO_BUFFER]], GRO_CMSG_SPACE)
        except BlockingIOError:
            break
        except OSError:
            device.rx_errors += 1
            device._drain_errqueue(sock)
            errors += 1
            if errors >= MAX_ERRORS_PER_POLL:
                break
            continue
        seg = n
        for level, kind, data in anc:
            if level == socket.IPPROTO_UDP and kind == UDP_GRO:
                seg = int.from_bytes(data, sys.byteorder) or n
        if seg > mtu or flags & socket.MSG_TRUNC:
            device.rx_oversize += -(-n // seg) if seg else 1
            continue
        if seg == n:
            append(arena[off:off + n])
            append_src(src)
            off += n
            continue
        device.rx_gro_reads += 1
        end = off + n
        p = off
        while p < end:
            q = p + seg if p + seg < end else end
            if len(out) < budget:
                append(arena[p:q])
                append_src(src)
            else:
                device._pending.append(bytes(arena[p:q]))
                device._pending_from.append(src)
                device.rx_bytes -= q - p  # counted when delivered
            p = q
        off = end
    device.rx_bytes += off - start
    return off


def poll_recv(device: UdpDevice, budget: int) -> list[Any]:
    """Up to ``budget`` datagrams, the priority socket drained first."""
    return poll_recv_from(device, budget)[0]


def poll_recv_from(device: UdpDevice, budget: int) -> tuple[list[Any], list[Any]]:
    """Up to ``budget`` datagrams, the priority socket drained first, and the address of the
    socket each came from (``(host, port)``: a peer's priority and data sockets differ)."""
    out: list[Any] = []
    srcs: list[Any] = []
    if budget <= 0 or device.closed:
        return out, srcs
    batched = device._batch is not None
    # Read only the sockets epoll reports readable: a read of an empty socket costs a system
    # call (1.2 us through recvmmsg), twice per pass.  Right after a wait we know already;
    # otherwise one epoll_wait(0) (0.3 us) asks for both.  Epoll is level-triggered, so a
    # socket skipped here and filled meanwhile shows in the next answer.
    ready = device._ready
    device._ready = None
    if ready is None:
        ready = device._readiness(device._poller.poll(0))
    slot = off = 0
    if ready[0]:
        if batched:
            slot = _drain_mmsg(device, device._prio_sock, out, srcs, budget, 0)
        else:
            off = _drain(device, device._prio_sock, out, srcs, budget, 0)
    device.rx_priority += len(out)
    if not ready[1] and not device._pending:
        device.rx_datagrams += len(out)
        return out, srcs
    if device._pending:  # left over from a GRO read: they come before newer data
        pending = device._pending
        take = pending[:budget - len(out)]
        del pending[:len(take)]
        out.extend(take)
        srcs.extend(device._pending_from[:len(take)])
        del device._pending_from[:len(take)]
        device.rx_bytes += sum(map(len, take))
    if device._gro:
        _drain_gro(device, device._data_sock, out, srcs, budget, 0 if batched else off)
    elif batched:
        _drain_mmsg(device, device._data_sock, out, srcs, budget, slot)
    else:
        _drain(device, device._data_sock, out, srcs, budget, off)
    device.rx_datagrams += len(out)
    return out, srcs


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


class UdpDevice:
    """One UDP device: a priority socket and a data socket bound to one IP."""

    post_send = post_send
    post_send_batch = post_send_batch
    post_send_many = post_send_many
    poll_recv = poll_recv
    poll_recv_from = poll_recv_from
    wait = wait

    def __init__(self, opts: UdpOptions) -> None:
        if opts.recvmmsg == "on" and not _mmsg.available():
            raise ConfigError("udp option 'recvmmsg' is 'on' but libc has no recvmmsg; allowed "
                              "is one of auto, on, off")
        self.options = opts
        self.closed = False
        self._keep_heap = _heap.keep_heap() if opts.keep_heap else False
        family = opts.family
        self.family = family
        self._max_payload = MAX_PAYLOAD[family]
        socks = _bind_sockets(opts)
        try:
            if opts.recverr:  # ENOBUFS from a full qdisc becomes back-pressure, not silent loss
                level, opt = ((socket.IPPROTO_IPV6, IPV6_RECVERR) if family == socket.AF_INET6
                              else (socket.IPPROTO_IP, IP_RECVERR))
                for s in socks:
                    s.setsockopt(level, opt, 1)
            self.rcvbuf_granted = [_set_buffer(s, socket.SO_RCVBUF, SO_RCVBUFFORCE, opts.rcvbuf) for s in socks]
            self.sndbuf_granted = [_set_buffer(s, socket.SO_SNDBUF, SO_SNDBUFFORCE, opts.sndbuf) for s in socks]
            has_gso = gso_supported(socks[1])
            if opts.gso == "on" and not has_gso:
                raise ConfigError("udp option 'gso' is 'on' but this kernel has no UDP_SEGMENT "
                                  "(Linux >= 4.18 needed); allowed is one of auto, on, off")
            if opts.gro:
                try:
                    socks[1].setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
                except OSError as exc:
                    raise ConfigError(f"udp option 'gro' is on but this kernel refuses UDP_GRO "
                                      f"({exc.strerror}; Linux >= 5.0 needed); allowed is true "
                                      "or false") from None
        except BaseException:
            for s in socks:
                s.close()
            raise
        self._socks: tuple[socket.socket, socket.socket] = (socks[0], socks[1])
        self._prio_sock = socks[0]
        self._prio_fd = socks[0].fileno()
        self._data_fd = socks[1].fileno()
        self._ready: tuple[bool, bool] | None = None  # set by wait(), used once by poll_recv
        self._sendto = (socks[0].sendto, socks[1].sendto)
        self._data_sock = socks[1]
        self._gro = opts.gro
        self._pending: list[bytes] = []
        self._pending_from: list[Any] = []
        self._gso = has_gso and opts.gso != "off"
        self._gso_mode = opts.gso
        self._gso_failures = 0
        self._gso_cmsg: dict[int, list[tuple[int, int, bytes]]] = {}
        self.local_sockaddrs = tuple(s.getsockname() for s in socks)
        self.wildcard = _is_wildcard(opts.host)
        if opts.mtu:
            self.mtu, self.mtu_source = opts.mtu, "option mtu"
        else:  # a wildcard's sends leave by the advertised address's interface
            self.mtu, self.mtu_source = _mtu.detect(family, opts.advertise if self.wildcard else opts.host)
        self._mtus = [self.mtu, self.mtu]  # per channel; create_channel may lower them
        # A wildcard-bound device hears peers on every interface, loopback's 64 KiB datagrams
        # included: it takes whatever arrives (the buffers cost memory only where written)
        self._recv_mtu = self._max_payload if self.wildcard and not opts.mtu else self.mtu
        self._recv_size = self._recv_mtu + 1  # one byte more, to see (and drop) oversize datagrams
        arena_len = max(ARENA_BYTES, 8 * max(self._recv_size, GRO_BUFFER))
        self._arena = memoryview(lazy_buffer(arena_len))  # pages only where datagrams land
        self._arena_limit = arena_len - self._recv_size
        self._arena_gro_limit = arena_len - GRO_BUFFER
        use_mmsg = opts.recvmmsg == "on" or (opts.recvmmsg == "auto" and _mmsg.available())
        self._batch = _mmsg.RecvBatch(self._recv_size, family=family) if use_mmsg else None
        if self._batch is not None:  # unpacked in one go per read (fewer lookups per datagram)
            b = self._batch
            self._mmsg_parts = (b.recv, b.view, b._lens, b._stride, b._len_at, b.slot_size, b.slots,
                                b.sources)
        scope = self.local_sockaddrs[0][3] if family == socket.AF_INET6 else 0
        self._address = _address.encode(family, opts.advertise, self.local_sockaddrs[0][1],
                                         self.local_sockaddrs[1][1], scope)
        self._busy_poll = opts.busy_poll
        self._reach: dict[tuple[str, int], str | None] = {}  # resolve's answers, per (ip, scope)
        self._warned: set[Any] = set()  # destinations whose unreachability was logged
        # wake(): another thread makes a blocked wait return (an eventfd, or a pipe)
        if hasattr(os, "eventfd"):
            self._wake_r = self._wake_w = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        else:  # pragma: no cover - non-Linux
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_r, False)
            os.set_blocking(self._wake_w, False)
        fds = [sock.fileno() for sock in socks] + [self._wake_r]
        self._select_fds = fds if max(fds) < SELECT_FD_LIMIT else None
        if hasattr(select, "epoll"):
            self._poller: Any = select.epoll()
            for fd in fds:
                self._poller.register(fd, select.EPOLLIN)
            self._poll_scale = 1.0  # epoll takes seconds
        else:  # pragma: no cover - non-Linux
            self._poller = select.poll()
            for fd in fds:
                self._poller.register(fd, select.POLLIN)
            self._poll_scale = 1000.0  # poll takes milliseconds
        self.tx_datagrams = self.tx_bytes = self.tx_pushbacks = self.tx_errors = 0
        self.tx_gso_sends = self.gso_fallbacks = 0
        self.rx_datagrams = self.rx_bytes = self.rx_priority = self.rx_errors = self.rx_oversize = 0
        self.rx_gro_reads = self.icmp_errors = 0
        self.port_unreachable: list[Any] = []  # destinations ICMP said closed (path_errors takes them)
        self.tx_unreachable = 0
        self.last_send_error = ""

    # -- errors on the send path (rare: kept out of the per-datagram functions) -----------

    def _send_error(self, exc: OSError, sock: socket.socket, data: Any, addr: Any) -> bool:
        """The send of ``data`` failed with ``exc``: True if it was sent after all or is to be
        counted as lost, False if the queue is full (the caller posts it again later)."""
        if self.closed:
            raise OSError(errno.EBADF, "udp: device is closed") from exc
        if exc.errno not in _PUSHBACK:
            # With IP_RECVERR an ICMP error (a peer's closed port, a smaller path MTU) is
            # reported once, by whichever call comes next: clear it and try again, once.
            self._drain_errqueue(sock)
            try:
                _send1(sock, data, addr)
                self.tx_datagrams += 1
                self.tx_bytes += _nbytes(data)
                return True
            except OSError as again:
                exc = again
        if exc.errno in _PUSHBACK:
            self.tx_pushbacks += 1
            return False
        if exc.errno == errno.EMSGSIZE:
            raise OSError(errno.EMSGSIZE, f"udp: the kernel refused a {_nbytes(data)}-byte datagram "
                          f"to {addr} as too large for the path; lower the 'mtu' option") from exc
        # Unreachable network, a firewall's EPERM: the datagram is lost as on a wire, and the
        # core's retransmission and peer timeout deal with it.  connect() refused peers
        # unreachable from the start; a route lost since is said once per destination.
        self.tx_errors += 1
        if exc.errno in _UNREACHABLE:
            self._unreachable(addr, exc)
        return True

    def _unreachable(self, addr: Any, exc: OSError) -> None:
        self.tx_unreachable += 1
        self.last_send_error = f"udp: cannot send from {self._bound_text()} to {addr[0]} port {addr[1]}: {exc.strerror}"
        if addr not in self._warned and len(self._warned) < REACH_CACHE:
            self._warned.add(addr)
            log.warning("%s (no route from the bound address; datagrams to it are lost until "
                        "the route returns, and the peer fails after peer_timeout)", self.last_send_error)

    def _drain_errqueue(self, sock: Any) -> None:
        """Read and count the socket's queued ICMP errors (IP_RECVERR): left there, they take
        receive-buffer space and keep epoll reporting EPOLLERR."""
        for _ in range(ERRQUEUE_BATCH):
            try:
                _data, anc, _flags, dest = sock.recvmsg(ERRQUEUE_BUFFER, ERRQUEUE_BUFFER, MSG_ERRQUEUE)
            except (BlockingIOError, AttributeError):
                return
            except OSError:
                continue  # a pending error reported by this call: it is cleared now
            self.icmp_errors += 1
            # sock_extended_err.ee_errno first: a port unreachable is ECONNREFUSED
            if any(len(d) >= 4 and int.from_bytes(d[:4], sys.byteorder) == errno.ECONNREFUSED
                   for _l, _t, d in anc) and len(self.port_unreachable) < ERRQUEUE_BATCH:
                self.port_unreachable.append(dest)

    def _gso_error(self, exc: OSError, sock: socket.socket, iov: Sequence[Any], cmsg: Any,
                   addr: Any, count: int, size: int) -> int | None:
        """A GSO send of ``count`` datagrams of ``size`` bytes (the buffers ``iov``) failed
        with ``exc``.  Returns the bytes sent after all, 0 if the run is lost (as on a wire),
        -1 if the caller should send it datagram by datagram, None if the send queue is
        full."""
        for attempt in range(2):
            if exc.errno in _PUSHBACK:
                self.tx_pushbacks += 1
                return None
            if exc.errno in _GSO_UNSUPPORTED and self._gso_mode == "auto":
                self.gso_fallbacks += 1
                self._gso_failures += 1
                if self._gso_failures >= _GSO_FAILURES_BEFORE_OFF:
                    self._gso = False
                return -1
            if exc.errno == errno.EMSGSIZE or exc.errno in _GSO_UNSUPPORTED:
                raise OSError(exc.errno, f"udp: GSO send of {count} datagrams of "
                              f"{size} bytes to {addr} failed: {exc.strerror} (try "
                              "gso=off or a smaller mtu)") from exc
            if self.closed:
                raise OSError(errno.EBADF, "udp: device is closed") from exc
            if attempt == 0:  # perhaps an ICMP error reported by this call: clear it, retry
                self._drain_errqueue(sock)
                try:
                    return int(sock.sendmsg(iov, cmsg, 0, addr))
                except OSError as again:
                    exc = again
        self.tx_errors += count  # lost as on a wire: the core retransmits
        if exc.errno in _UNREACHABLE:
            self._unreachable(addr, exc)
        return 0

    # -- the rest of the Device interface ---------------------------------------------

    def capabilities(self) -> Capabilities:
        return Capabilities(
            mtu=self.mtu,
            max_inline=0,
            send_queue_depth=max(1, self.sndbuf_granted[1] // self.mtu),
            recv_queue_depth=max(1, self.rcvbuf_granted[1] // self.mtu),
            integrity=False,
            virtual_time=False,
            reports_source=True,
            # post_send and post_send_many take a datagram as a list of buffers (sendmsg
            # gathers them), so the engine need not copy a bulk payload into its segment
            gather_sends=True,
            # sendto completes synchronously: poll_completions has nothing to report
            sends_complete_at_once=True,
            # wait() returns at once when a socket is readable, so the transport may wait
            # before it reads (a read of an empty socket is a wasted system call)
            wait_wakes_on_input=True,
        )

    def create_channel(self, channel: Channel, mtu: int) -> ChannelInfo:
        channel = Channel(channel)
        granted = self.mtu if mtu <= 0 else min(mtu, self.mtu)
        self._mtus[channel] = granted
        caps = self.capabilities()
        return ChannelInfo(channel, granted, caps.send_queue_depth, caps.recv_queue_depth)

    def poll_completions(self) -> int:
        return 0  # sendto completes synchronously

    def local_address(self) -> bytes:
        return self._address

    def resolve(self, address: bytes) -> _address.Handle:
        """The destination handle of a peer's address.  An IPv4 address on a dual-stack
        (``[::]``-bound) device is reached as ``::ffff:a.b.c.d``, and a mapped one on an
        IPv4 device as ``a.b.c.d``.  Raises :class:`~btlcore.errors.AddressUnreachable` (a
        ValueError) naming both addresses when the kernel has no way from the bound address
        to the peer's (a loopback-bound device toward another host): at ``connect()``, not
        as a silent timeout."""
        family, ip, pport, dport, scope = _address.decode(address)
        if family != self.family:
            ip = self._same_family(address, family, ip)
            family = self.family
        reason = self._reach.get((ip, scope), False)
        if reason is False:
            if len(self._reach) >= REACH_CACHE:
                self._reach.clear()
            with _route.namespace_of(self._prio_sock) as inside:
                reason = _route.unreachable(family, self.options.host, ip, scope) if inside else None
            self._reach[(ip, scope)] = reason
        if reason is not None:
            raise AddressUnreachable(f"udp: cannot reach {_address.describe(address)} from "
                                     f"{self._bound_text()} ({reason}); bind a wildcard "
                                     f"(option bind=0.0.0.0:PORT or [::]:PORT) or an address on "
                                     f"the peer's network")
        return _address.to_handle(family, ip, pport, dport, scope)

    def _same_family(self, address: bytes, family: int, ip: str) -> str:
        """``ip`` (of ``family``, not ours) as our family can send to it, or ValueError."""
        if self.family == socket.AF_INET6 and self.wildcard:
            return f"::ffff:{ip}"  # IPv4 through the dual-stack socket
        mapped = ipaddress.ip_address(ip)
        if self.family == socket.AF_INET and isinstance(mapped, ipaddress.IPv6Address) \
                and mapped.ipv4_mapped is not None:
            return str(mapped.ipv4_mapped)
        mine = "IPv6" if self.family == socket.AF_INET6 else "IPv4"
        theirs = "IPv6" if family == socket.AF_INET6 else "IPv4"
        raise ValueError(f"udp address {_address.describe(address)} is {theirs} but this "
                         f"device is bound to {mine} address {self.options.host}")

    def _bound_text(self) -> str:
        host, port = self.local_sockaddrs[0][0], self.local_sockaddrs[0][1]
        return f"[{host}]:{port}" if self.family == socket.AF_INET6 else f"{host}:{port}"

    def clock(self) -> Any:
        return time.monotonic

    def _readiness(self, events: Any) -> tuple[bool, bool]:
        """(priority readable, data readable) from epoll's answer; queued ICMP errors
        (EPOLLERR) are read here, or epoll would report the socket for ever."""
        prio = data = False
        prio_fd = self._prio_fd
        for fd, mask in events:
            if fd == prio_fd:
                prio = True
            elif fd == self._wake_r:
                self._drain_wake()
                continue
            else:
                data = True
            if mask & POLL_ERR:
                self._drain_errqueue(self._socks[0] if fd == prio_fd else self._socks[1])
        return prio, data

    def wake(self) -> None:
        """Make a wait blocked in another thread return now (thread-safe: one write to the
        wake descriptor; a full pipe or a closed device is ignored)."""
        if self.closed:
            return
        try:
            os.write(self._wake_w, b"\x01\0\0\0\0\0\0\0")
        except (BlockingIOError, OSError):
            pass

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                if self._wake_r == self._wake_w:  # an eventfd: one read resets it
                    return
        except (BlockingIOError, OSError):
            pass

    def fds(self) -> list[int]:
        return [] if self.closed else [s.fileno() for s in self._socks]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._poller.close()
        for s in self._socks:
            s.close()
        for fd in {self._wake_r, self._wake_w}:
            os.close(fd)

    def stats(self) -> dict[str, Any]:
        """Counters since open, and what the kernel granted."""
        return {
            "tx_datagrams": self.tx_datagrams,
            "tx_bytes": self.tx_bytes,
            "tx_pushbacks": self.tx_pushbacks,
            "tx_errors": self.tx_errors,
            "tx_gso_sends": self.tx_gso_sends,
            "tx_unreachable": self.tx_unreachable,
            "gso_fallbacks": self.gso_fallbacks,
            "rx_datagrams": self.rx_datagrams,
            "rx_bytes": self.rx_bytes,
            "rx_priority": self.rx_priority,
            "rx_errors": self.rx_errors,
            "rx_oversize": self.rx_oversize,
            "rx_gro_reads": self.rx_gro_reads,
            "icmp_errors": self.icmp_errors,
            "mtu": self.mtu,
            "mtu_source": self.mtu_source,
            "gso": self._gso,
            "gro": self._gro,
            "recverr": self.options.recverr,
            "recvmmsg": self._batch is not None,
            "keep_heap": self._keep_heap,
            "busy_poll": self._busy_poll,
            "rcvbuf_requested": self.options.rcvbuf,
            "rcvbuf_granted": self.rcvbuf_granted[1],
            "sndbuf_requested": self.options.sndbuf,
            "sndbuf_granted": self.sndbuf_granted[1],
            "address": _address.describe(self._address),
        }

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"mtu={self.mtu}"
        return f"<UdpDevice {_address.describe(self._address)} {state}>"
