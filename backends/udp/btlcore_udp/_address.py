"""The UDP device's address: the bytes a peer passes to ``resolve``.

Version 1, big-endian, 12 bytes for IPv4 and 28 for IPv6::

    off size field
     0   1   magic           0x55 ('U'): tells a UDP address from another backend's
     1   1   version         ADDRESS_VERSION (1)
     2   1   family          4 or 6
     3   1   reserved        0
     4   2   priority_port   the priority channel's UDP port
     6   2   data_port       the data channel's UDP port
     8   4   ip              IPv4 address                         (family 4)
     8  16   ip              IPv6 address                         (family 6)
    24   4   scope_id        IPv6 scope (interface index; 0 unless link-local)

The priority channel's port comes first, and a device binds its data socket on that port
+ 1 (option ``paired``, the default, also for ephemeral ports), so the text form of an
address needs one port: ``HOST:PORT`` (``[HOST]:PORT`` for IPv6), where PORT is the priority
socket's (:func:`to_text`; ``btl serve`` prints it, ``btl transfer --peer`` takes it).  The
bytes are unchanged since version 1 and still carry both ports, so a device whose data port
was set apart (option ``data_port``) is written ``udp://HOST:PRIORITY+DATA``.

``resolve`` turns it into a destination handle: a tuple of socket addresses indexed by
:class:`~btlcore.device.Channel` (``handle[Channel.DATA]`` is what ``sendto`` takes).
"""

from __future__ import annotations

import socket
import struct

MAGIC = 0x55
ADDRESS_VERSION = 1
_HEAD = struct.Struct("!BBBBHH")
_SCOPE = struct.Struct("!I")
_LEN = {4: _HEAD.size + 4, 6: _HEAD.size + 16 + _SCOPE.size}
_FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}
_TAG: dict[int, int] = {socket.AF_INET: 4, socket.AF_INET6: 6}

#: what ``sendto`` takes: (ip, port) for IPv4, (ip, port, flowinfo, scope_id) for IPv6
SockAddr = tuple[str, int] | tuple[str, int, int, int]
Handle = tuple[SockAddr, SockAddr]  # (priority sockaddr, data sockaddr)


def encode(family: int, ip: str, priority_port: int, data_port: int, scope_id: int = 0) -> bytes:
    tag = _TAG[family]
    out = _HEAD.pack(MAGIC, ADDRESS_VERSION, tag, 0, priority_port, data_port)
    out += socket.inet_pton(family, ip.split("%")[0])
    if tag == 6:
        out += _SCOPE.pack(scope_id)
    return out


def decode(address: bytes | bytearray | memoryview) -> tuple[int, str, int, int, int]:
    """-> (family, ip, priority_port, data_port, scope_id).  Raises ValueError saying what is
    wrong with a malformed address."""
    try:
        blob = bytes(address)
    except TypeError:
        raise ValueError(f"udp address must be bytes, not {type(address).__name__}") from None
    if len(blob) < _HEAD.size:
        raise ValueError(f"udp address too short: {len(blob)} bytes, at least {_HEAD.size} needed "
                         f"(got {blob.hex()})")
    magic, version, tag, _reserved, pport, dport = _HEAD.unpack_from(blob)
    if magic != MAGIC:
        raise ValueError(f"not a udp address: first byte {magic:#04x}, expected {MAGIC:#04x} "
                         "(an address from another backend?)")
    if version != ADDRESS_VERSION:
        raise ValueError(f"udp address version {version} is not supported (this device speaks "
                         f"version {ADDRESS_VERSION})")
    if tag not in _LEN:
        raise ValueError(f"udp address family {tag} is neither 4 nor 6")
    if len(blob) != _LEN[tag]:
        raise ValueError(f"udp IPv{tag} address must be {_LEN[tag]} bytes, got {len(blob)}")
    if pport == 0 or dport == 0:
        raise ValueError(f"udp address has port 0 (priority {pport}, data {dport})")
    family = _FAMILY[tag]
    if tag == 4:
        ip = socket.inet_ntop(family, blob[8:12])
        scope = 0
    else:
        ip = socket.inet_ntop(family, blob[8:24])
        (scope,) = _SCOPE.unpack_from(blob, 24)
    return family, ip, pport, dport, scope


def to_handle(family: int, ip: str, priority_port: int, data_port: int, scope_id: int = 0) -> Handle:
    if family == socket.AF_INET6:
        return ((ip, priority_port, 0, scope_id), (ip, data_port, 0, scope_id))
    return ((ip, priority_port), (ip, data_port))


def describe(address: bytes) -> str:
    """``udp://[::1]:40001+40002`` style text, for logs and errors."""
    family, ip, pport, dport, scope = decode(address)
    host = f"[{ip}{'%' + str(scope) if scope else ''}]" if family == socket.AF_INET6 else ip
    return f"udp://{host}:{pport}+{dport}"


def host_text(family: int, ip: str, scope: int = 0) -> str:
    """``10.0.0.1``, ``[fd00::1]``, ``[fe80::1%2]``; an IPv4-mapped IPv6 address as IPv4."""
    if family == socket.AF_INET6 and ip.lower().startswith("::ffff:") and "." in ip:
        return ip[7:]
    return f"[{ip}{'%' + str(scope) if scope else ''}]" if family == socket.AF_INET6 else ip


def to_text(address: bytes) -> str:
    """``HOST:PORT`` when the data port is the priority port + 1, else ``describe``'s form."""
    family, ip, pport, dport, scope = decode(address)
    if dport != pport + 1:
        return describe(address)
    return f"{host_text(family, ip, scope)}:{pport}"
