"""btlcore's wire format as scapy layers, for dissecting captures and building odd frames.

This module is the scapy twin of :mod:`btlcore.wire` (a hypothesis test proves that both
produce and read the same bytes).  It is for tools and tests only: importing scapy costs
about a second and dissecting a frame about 0.4 ms, so the simulator's per-frame path never
touches it.

Layout, as ``wire.py`` documents it::

    BTL          the 36-byte header, then the chunk extension (if F_CHUNK) and the put
                 extension (if F_PUT) as conditional fields of the same layer
    BTLAck       the T_ACK body: window, nranges, ack_flags, ack_delay, SACK ranges
                 (BTLSackRange each)
    BTLHello     the T_HELLO / T_HELLO_ACK body
    BTLPutStatus the body of a T_DATA with F_STATUS (a put status: put_seq, status)
    Raw          any other T_DATA payload

and, for version 2 (``wire.SUPPORTED_VERSIONS``)::

    BTLParam     one transport parameter (type, length, value), a list of which follows a
                 HELLO's address (BTLHello.params)
    BTLClose     the T_CLOSE / T_CLOSE_ACK body
    BTLNotice    the T_UNKNOWN_CONN body
    BTLChallenge the T_CHALLENGE / T_RESPONSE body (the nonce)
    BTLPing      the T_PING body (12 reserved bytes)
    BTLVersion   a whole VERSION reply (version byte 0): BTL dispatches to it, since its
                 layout is not the header's

Binding: UDP port :data:`btlcore.wire.PCAP_UDP_PORT` (either direction) carries BTL, so a
capture of the simulated fabric dissects as Ether / IP / UDP / BTL.

Building: leave ``payload_len`` and ``crc`` unset and ``post_build`` fills them in (the CRC
only when ``flags`` has CRC, as :func:`btlcore.wire.seal` does).  ``flags`` is never
inferred: set CHUNK / PUT yourself when you give those fields, exactly as on the wire.
"""

from __future__ import annotations

import struct
from typing import Any

from scapy.fields import (
    ByteEnumField,
    ByteField,
    ConditionalField,
    FieldLenField,
    FieldListField,
    FlagsField,
    IntField,
    LongField,
    PacketListField,
    ShortEnumField,
    ShortField,
    StrFixedLenField,
    StrLenField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from btlcore.protocol import wire

FLAG_NAMES = ["ACK", "CHUNK", "PUT", "CRC", "STATUS"]  # bit 0 first, matching wire.F_*
ACK_FLAG_NAMES = ["TRUNCATED", "DUPLICATE"]  # wire.AF_*


class BTLSackRange(Packet):
    """One SACK range: seqs ack+start .. ack+start+length-1 were received."""

    name = "btlcore SACK range"
    fields_desc = [IntField("start", 0), IntField("length", 0)]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


class BTL(Packet):
    """The btlcore header with its optional chunk and put extensions."""

    name = "btlcore"
    fields_desc = [
        ByteField("version", wire.WIRE_VERSION),
        ByteEnumField("type", wire.T_DATA, wire.TYPE_NAMES),
        FlagsField("flags", 0, 8, FLAG_NAMES),
        ByteField("hello_flags", 0),
        IntField("dst_conn", 0),
        XIntField("src_incarnation", 0),
        XIntField("crc", None),
        LongField("seq", 0),
        LongField("ack", 0),
        ShortField("tag", 0),
        ShortField("payload_len", None),
        ConditionalField(IntField("msg_id", 0), lambda p: bool(int(p.flags) & wire.F_CHUNK)),
        ConditionalField(IntField("msg_len", 0), lambda p: bool(int(p.flags) & wire.F_CHUNK)),
        ConditionalField(IntField("offset", 0), lambda p: bool(int(p.flags) & wire.F_CHUNK)),
        ConditionalField(IntField("put_key", 0), lambda p: bool(int(p.flags) & wire.F_PUT)),
        ConditionalField(LongField("put_offset", 0), lambda p: bool(int(p.flags) & wire.F_PUT)),
    ]

    @classmethod
    def dispatch_hook(cls, _pkt: bytes | None = None, *args: Any, **kargs: Any) -> Any:
        # a VERSION reply (version byte 0) is not a header followed by a body
        if _pkt and _pkt[0] == wire.VERSION_NEGOTIATION:
            return BTLVersion
        return cls

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.payload_len is None:
            pkt = pkt[:34] + struct.pack("!H", len(pay)) + pkt[36:]
        if self.crc is None:
            crc = 0
            if int(self.flags) & wire.F_CRC:
                crc = wire.datagram_crc(pkt + pay)
            pkt = pkt[: wire.CRC_OFFSET] + struct.pack("!I", crc) + pkt[wire.CRC_OFFSET + 4 :]
        return pkt + pay

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        # payload_len bounds the body; anything after it (Ethernet padding) is not ours
        if self.payload_len is None:
            return s, b""
        return s[: self.payload_len], s[self.payload_len :]

    def guess_payload_class(self, payload: bytes) -> Any:
        # a put status is told by a flag, not by the type: bind_layers cannot express it
        if self.type == wire.T_DATA and int(self.flags) & wire.F_STATUS:
            return BTLPutStatus
        return super().guess_payload_class(payload)

    def crc_ok(self) -> bool:
        """True if the frame carries no CRC or a correct one (as :func:`wire.crc_ok`)."""
        return wire.crc_ok(bytes(self))

    def mysummary(self) -> str:
        return self.sprintf("btlcore %BTL.type% seq=%BTL.seq% ack=%BTL.ack% flags=%BTL.flags%")


class BTLAck(Packet):
    """The T_ACK body: the advertised window, ACK flags, the ACK delay (microseconds) and
    the SACK ranges above the cumulative ACK."""

    name = "btlcore ACK"
    fields_desc = [
        IntField("window", 0),
        FieldLenField("nranges", None, fmt="B", count_of="ranges"),
        FlagsField("ack_flags", 0, 8, ACK_FLAG_NAMES),
        XShortField("reserved", 0),
        IntField("ack_delay", 0),
        PacketListField("ranges", [], BTLSackRange, count_from=lambda p: p.nranges),
    ]


class BTLParam(Packet):
    """One transport parameter: type (wire.TP_*; unknown ones are kept as bytes), length,
    value."""

    name = "btlcore transport parameter"
    fields_desc = [
        XShortField("type", 0),
        FieldLenField("length", None, fmt="H", length_of="value"),
        StrLenField("value", b"", length_from=lambda p: p.length),
    ]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


class BTLHello(Packet):
    """The T_HELLO / T_HELLO_ACK body."""

    name = "btlcore HELLO"
    fields_desc = [
        XIntField("incarnation", 0),
        IntField("conn_id", 0),
        LongField("isn", 0),
        XIntField("echo_incarnation", 0),
        IntField("window", 0),
        IntField("max_ack_delay", 0),
        FieldLenField("addr_len", None, fmt="H", length_of="address"),
        StrLenField("address", b"", length_from=lambda p: p.addr_len),
        PacketListField("params", [], BTLParam),
    ]


class BTLClose(Packet):
    """The T_CLOSE / T_CLOSE_ACK body: the sender's conn id, the receiver's incarnation, the
    reason (wire.CR_*)."""

    name = "btlcore CLOSE"
    fields_desc = [
        IntField("conn_id", 0),
        XIntField("echo_incarnation", 0),
        ShortEnumField("reason", wire.CR_CLOSED, wire.CLOSE_REASON_NAMES),
        XShortField("reserved", 0),
    ]


class BTLNotice(Packet):
    """The T_UNKNOWN_CONN body: what the provoking datagram's sender alone can check."""

    name = "btlcore unknown-connection notice"
    fields_desc = [
        XIntField("echo_incarnation", 0),
        XIntField("echo_digest", 0),
        ByteEnumField("echo_type", 0, wire.TYPE_NAMES),
        XByteField("reserved0", 0),
        XShortField("reserved1", 0),
    ]


class BTLChallenge(Packet):
    """The T_CHALLENGE / T_RESPONSE body: a 64-bit nonce (echoed by the RESPONSE)."""

    name = "btlcore CHALLENGE"
    fields_desc = [XLongField("nonce", 0)]


class BTLPing(Packet):
    """The T_PING body: reserved bytes that make a PING as large as a notice."""

    name = "btlcore PING"
    fields_desc = [StrFixedLenField("reserved", bytes(wire.PING_BODY.size), wire.PING_BODY.size)]


class BTLVersion(Packet):
    """A VERSION reply: version byte 0, the provoking datagram's ids echoed, the versions
    this end speaks (one byte each), and a CRC32C of all that (left unset, ``post_build``
    fills it in)."""

    name = "btlcore VERSION"
    fields_desc = [
        ByteField("version", wire.VERSION_NEGOTIATION),
        ByteEnumField("type", wire.T_VERSION, wire.TYPE_NAMES),
        FieldLenField("count", None, fmt="B", count_of="versions"),
        XByteField("reserved", 0),
        IntField("echo_dst_conn", 0),
        XIntField("echo_incarnation", 0),
        FieldListField("versions", [], ByteField("", 0), count_from=lambda p: p.count),
        XIntField("crc", None),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.crc is None:
            pkt = pkt[:-4] + struct.pack("!I", wire.crc32c(pkt[:-4]))
        return pkt + pay


class BTLPutStatus(Packet):
    """A put status (the payload of a T_DATA with F_STATUS): the seq of the put's last
    segment and how the receiver took the put (wire.PS_*)."""

    name = "btlcore put status"
    fields_desc = [
        LongField("put_seq", 0),
        ByteEnumField("status", wire.PS_LANDED, wire.PUT_STATUS_NAMES),
        XByteField("reserved0", 0),
        XShortField("reserved1", 0),
    ]


bind_layers(UDP, BTL, dport=wire.PCAP_UDP_PORT)
bind_layers(UDP, BTL, sport=wire.PCAP_UDP_PORT)
bind_layers(BTL, BTLAck, type=wire.T_ACK)
bind_layers(BTL, BTLHello, type=wire.T_HELLO)
bind_layers(BTL, BTLHello, type=wire.T_HELLO_ACK)
bind_layers(BTL, BTLClose, type=wire.T_CLOSE)
bind_layers(BTL, BTLClose, type=wire.T_CLOSE_ACK)
bind_layers(BTL, BTLNotice, type=wire.T_UNKNOWN_CONN)
bind_layers(BTL, BTLChallenge, type=wire.T_CHALLENGE)
bind_layers(BTL, BTLChallenge, type=wire.T_RESPONSE)
bind_layers(BTL, BTLPing, type=wire.T_PING)


def dissect(frame: bytes | bytearray | memoryview) -> BTL:
    """A btlcore datagram (no Ether/IP/UDP in front) as a scapy packet."""
    return BTL(bytes(frame))


def fields(pkt: Packet) -> dict[str, Any]:
    """The btlcore fields of a dissected packet, named as :class:`wire.Datagram` names them
    (plus ``window``/``ack_flags``/``ack_delay``/``ranges`` for an ACK body, ``hello`` for
    a HELLO, ``put_seq``/``status`` for a put status, ``close`` for a CLOSE / CLOSE_ACK,
    ``notice`` for an UNKNOWN_CONN, ``nonce`` for a CHALLENGE / RESPONSE; a VERSION reply
    gives version, type, dst_conn, src_incarnation and ``versions``)."""
    if BTLVersion in pkt:
        reply = pkt[BTLVersion]
        return {"version": reply.version, "type": reply.type, "dst_conn": reply.echo_dst_conn,
                "src_incarnation": reply.echo_incarnation, "versions": tuple(reply.versions)}
    btl = pkt[BTL]
    flags = int(btl.flags)
    out: dict[str, Any] = {
        "version": btl.version,
        "type": btl.type,
        "flags": flags,
        "dst_conn": btl.dst_conn,
        "src_incarnation": btl.src_incarnation,
        "crc": btl.crc,
        "seq": btl.seq,
        "ack": btl.ack,
        "tag": btl.tag,
        "payload_len": btl.payload_len,
        "msg_id": btl.msg_id if flags & wire.F_CHUNK else None,
        "msg_len": btl.msg_len if flags & wire.F_CHUNK else None,
        "offset": btl.offset if flags & wire.F_CHUNK else None,
        "put_key": btl.put_key if flags & wire.F_PUT else None,
        "put_offset": btl.put_offset if flags & wire.F_PUT else None,
        "payload": bytes(btl.payload),
    }
    if BTLAck in btl:
        ack = btl[BTLAck]
        out["window"] = ack.window
        out["ack_delay"] = ack.ack_delay
        out["ack_flags"] = int(ack.ack_flags)
        out["ranges"] = [(r.start, r.length) for r in ack.ranges]
    if BTLPutStatus in btl:
        status = btl[BTLPutStatus]
        out["put_seq"] = status.put_seq
        out["status"] = status.status
    if BTLHello in btl:
        hello = btl[BTLHello]
        params = None
        if hello.params:
            block = b"".join(bytes(p) for p in hello.params)
            params = wire.TransportParameters.decode(block)
        out["hello"] = wire.Hello(hello.incarnation, hello.conn_id, hello.isn,
                                  hello.echo_incarnation, hello.window, bytes(hello.address),
                                  hello.max_ack_delay, params)
    if BTLClose in btl:
        close = btl[BTLClose]
        out["close"] = wire.Close(close.conn_id, close.echo_incarnation, close.reason)
    if BTLNotice in btl:
        notice = btl[BTLNotice]
        out["notice"] = wire.Notice(notice.echo_incarnation, notice.echo_digest,
                                    notice.echo_type)
    if BTLChallenge in btl:
        out["nonce"] = btl[BTLChallenge].nonce
    return out
