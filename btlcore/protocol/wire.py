"""The wire format: every byte btlcore puts in a datagram.  ``docs/protocol.md`` is its
prose twin; ``btlcore_sim.layers`` defines the same bytes as scapy layers (a test
proves both agree).

All fields are big-endian.  A datagram is::

    header (36 B) [chunk ext (12 B)] [put ext (12 B)] payload

Header::

    off size field
     0   1   version          WIRE_VERSION
     1   1   type             T_DATA, T_ACK, T_HELLO, T_HELLO_ACK (version 2: and T_CLOSE ..
                              T_PING, below)
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
    30+n     transport parameters (version 2; see below), possibly none

Version 2 (``WIRE_VERSION``, the one ``SUPPORTED_VERSIONS`` lists; version 1 had only the
first four types and no parameters).  The same header, and these types and bodies:

Transport parameters (after a HELLO's address): a run of ``PARAM_HEAD`` (type u16,
length u16) each followed by ``length`` bytes of value; unknown types are skipped, a known
one has one fixed width and a range, and appears at most once (``TransportParameters``).
``TP_PADDING`` (type 0, any length, zeros) is an unknown type by design: a HELLO carries
one so that it is no smaller than the HELLO_ACK it provokes (``padding_param``).

T_CLOSE / T_CLOSE_ACK payload (header dst_conn: the receiver's conn id)::

     0   4   conn_id          the sender's own conn id of this connection
     4   4   echo_incarnation the receiver's incarnation
     8   2   reason           CR_* (a CLOSE_ACK echoes the CLOSE's)
    10   2   reserved

T_UNKNOWN_CONN payload ("unknown connection" notice; header dst_conn and seq echo the
provoking datagram's; 48 bytes in all, never more than what provoked it)::

     0   4   echo_incarnation the provoking datagram's src_incarnation
     4   4   echo_digest      datagram_crc() of the provoking datagram
     8   1   echo_type        the provoking datagram's type
     9   3   reserved

T_CHALLENGE / T_RESPONSE payload::

     0   8   nonce            fresh random 64 bits; a RESPONSE echoes its CHALLENGE's
(a CHALLENGE's header seq: the ISN of the connection it asks about; the peer answers only
for its own conn id and ISN)

T_PING payload (asks for an immediate T_ACK; as large as a notice, so it may provoke one)::

     0  12   reserved         0

VERSION reply (version byte 0: its layout depends on no version's header)::

     0   1   version          0
     1   1   type             T_VERSION
     2   1   count            n
     3   1   reserved         0
     4   4   echo_dst_conn    the provoking datagram's bytes [4:8] (its dst_conn)
     8   4   echo_incarnation the provoking datagram's bytes [8:12] (its src_incarnation)
    12   n   versions         one byte each: the versions this end speaks
    12+n 4   crc              CRC32C of bytes [0:12+n] (a corrupted list must not fail a
                              handshake: the reply has no header, so no F_CRC)
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Iterable
from types import ModuleType
from typing import Final

import attrs
from mypy_extensions import mypyc_attr

_crc32c_mod: ModuleType | None
try:  # the C implementation: 0.3 us for 1500 B, five times zlib.crc32
    import crc32c as _crc32c_mod
except ImportError:  # pragma: no cover - crc32c is a hard dependency; keep a slow fallback
    _crc32c_mod = None

#: the version this end speaks (and writes in every datagram's first byte); a datagram of
#: another version is answered with a VERSION reply (the engine's, rate-limited)
WIRE_VERSION: Final = 2
#: the versions whose datagrams this codec reads and writes (the VERSION reply lists these)
SUPPORTED_VERSIONS = (2,)
#: the version byte of a VERSION reply: "version negotiation", not a version
VERSION_NEGOTIATION: Final = 0

T_DATA: Final = 1
T_ACK: Final = 2
T_HELLO: Final = 3
T_HELLO_ACK: Final = 4
# version 2
T_CLOSE: Final = 5
T_CLOSE_ACK: Final = 6
T_UNKNOWN_CONN: Final = 7
T_CHALLENGE: Final = 8
T_RESPONSE: Final = 9
T_PING: Final = 10
T_VERSION: Final = 11  # only with version byte VERSION_NEGOTIATION
TYPE_NAMES: Final[dict[int, str]] = {T_DATA: "DATA", T_ACK: "ACK", T_HELLO: "HELLO", T_HELLO_ACK: "HELLO_ACK",
              T_CLOSE: "CLOSE", T_CLOSE_ACK: "CLOSE_ACK", T_UNKNOWN_CONN: "UNKNOWN_CONN",
              T_CHALLENGE: "CHALLENGE", T_RESPONSE: "RESPONSE", T_PING: "PING",
              T_VERSION: "VERSION"}
#: the types each version knows (a type outside its version's set is malformed)
TYPES_BY_VERSION: dict[int, frozenset[int]] = {
    1: frozenset({T_DATA, T_ACK, T_HELLO, T_HELLO_ACK}),
    2: frozenset({T_DATA, T_ACK, T_HELLO, T_HELLO_ACK, T_CLOSE, T_CLOSE_ACK, T_UNKNOWN_CONN,
                  T_CHALLENGE, T_RESPONSE, T_PING}),
}

F_ACK: Final = 0x01
F_CHUNK: Final = 0x02
F_PUT: Final = 0x04
F_CRC: Final = 0x08
F_STATUS: Final = 0x10  # a put status (see PUT_STATUS), not a message for the application
KNOWN_FLAGS: Final = F_ACK | F_CHUNK | F_PUT | F_CRC | F_STATUS
#: hello_flags (header byte 3 of a HELLO or HELLO_ACK): the sender drops every datagram
#: without a CRC32C, so the receiver must put one on everything it sends it
HF_CRC_REQUIRED: Final = 0x01

HEADER: Final = struct.Struct("!BBBBIIIQQHH")
CHUNK: Final = struct.Struct("!III")
PUT: Final = struct.Struct("!IQ")
ACK_BODY: Final = struct.Struct("!IBB2xI")
SACK_RANGE: Final = struct.Struct("!II")
HELLO_BODY: Final = struct.Struct("!IIQIIIH")
PUT_STATUS: Final = struct.Struct("!QB3x")
PARAM_HEAD: Final = struct.Struct("!HH")
CLOSE_BODY: Final = struct.Struct("!IIH2x")
NOTICE_BODY: Final = struct.Struct("!IIB3x")
CHALLENGE_BODY: Final = struct.Struct("!Q")
PING_BODY: Final = struct.Struct("!12x")
VERSION_HEAD: Final = struct.Struct("!BBBxII")
#: the fixed body size of each version-2 type with a body of its own
BODY_SIZE: Final[dict[int, int]] = {T_CLOSE: CLOSE_BODY.size, T_CLOSE_ACK: CLOSE_BODY.size,
             T_UNKNOWN_CONN: NOTICE_BODY.size, T_CHALLENGE: CHALLENGE_BODY.size,
             T_RESPONSE: CHALLENGE_BODY.size, T_PING: PING_BODY.size}
#: close reasons (CLOSE_BODY.reason); a receiver takes any other value as "other"
CR_CLOSED: Final = 0  # the sender's transport closed
CR_DISCONNECT: Final = 1  # the sender disconnected this peer only
CR_PROTOCOL_ERROR: Final = 2  # the sender saw the peer break the protocol
CR_LIMIT: Final = 3  # the peer exceeded a limit the sender advertised
CLOSE_REASON_NAMES: Final[dict[int, str]] = {CR_CLOSED: "closed", CR_DISCONNECT: "disconnected",
                      CR_PROTOCOL_ERROR: "protocol error", CR_LIMIT: "limit exceeded"}
#: an UNKNOWN_CONN notice is this long: it answers only datagrams at least as long
NOTICE_LEN: Final = 36 + NOTICE_BODY.size

#: put status codes (PUT_STATUS.status): how the receiver took a put
PS_LANDED: Final = 0  # every byte was written into the region
PS_UNKNOWN_KEY: Final = 1  # no region is exposed under that key
PS_OUT_OF_BOUNDS: Final = 2  # the put does not fit in the region
PS_UNEXPOSED: Final = 3  # the region was unexposed while the put was arriving
PUT_STATUS_NAMES: Final[dict[int, str]] = {PS_LANDED: "landed", PS_UNKNOWN_KEY: "unknown key",
                    PS_OUT_OF_BOUNDS: "out of bounds",
                    PS_UNEXPOSED: "region unexposed while the put was arriving"}

HEADER_LEN: Final = HEADER.size  # 36
# The header cut around its CRC field, for the send path, which computes the CRC over the
# pieces before joining them into one immutable datagram: bytes [0:12] (constant for a
# peer's data segments, so its CRC is computed once per pass), then [16:36] with the
# extensions that follow (chunk, put, or both).
HEAD_PREFIX: Final = struct.Struct("!BBBBII")
HEAD_REST: Final = struct.Struct("!QQHH")
HEAD_REST_CHUNK: Final = struct.Struct("!QQHHIII")
HEAD_REST_PUT: Final = struct.Struct("!QQHHIQ")
HEAD_REST_CHUNK_PUT: Final = struct.Struct("!QQHHIIIIQ")
CHUNK_LEN: Final = CHUNK.size  # 12
PUT_LEN: Final = PUT.size  # 12
CRC_OFFSET: Final = 12
ACK_OFFSET: Final = 24
assert HEAD_PREFIX.size == CRC_OFFSET and CRC_OFFSET + 4 + HEAD_REST.size == HEADER_LEN
MAX_SACK_RANGES: Final = 64
AF_TRUNCATED: Final = 0x01
AF_DUPLICATE: Final = 0x02
SEQ_MASK: Final = (1 << 64) - 1
#: the largest int a mypyc-compiled module keeps unboxed (63-bit tagged): a sequence number in
#: 0..SEQ_SHORT is its own low 64 bits, so ``s if 0 <= s <= SEQ_SHORT else s & SEQ_MASK`` spares
#: the compiled build a boxed long operation per packet (SEQ_MASK is not a short int)
SEQ_SHORT: Final = (1 << 62) - 1
UNKNOWN_FLAGS: Final = 0xFF & ~KNOWN_FLAGS
# the header and the chunk extension in one unpack (a receiver reads both at once)
HEADER_CHUNK: Final = struct.Struct(HEADER.format + CHUNK.format[1:])
# where a data segment's payload starts, by its F_CHUNK | F_PUT bits
PAYLOAD_AT: Final[dict[int, int]] = {0: HEADER_LEN, F_CHUNK: HEADER_LEN + CHUNK_LEN, F_PUT: HEADER_LEN + PUT_LEN,
              F_CHUNK | F_PUT: HEADER_LEN + CHUNK_LEN + PUT_LEN}
U32_MASK: Final = (1 << 32) - 1

#: UDP port a pcap of the simulator uses for btlcore frames (Ether/IPv4/UDP/btlcore).
PCAP_UDP_PORT: Final = 7471


def _crc32c_py(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    crc = value ^ 0xFFFFFFFF
    for byte in bytes(data):
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


# Final: compiled modules that import it read it from a static, not the module's dict
crc32c: Final[Callable[..., int]] = _crc32c_mod.crc32c if _crc32c_mod is not None else _crc32c_py


def datagram_crc(buf: bytes | bytearray | memoryview, tail: bytes | memoryview = b"") -> int:
    """CRC32C of a datagram, skipping its own CRC field; ``tail``: the rest of a datagram
    kept in two parts (a gathered send's payload), after ``buf``."""
    view = memoryview(buf)
    crc = crc32c(view[CRC_OFFSET + 4 :], crc32c(view[:CRC_OFFSET]))
    return crc32c(tail, crc) if tail else crc


def seal(buf: bytearray) -> None:
    """Set F_CRC and write the CRC field of a finished datagram (in place)."""
    buf[2] |= F_CRC
    struct.pack_into("!I", buf, CRC_OFFSET, datagram_crc(buf))


def crc_ok(buf: bytes | bytearray | memoryview) -> bool:
    """True if the datagram carries no CRC, or carries a correct one."""
    if not buf[2] & F_CRC:
        return True
    stored: int = struct.unpack_from("!I", buf, CRC_OFFSET)[0]
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
        if self.version == VERSION_NEGOTIATION:  # a VERSION reply: the payload lists versions
            return version_reply(self.dst_conn, self.src_incarnation, tuple(self.payload))
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


def decode(buf: bytes | bytearray | memoryview,
           versions: Collection[int] = (WIRE_VERSION,)) -> Datagram:
    """Parse one datagram of one of ``versions`` (or a VERSION reply, which any version
    reads); raise :class:`MalformedDatagram` if it is not well formed.

    A VERSION reply decodes as a Datagram of version 0, type T_VERSION, its echoed ids in
    ``dst_conn`` / ``src_incarnation`` and its version list as ``payload`` bytes."""
    view = memoryview(buf)
    if len(view) and view[0] == VERSION_NEGOTIATION:
        dst, inc, listed = parse_version_reply(view)
        return Datagram(T_VERSION, 0, dst, inc, payload=bytes(listed), version=VERSION_NEGOTIATION)
    if len(view) < HEADER_LEN:
        raise MalformedDatagram(f"{len(view)} bytes is shorter than the {HEADER_LEN}-byte header")
    (version, typ, flags, _r, dst, inc, crc, seq, ack, tag, plen) = HEADER.unpack_from(view)
    if version not in versions:
        want = " or ".join(str(v) for v in versions)
        raise MalformedDatagram(f"wire version {version}, expected {want}")
    if typ not in TYPES_BY_VERSION.get(version, ()):
        raise MalformedDatagram(f"unknown type {typ} in version {version}")
    if flags & ~KNOWN_FLAGS:
        raise MalformedDatagram(f"unknown flags {flags:#x}")
    if typ in BODY_SIZE:
        if flags & (F_CHUNK | F_PUT | F_STATUS):
            raise MalformedDatagram(f"flags {flags:#x}: a {TYPE_NAMES[typ]} takes only ACK and CRC")
        if plen != BODY_SIZE[typ] or len(view) != HEADER_LEN + plen:
            raise MalformedDatagram(f"a {TYPE_NAMES[typ]} body is {BODY_SIZE[typ]} bytes, "
                                    f"not {len(view) - HEADER_LEN}")
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
    return PUT_STATUS.unpack_from(payload)


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
    #: the transport parameter block after the address (version 2); None: no block at all
    params: TransportParameters | None = None

    def encode(self) -> bytes:
        block = self.params.encode() if self.params is not None else b""
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
            + block
        )

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Hello:
        if len(payload) < HELLO_BODY.size:
            raise MalformedDatagram("truncated HELLO body")
        inc, conn, isn, echo, window, ack_delay, alen = HELLO_BODY.unpack_from(payload)
        end = HELLO_BODY.size + alen
        if len(payload) < end:
            raise MalformedDatagram(f"HELLO address length {alen} does not match the body")
        params = None
        if len(payload) > end:
            try:
                params = TransportParameters.decode(payload[end:])
            except MalformedDatagram as exc:
                raise MalformedDatagram(f"HELLO address length {alen} leaves "
                                        f"{len(payload) - end} bytes: {exc}") from None
        return cls(inc, conn, isn, echo, window, bytes(payload[HELLO_BODY.size : end]), ack_delay,
                   params)


# ---------------------------------------------------------------------------------------
# Version 2: transport parameters, close, the unknown-connection notice, restart challenge,
# ping and the VERSION reply.

#: transport parameter types (PARAM_HEAD.type): name, value width (bytes), allowed range
TP_MAX_DATAGRAM_SIZE: Final = 0x0001
TP_MAX_MESSAGE_SIZE: Final = 0x0002
TP_PEER_TIMEOUT: Final = 0x0003
TP_WINDOW_BYTES: Final = 0x0004
#: padding: skipped as unknown (never in PARAM_SPECS); see padding_param
TP_PADDING: Final = 0x0000
_PARAM_FORMAT: Final[dict[int, struct.Struct]] = {4: struct.Struct("!I"), 8: struct.Struct("!Q")}
#: type -> (attribute, width, smallest, largest)
PARAM_SPECS: dict[int, tuple[str, int, int, int]] = {
    TP_MAX_DATAGRAM_SIZE: ("max_datagram_size", 4, 61, U32_MASK),
    TP_MAX_MESSAGE_SIZE: ("max_message_size", 4, 1, U32_MASK),
    TP_PEER_TIMEOUT: ("peer_timeout_ms", 4, 0, U32_MASK),
    TP_WINDOW_BYTES: ("window_bytes", 8, 0, SEQ_MASK),
}


def _check_param(name: str, value: object, low: int, high: int) -> None:  # (object: any value is checked)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"transport parameter {name} must be an int in {low}..{high}, "
                         f"not {value!r}")


# an ordinary class when compiled: attrs' __init__ takes any value and the check below says
# what is allowed (a compiled attrs class would refuse a float with a TypeError first)
@mypyc_attr(native_class=False)
@attrs.define(slots=True, frozen=True)
class TransportParameters:
    """The limits an end advertises in its HELLO / HELLO_ACK (QUIC's transport parameters,
    RFC 9000 §18): the peer obeys them.  An absent parameter means its default."""

    #: the largest datagram this end's device takes, bytes (61 is the smallest usable)
    max_datagram_size: int = 65535
    #: the largest message this end accepts (its ``max_message_size``); wire maximum 2**32-1
    max_message_size: int = U32_MASK
    #: this end's ``peer_timeout``, ms; 0: not advertised (the smaller non-zero one wins)
    peer_timeout_ms: int = 0
    #: this end's receive window in bytes; 0: no byte limit (the segment window alone)
    window_bytes: int = 0

    def __attrs_post_init__(self) -> None:
        for name, _, low, high in PARAM_SPECS.values():
            _check_param(name, getattr(self, name), low, high)

    def encode(self) -> bytes:
        """Every known parameter, in type order."""
        out = bytearray()
        for typ, (name, width, _, _) in sorted(PARAM_SPECS.items()):
            out += PARAM_HEAD.pack(typ, width) + _PARAM_FORMAT[width].pack(getattr(self, name))
        return bytes(out)

    @classmethod
    def decode(cls, block: bytes | memoryview) -> TransportParameters:
        """Parse a parameter block; unknown types are skipped.  Malformed: a parameter
        running past the end, a known one repeated, of the wrong width or out of range."""
        view = memoryview(block)
        values: dict[str, int] = {}
        pos = 0
        while pos < len(view):
            if len(view) - pos < PARAM_HEAD.size:
                raise MalformedDatagram(f"transport parameter header truncated at byte {pos}")
            typ, length = PARAM_HEAD.unpack_from(view, pos)
            pos += PARAM_HEAD.size
            if pos + length > len(view):
                raise MalformedDatagram(f"transport parameter {typ:#06x} of {length} bytes runs "
                                        f"{pos + length - len(view)} bytes past the block")
            spec = PARAM_SPECS.get(typ)
            if spec is not None:
                name, width, low, high = spec
                if name in values:
                    raise MalformedDatagram(f"transport parameter {name} appears twice")
                if length != width:
                    raise MalformedDatagram(f"transport parameter {name} is {width} bytes, "
                                            f"not {length}")
                value: int = _PARAM_FORMAT[width].unpack_from(view, pos)[0]
                if not low <= value <= high:
                    raise MalformedDatagram(f"transport parameter {name} = {value} is outside "
                                            f"{low}..{high}")
                values[name] = value
            pos += length
        return cls(**values)


def padding_param(size: int) -> bytes:
    """A ``TP_PADDING`` parameter at least ``size`` bytes long (b"" for ``size`` <= 0): what
    a HELLO appends so that the HELLO_ACK it provokes is no larger than itself."""
    if size <= 0:
        return b""
    return PARAM_HEAD.pack(TP_PADDING, max(0, size - PARAM_HEAD.size)) + bytes(max(0, size - PARAM_HEAD.size))


@attrs.define(slots=True, frozen=True)
class Close:
    """The T_CLOSE / T_CLOSE_ACK body (RFC 9000 §10.2).  With the header's dst_conn (the
    receiver's conn id) it names the connection by ids an off-path sender cannot know.  A
    CLOSE_ACK echoes: its dst_conn is the CLOSE's ``conn_id``, its ``conn_id`` the CLOSE's
    dst_conn, its ``echo_incarnation`` the CLOSE's src_incarnation, and the reason."""

    conn_id: int
    echo_incarnation: int
    reason: int = CR_CLOSED

    def encode(self) -> bytes:
        return CLOSE_BODY.pack(self.conn_id, self.echo_incarnation, self.reason)

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Close:
        if len(payload) != CLOSE_BODY.size:
            raise MalformedDatagram(f"CLOSE body of {len(payload)} bytes, expected {CLOSE_BODY.size}")
        return cls(*CLOSE_BODY.unpack_from(payload))


@attrs.define(slots=True, frozen=True)
class Notice:
    """The T_UNKNOWN_CONN body (a stateless reset's role, RFC 9000 §10.3): what only the
    provoking datagram's sender knows, echoed so it can check the notice answers a datagram
    it really sent.  The notice's header echoes the provoking dst_conn and seq."""

    echo_incarnation: int
    echo_digest: int
    echo_type: int

    def encode(self) -> bytes:
        return NOTICE_BODY.pack(self.echo_incarnation, self.echo_digest, self.echo_type)

    @classmethod
    def decode(cls, payload: bytes | memoryview) -> Notice:
        if len(payload) != NOTICE_BODY.size:
            raise MalformedDatagram(f"notice body of {len(payload)} bytes, "
                                    f"expected {NOTICE_BODY.size}")
        return cls(*NOTICE_BODY.unpack_from(payload))


def notice_for(provoking: bytes | bytearray | memoryview, incarnation: int) -> bytes | None:
    """The UNKNOWN_CONN notice answering ``provoking`` (a well-formed datagram header) from
    an end of ``incarnation``, in the provoking datagram's version, CRC-sealed; None when
    it would be larger than ``provoking`` or ``provoking`` is itself a notice (a notice is
    never answered)."""
    view = memoryview(provoking)
    if len(view) < NOTICE_LEN or len(view) < HEADER_LEN or view[1] == T_UNKNOWN_CONN:
        return None
    version, typ, _f, _h, dst, inc, _c, seq, _a, _t, _p = HEADER.unpack_from(view)
    body = Notice(inc, datagram_crc(view), typ).encode()
    return Datagram(T_UNKNOWN_CONN, 0, dst, incarnation, seq, payload=body,
                    version=version).encode()


def challenge_payload(nonce: int) -> bytes:
    """The T_CHALLENGE / T_RESPONSE body: the 64-bit nonce (PATH_CHALLENGE, RFC 9000 §8.2)."""
    return CHALLENGE_BODY.pack(nonce & SEQ_MASK)


def parse_challenge(payload: bytes | memoryview) -> int:
    """The nonce of a T_CHALLENGE / T_RESPONSE body."""
    if len(payload) != CHALLENGE_BODY.size:
        raise MalformedDatagram(f"challenge body of {len(payload)} bytes, "
                                f"expected {CHALLENGE_BODY.size}")
    nonce: int = CHALLENGE_BODY.unpack_from(payload)[0]
    return nonce


def ping_payload() -> bytes:
    """The T_PING body: 12 zero bytes, so that a PING may provoke a notice."""
    return PING_BODY.pack()


def version_reply(echo_dst_conn: int, echo_incarnation: int,
                  versions: Iterable[int] = SUPPORTED_VERSIONS) -> bytes:
    """The VERSION reply to a datagram of a version this end does not speak (RFC 9000 §6):
    it echoes the datagram's bytes [4:12] and lists ``versions``."""
    wanted = tuple(versions)
    if not 1 <= len(wanted) <= 255 or not all(isinstance(v, int) and 1 <= v <= 255 for v in wanted):
        raise ValueError(f"a VERSION reply lists 1..255 versions, each 1..255, not {wanted}")
    listed = bytes(wanted)
    out = VERSION_HEAD.pack(VERSION_NEGOTIATION, T_VERSION, len(listed), echo_dst_conn,
                            echo_incarnation) + listed
    return out + struct.pack("!I", crc32c(out))


def parse_version_reply(buf: bytes | bytearray | memoryview) -> tuple[int, int, tuple[int, ...]]:
    """(echo_dst_conn, echo_incarnation, versions) of a VERSION reply."""
    view = memoryview(buf)
    if len(view) < VERSION_HEAD.size:
        raise MalformedDatagram(f"VERSION reply of {len(view)} bytes is shorter than its "
                                f"{VERSION_HEAD.size}-byte head")
    version, typ, count, dst, inc = VERSION_HEAD.unpack_from(view)
    if version != VERSION_NEGOTIATION or typ != T_VERSION:
        raise MalformedDatagram(f"not a VERSION reply (version {version}, type {typ})")
    listed = tuple(view[VERSION_HEAD.size : len(view) - 4])
    if count == 0 or len(view) != VERSION_HEAD.size + count + 4 or VERSION_NEGOTIATION in listed:
        raise MalformedDatagram(f"VERSION reply claims {count} versions in {len(view)} bytes "
                                f"(12 + count + 4 for its CRC32C)")
    if struct.unpack_from("!I", view, len(view) - 4)[0] != crc32c(view[: len(view) - 4]):
        raise MalformedDatagram("VERSION reply with a bad CRC32C")
    return dst, inc, listed
