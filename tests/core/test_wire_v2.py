"""The wire format's second version as a codec: transport parameters, CLOSE / CLOSE_ACK,
the unknown-connection notice, CHALLENGE / RESPONSE, PING and the VERSION reply: layouts,
round trips and every MalformedDatagram path."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from btlcore.protocol import wire
from btlcore.protocol.wire import (
    HEADER_LEN,
    NOTICE_LEN,
    PARAM_HEAD,
    T_CHALLENGE,
    T_CLOSE,
    T_CLOSE_ACK,
    T_PING,
    T_RESPONSE,
    T_UNKNOWN_CONN,
    T_VERSION,
    Close,
    Datagram,
    Hello,
    MalformedDatagram,
    Notice,
    TransportParameters,
    decode,
)

V2 = (2,)
u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)


@st.composite
def transport_parameters(draw: st.DrawFn) -> TransportParameters:
    return TransportParameters(draw(st.integers(61, 2**32 - 1)), draw(st.integers(1, 2**32 - 1)),
                               draw(u32), draw(u64))


def test_v1_codes_unchanged_and_v2_codes_distinct() -> None:
    assert (wire.T_DATA, wire.T_ACK, wire.T_HELLO, wire.T_HELLO_ACK) == (1, 2, 3, 4)
    assert wire.WIRE_VERSION == 2 and wire.SUPPORTED_VERSIONS == (2,)
    assert len(set(wire.TYPE_NAMES)) == len(wire.TYPE_NAMES) == 11
    assert wire.TYPES_BY_VERSION[1] < wire.TYPES_BY_VERSION[2]
    assert T_VERSION not in wire.TYPES_BY_VERSION[2]  # only with version byte 0


def test_sizes() -> None:
    assert (wire.CLOSE_BODY.size, wire.NOTICE_BODY.size, wire.CHALLENGE_BODY.size,
            wire.PING_BODY.size, wire.VERSION_HEAD.size, PARAM_HEAD.size) == (12, 12, 8, 12, 12, 4)
    assert NOTICE_LEN == 48 == HEADER_LEN + wire.PING_BODY.size  # a PING may provoke a notice


# ------------------------------------------------------------------------------ transport parameters


def test_transport_parameters_layout() -> None:
    tp = TransportParameters(max_datagram_size=1500, max_message_size=1 << 20,
                             peer_timeout_ms=10_000, window_bytes=16 << 20)
    assert tp.encode() == bytes.fromhex(
        "0001 0004 000005dc"
        "0002 0004 00100000"
        "0003 0004 00002710"
        "0004 0008 0000000001000000")
    assert TransportParameters.decode(b"") == TransportParameters()


@settings(max_examples=200, deadline=None)
@given(transport_parameters(), st.lists(st.tuples(st.integers(5, 0xFFFF), st.binary(max_size=20)),
                                        max_size=4), st.randoms())
def test_transport_parameters_round_trip_skipping_unknown(tp, unknown, rnd) -> None:
    params = [tp.encode()[i:i + 8 if i < 24 else i + 12] for i in (0, 8, 16, 24)]
    params += [PARAM_HEAD.pack(t, len(v)) + v for t, v in unknown]
    rnd.shuffle(params)  # any order, unknown types anywhere
    assert TransportParameters.decode(b"".join(params)) == tp


@pytest.mark.parametrize("block, match", [
    (b"\x00", "header truncated at byte 0"),
    (bytes.fromhex("0001 0004 000005"), "runs 1 bytes past the block"),
    (bytes.fromhex("0099 0005 00"), "runs 4 bytes past the block"),
    (bytes.fromhex("0001 0004 000005dc 0001 0004 000005dc"), "max_datagram_size appears twice"),
    (bytes.fromhex("0003 0008 0000000000002710"), "peer_timeout_ms is 4 bytes, not 8"),
    (bytes.fromhex("0001 0004 0000003c"), "max_datagram_size = 60 is outside 61.."),
    (bytes.fromhex("0002 0004 00000000"), "max_message_size = 0 is outside 1.."),
])
def test_transport_parameters_malformed(block: bytes, match: str) -> None:
    with pytest.raises(MalformedDatagram, match=match):
        TransportParameters.decode(block)


@pytest.mark.parametrize("kwargs", [{"max_datagram_size": 60}, {"max_message_size": 2**32},
                                    {"peer_timeout_ms": -1}, {"window_bytes": 2**64},
                                    {"max_message_size": 1.5}, {"peer_timeout_ms": True}])
def test_transport_parameters_refuse_bad_values_at_construction(kwargs: dict) -> None:
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"transport parameter {name} must be an int in"):
        TransportParameters(**kwargs)


@settings(max_examples=100, deadline=None)
@given(u32, u32, u64, u32, u32, st.binary(max_size=64), u32, st.none() | transport_parameters())
def test_hello_with_params_round_trip(inc, conn, isn, echo, window, address, delay, tp) -> None:
    h = Hello(inc, conn, isn, echo, window, address, delay, tp)
    raw = h.encode()
    assert len(raw) == 30 + len(address) + (36 if tp is not None else 0)
    assert Hello.decode(raw) == h
    # the version-1 body is the version-2 body's prefix
    assert raw[:30 + len(address)] == Hello(inc, conn, isn, echo, window, address, delay).encode()


def test_hello_with_a_malformed_block() -> None:
    raw = Hello(1, 2, 3, 4, 5, b"addr", 6, TransportParameters()).encode()
    with pytest.raises(MalformedDatagram, match="address length 4 leaves 35 bytes: .*runs 1 bytes"):
        Hello.decode(raw[:-1])
    with pytest.raises(MalformedDatagram, match="appears twice"):
        Hello.decode(raw + raw[34:42])


# ------------------------------------------------------------------------------ bodies


def _v2(typ: int, payload: bytes, **kw: int) -> bytes:
    return Datagram(typ, payload=payload, version=2, **kw).encode()


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([T_CLOSE, T_CLOSE_ACK]), u32, u32, u32, u32, st.integers(0, 0xFFFF))
def test_close_round_trip(typ, dst, inc, conn, echo, reason) -> None:
    body = Close(conn, echo, reason)
    raw = _v2(typ, body.encode(), dst_conn=dst, src_incarnation=inc)
    assert len(raw) == 48
    dg = decode(raw, versions=V2)
    assert (dg.type, dg.dst_conn, dg.src_incarnation, dg.version) == (typ, dst, inc, 2)
    assert Close.decode(dg.payload) == body
    assert dg.encode() == raw


def test_close_ack_echoes_the_close() -> None:
    """What a CLOSE_ACK echoes is exactly what its CLOSE named (the layout lets it)."""
    close = decode(_v2(T_CLOSE, Close(0xA1, 0xB2, wire.CR_DISCONNECT).encode(), dst_conn=0xC3,
                       src_incarnation=0xD4), versions=V2)
    body = Close.decode(close.payload)
    ack = Datagram(T_CLOSE_ACK, dst_conn=body.conn_id, src_incarnation=body.echo_incarnation,
                   payload=Close(close.dst_conn, close.src_incarnation, body.reason).encode(),
                   version=2)
    back = decode(ack.encode(), versions=V2)
    assert (back.dst_conn, Close.decode(back.payload)) == (0xA1, Close(0xC3, 0xD4, wire.CR_DISCONNECT))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([T_CHALLENGE, T_RESPONSE]), u64)
def test_challenge_round_trip(typ: int, nonce: int) -> None:
    raw = _v2(typ, wire.challenge_payload(nonce), dst_conn=7, src_incarnation=9)
    assert len(raw) == 44
    assert wire.parse_challenge(decode(raw, versions=V2).payload) == nonce


def test_ping_is_a_notice_long() -> None:
    raw = _v2(T_PING, wire.ping_payload(), dst_conn=7, src_incarnation=9)
    assert len(raw) == NOTICE_LEN and decode(raw, versions=V2).payload == bytes(12)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(wire.TYPES_BY_VERSION[2])), u32, u32, u64, st.binary(max_size=100),
       u32)
def test_notice_echoes_the_provoking_datagram(typ, dst, inc, seq, payload, me) -> None:
    if typ in wire.BODY_SIZE:
        payload = bytes(wire.BODY_SIZE[typ])
    provoking = _v2(typ, payload, dst_conn=dst, src_incarnation=inc, seq=seq)
    raw = wire.notice_for(provoking, me)
    if typ == T_UNKNOWN_CONN or len(provoking) < NOTICE_LEN:
        assert raw is None  # never answers a notice, never larger than what provoked it
        return
    assert raw is not None and len(raw) == NOTICE_LEN <= len(provoking) and wire.crc_ok(raw)
    dg = decode(raw, versions=V2)
    assert (dg.type, dg.dst_conn, dg.src_incarnation, dg.seq) == (T_UNKNOWN_CONN, dst, me, seq)
    assert Notice.decode(dg.payload) == Notice(inc, wire.datagram_crc(provoking), typ)


@pytest.mark.parametrize("typ", sorted(wire.BODY_SIZE))
def test_v2_bodies_malformed(typ: int) -> None:
    size = wire.BODY_SIZE[typ]
    for n in (0, size - 1, size + 1):
        with pytest.raises(MalformedDatagram, match=f"body is {size} bytes, not {n}"):
            decode(_v2(typ, bytes(n)), versions=V2)
    for flag in (wire.F_CHUNK, wire.F_PUT, wire.F_STATUS):
        raw = bytearray(_v2(typ, bytes(size)))
        raw[2] |= flag
        if flag != wire.F_STATUS:  # the extension's bytes, so only the flag is wrong
            raw[34:36] = struct.pack("!H", size)
        with pytest.raises(MalformedDatagram, match="takes only ACK and CRC"):
            decode(bytes(raw), versions=V2)
    parse = {T_CLOSE: Close.decode, T_CLOSE_ACK: Close.decode, T_UNKNOWN_CONN: Notice.decode,
             T_CHALLENGE: wire.parse_challenge, T_RESPONSE: wire.parse_challenge}.get(typ)
    if parse is not None:
        with pytest.raises(MalformedDatagram, match=f"expected {size}"):
            parse(bytes(size + 1))


def test_v2_types_are_unknown_in_version_1_and_version_1_is_refused_by_default() -> None:
    raw = bytearray(_v2(T_CLOSE, Close(1, 2).encode()))
    assert decode(raw).type == T_CLOSE  # version 2 is the default now
    raw[0] = 1
    with pytest.raises(MalformedDatagram, match="wire version 1, expected 2"):
        decode(raw)
    with pytest.raises(MalformedDatagram, match="unknown type 5 in version 1"):
        decode(raw, versions=(1, 2))
    assert decode(_v2(wire.T_DATA, b"x"), versions=(1, 2)).version == 2


# ------------------------------------------------------------------------------ VERSION reply


def test_version_reply_layout() -> None:
    raw = wire.version_reply(0x11223344, 0x55667788)
    assert raw == bytes.fromhex("00 0b 01 00 11223344 55667788 02 301deb7c")  # (its CRC32C last)
    dg = decode(raw)  # whatever versions the reader speaks
    assert (dg.version, dg.type, dg.dst_conn, dg.src_incarnation, dg.payload) == \
        (0, T_VERSION, 0x11223344, 0x55667788, b"\x02")
    assert dg.encode() == raw
    assert wire.parse_version_reply(raw) == (0x11223344, 0x55667788, (2,))


@settings(max_examples=100, deadline=None)
@given(u32, u32, st.lists(st.integers(1, 255), min_size=1, max_size=255))
def test_version_reply_round_trip(dst: int, inc: int, versions: list[int]) -> None:
    raw = wire.version_reply(dst, inc, versions)
    assert len(raw) == 12 + len(versions) + 4
    assert wire.parse_version_reply(raw) == (dst, inc, tuple(versions))
    assert decode(raw, versions=()).payload == bytes(versions)


@pytest.mark.parametrize("raw, match", [
    (bytes.fromhex("00 0b 01 00 00000001 000000"), "shorter than its 12-byte head"),
    (bytes.fromhex("00 0b 02 00 00000001 00000002 02"), "claims 2 versions"),
    (bytes.fromhex("00 0b 01 00 00000001 00000002 0203"), "claims 1 versions"),
    (bytes.fromhex("00 0b 00 00 00000001 00000002"), "claims 0 versions"),
    (bytes.fromhex("00 0b 01 00 00000001 00000002 00"), "claims 1 versions"),
    (bytes.fromhex("00 01 01 00 00000001 00000002 02"), "not a VERSION reply"),
    (bytes.fromhex("00 0b 01 00 11223344 55667788 03 301deb7c"), "bad CRC32C"),  # a corrupted list
])
def test_version_reply_malformed(raw: bytes, match: str) -> None:
    with pytest.raises(MalformedDatagram, match=match):
        decode(raw)


@pytest.mark.parametrize("versions", [(), (0,), (0, 2), (2, 256), tuple(range(1, 256)) * 2])
def test_version_reply_refuses_bad_lists(versions: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="lists 1..255 versions"):
        wire.version_reply(1, 2, versions)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_decode_garbage_only_raises_malformed_in_every_version(data: bytes) -> None:
    for versions in ((1,), (2,), (1, 2)):
        try:
            decode(data, versions=versions)
        except MalformedDatagram:
            pass
    try:
        TransportParameters.decode(data)
    except MalformedDatagram:
        pass
