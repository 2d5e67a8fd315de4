"""The wire format: every byte btlcore puts in a datagram.  ``docs/protocol.md`` is its
prose twin; ``btlcore_sim.layers`` defines the same bytes as scapy layers (a test
proves both agree).

All fields are big-endian.  A datagram is::

    header (36 B) [chunk ext (12 B)] [put ext (12 B)] payload

Header::

    off size field
     0   1   version          WIRE_VERSION
     1   1   type             T_DATA, T_ACK, T_HELLO, T_HELLO_ACK
     2   1   flags            F_ACK | F_CHUNK | F_PUT | F_CRC | F_STATUS
     3   1   hello_flags      T_HELLO / T_HELLO_ACK: HF_CRC_REQUIRED; other types: 0
     4   4   dst_conn         the receiver's connection id for this peer (0 in a first HELLO)
     8   4   src_incarnation  the sender's incarnation (random, never 0)
    12   4   crc              CRC32C of bytes [0:12] + [16:end] when F_CRC is set, else 0
    16   8   seq              segment sequence number (T_DATA), else 0
    24   8   ack              cumulative ACK: highest in-order seq received (valid if F_ACK)
    32   2   tag              the message's tag (T_DATA)
    34   2   payload_len      bytes after the header and extensions

Chunk extension (F_CHUNK; a segment of a message larger than one datagram)::

     0   4   msg_id           the sender's message number (mod 2**32)
     4   4   msg_len          the whole message's length
     8   4   offset           this chunk's offset in the message

Put extension (F_PUT; emulated RDMA write into a region the receiver exposed)::

     0   4   key              the region's key
     4   8   offset           where the message's first byte goes in the region

Put status payload (a T_DATA segment with F_STATUS, neither F_CHUNK nor F_PUT; sent
reliably by a put's receiver once the whole put arrived, never delivered as a message)::

     0   8   put_seq          the wire seq of the put's last segment (the one with its last byte)
     8   1   status           PS_LANDED, PS_UNKNOWN_KEY, PS_OUT_OF_BOUNDS, PS_UNEXPOSED
     9   3   reserved         0

T_ACK payload (selective ACK)::

     0   4   window           receive window (segments) the receiver advertises
     4   1   nranges          number of SACK ranges that follow (at most MAX_SACK_RANGES)
     5   1   ack_flags        AF_TRUNCATED: more ranges existed than fit; those between
                              the last two listed were left out (their status is unknown).
                              AF_DUPLICATE: a duplicate segment arrived since the last ACK
                              (DSACK-like: tells the sender a retransmission was spurious)
     6   2   reserved
     8   4   ack_delay        microseconds between the arrival of the largest sequence
                              number this ACK acknowledges and the ACK's departure
                              (saturates at 2**32-1); the sender subtracts it from its RTT
                              sample, so delayed or lost ACKs do not inflate the RTO
    12   8n  ranges           (start u32, length u32): seqs ack+start .. ack+start+length-1
                              were received; ranges ascend and never touch

T_HELLO / T_HELLO_ACK payload::

     0   4   incarnation      the sender's incarnation (as in the header)
     4   4   conn_id          the id the receiver must put in dst_conn when sending to us
     8   8   isn              our initial sequence number (first data seq is isn + 1)
    16   4   echo_incarnation the receiver's incarnation as we know it (0 if unknown)
    20   4   window           our receive window (segments)
    24   4   max_ack_delay    the longest we hold back a standalone ACK, microseconds: the
                              receiver adds it to its retransmit timeout (QUIC's
                              max_ack_delay transport parameter)
    28   2   addr_len
    30   n   address          our device address (what the receiver passes to resolve)
"""

from __future__ import annotations

import struct

import attrs

try:  # the C implementation: 0.3 us for 1500 B, five times zlib.crc32
    from crc32c import crc32c as _crc32c
except ImportError:  # pragma: no cover - crc32c is a hard dependency; keep a slow fallback
    _crc32c = None

WIRE_VERSION = 1

T_DATA = 1
T_ACK = 2
T_HELLO = 3
T_HELLO_ACK = 4
TYPE_NAMES = {T_DATA: "DATA", T_ACK: "ACK", T_HELLO: "HELLO", T_HELLO_ACK: "HELLO_ACK"}

F_ACK = 0x01
F_CHUNK = 0x02
F_PUT = 0x04
F_CRC = 0x08
F_STATUS = 0x10  # a put status (see PUT_STATUS), not a message for the application
KNOWN_FLAGS = F_ACK | F_CHUNK | F_PUT | F_CRC | F_STATUS
#: hello_flags (header byte 3 of a HELLO or HELLO_ACK): the sender drops every datagram
#: without a CRC32C, so the receiver must put one on everything it sends it
HF_CRC_REQUIRED = 0x01

HEADER = struct.Struct("!BBBBIIIQQHH")
CHUNK = struct.Struct("!III")
PUT = struct.Struct("!IQ")
ACK_BODY = struct.Struct("!IBB2xI")
SACK_RANGE = struct.Struct("!II")
HELLO_BODY = struct.Struct("!IIQIIIH")
PUT_STATUS = struct.Struct("!QB3x")

#: put status codes (PUT_STATUS.status): how the receiver took a put
PS_LANDED = 0  # every byte was written into the region
PS_UNKNOWN_KEY = 1  # no region is exposed under that key
PS_OUT_OF_BOUNDS = 2  # the put does not fit in the region
PS_UNEXPOSED = 3  # the region was unexposed while the put was arriving
PUT_STATUS_NAMES = {PS_LANDED: "landed", PS_UNKNOWN_KEY: "unknown key",
                    PS_OUT_OF_BOUNDS: "out of bounds",
                    PS_UNEXPOSED: "region unexposed while the put was arriving"}

HEADER_LEN = HEADER.size  # 36
# The header cut around its CRC field, for the send path, which computes the CRC over the
# pieces before joining them into one immutable datagram: bytes [0:12] (constant for a
# peer's data segments, so its CRC is computed once per pass), then [16:36] with the
# extensions that follow (chunk, put, or both).
HEAD_PREFIX = struct.Struct("!BBBBII")
HEAD_REST = struct.Struct("!QQHH")
HEAD_REST_CHUNK = struct.Struct("!QQHHIII")
HEAD_REST_PUT = struct.Struct("!QQHHIQ")
HEAD_REST_CHUNK_PUT = struct.Struct("!QQHHIIIIQ")
CHUNK_LEN = CHUNK.size  # 12
PUT_LEN = PUT.size  # 12
CRC_OFFSET = 12
ACK_OFFSET = 24
assert HEAD_PREFIX.size == CRC_OFFSET and CRC_OFFSET + 4 + HEAD_REST.size == HEADER_LEN
MAX_SACK_RANGES = 64
AF_TRUNCATED = 0x01
AF_DUPLICATE = 0x02
SEQ_MASK = (1 << 64) - 1
U32_MASK = (1 << 32) - 1

#: UDP port a pcap of the simulator uses for btlcore frames (Ether/IPv4/UDP/btlcore).
PCAP_UDP_PORT = 7471


def _crc32c_py(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    crc = value ^ 0xFFFFFFFF
    for byte in bytes(data):
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


crc32c = _crc32c or _crc32c_py


def datagram_crc(buf: bytes | bytearray | memoryview, tail: bytes | memoryview = b"") -> int:
    """CRC32C of a datagram, skipping its own CRC field; ``tail``: the rest of a datagram
    kept in two parts (a gathered send's payload), after ``buf``."""
    view = memoryview(buf)
    return crc32c(tail, crc32c(view[CRC_OFFSET + 4 :], crc32c(view[:CRC_OFFSET])))


def seal(buf: bytearray) -> None:
    """Set F_CRC and write the CRC field of a finished datagram (in place)."""
    buf[2] |= F_CRC
    struct.pack_into("!I", buf, CRC_OFFSET, datagram_crc(buf))


def crc_ok(buf: bytes | bytearray | memoryview) -> bool:
    """True if the datagram carries no CRC, or carries a correct one."""
    if not buf[2] & F_CRC:
        return True
    (stored,) = struct.unpack_from("!I", buf, CRC_OFFSET)
    return stored == datagram_crc(buf)


def unwrap_seq(wire_seq: int, near: int) -> int:
    """The 64-bit serial number closest to ``near`` whose low 64 bits are ``wire_seq``.

    Sequence numbers are unbounded Python ints inside the core; only the wire wraps."""
    delta = (wire_seq - near) & SEQ_MASK
    if delta >= 1 << 63:
        delta -= 1 << 64
    return near + delta


# ---------------------------------------------------------------------------------------
# Readable encode/decode, for tests, tools and docs.  The engine's hot path packs with the
# same Struct objects directly.


@attrs.define(slots=True)
class Datagram:
    """A decoded datagram: every field of every part, by name."""

    type: int
    flags: int = 0
    dst_conn: int = 0
    src_incarnation: int = 0
    seq: int = 0
    ack: int = 0
    tag: int = 0
    msg_id: int | None = None
    msg_len: int | None = None
    offset: int | None = None
    put_key: int | None = None
    put_offset: int | None = None
    payload: bytes = b""
    crc: int = 0
    version: int = WIRE_VERSION

    def encode(self, with_crc: bool = True) -> bytes:
        flags = self.flags & ~(F_CHUNK | F_PUT | F_CRC)
        ext = b""
        if self.msg_id is not None:
            flags |= F_CHUNK
            ext += CHUNK.pack(self.msg_id, self.msg_len or 0, self.offset or 0)
        if self.put_key is not None:
            flags |= F_PUT
            ext += PUT.pack(self.put_key, self.put_offset or 0)
        buf = bytearray(
            HEADER.pack(
                self.version,
                self.type,
                flags,
                0,
                self.dst_conn,
                self.src_incarnation,
                0,
                self.seq & SEQ_MASK,
                self.ack & SEQ_MASK,
                self.tag,
                len(self.payload),
            )
        )
        buf += ext
        buf += self.payload
        if with_crc:
            seal(buf)
        return bytes(buf)


class MalformedDatagram(ValueError):
    """The bytes are not a btlcore datagram (too short, bad version, bad lengths)."""


def decode(buf: bytes | bytearray | memoryview) -> Datagram:
    """Parse one datagram; raise :class:`MalformedDatagram` if it is not well formed."""
    view = memoryview(buf)
    if len(view) < HEADER_LEN:
        raise MalformedDatagram(f"{len(view)} bytes is shorter than the {HEADER_LEN}-byte header")
    (version, typ, flags, _r, dst, inc, crc, seq, ack, tag, plen) = HEADER.unpack_from(view)
    if version != WIRE_VERSION:
        raise MalformedDatagram(f"wire version {version}, expected {WIRE_VERSION}")
    if typ not in TYPE_NAMES:
        raise MalformedDatagram(f"unknown type {typ}")
    if flags & ~KNOWN_FLAGS:
        raise MalformedDatagram(f"unknown flags {flags:#x}")
    pos = HEADER_LEN
    dg = Datagram(typ, flags, dst, inc, seq, ack, tag, crc=crc, version=version)
    if flags & F_CHUNK:
        if len(view) < pos + CHUNK_LEN:
            raise MalformedDatagram("truncated chunk extension")
        dg.msg_id, dg.msg_len, dg.offset = CHUNK.unpack_from(view, pos)
        pos += CHUNK_LEN
    if flags & F_PUT:
        if len(view) < pos + PUT_LEN:
            raise MalformedDatagram("truncated put extension")
        dg.put_key, dg.put_offset = PUT.unpack_from(view, pos)
        pos += PUT_LEN
    if len(view) - pos != plen:
        raise MalformedDatagram(f"payload_len {plen} but {len(view) - pos} bytes follow")
    dg.payload = bytes(view[pos:])
    return dg


def ack_payload(window: int, ranges: list[tuple[int, int]], ack_delay_us: int = 0,
                ack_flags: int = 0) -> bytes:
    """The T_ACK payload: advertised window, flags, ACK delay and SACK ranges relative to
    the ACK."""
    out = bytearray(ACK_BODY.pack(window, len(ranges), ack_flags, min(ack_delay_us, U32_MASK)))
    for start, length in ranges:
        out += SACK_RANGE.pack(start, length)
    return bytes(out)


def parse_ack_payload(payload: bytes | memoryview) -> tuple[int, list[tuple[int, int]], int, int]:
    """(window, ranges, ack_delay_us, ack_flags) of a T_ACK payload."""
    if len(payload) < ACK_BODY.size:
        raise MalformedDatagram("truncated ACK body")
    window, n, flags, delay = ACK_BODY.unpack_from(payload)
    if n > MAX_SACK_RANGES or len(payload) != ACK_BODY.size + n * SACK_RANGE.size:
        raise MalformedDatagram(f"ACK body claims {n} ranges in {len(payload)} bytes")
    ranges = [SACK_RANGE.unpack_from(payload, ACK_BODY.size + i * SACK_RANGE.size) for i in range(n)]
    return window, ranges, delay, flags


def put_status_payload(put_seq: int, status: int) -> bytes:
    """The payload of a put status segment (F_STATUS)."""
    return PUT_STATUS.pack(put_seq & SEQ_MASK, status)


def parse_put_status(payload: bytes | memoryview) -> tuple[int, int]:
    """(put_seq, status) of a put status payload."""
    if len(payload) != PUT_STATUS.size:
        raise MalformedDatagram(f"put status of {len(payload)} bytes, expected {PUT_STATUS.size}")
    return PUT_STATUS.unpack_from(payload)  # type: ignore[return-value]


@attrs.define(slots=True, frozen=True)
class Hello:
    """The handshake body (T_HELLO and T_HELLO_ACK)."""

    incarnation: int
    conn_id: int
    isn: int
    echo_incarnation: int
    window: int
    address: bytes
    max_ack_delay_us: int = 0

    def encode(self) -> bytes:
        return (
            HELLO_BODY.pack(
                self.incarnation,
                self.conn_id,
                self.isn & SEQ_MASK,
                self.echo_incarnation,
                self.window,
                self.max_ack_delay_us,
                len(self.address),
            )
            + self.address
        )

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Hello:
        if len(payload) < HELLO_BODY.size:
            raise MalformedDatagram("truncated HELLO body")
        inc, conn, isn, echo, window, ack_delay, alen = HELLO_BODY.unpack_from(payload)
        if len(payload) != HELLO_BODY.size + alen:
            raise MalformedDatagram(f"HELLO address length {alen} does not match the body")
        return cls(inc, conn, isn, echo, window, bytes(payload[HELLO_BODY.size :]), ack_delay)
