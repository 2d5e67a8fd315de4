"""The verbs device's address: the bytes a peer passes to ``resolve``.

Version 1, big-endian, 36 bytes::

    off size field
     0   1   magic           0x56 ('V'): tells a verbs address from another backend's
     1   1   version         ADDRESS_VERSION (1)
     2   2   lid             the port's LID (0 on RoCE)
     4  16   gid             the GID the device sends from (raw; ::ffff:a.b.c.d on RoCE v2/IPv4)
    20   4   qkey            the QKey both QPs accept
    24   4   priority_qpn    the priority channel's UD QP number (24 bits)
    28   4   data_qpn        the data channel's UD QP number (24 bits)
    32   4   max_datagram    the largest datagram this device accepts (its port's active MTU)

``resolve`` turns it into a :class:`Destination`: an address handle (built once per address
and cached) and the two QP numbers, indexed by :class:`~btlcore.device.Channel`.
"""

from __future__ import annotations

import ipaddress
import struct

import attrs

MAGIC = 0x56
ADDRESS_VERSION = 1
_FORMAT = struct.Struct("!BBH16sIIII")
LENGTH = _FORMAT.size  # 36


@attrs.define(slots=True, frozen=True)
class VerbsAddress:
    lid: int
    gid: bytes
    qkey: int
    priority_qpn: int
    data_qpn: int
    max_datagram: int

    def encode(self) -> bytes:
        return _FORMAT.pack(MAGIC, ADDRESS_VERSION, self.lid, self.gid, self.qkey,
                            self.priority_qpn, self.data_qpn, self.max_datagram)

    @property
    def gid_text(self) -> str:
        """The GID as an IPv6 address (``::ffff:127.0.0.1``)."""
        return gid_str(self.gid)

    def __str__(self) -> str:
        return (f"verbs gid {self.gid_text} lid {self.lid} qpn {self.priority_qpn}/{self.data_qpn} "
                f"qkey {self.qkey:#x} mtu {self.max_datagram}")


def gid_str(raw: bytes) -> str:
    """A raw GID as text: an IPv6 address, IPv4-mapped ones as ``::ffff:a.b.c.d``."""
    ip = ipaddress.IPv6Address(bytes(raw))
    return f"::ffff:{ip.ipv4_mapped}" if ip.ipv4_mapped is not None else str(ip)


def decode(address: bytes | bytearray | memoryview) -> VerbsAddress:
    """Parse an address; raise ``ValueError`` saying what is wrong with a malformed one."""
    try:
        blob = bytes(address)
    except TypeError:
        raise ValueError(f"verbs address must be bytes, not {type(address).__name__}") from None
    if len(blob) < 2 or blob[0] != MAGIC:
        first = f"{blob[0]:#04x}" if blob else "nothing"
        raise ValueError(f"not a verbs address: first byte {first}, expected {MAGIC:#04x} "
                         "(an address from another backend?)")
    if blob[1] != ADDRESS_VERSION:
        raise ValueError(f"verbs address version {blob[1]} is not supported (this device speaks "
                         f"version {ADDRESS_VERSION})")
    if len(blob) != LENGTH:
        raise ValueError(f"verbs address has {len(blob)} bytes, expected {LENGTH}")
    _m, _v, lid, gid, qkey, pqpn, dqpn, maxdg = _FORMAT.unpack(blob)
    for name, qpn in (("priority", pqpn), ("data", dqpn)):
        if not 0 < qpn < 1 << 24:
            raise ValueError(f"verbs address: {name} QP number {qpn} is not a 24-bit QPN")
    if gid == bytes(16):
        raise ValueError("verbs address: the GID is all zeros")
    if maxdg < 64:
        raise ValueError(f"verbs address: max_datagram {maxdg} is too small")
    return VerbsAddress(lid, gid, qkey, pqpn, dqpn, maxdg)


TEXT_FORM = "verbs:[GID]:PRIORITY_QPN+DATA_QPN:QKEY:LID:MTU"


def to_text(address: bytes) -> str:
    """The address as people copy it (``Transport.address_text``):
    ``verbs:[::ffff:10.0.0.1]:17+18:0x11111111:0:4096``, every field of the bytes in order."""
    a = decode(address)
    return f"verbs:[{a.gid_text}]:{a.priority_qpn}+{a.data_qpn}:{a.qkey:#x}:{a.lid}:{a.max_datagram}"


def from_text(text: str) -> bytes:
    """:func:`to_text`'s form back to bytes; ValueError names the form."""
    body = text.strip().removeprefix("verbs:")
    try:
        gid_part, rest = body[1:].split("]:", 1) if body.startswith("[") else ("", "")
        qpns, qkey, lid, mtu = rest.split(":")
        pqpn, dqpn = qpns.split("+")
        gid = ipaddress.IPv6Address(gid_part).packed
        out = VerbsAddress(int(lid), gid, int(qkey, 0), int(pqpn), int(dqpn), int(mtu)).encode()
    except (ValueError, struct.error):
        raise ValueError(f"expected a verbs address as {TEXT_FORM} or hex, got {text!r}") from None
    decode(out)
    return out
