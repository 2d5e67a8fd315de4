"""Reading btlcore datagrams out of packet captures, without scapy or Wireshark.

:func:`read` walks a pcap or pcapng file (the simulator's, ``btlcore_plugins.pcap``'s, or
tcpdump's of real UDP traffic on any port) and yields each UDP datagram that
:func:`looks_like_btl` accepts, as a :class:`Captured`: its time, ends, the capture
interface and comment (the simulator writes its drops on interface ``sim-dropped`` with
the comment ``dropped: <cause> (<src>-><dst>)``), and the datagram decoded by
:func:`btlcore.protocol.wire.decode`.

:func:`looks_like_btl` is the heuristic the Wireshark dissector (``btlcore/wireshark/btl.lua``)
and the scapy binding (``btlcore_sim.scapy``) apply to UDP on any port: the version, the
type, the flags and the header's lengths must be consistent with the datagram's size.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import BinaryIO

import attrs

from .protocol import wire

_V2_BODY = wire.BODY_SIZE
_BAD_FLAGS = 0xFF & ~wire.KNOWN_FLAGS
_EXT = {0: 0, wire.F_CHUNK: wire.CHUNK_LEN, wire.F_PUT: wire.PUT_LEN,
        wire.F_CHUNK | wire.F_PUT: wire.CHUNK_LEN + wire.PUT_LEN}
#: the wire versions the heuristic and the readers accept
VERSIONS = (1, 2)


def looks_like_btl(buf: bytes | bytearray | memoryview, size: int | None = None) -> bool:
    """True if ``buf`` (a UDP payload) is a consistent btlcore datagram of wire version 1 or
    2, or a VERSION reply with a good CRC32C: the heuristic behind "any UDP port".  ``size``:
    the datagram's real length when the capture kept only its first ``len(buf)`` bytes (then
    the body is checked as far as it was kept)."""
    n = len(buf) if size is None else size
    if len(buf) < 16:
        return False
    version, typ = buf[0], buf[1]
    if version == wire.VERSION_NEGOTIATION:
        count = buf[2]
        if typ != wire.T_VERSION or count < 1 or n != 16 + count or len(buf) != n:
            return False
        return int.from_bytes(bytes(buf[n - 4:]), "big") == wire.crc32c(bytes(buf[: n - 4]))
    if len(buf) < wire.HEADER_LEN or typ not in wire.TYPES_BY_VERSION.get(version, ()):
        return False
    flags, hello_flags = buf[2], buf[3]
    if flags & _BAD_FLAGS or hello_flags & ~wire.HF_CRC_REQUIRED & 0xFF:
        return False
    if bytes(buf[8:12]) == b"\0\0\0\0":  # src_incarnation is never 0
        return False
    at = wire.HEADER_LEN + _EXT[flags & (wire.F_CHUNK | wire.F_PUT)]
    plen = buf[34] << 8 | buf[35]
    if n != at + plen:
        return False
    if len(buf) < n and len(buf) < at + wire.HELLO_BODY.size:
        return True  # (cut short before the body's lengths: the header is all there is to check)
    return _body_ok(buf, version, typ, flags, at, plen)


def _body_ok(buf: bytes | bytearray | memoryview, version: int, typ: int, flags: int, at: int,
             plen: int) -> bool:
    if typ != wire.T_DATA and flags & (wire.F_CHUNK | wire.F_PUT | wire.F_STATUS):
        return False
    if typ in _V2_BODY:
        return plen == _V2_BODY[typ]
    if typ == wire.T_ACK:
        return plen >= wire.ACK_BODY.size and plen == wire.ACK_BODY.size + 8 * buf[at + 4]
    if typ in (wire.T_HELLO, wire.T_HELLO_ACK):
        if plen < wire.HELLO_BODY.size:
            return False
        rest = plen - wire.HELLO_BODY.size - (buf[at + 28] << 8 | buf[at + 29])
        return rest >= 0 and (version >= 2 or rest == 0)
    if flags & wire.F_STATUS:
        return plen == wire.PUT_STATUS.size and not flags & (wire.F_CHUNK | wire.F_PUT)
    return True


@attrs.define(slots=True)
class Captured:
    """One btlcore datagram seen in a capture."""

    time: float  # seconds, as the capture stamps it (virtual time in a simulator capture)
    src: str  # "ip:port"
    dst: str
    datagram: wire.Datagram
    size: int  # the UDP payload's length
    interface: str = ""  # the pcapng interface's name ("sim-delivered", "sim-dropped", ...)
    comment: str = ""  # the frame's comment (the simulator's drop cause, "duplicate", ...)
    crc_ok: bool = True  # False: it carries a CRC32C that does not match (the receiver drops it)
    #: the capture kept only its first bytes (tcpdump -s): ``datagram`` has the header and the
    #: extensions kept, its payload is what was kept of the body, its CRC32C unchecked
    truncated: bool = False

    @property
    def dropped(self) -> bool:
        """The simulator lost this frame (its ``sim-dropped`` interface)."""
        return self.interface == "sim-dropped"

    @property
    def drop_cause(self) -> str:
        """The cause the simulator wrote (``loss``, ``burst``, ``queue``, ...); "" if none."""
        text = self.comment
        if not text.startswith("dropped: "):
            return ""
        return text[len("dropped: "):].split(" (", 1)[0]


class CaptureError(ValueError):
    """The file is not a pcap or pcapng capture this reader understands."""


# ------------------------------------------------------------------------ link layers


def _udp(frame: bytes, linktype: int) -> tuple[str, str, bytes, int] | None:
    """(src, dst, UDP payload as captured, its real length) of a frame of ``linktype``, or
    None if it is not UDP."""
    if linktype == 1:  # Ethernet, with up to two VLAN tags
        at, ethertype = 14, frame[12:14]
        while ethertype in (b"\x81\x00", b"\x88\xa8") and len(frame) >= at + 4:
            ethertype, at = frame[at + 2:at + 4], at + 4
        return _ip(frame[at:], ethertype)
    if linktype in (101, 228, 229, 12, 14):  # raw IP (v4 or v6 by its first nibble)
        return _ip(frame, b"")
    if linktype == 0 or linktype == 108:  # BSD loopback: a 4-byte family
        return _ip(frame[4:], b"")
    if linktype == 113:  # Linux cooked v1
        return _ip(frame[16:], frame[14:16])
    if linktype == 276:  # Linux cooked v2
        return _ip(frame[20:], frame[0:2])
    return None


def _ip(pkt: bytes, ethertype: bytes) -> tuple[str, str, bytes, int] | None:
    if len(pkt) < 20:
        return None
    version = pkt[0] >> 4
    if ethertype not in (b"", b"\x08\x00", b"\x86\xdd"):
        return None
    if version == 4:
        ihl = (pkt[0] & 0x0F) * 4
        if pkt[9] != 17 or struct.unpack_from("!H", pkt, 6)[0] & 0x3FFF:  # UDP, unfragmented
            return None
        total = struct.unpack_from("!H", pkt, 2)[0]
        src, dst, udp = ".".join(map(str, pkt[12:16])), ".".join(map(str, pkt[16:20])), pkt[ihl:total]
    elif version == 6 and len(pkt) >= 40:
        if pkt[6] != 17:
            return None
        src, dst = _ip6(pkt[8:24]), _ip6(pkt[24:40])
        udp = pkt[40:40 + struct.unpack_from("!H", pkt, 4)[0]]
    else:
        return None
    if len(udp) < 8:
        return None
    sport, dport, length = struct.unpack_from("!HHH", udp)
    return f"{src}:{sport}", f"{dst}:{dport}", udp[8:length], length - 8


def _ip6(raw: bytes) -> str:
    return "[" + ":".join(f"{x:x}" for x in struct.unpack("!8H", raw)) + "]"


# ------------------------------------------------------------------------ file formats


def _pcap(f: BinaryIO, head: bytes) -> Iterator[tuple[float, int, str, str, bytes]]:
    """(time, linktype, interface, comment, frame) of a classic pcap file."""
    magic = head[:4]
    endian = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    scale = 1e-9 if magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d") else 1e-6
    linktype = struct.unpack(endian + "I", head[20:24])[0] & 0x0FFFFFFF
    rec = struct.Struct(endian + "IIII")
    while True:
        hdr = f.read(16)
        if len(hdr) < 16:
            return
        sec, frac, caplen, _ = rec.unpack(hdr)
        yield sec + frac * scale, linktype, "", "", f.read(caplen)


def _pcapng(f: BinaryIO, head: bytes) -> Iterator[tuple[float, int, str, str, bytes]]:
    """(time, linktype, interface, comment, frame) of a pcapng file's packet blocks."""
    endian = "<" if head[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
    u32 = struct.Struct(endian + "I")
    ifaces: list[tuple[int, str, float]] = []  # linktype, name, seconds per tick
    block: bytes | None = head
    while True:
        if block is None:
            start = f.read(8)
            if len(start) < 8:
                return
            kind, length = u32.unpack(start[:4])[0], u32.unpack(start[4:])[0]
            body = f.read(length - 8)
        else:  # the section header, already read
            kind, length = u32.unpack(block[:4])[0], u32.unpack(block[4:8])[0]
            body = block[8:] + f.read(length - len(block))
            block = None
        if kind == 0x0A0D0D0A:  # a new section: its interfaces start over
            ifaces = []
        elif kind == 1:
            linktype = struct.unpack(endian + "H", body[:2])[0]
            opts = dict(_options(body[8:-4], endian))
            name = opts.get(2, b"").decode(errors="replace")
            tsres = opts.get(9, b"\x06")[0]
            tick = 2.0 ** -(tsres & 0x7F) if tsres & 0x80 else 10.0 ** -tsres
            ifaces.append((linktype, name, tick))
        elif kind in (6, 3):
            yield _epb(body, endian, ifaces) if kind == 6 else _spb(body, endian, ifaces)


def _epb(body: bytes, endian: str, ifaces: list[tuple[int, str, float]]) -> tuple[float, int, str, str, bytes]:
    iface, hi, lo, caplen, _ = struct.unpack(endian + "IIIII", body[:20])
    linktype, name, tick = ifaces[iface] if iface < len(ifaces) else (1, "", 1e-6)
    frame = body[20:20 + caplen]
    opts = dict(_options(body[20 + caplen + (-caplen % 4):-4], endian))
    comment = opts.get(1, b"").decode(errors="replace")
    return ((hi << 32) | lo) * tick, linktype, name, comment, frame


def _spb(body: bytes, endian: str, ifaces: list[tuple[int, str, float]]) -> tuple[float, int, str, str, bytes]:
    linktype, name, _ = ifaces[0] if ifaces else (1, "", 1e-6)
    return 0.0, linktype, name, "", body[4:-4]


def _options(raw: bytes, endian: str) -> Iterator[tuple[int, bytes]]:
    at = 0
    while at + 4 <= len(raw):
        code, length = struct.unpack_from(endian + "HH", raw, at)
        if code == 0:
            return
        yield code, raw[at + 4:at + 4 + length]
        at += 4 + length + (-length % 4)


def frames(path: str | os.PathLike[str]) -> Iterator[tuple[float, int, str, str, bytes]]:
    """Every frame of a pcap or pcapng file: (time, linktype, interface, comment, bytes)."""
    with open(path, "rb") as f:
        head = f.read(24)
        if head[:4] == b"\x0a\x0d\x0d\x0a":
            yield from _pcapng(f, head)
        elif head[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d"):
            yield from _pcap(f, head)
        else:
            raise CaptureError(f"{os.fspath(path)!r} is neither a pcap nor a pcapng capture "
                               f"(it starts with {head[:4].hex()})")


def read(path: str | os.PathLike[str]) -> Iterator[Captured]:
    """The btlcore datagrams of a capture, in file order (see the module docstring); UDP
    datagrams that fail :func:`looks_like_btl` are skipped, whatever their port."""
    for time, linktype, iface, comment, frame in frames(path):
        udp = _udp(frame, linktype)
        if udp is None or not looks_like_btl(udp[2], udp[3]):
            continue
        src, dst, payload, size = udp
        if len(payload) < size:
            yield Captured(time, src, dst, _head_only(payload), size, iface, comment, True, True)
            continue
        try:
            dg = wire.decode(payload, VERSIONS)
        except wire.MalformedDatagram:
            continue
        yield Captured(time, src, dst, dg, size, iface, comment, wire.crc_ok(payload))


def _head_only(buf: bytes) -> wire.Datagram:
    """The header and the extensions kept of a datagram a capture cut short."""
    version, typ, flags, _h, dst, inc, crc, seq, ack, tag, _plen = wire.HEADER.unpack_from(buf)
    dg = wire.Datagram(typ, flags, dst, inc, seq, ack, tag, crc=crc, version=version)
    at = wire.HEADER_LEN
    if flags & wire.F_CHUNK and len(buf) >= at + wire.CHUNK_LEN:
        dg.msg_id, dg.msg_len, dg.offset = wire.CHUNK.unpack_from(buf, at)
        at += wire.CHUNK_LEN
    if flags & wire.F_PUT and len(buf) >= at + wire.PUT_LEN:
        dg.put_key, dg.put_offset = wire.PUT.unpack_from(buf, at)
        at += wire.PUT_LEN
    dg.payload = bytes(buf[at:])
    return dg
