"""docs/protocol.md against the code: parameters and their quoted defaults, every wire table
(sizes, offsets, constants, flags), the CRC rule, the worked examples byte for byte, the
engine constants the page quotes, the HELLO retry schedule and the incarnation clock."""

from __future__ import annotations

import pathlib
import random
import re
import struct
from typing import Any

import attrs
import pytest
from docskit import cells, read, row  # type: ignore[import-not-found]

import btlcore
from btlcore.config import Config
from btlcore.protocol import wire

# ------------------------------------------------------------------------------ parameters


def test_every_parameter_appears_in_protocol_md() -> None:
    text = read("protocol.md")
    missing = [n for n in Config.names() if f"`{n}`" not in text]
    assert not missing, f"protocol.md never mentions {missing}"


def _format_default(value: Any) -> str:
    if isinstance(value, bool) or isinstance(value, str):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"
    if value >= 1:
        return f"{value:g} s"
    if value >= 1e-3:
        return f"{value * 1e3:g} ms"
    return f"{value * 1e6:g} µs"


def test_defaults_quoted_in_protocol_md_are_current() -> None:
    """Every "`param` (default X)" and "`param` (X)" in protocol.md states the real default."""
    text = read("protocol.md")
    fields = {f.name: f.default for f in attrs.fields(Config)}
    seen = 0
    for name, value in re.findall(r"`(\w+)` \((?:default )?([^)`]*)\)", text):
        if name not in fields or not re.match(r"[0-9]", value):
            continue
        seen += 1
        want = _format_default(fields[name])
        default = fields[name]
        if isinstance(default, int) and default >= 1 << 20 and default % (1 << 20) == 0 \
                and "MiB" in value:
            want = f"{default >> 20} MiB"
        assert value.startswith(want), f"protocol.md says {name} ({value}); the default is {want}"
    assert seen >= 10
    for name, value in re.findall(r"`(rto_initial|rto_min|rto_max)` ([0-9.]+ [mµ]?s)", text):
        assert value == _format_default(fields[name])


# ------------------------------------------------------------------------------ wire format


def _field_sizes(fmt: str) -> list[int]:
    """The size of each field of a struct format (a run of pad bytes is one field)."""
    sizes = []
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", fmt.lstrip("!<>=@")):
        n = int(count) if count else 1
        if code == "x":
            sizes.append(n)
        else:
            sizes.extend([struct.calcsize("!" + code)] * n)
    return sizes


def _struct_tables(text: str) -> dict[str, list[tuple[int, int, str]]]:
    tables: dict[str, list[tuple[int, int, str]]] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"<!-- struct: (\w+) -->", line)
        if not m:
            continue
        rows = []
        for line_ in lines[i + 3:]:
            if not line_.startswith("|"):
                break
            off, size, field = cells(line_)[:3]
            rows.append((int(off), int(size), field.strip("`")))
        tables[m.group(1)] = rows
    return tables


WIRE_STRUCTS = ("HEADER", "CHUNK", "PUT", "PUT_STATUS", "ACK_BODY", "SACK_RANGE", "HELLO_BODY",
                "PARAM_HEAD", "CLOSE_BODY", "NOTICE_BODY", "CHALLENGE_BODY", "PING_BODY",
                "VERSION_HEAD")


@pytest.mark.parametrize("name", WIRE_STRUCTS)
def test_struct_tables_match_wire_py(name: str) -> None:
    text = read("protocol.md")
    tables = _struct_tables(text)
    assert name in tables, f"protocol.md has no table for wire.{name}"
    rows = tables[name]
    st = getattr(wire, name)
    assert [size for _, size, _ in rows] == _field_sizes(st.format), f"{name}: field sizes differ"
    offset = 0
    for off, size, field in rows:
        assert off == offset, f"{name}.{field}: offset {off}, expected {offset}"
        offset += size
    assert offset == st.size
    # the heading above the table states the size too
    before = text[:text.index(f"<!-- struct: {name} -->")]
    heading = [h for h in before.splitlines() if h.startswith("#")][-1]
    want = f"{st.size} per range" if name == "SACK_RANGE" else f"({st.size} bytes"
    assert want in heading, f"heading {heading!r} should state {want!r}"


def test_header_named_offsets_match_wire_py() -> None:
    rows = {field: off for off, _, field in _struct_tables(read("protocol.md"))["HEADER"]}
    assert rows["crc"] == wire.CRC_OFFSET
    assert rows["ack"] == wire.ACK_OFFSET
    assert wire.HEADER_LEN == 36 and "**36-byte header**" in read("protocol.md")


def test_constants_match_wire_py() -> None:
    text = read("protocol.md")
    for name in ("T_DATA", "T_ACK", "T_HELLO", "T_HELLO_ACK"):
        assert cells(row(text, f"`{name}`"))[1] == str(getattr(wire, name)), name
    for name in ("F_ACK", "F_CHUNK", "F_PUT", "F_CRC", "F_STATUS", "AF_TRUNCATED", "AF_DUPLICATE"):
        assert cells(row(text, f"`{name}`"))[1] == f"0x{getattr(wire, name):02X}".replace("0X", "0x"), name
    assert cells(row(text, "`MAX_SACK_RANGES`"))[1] == str(wire.MAX_SACK_RANGES)
    # version 2: every type, transport parameter and close reason wire.py defines, and no other
    v2 = [n for n in dir(wire) if re.fullmatch(r"(T|TP|CR)_[A-Z_]+", n)]
    for name in v2:
        assert cells(row(text, f"`{name}`"))[1] == str(getattr(wire, name)), name
    assert len(v2) == 11 + len(wire.PARAM_SPECS) + 1 + len(wire.CLOSE_REASON_NAMES)  # (+1: TP_PADDING)
    params = {getattr(wire, n): n for n in v2 if n.startswith("TP_")}
    defaults = wire.TransportParameters()
    for typ, (name, width, low, high) in wire.PARAM_SPECS.items():
        meaning = cells(row(text, f"`{params[typ]}`"))[2]
        top = "2^32-1" if high == wire.U32_MASK else "2^64-1"
        default = getattr(defaults, name)
        quoted = "2^32-1" if default == wire.U32_MASK else str(default)
        assert meaning.startswith(f"u{8 * width}, {low}..{top}, default {quoted}:"), name
    assert f"`NOTICE_LEN` = {wire.NOTICE_LEN}" in text
    assert "`VERSION_NEGOTIATION`, never a version" in text and wire.VERSION_NEGOTIATION == 0
    assert "(`SUPPORTED_VERSIONS` in `wire.py`)" in text and wire.SUPPORTED_VERSIONS == (2,)
    assert f"`WIRE_VERSION` = {wire.WIRE_VERSION}" in text
    # the flag values quoted inline in the header table
    for name in ("F_ACK", "F_CHUNK", "F_PUT", "F_CRC", "F_STATUS"):
        assert f"`{name}` 0x{getattr(wire, name):02x}" in text


def test_crc_check_value() -> None:
    text = read("protocol.md")
    m = re.search(r'crc32c\(b"123456789"\) == (0x[0-9A-Fa-f]{8})', text)
    assert m and int(m.group(1), 16) == wire.crc32c(b"123456789") == wire._crc32c_py(b"123456789")
    assert "0x82F63B78" in text and "bytes `[0:12]` followed\n  by bytes `[16:end]`" in text


# ------------------------------------------------------------------------------ worked examples


def _example(text: str, name: str) -> bytes:
    m = re.search(rf"<!-- example: {name} -->\n```\n([0-9a-f ]+)\n```", text)
    assert m, f"protocol.md has no example {name}"
    return bytes.fromhex(m.group(1))


def test_worked_examples_are_exact() -> None:
    text = read("protocol.md")
    data = wire.Datagram(wire.T_DATA, flags=wire.F_ACK, dst_conn=0x11223344, src_incarnation=0x55667788,
                         seq=0x0123456789ABCDEF, ack=0x0123456789ABCDDE, tag=7, payload=b"hi").encode()
    assert _example(text, "data") == data
    ack = wire.Datagram(wire.T_ACK, flags=wire.F_ACK, dst_conn=0x11223344, src_incarnation=0x55667788, ack=1000,
                        payload=wire.ack_payload(4096, [(2, 3), (7, 1)], 150, wire.AF_DUPLICATE)).encode()
    assert _example(text, "ack") == ack
    assert wire.parse_ack_payload(wire.decode(ack).payload) == (4096, [(2, 3), (7, 1)], 150, wire.AF_DUPLICATE)
    hello_body = wire.Hello(0x55667788, 0x0A0B0C0D, 0x1000, 0, 4096, bytes.fromhex("020000000001"), 200)
    # (version 1's HELLO, for comparison with version 2's below)
    hello = wire.Datagram(wire.T_HELLO, src_incarnation=0x55667788, payload=hello_body.encode(),
                          version=1).encode()
    assert _example(text, "hello") == hello
    assert wire.Hello.decode(wire.decode(hello, versions=(1,)).payload) == hello_body
    for name in ("data", "ack", "hello"):
        assert wire.crc_ok(_example(text, name))


def test_version_2_worked_examples_are_exact() -> None:
    text = read("protocol.md")
    params = wire.TransportParameters(max_datagram_size=1500, max_message_size=64 << 20,
                                      peer_timeout_ms=10_000, window_bytes=16 << 20)
    hello_body = wire.Hello(0x55667788, 0x0A0B0C0D, 0x1000, 0, 4096, bytes.fromhex("020000000001"), 200,
                            params)
    # a first HELLO: its dst_conn is the sender's own conn_id (§5.3)
    hello = wire.Datagram(wire.T_HELLO, dst_conn=0x0A0B0C0D, src_incarnation=0x55667788,
                          payload=hello_body.encode(), version=2).encode()
    assert _example(text, "hello_v2") == hello
    assert wire.Hello.decode(wire.decode(hello, versions=(2,)).payload) == hello_body
    # version 1's HELLO body, then the parameter block
    v1_body = wire.decode(_example(text, "hello"), versions=(1,)).payload
    assert wire.decode(hello, versions=(2,)).payload == v1_body + params.encode()
    close = wire.Datagram(wire.T_CLOSE, dst_conn=0x11223344, src_incarnation=0x55667788, version=2,
                          payload=wire.Close(0x0A0B0C0D, 0x99AABBCC, wire.CR_CLOSED).encode()).encode()
    assert _example(text, "close") == close and wire.crc_ok(close)
    version = _example(text, "version")
    assert version == wire.version_reply(0x11223344, 0x55667788)
    assert wire.parse_version_reply(version) == (0x11223344, 0x55667788, wire.SUPPORTED_VERSIONS)


def test_worked_examples_are_accepted_by_an_engine() -> None:
    """The version-2 HELLO example, sent to a fresh engine, creates a peer and is answered
    (the version-1 one gets no answer: no source to send a VERSION reply to)."""
    from btlcore.protocol.engine import Engine

    e = Engine(Config(), address=b"\x02\x00\x00\x00\x00\x02", resolve=lambda a: bytes(a), data_mtu=1500,
               priority_mtu=768, crc=True, rng=random.Random(5), now=0.0)
    e.receive_datagram(_example(read("protocol.md"), "hello"), None, 0.0)
    assert e.peers_by_addr == {} and e.datagrams_to_send(0.0) == []
    e.receive_datagram(_example(read("protocol.md"), "hello_v2"), None, 0.0)
    assert list(e.peers_by_addr) == [bytes.fromhex("020000000001")]
    out = e.datagrams_to_send(0.0)
    replies = [wire.decode(bytes(buf)) for _, _, buf in out]
    assert [d.type for d in replies] == [wire.T_HELLO_ACK]
    reply = wire.Hello.decode(replies[0].payload)
    assert reply.echo_incarnation == 0x55667788 and replies[0].dst_conn == 0x0A0B0C0D
    # max_ack_delay: what btlcore advertises is its ack_delay in µs; what it was told (the
    # example's 200 µs) is part of its retransmit timeout toward that peer (§9.3)
    assert reply.max_ack_delay_us == round(Config().ack_delay * 1e6)
    peer = e.peers_by_addr[bytes.fromhex("020000000001")]
    assert peer.timer.max_ack_delay == pytest.approx(200e-6)


# ------------------------------------------------------------------------------ engine constants and timers


def test_engine_constants_quoted_in_protocol_md() -> None:
    from btlcore import progress
    from btlcore.protocol import handshake as engine
    from btlcore.protocol import rtt

    text = read("protocol.md")
    assert engine._HELLO_INTERVAL_MAX == 1.0 and "capped at 1 s" in text
    assert rtt.GRANULARITY == 1e-6 and "G = 1 µs" in text
    assert "up to 64 rounds" in text  # the progress pass's bound (Progress.flush_sends)
    source = (pathlib.Path(btlcore.__file__).parent / "progress.py").read_text()  # (compiled or not)
    assert progress.SEND_ROUNDS == 64 and "in range(SEND_ROUNDS):" in source


def test_hello_retry_schedule_as_documented() -> None:
    """protocol.md §5.3: HELLOs at 0, then +10, +20, +40 ... +640 ms, then every 1 s, until
    handshake_timeout fails the peer."""
    from btlcore.protocol.engine import Engine

    assert "10, 20, 40, ... 640 ms, 1 s, 1 s" in read("protocol.md")
    e = Engine(Config(), address=b"E", resolve=lambda a: bytes(a), data_mtu=1500, priority_mtu=768,
               crc=True, rng=random.Random(2), now=0.0)
    peer = e.connect(b"X", 0.0)
    times = []
    now = 0.0
    while peer.state.value == "connecting":
        for _, _, buf in e.datagrams_to_send(now):
            assert buf[1] == wire.T_HELLO
            times.append(round(now, 6))
        t = e.next_deadline()
        assert t is not None
        now = t
        e.handle_timer(now)
    gaps = [round(b - a, 6) for a, b in zip(times, times[1:], strict=False)]
    assert gaps[:8] == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0]
    assert set(gaps[8:]) == {1.0}
    assert now == Config().handshake_timeout and peer.state.value == "failed"


def test_incarnations_as_documented(clean_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """protocol.md §5.1: the clock in 1/1024 s, strictly increasing in a process; on the
    simulator, (NIC instance + 1) << 12 and 12 random bits."""
    from btlcore import lives

    text = read("protocol.md")
    assert "units of 1/1024 s" in text and "`(instance + 1) << 12 | r`" in text
    monkeypatch.setattr(lives, "_last_incarnation", 0)
    assert lives.make_incarnation(1000.0) == 1024_000
    assert lives.make_incarnation(1000.0) == 1024_001  # same instant: still later
    assert lives.make_incarnation(999.0) == 1024_002   # the clock stepped back: likewise
    assert lives.make_incarnation(1001.0) == 1025_024
    a, b = btlcore.open("sim"), btlcore.open("sim")
    for t in (a, b):
        assert t.engine.incarnation >> 12 == t.device.device.instance + 1
    a.close()
    b.close()
