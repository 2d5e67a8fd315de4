"""The receive path: ``poll_recv`` and ``poll_recv_from`` drain the priority socket (at most
three quarters of the budget while the data socket is readable: a flooded priority socket
never starves the data one), then the data socket, each the device's way (``_drain_mmsg``: recvmmsg into fixed slots;
``_drain``: a recv_into loop into one arena; ``_drain_gro``: UDP GRO reads cut at the
kernel's segment size).  Each datagram is a memoryview valid until the next poll.  After a
busy wait that saw one socket turn readable while it spun (``device._lone``: a round trip's
request or reply), that socket is read once with ``recvfrom`` instead (``_read_lone``), its
datagram a ``bytes``; a busy wait that reads the sockets itself (``_wait.spin``) hands over
the datagram it read (``device._caught``), and poll_recv takes it first.

Plain functions taking the device first, which the core calls directly (the hooks name
them with ``btlcore.device.direct``); the loops are per datagram, so everything in them
stays inline.  Compiled with mypyc where the build can (``btlcore/_native.py``), on the
device's fields as a native class declares them (``_state``: typed, at fixed offsets)."""

from __future__ import annotations

import socket
import sys
from typing import Any

from ._errors import recv_failed
from ._mmsg import scoped
from ._sockets import UDP_GRO
from ._state import UdpState
from ._wait import look, readiness

GRO_BUFFER = 65536  # a GRO read may return up to 64 KiB of glued datagrams
GRO_CMSG_SPACE = socket.CMSG_SPACE(4)
ARENA_BYTES = 4 << 20
MAX_ERRORS_PER_POLL = 8


def _drain(device: UdpState, sock: socket.socket, out: list[Any], srcs: list[Any], budget: int,
           off: int) -> int:
    """``recvfrom_into`` datagrams back to back into the arena from ``off``, their senders
    into ``srcs``; return the new offset.  Stops when the socket is empty, ``out`` holds
    ``budget``, or the arena is full."""
    arena = device._arena
    limit = device._arena_limit
    size = device._recv_size
    mtu = device._recv_mtu
    recvfrom_into = sock.recvfrom_into
    errors = 0
    start = off
    while len(out) < budget and off <= limit:
        try:
            n, src = recvfrom_into(arena[off:], size)
        except BlockingIOError:
            break
        except OSError:  # an ICMP error reported by this call (IP_RECVERR)
            errors = recv_failed(device, sock, errors)
            if errors >= MAX_ERRORS_PER_POLL:
                break
            continue
        if n > mtu:
            device.rx_oversize += 1
            continue
        out.append(arena[off:off + n])
        srcs.append(src)
        off += n
    device.rx_bytes += off - start
    return off


def _drain_mmsg(device: UdpState, sock: socket.socket, out: list[Any], srcs: list[Any],
                budget: int, slot: int) -> int:
    """Like :func:`_drain` with ``recvmmsg``: many datagrams per system call, each in its own
    slot of ``device._batch`` from ``slot`` on; return the next free slot.  The senders are
    read per call, in bulk (``RecvBatch.sources``)."""
    recv, view, lens, stride, at, size, slots, sources = device._mmsg_parts
    fd = sock.fileno()
    mtu = device._recv_mtu
    nbytes = 0
    errors = 0
    while len(out) < budget and slot < slots:
        want = min(budget - len(out), slots - slot)
        try:
            k: int = recv(fd, slot, want)
        except OSError:  # an ICMP error reported by this call (IP_RECVERR)
            errors = recv_failed(device, sock, errors)
            if errors >= MAX_ERRORS_PER_POLL:
                break
            continue
        had = len(out)
        for i in range(slot, slot + k):
            n: int = lens[i * stride + at]
            if n > mtu:
                device.rx_oversize += 1
                continue
            begin = i * size
            out.append(view[begin:begin + n])
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


def _drain_gro(device: UdpState, sock: socket.socket, out: list[Any], srcs: list[Any], budget: int,
               off: int) -> int:
    """Like :func:`_drain`, for a socket with UDP_GRO on: one ``recvmsg_into`` may return many
    datagrams glued together, with their size in a control message.  Those beyond the budget
    are copied to ``device._pending`` (their sender to ``device._pending_from``) and
    delivered first by the next poll."""
    arena = device._arena
    limit = device._arena_gro_limit
    mtu = device._recv_mtu
    recvmsg_into = sock.recvmsg_into
    errors = 0
    start = off
    while len(out) < budget and off <= limit:
        try:
            n, anc, flags, src = recvmsg_into([arena[off:off + GRO_BUFFER]], GRO_CMSG_SPACE)
        except BlockingIOError:
            break
        except OSError:  # an ICMP error reported by this call (IP_RECVERR)
            errors = recv_failed(device, sock, errors)
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
            out.append(arena[off:off + n])
            srcs.append(src)
            off += n
            continue
        device.rx_gro_reads += 1
        end = off + n
        p = off
        while p < end:
            q = p + seg if p + seg < end else end
            if len(out) < budget:
                out.append(arena[p:q])
                srcs.append(src)
            else:
                device._pending.append(bytes(arena[p:q]))
                device._pending_from.append(src)
                device.rx_bytes -= q - p  # counted when delivered
            p = q
        off = end
    device.rx_bytes += off - start
    return off


def _read_lone(device: UdpState, channel: int, out: list[Any], srcs: list[Any]) -> None:
    """One datagram of the socket a busy wait saw turn readable (``device._lone``): one
    ``recvfrom``, no more.  A round trip's request or reply comes alone, and this is the
    cheapest read of one (recvmmsg through ctypes costs a microsecond more with its senders,
    and a second read would only say the socket is empty); as ``bytes``, not a view of the
    arena, which is cheaper for the engine to take a small payload from (a bytes slice, where
    a view needs a sub-view and a copy).  Anything else queued stays readable: the next wait
    sees it at once, and its read is batched."""
    try:
        got: tuple[bytes, Any] = device._recv_from[channel](device._recv_size)
    except BlockingIOError:
        return
    except OSError:  # an ICMP error reported by this call (IP_RECVERR)
        recv_failed(device, device._socks[channel], 0)
        return
    _take_lone(device, channel, got, out, srcs)


def _take_lone(device: UdpState, channel: int, got: tuple[bytes, Any], out: list[Any], srcs: list[Any]) -> None:
    """A datagram read alone by ``recvfrom`` (``_read_lone``'s, or the one a busy wait's spin
    caught), checked and counted, into ``out`` and ``srcs``."""
    data, src = got
    n = len(data)
    if n > device._recv_mtu:
        device.rx_oversize += 1
        return
    if len(src) == 4 and src[3] and device._batch is not None:
        src = scoped(src)  # (a scoped IPv6 sender, named as the batched reads name it)
    out.append(data)
    srcs.append(src)
    device.rx_bytes += n
    device.rx_datagrams += 1
    if channel == 0:
        device.rx_priority += 1


def poll_recv(device: UdpState, budget: int) -> list[Any]:
    """Up to ``budget`` datagrams, the priority socket drained first."""
    return poll_recv_from(device, budget)[0]


def poll_recv_from(device: UdpState, budget: int) -> tuple[list[Any], list[Any]]:
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
    pre = 0  # datagrams in out already counted (a spin's)
    if device._caught is not None:  # what a busy wait's spin read (see _wait.spin)
        got, device._caught = device._caught, None
        _take_lone(device, device._hot, got, out, srcs)
        backlog = False
        if not device._lone and len(out) < budget:
            # there at the spin's first read: a reply that came early, or a backlog; one more
            # read of that socket tells (an empty recvfrom costs less than two empty batched
            # reads), and a backlog is read on batched, both sockets (neither starves)
            _read_lone(device, device._hot, out, srcs)
            backlog = len(out) > 1
        device._lone = False
        if not backlog or len(out) >= budget:
            return out, srcs
        ready, pre = (True, True), len(out)
    elif ready is None:
        # no wait before: a spinning device's sockets are not in the poller, so read both
        ready = (True, True) if device._spin_reads else readiness(device, look(device))
    elif device._lone:  # a busy wait saw one socket turn readable: a lone datagram, most likely
        device._lone = False
        if ready[0] != ready[1] and not device._pending and not device._gro:
            _read_lone(device, 0 if ready[0] else 1, out, srcs)
            return out, srcs
    slot = off = 0
    if ready[0]:
        # first, but never the whole budget while data waits: a flood on the priority socket
        # must not starve the data socket (the live peer's data and its retransmissions
        # would all be dropped in the kernel, and the peer declared dead)
        first = budget - (budget >> 2) if ready[1] or device._pending else budget
        if batched:
            slot = _drain_mmsg(device, device._prio_sock, out, srcs, first, 0)
        else:
            off = _drain(device, device._prio_sock, out, srcs, first, 0)
    device.rx_priority += len(out) - pre
    if not ready[1] and not device._pending:
        device.rx_datagrams += len(out) - pre
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
    device.rx_datagrams += len(out) - pre
    return out, srcs


def path_errors(device: UdpState) -> list[Any]:
    """The peers' sockets ICMP said closed since the last call (read with ``IP_RECVERR``):
    asked by the progress pass every millisecond, so compiled and called directly, as the
    receive path is."""
    found = device.port_unreachable
    if not found:
        return found
    device.port_unreachable = []
    return found
