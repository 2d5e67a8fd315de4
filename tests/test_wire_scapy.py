"""``btlcore.protocol.wire`` and the scapy layers of ``btlcore_sim.layers`` agree, both ways:
a datagram encoded by wire equals the one scapy builds from the same fields (CRC included),
and scapy dissects wire's bytes back to the same fields (as wire.decode reads them)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from btlcore.protocol import wire

layers = pytest.importorskip("btlcore_sim.layers")
scapy_all = pytest.importorskip("scapy.all")

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, wire.U32_MASK)
u64 = st.integers(0, wire.SEQ_MASK)


@st.composite
def ack_bodies(draw: st.DrawFn) -> tuple[bytes, dict]:
    ranges = draw(st.lists(st.tuples(u32, u32), max_size=wire.MAX_SACK_RANGES))
    window, delay = draw(u32), draw(u32)
    flags = draw(st.sampled_from([0, wire.AF_TRUNCATED, wire.AF_DUPLICATE,
                                  wire.AF_TRUNCATED | wire.AF_DUPLICATE]))
    body = wire.ack_payload(window, ranges, delay, flags)
    layer = layers.BTLAck(window=window, ack_flags=flags, ack_delay=delay,
                          ranges=[layers.BTLSackRange(start=s, length=n) for s, n in ranges])
    return body, {"layer": layer, "window": window, "ack_delay": delay, "ack_flags": flags,
                  "ranges": ranges}


@st.composite
def hello_bodies(draw: st.DrawFn) -> tuple[bytes, dict]:
    hello = wire.Hello(draw(u32), draw(u32), draw(u64), draw(u32), draw(u32),
                       draw(st.binary(max_size=64)), draw(u32))
    layer = layers.BTLHello(incarnation=hello.incarnation, conn_id=hello.conn_id, isn=hello.isn,
                            echo_incarnation=hello.echo_incarnation, window=hello.window,
                            max_ack_delay=hello.max_ack_delay_us, address=hello.address)
    return hello.encode(), {"layer": layer, "hello": hello}


@st.composite
def datagrams(draw: st.DrawFn) -> tuple[wire.Datagram, object, dict]:
    """A datagram, the scapy packet built from the same fields, and the body's fields."""
    # the four types of variable body (the fixed-body types of version 2: v2 tests below)
    typ = draw(st.sampled_from(sorted(wire.TYPES_BY_VERSION[1])))
    if typ == wire.T_ACK:
        payload, body = draw(ack_bodies())
    elif typ in (wire.T_HELLO, wire.T_HELLO_ACK):
        payload, body = draw(hello_bodies())
    elif draw(st.booleans()):  # a put status: F_STATUS, its body, no extension
        put_seq, status = draw(u64), draw(u8)
        payload = wire.put_status_payload(put_seq, status)
        body = {"layer": layers.BTLPutStatus(put_seq=put_seq, status=status),
                "put_seq": put_seq, "status": status}
        dg = wire.Datagram(
            typ, flags=draw(st.sampled_from([0, wire.F_ACK])) | wire.F_STATUS, dst_conn=draw(u32),
            src_incarnation=draw(u32), seq=draw(u64), ack=draw(u64), tag=draw(u16), payload=payload)
        return dg, body, {"chunk": None, "put": None}
    else:
        payload = draw(st.binary(max_size=300))
        body = {"layer": scapy_all.Raw(payload) if payload else None}
    chunk = draw(st.none() | st.tuples(u32, u32, u32))
    put = draw(st.none() | st.tuples(u32, u64))
    dg = wire.Datagram(
        typ, flags=draw(st.sampled_from([0, wire.F_ACK])), dst_conn=draw(u32),
        src_incarnation=draw(u32), seq=draw(u64), ack=draw(u64), tag=draw(u16),
        msg_id=chunk and chunk[0], msg_len=chunk and chunk[1], offset=chunk and chunk[2],
        put_key=put and put[0], put_offset=put and put[1], payload=payload)
    return dg, body, {"chunk": chunk, "put": put}


def _scapy_build(dg: wire.Datagram, body: dict, ext: dict, with_crc: bool) -> object:
    flags = dg.flags | (wire.F_CHUNK if ext["chunk"] else 0) | (wire.F_PUT if ext["put"] else 0)
    flags |= wire.F_CRC if with_crc else 0
    extra = {}
    if ext["chunk"]:
        extra.update(msg_id=dg.msg_id, msg_len=dg.msg_len, offset=dg.offset)
    if ext["put"]:
        extra.update(put_key=dg.put_key, put_offset=dg.put_offset)
    pkt = layers.BTL(type=dg.type, flags=flags, dst_conn=dg.dst_conn,
                     src_incarnation=dg.src_incarnation, seq=dg.seq, ack=dg.ack, tag=dg.tag, **extra)
    return pkt / body["layer"] if body["layer"] is not None else pkt


@settings(max_examples=300, deadline=None)
@given(datagrams(), st.booleans())
def test_scapy_builds_the_bytes_wire_encodes(case: tuple, with_crc: bool) -> None:
    dg, body, ext = case
    encoded = dg.encode(with_crc=with_crc)
    built = bytes(_scapy_build(dg, body, ext, with_crc))
    assert built == encoded
    assert wire.crc_ok(built)


@settings(max_examples=300, deadline=None)
@given(datagrams(), st.booleans())
def test_scapy_dissects_what_wire_encodes(case: tuple, with_crc: bool) -> None:
    dg, body, ext = case
    encoded = dg.encode(with_crc=with_crc)
    decoded = wire.decode(encoded)
    pkt = layers.dissect(encoded)
    got = layers.fields(pkt)
    for name in ("version", "type", "flags", "dst_conn", "src_incarnation", "crc", "seq", "ack",
                 "tag", "msg_id", "msg_len", "offset", "put_key", "put_offset", "payload"):
        assert got[name] == getattr(decoded, name), name
    assert got["payload_len"] == len(dg.payload)
    if not with_crc:
        assert got["crc"] == 0
    if dg.type == wire.T_ACK:
        parsed = wire.parse_ack_payload(decoded.payload)  # (window, ranges, delay, flags)
        assert (got["window"], got["ranges"], got["ack_delay"], got["ack_flags"]) == parsed
        assert parsed == (body["window"], body["ranges"], body["ack_delay"], body["ack_flags"])
    if dg.type in (wire.T_HELLO, wire.T_HELLO_ACK):
        assert got["hello"] == wire.Hello.decode(decoded.payload) == body["hello"]
    if dg.flags & wire.F_STATUS:
        assert decoded.flags & wire.F_STATUS and got["flags"] & wire.F_STATUS
        parsed = wire.parse_put_status(decoded.payload)
        assert (got["put_seq"], got["status"]) == parsed == (body["put_seq"], body["status"])
    else:
        assert "put_seq" not in got
    # and scapy rebuilds the dissected packet byte for byte
    assert bytes(pkt) == encoded


@settings(max_examples=100, deadline=None)
@given(datagrams())
def test_a_capture_frame_dissects_as_ether_ip_udp_btlcore(case: tuple) -> None:
    dg, _, _ = case
    encoded = dg.encode()
    for sport, dport in ((wire.PCAP_UDP_PORT, 40000), (40000, wire.PCAP_UDP_PORT)):
        frame = bytes(scapy_all.Ether() / scapy_all.IP() / scapy_all.UDP(sport=sport, dport=dport)
                      / scapy_all.Raw(encoded))
        pkt = scapy_all.Ether(frame)
        assert pkt.haslayer(layers.BTL)
        assert bytes(pkt[layers.BTL]) == encoded


def test_scapy_checks_the_crc_as_wire_does() -> None:
    good = wire.Datagram(wire.T_DATA, seq=5, payload=b"hello").encode()
    assert layers.dissect(good).crc_ok()
    bad = bytearray(good)
    bad[-1] ^= 1
    assert not layers.dissect(bytes(bad)).crc_ok()
    assert not wire.crc_ok(bytes(bad))


def test_ack_layer_follows_the_wire_body_layout() -> None:
    """The fixed part of BTLAck is wire.ACK_BODY's size (catches a wire change)."""
    assert len(layers.BTLAck()) == wire.ACK_BODY.size
    assert len(layers.BTLHello()) == wire.HELLO_BODY.size
    assert len(layers.BTLPutStatus()) == wire.PUT_STATUS.size


def test_flag_names_follow_wire() -> None:
    for i, name in enumerate(layers.FLAG_NAMES):
        assert getattr(wire, f"F_{name}") == 1 << i
    assert (1 << len(layers.FLAG_NAMES)) - 1 == wire.KNOWN_FLAGS
    assert len(layers.BTL()) == wire.HEADER_LEN


# ------------------------------------------------------------------------------ version 2


@st.composite
def transport_parameters(draw: st.DrawFn) -> object:
    return wire.TransportParameters(draw(st.integers(61, wire.U32_MASK)),
                                    draw(st.integers(1, wire.U32_MASK)), draw(u32), draw(u64))


def _param_layers(tp: object) -> list:
    return [layers.BTLParam(type=typ, value=getattr(tp, name).to_bytes(width, "big"))
            for typ, (name, width, _, _) in sorted(wire.PARAM_SPECS.items())]


@st.composite
def v2_datagrams(draw: st.DrawFn) -> tuple[bytes, object, dict]:
    """A version-2 datagram as wire encodes it, the scapy packet built from the same
    fields, and the fields layers.fields() must read back."""
    typ = draw(st.sampled_from(sorted(wire.TYPES_BY_VERSION[2] - wire.TYPES_BY_VERSION[1])
                               + [wire.T_HELLO, wire.T_HELLO_ACK, wire.T_VERSION]))
    dst, inc, seq = draw(u32), draw(u32), draw(u64)
    if typ == wire.T_VERSION:
        versions = draw(st.lists(st.integers(1, 255), min_size=1, max_size=8))
        return (wire.version_reply(dst, inc, versions),
                layers.BTLVersion(echo_dst_conn=dst, echo_incarnation=inc, versions=versions),
                {"version": 0, "type": typ, "dst_conn": dst, "src_incarnation": inc,
                 "versions": tuple(versions)})
    want: dict = {}
    if typ in (wire.T_HELLO, wire.T_HELLO_ACK):
        tp = draw(transport_parameters())
        hello = wire.Hello(draw(u32), draw(u32), draw(u64), draw(u32), draw(u32),
                           draw(st.binary(max_size=32)), draw(u32), tp)
        payload = hello.encode()
        body = layers.BTLHello(incarnation=hello.incarnation, conn_id=hello.conn_id, isn=hello.isn,
                               echo_incarnation=hello.echo_incarnation, window=hello.window,
                               max_ack_delay=hello.max_ack_delay_us, address=hello.address,
                               params=_param_layers(tp))
        want["hello"] = hello
    elif typ in (wire.T_CLOSE, wire.T_CLOSE_ACK):
        close = wire.Close(draw(u32), draw(u32), draw(u16))
        payload = close.encode()
        body = layers.BTLClose(conn_id=close.conn_id, echo_incarnation=close.echo_incarnation,
                               reason=close.reason)
        want["close"] = close
    elif typ == wire.T_UNKNOWN_CONN:
        notice = wire.Notice(draw(u32), draw(u32), draw(u8))
        payload = notice.encode()
        body = layers.BTLNotice(echo_incarnation=notice.echo_incarnation,
                                echo_digest=notice.echo_digest, echo_type=notice.echo_type)
        want["notice"] = notice
    elif typ in (wire.T_CHALLENGE, wire.T_RESPONSE):
        nonce = draw(u64)
        payload = wire.challenge_payload(nonce)
        body = layers.BTLChallenge(nonce=nonce)
        want["nonce"] = nonce
    else:
        payload = wire.ping_payload()
        body = layers.BTLPing()
    flags = draw(st.sampled_from([0, wire.F_ACK])) | wire.F_CRC
    encoded = wire.Datagram(typ, flags, dst, inc, seq, payload=payload, version=2).encode()
    pkt = layers.BTL(version=2, type=typ, flags=flags, dst_conn=dst, src_incarnation=inc,
                     seq=seq) / body
    want.update(version=2, type=typ, flags=flags, dst_conn=dst, src_incarnation=inc, seq=seq,
                payload=payload)
    return encoded, pkt, want


@settings(max_examples=300, deadline=None)
@given(v2_datagrams())
def test_scapy_builds_and_dissects_the_v2_bytes_wire_encodes(case: tuple) -> None:
    encoded, pkt, want = case
    assert bytes(pkt) == encoded
    decoded = wire.decode(encoded, versions=wire.SUPPORTED_VERSIONS)
    dissected = layers.dissect(encoded)
    got = layers.fields(dissected)
    for name, value in want.items():
        assert got[name] == value, name
    if decoded.version == wire.VERSION_NEGOTIATION:
        assert wire.parse_version_reply(encoded) == (got["dst_conn"], got["src_incarnation"],
                                                     got["versions"])
    else:
        assert (decoded.type, decoded.flags, decoded.dst_conn, decoded.seq, decoded.payload) == \
            (got["type"], got["flags"], got["dst_conn"], got["seq"], got["payload"])
        assert wire.crc_ok(encoded) and dissected.crc_ok()
    assert bytes(dissected) == encoded


@settings(max_examples=50, deadline=None)
@given(v2_datagrams())
def test_a_v2_capture_frame_dissects_as_ether_ip_udp_btlcore(case: tuple) -> None:
    encoded, _, want = case
    frame = bytes(scapy_all.Ether() / scapy_all.IP()
                  / scapy_all.UDP(sport=40000, dport=wire.PCAP_UDP_PORT) / scapy_all.Raw(encoded))
    pkt = scapy_all.Ether(frame)
    top = layers.BTLVersion if want["type"] == wire.T_VERSION else layers.BTL
    assert pkt.haslayer(top) and bytes(pkt[top]) == encoded


def test_unknown_transport_parameters_dissect_and_are_skipped() -> None:
    tp = wire.TransportParameters(max_message_size=1 << 20)
    block = tp.encode() + wire.PARAM_HEAD.pack(0x7777, 3) + b"abc"
    hello = wire.Hello(1, 2, 3, 4, 5, b"ad", 6).encode() + block
    raw = wire.Datagram(wire.T_HELLO, src_incarnation=1, payload=hello, version=2).encode()
    pkt = layers.dissect(raw)
    params = pkt[layers.BTLHello].params
    assert [(p.type, p.length) for p in params][-1] == (0x7777, 3) and params[-1].value == b"abc"
    assert layers.fields(pkt)["hello"].params == tp and bytes(pkt) == raw


def test_v2_layers_follow_the_wire_body_layouts() -> None:
    assert len(layers.BTLClose()) == wire.CLOSE_BODY.size
    assert len(layers.BTLNotice()) == wire.NOTICE_BODY.size
    assert len(layers.BTLChallenge()) == wire.CHALLENGE_BODY.size
    assert len(layers.BTLPing()) == wire.PING_BODY.size
    assert len(layers.BTLVersion()) == wire.VERSION_HEAD.size + 4  # (+ its CRC32C)
    assert len(layers.BTLParam()) == wire.PARAM_HEAD.size
