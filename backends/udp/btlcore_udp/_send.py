"""The send paths: ``post_send`` (one datagram), ``post_send_batch`` (runs of equal-size
datagrams as one UDP GSO ``sendmsg``) and ``post_send_many`` (a driver's whole flush).

Plain functions taking the device first, which the core calls directly (the hooks name
them with ``btlcore.device.direct``: no wrapper per datagram); compiled with mypyc where
the build can (``btlcore/_native.py``), on the device's fields as a native class declares
them (``_state``: read at fixed offsets, typed).  A channel is a plain ``int`` here (the
engine's numbering; :class:`~btlcore.device.Channel` is one).  Their rare failures go to
``_errors``."""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from typing import Any

from btlcore.device import Channel

from ._errors import gso_error, send_error
from ._sockets import UDP_SEGMENT
from ._state import UdpState, nbytes

GSO_MAX_SEGMENTS = 64  # UDP_MAX_SEGMENTS in kernels before 6.9 (128 since); stay safe


def post_send(device: UdpState, channel: int, dest: Any, data: Any) -> bool:
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
        return send_error(device, exc, device._socks[channel], data, dest[channel])
    device.tx_datagrams += 1
    device.tx_bytes += n
    return True


def _post_gathered(device: UdpState, channel: int, dest: Any, data: list[Any]) -> bool:
    n = nbytes(data)
    if n > device._mtus[channel]:
        raise ValueError(f"udp: datagram of {n} bytes exceeds the {Channel(channel).name} "
                         f"channel MTU of {device._mtus[channel]} bytes")
    sock = device._socks[channel]
    try:
        sock.sendmsg(data, (), 0, dest[channel])
    except OSError as exc:
        return send_error(device, exc, sock, data, dest[channel])
    device.tx_datagrams += 1
    device.tx_bytes += n
    return True


def post_send_batch(device: UdpState, channel: int, dest: Any, datagrams: Sequence[Any]) -> int:
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
    sizes = [nbytes(d) for d in datagrams]  # (compiled: direct calls, no map)
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
                if type(data) is list:  # (_errors._send1, inlined: once per datagram at 65000 B)
                    sock.sendmsg(data, (), 0, addr)
                else:
                    sock.sendto(data, addr)
            except OSError as exc:
                if not send_error(device, exc, sock, datagrams[i], addr):
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
            sent_bytes: int = sock.sendmsg(iov, cmsg, 0, addr)
        except OSError as exc:
            sent = gso_error(device, exc, sock, iov, cmsg, addr, j - i, size)
            if sent is None:  # queue full
                return i
            if sent < 0:  # GSO refused here: this run again, datagram by datagram
                plain_until = j
                if not device._gso:  # ... and, turned off now, for the rest of the batch too
                    gso_max = 0
                continue
            sent_bytes = sent
        if sent_bytes:
            device.tx_datagrams += j - i
            device.tx_bytes += sent_bytes
            device.tx_gso_sends += 1
        i = j
    return total


def post_send_many(device: UdpState, items: Sequence[tuple[Any, Any, Any]]) -> int:
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
