"""A pcapng writer for the fabric: raw bytes, built with struct, no scapy per frame.

What the file holds:

* Interface 0, ``sim-delivered``: every frame a link delivered to a receive queue, stamped
  with the virtual time it landed.  A duplicate or corrupted copy carries a comment
  (``duplicate``, ``corrupted bit N``).
* Interface 1, ``sim-dropped``: every frame a link lost, stamped with the virtual time of
  the loss, with the comment ``dropped: <cause> (<src>-><dst>)``; the causes are those of
  :data:`btlcore_sim.links.DROP_CAUSES`.

Each frame is wrapped as Ethernet / IPv4 / UDP (both ports :data:`btlcore.wire.PCAP_UDP_PORT`,
UDP checksum 0 as IPv4 allows, a valid IPv4 header checksum), from the sending NIC's
address (its MAC; IPv4 10.0.hi.lo from the node id) to the receiver's, so Wireshark and
tshark (with ``btl wireshark``'s dissector) and scapy (``import btlcore_sim.scapy``) dissect
it down to btlcore; ``btl plot`` draws it.
Timestamps have nanosecond resolution (``if_tsresol`` 9).  Nothing in the file depends on
the wall clock, so a seeded run writes the same bytes every time.
"""

from __future__ import annotations

import os
import struct
from typing import IO, Any

from btlcore.protocol import wire

LINKTYPE_ETHERNET = 1
IFACE_DELIVERED = 0
IFACE_DROPPED = 1
IFACE_NAMES = ("sim-delivered", "sim-dropped")

_SHB = 0x0A0D0D0A
_IDB = 0x00000001
_EPB = 0x00000006
_BOM = 0x1A2B3C4D
_EPB_HEAD = struct.Struct("<IIIIIII")  # type, length, iface, ts high, ts low, caplen, len
_U32 = struct.Struct("<I")
_OPT = struct.Struct("<HH")
_IP_UDP = struct.Struct("!BBHHHBBH4s4sHHHH")
_ETHERTYPE_IPV4 = b"\x08\x00"
_L2L4_LEN = 14 + 20 + 8


def _option(code: int, value: bytes) -> bytes:
    return _OPT.pack(code, len(value)) + value + b"\x00" * (-len(value) % 4)


def _block(kind: int, body: bytes) -> bytes:
    length = 12 + len(body)
    return _U32.pack(kind) + _U32.pack(length) + body + _U32.pack(length)


def node_ip(node_id: int) -> bytes:
    return bytes((10, 0, node_id >> 8, node_id & 0xFF))


def node_mac(node_id: int) -> bytes:
    return b"\x02\x00\x00\x00" + node_id.to_bytes(2, "big")


class PcapWriter:
    """Append frames to a pcapng file.  One per fabric; see the module docstring."""

    __slots__ = ("path", "_file", "_templates", "frames")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._file: IO[bytes] = open(self.path, "wb", buffering=1 << 20)  # noqa: SIM115
        self._templates: dict[tuple[int, int], tuple[bytes, bytes, bytes, int]] = {}
        self.frames = 0
        shb = _block(_SHB, struct.pack("<IHHq", _BOM, 1, 0, -1)
                     + _option(4, b"btlcore sim fabric") + _option(0, b""))
        self._file.write(shb)
        for name in IFACE_NAMES:
            opts = _option(2, name.encode()) + _option(9, bytes((9,))) + _option(0, b"")
            self._file.write(_block(_IDB, struct.pack("<HHI", LINKTYPE_ETHERNET, 0, 0) + opts))

    def _template(self, src: int, dst: int) -> tuple[bytes, bytes, bytes, int]:
        """Ethernet header, the two IPs and the fixed part of the IPv4 checksum sum."""
        eth = node_mac(dst) + node_mac(src) + _ETHERTYPE_IPV4
        sip, dip = node_ip(src), node_ip(dst)
        # version/IHL+TOS, id, flags (DF), TTL+proto; the total length is added per frame
        partial = 0x4500 + 0 + 0x4000 + ((64 << 8) | 17)
        for ip in (sip, dip):
            partial += (ip[0] << 8 | ip[1]) + (ip[2] << 8 | ip[3])
        tpl = (eth, sip, dip, partial)
        self._templates[(src, dst)] = tpl
        return tpl

    def _write(self, iface: int, t: float, src: int, dst: int, frame: Any, comment: str | None) -> None:
        eth, sip, dip, partial = self._templates.get((src, dst)) or self._template(src, dst)
        n = len(frame)
        total = 28 + n
        s = partial + total
        s = (s & 0xFFFF) + (s >> 16)
        s = (s & 0xFFFF) + (s >> 16)
        ip_udp = _IP_UDP.pack(0x45, 0, total, 0, 0x4000, 64, 17, ~s & 0xFFFF, sip, dip,
                              wire.PCAP_UDP_PORT, wire.PCAP_UDP_PORT, 8 + n, 0)
        caplen = _L2L4_LEN + n
        pad = b"\x00" * (-caplen % 4)
        opts = b""
        if comment:
            opts = _option(1, comment.encode()) + b"\x00\x00\x00\x00"
        length = 32 + caplen + len(pad) + len(opts)
        ts = int(t * 1e9 + 0.5)
        self._file.write(b"".join((
            _EPB_HEAD.pack(_EPB, length, iface, ts >> 32, ts & 0xFFFFFFFF, caplen, caplen),
            eth, ip_udp, frame, pad, opts, _U32.pack(length))))
        self.frames += 1

    def delivered(self, t: float, src: int, dst: int, frame: Any, note: str | None = None) -> None:
        self._write(IFACE_DELIVERED, t, src, dst, frame, note)

    def dropped(self, t: float, src: int, dst: int, frame: Any, comment: str) -> None:
        self._write(IFACE_DROPPED, t, src, dst, frame, comment)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
