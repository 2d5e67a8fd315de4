"""Keep docs/ honest: what the docs state about parameters, counters, the wire format, the
command line and the Device interface is checked against the code, and every Python block
marked ``python runnable`` in docs/api.md and docs/backends.md is run (on the simulator, or
on the in-process example backend of backends.md, against which the whole backend
conformance suite also runs)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import struct
from pathlib import Path
from typing import Any

import attrs
import pytest

import btlcore
from btlcore import wire
from btlcore.cli import build_parser
from btlcore.config import Config
from btlcore.conformance import BackendHarness, ConformanceTests
from btlcore.device import REQUIRED_HOOKS, DeviceOps, DeviceSpec
from btlcore.stats import MODULE_COUNTERS, PEER_COUNTERS

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _read(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _row(text: str, first_cell: str) -> str:
    """The markdown table row whose first cell is ``first_cell`` (exactly one)."""
    rows = [line for line in text.splitlines()
            if line.startswith("|") and line.split("|")[1].strip() == first_cell]
    assert len(rows) == 1, f"expected one table row for {first_cell}, found {len(rows)}"
    return rows[0]


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


# ------------------------------------------------------------------------------ parameters


@pytest.mark.parametrize("field", attrs.fields(Config), ids=lambda f: f.name)
def test_every_parameter_in_api_md_with_its_default(field: attrs.Attribute) -> None:  # type: ignore[type-arg]
    row = _cells(_row(_read("api.md"), f"`{field.name}`"))
    name, default, allowed, env, meaning = row
    assert default == f"`{field.default!r}`"
    assert env == f"`BTL_{field.name.upper()}`"
    described = {n: (a, d) for n, _, a, d in Config.describe()}
    assert allowed == described[field.name][0]
    assert meaning == described[field.name][1]


def test_every_parameter_appears_in_protocol_md() -> None:
    text = _read("protocol.md")
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
    text = _read("protocol.md")
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


def test_env_reserved_names_documented() -> None:
    from btlcore.config import RESERVED_ENV, RESERVED_ENV_PREFIXES

    text = _read("api.md")
    for name in (*RESERVED_ENV, *RESERVED_ENV_PREFIXES):
        assert f"`{name}`" in text, name


# ------------------------------------------------------------------------------ counters


@pytest.mark.parametrize("name", PEER_COUNTERS + MODULE_COUNTERS)
def test_every_counter_in_api_md(name: str) -> None:
    cells = _cells(_row(_read("api.md"), f"`{name}`"))
    assert len(cells) == 2 and cells[1], f"{name} has no one-line description"


def test_docs_name_no_counter_that_does_not_exist() -> None:
    known = set(PEER_COUNTERS) | set(MODULE_COUNTERS)
    for doc in ("api.md", "protocol.md", "backends.md"):
        named = set(re.findall(r"\b(num_[a-z_]+|max_(?:send|recv)_window)\b", _read(doc)))
        assert named <= known, f"{doc} names unknown counters {sorted(named - known)}"


def test_counter_split_between_peer_and_transport_tables() -> None:
    text = _read("api.md")
    peer_part, module_part = text.split("Per transport (`btlcore.stats.MODULE_COUNTERS`")
    for name in PEER_COUNTERS:
        assert f"| `{name}` |" in peer_part
    for name in MODULE_COUNTERS:
        assert f"| `{name}` |" in module_part.split("## Errors")[0]


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
        for row in lines[i + 3:]:
            if not row.startswith("|"):
                break
            off, size, field = _cells(row)[:3]
            rows.append((int(off), int(size), field.strip("`")))
        tables[m.group(1)] = rows
    return tables


WIRE_STRUCTS = ("HEADER", "CHUNK", "PUT", "PUT_STATUS", "ACK_BODY", "SACK_RANGE", "HELLO_BODY")


@pytest.mark.parametrize("name", WIRE_STRUCTS)
def test_struct_tables_match_wire_py(name: str) -> None:
    text = _read("protocol.md")
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
    rows = {field: off for off, _, field in _struct_tables(_read("protocol.md"))["HEADER"]}
    assert rows["crc"] == wire.CRC_OFFSET
    assert rows["ack"] == wire.ACK_OFFSET
    assert wire.HEADER_LEN == 36 and "**36-byte header**" in _read("protocol.md")


def test_constants_match_wire_py() -> None:
    text = _read("protocol.md")
    for name in ("T_DATA", "T_ACK", "T_HELLO", "T_HELLO_ACK"):
        assert _cells(_row(text, f"`{name}`"))[1] == str(getattr(wire, name)), name
    for name in ("F_ACK", "F_CHUNK", "F_PUT", "F_CRC", "F_STATUS", "AF_TRUNCATED", "AF_DUPLICATE"):
        assert _cells(_row(text, f"`{name}`"))[1] == f"0x{getattr(wire, name):02X}".replace("0X", "0x"), name
    assert _cells(_row(text, "`MAX_SACK_RANGES`"))[1] == str(wire.MAX_SACK_RANGES)
    assert f"`WIRE_VERSION` = {wire.WIRE_VERSION}" in text
    # the flag values quoted inline in the header table
    for name in ("F_ACK", "F_CHUNK", "F_PUT", "F_CRC", "F_STATUS"):
        assert f"`{name}` 0x{getattr(wire, name):02x}" in text


def test_crc_check_value() -> None:
    text = _read("protocol.md")
    m = re.search(r'crc32c\(b"123456789"\) == (0x[0-9A-Fa-f]{8})', text)
    assert m and int(m.group(1), 16) == wire.crc32c(b"123456789") == wire._crc32c_py(b"123456789")
    assert "0x82F63B78" in text and "bytes `[0:12]` followed\n  by bytes `[16:end]`" in text


def _example(text: str, name: str) -> bytes:
    m = re.search(rf"<!-- example: {name} -->\n```\n([0-9a-f ]+)\n```", text)
    assert m, f"protocol.md has no example {name}"
    return bytes.fromhex(m.group(1))


def test_worked_examples_are_exact() -> None:
    text = _read("protocol.md")
    data = wire.Datagram(wire.T_DATA, flags=wire.F_ACK, dst_conn=0x11223344, src_incarnation=0x55667788,
                         seq=0x0123456789ABCDEF, ack=0x0123456789ABCDDE, tag=7, payload=b"hi").encode()
    assert _example(text, "data") == data
    ack = wire.Datagram(wire.T_ACK, flags=wire.F_ACK, dst_conn=0x11223344, src_incarnation=0x55667788, ack=1000,
                        payload=wire.ack_payload(4096, [(2, 3), (7, 1)], 150, wire.AF_DUPLICATE)).encode()
    assert _example(text, "ack") == ack
    assert wire.parse_ack_payload(wire.decode(ack).payload) == (4096, [(2, 3), (7, 1)], 150, wire.AF_DUPLICATE)
    hello_body = wire.Hello(0x55667788, 0x0A0B0C0D, 0x1000, 0, 4096, bytes.fromhex("020000000001"), 200)
    hello = wire.Datagram(wire.T_HELLO, src_incarnation=0x55667788, payload=hello_body.encode()).encode()
    assert _example(text, "hello") == hello
    assert wire.Hello.decode(wire.decode(hello).payload) == hello_body
    for name in ("data", "ack", "hello"):
        assert wire.crc_ok(_example(text, name))


def test_worked_examples_are_accepted_by_an_engine() -> None:
    """The HELLO example, sent to a fresh engine, creates a peer and is answered."""
    import random

    from btlcore.engine import Engine

    e = Engine(Config(), address=b"\x02\x00\x00\x00\x00\x02", resolve=lambda a: bytes(a), data_mtu=1500,
               priority_mtu=768, crc=True, rng=random.Random(5), now=0.0)
    e.receive_datagram(_example(_read("protocol.md"), "hello"), 0.0)
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


def test_engine_constants_quoted_in_protocol_md() -> None:
    from btlcore import engine, rtt

    text = _read("protocol.md")
    assert engine._HELLO_INTERVAL_MAX == 1.0 and "capped at 1 s" in text
    assert rtt.GRANULARITY == 1e-6 and "G = 1 µs" in text
    assert "up to 64 rounds" in text  # Transport._flush_sends' bound
    import inspect

    from btlcore.transport import Transport

    assert "range(64)" in inspect.getsource(Transport._flush_sends)


# ------------------------------------------------------------------------------ the btl command


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("btl has no subcommands")


@pytest.mark.parametrize("command", sorted(_subparsers(build_parser())))
def test_every_btl_command_and_option_in_api_md(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _read("api.md")
    assert f"### `btl {command}`" in text
    section = text.split(f"### `btl {command}`")[1].split("\n### ")[0]
    sub = _subparsers(build_parser())[command]
    actions = list(sub._actions)
    if command == "bench":  # btl bench hands every option to the runner ('btl bench --help')
        monkeypatch.syspath_prepend(str(DOCS.parent))
        from benchmarks.runner import parser as bench_parser

        actions += bench_parser()._actions
        assert len(actions) > 5
    for action in actions:
        for opt in action.option_strings:
            if opt in ("-h", "--help"):
                continue
            assert opt in section or (opt in ("--set", "--json") and opt in text), \
                f"btl {command} {opt} is not documented"


def test_cli_snippets_show_current_output_format() -> None:
    """The summary lines in api.md's snippets are the ones the code prints."""
    text = _read("api.md")
    for needle in ("  verified: yes", "  messages: ", "standalone ACKs received", "btl serve: backend udp, address "):
        assert needle in text
    from btlcore import cli

    import inspect

    src = inspect.getsource(cli)
    for needle in ("verified: ", "standalone ACKs received", "btl serve: backend "):
        assert needle in src


# ------------------------------------------------------------------------------ backends.md


def test_backends_md_covers_every_hook_and_binding() -> None:
    text = _read("backends.md")
    hooks = [n for n in vars(DeviceSpec) if n.startswith("btl_")]
    assert set(REQUIRED_HOOKS) <= set(hooks)
    for hook in hooks:
        assert f"`{hook}(" in text, f"backends.md does not describe {hook}"
    for field in attrs.fields(DeviceOps):
        assert f"`{field.name}`" in text, f"backends.md does not list DeviceOps.{field.name}"
    for member in ("backend", "options", "supports_restart", "max_transports", "timeout", "open", "reopen",
                   "kill", "run"):
        assert hasattr(BackendHarness, member) and f"`{member}" in text, member
    assert '[project.entry-points."btlcore.backends"]' in text


def test_conformance_test_list_in_backends_md() -> None:
    """backends.md enumerates what the suite tests; a new test must be added there."""
    tests = sorted(n for n in vars(ConformanceTests) if n.startswith("test_"))
    assert len(tests) == 14, f"the conformance suite has {len(tests)} tests now: update backends.md's list"


# ------------------------------------------------------------------------------ runnable code


def _runnable_blocks(name: str) -> list[tuple[int, str]]:
    text = _read(name)
    blocks = []
    for m in re.finditer(r"^```python runnable\n(.*?)^```$", text, re.S | re.M):
        blocks.append((text[:m.start()].count("\n") + 1, m.group(1)))
    return blocks


def _blocks() -> list[Any]:
    params = []
    for name in ("api.md", "backends.md"):
        try:
            blocks = _runnable_blocks(name)
        except FileNotFoundError:
            continue
        params += [pytest.param(name, code, id=f"{name}:{line}") for line, code in blocks]
    return params


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    from btlcore.backends.sim import reset_default_fabric

    for key in list(os.environ):
        if key.startswith("BTL_"):
            monkeypatch.delenv(key)
    reset_default_fabric()
    yield
    reset_default_fabric()


def test_docs_have_runnable_examples() -> None:
    assert len(_runnable_blocks("api.md")) >= 5
    assert len(_runnable_blocks("backends.md")) >= 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("doc,code", _blocks())
def test_runnable_example(doc: str, code: str, clean_env: Any) -> None:
    namespace: dict[str, Any] = {"__name__": f"docs_example_{doc}"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"<{doc}>", "exec"), namespace)  # noqa: S102 - the docs' own code


# -- the conformance suite on backends.md's example backend


_LOOP: dict[str, Any] = {}


def _loop_backend() -> dict[str, Any]:
    if not _LOOP:
        code = next(c for line, c in _runnable_blocks("backends.md") if "class LoopBackend" in c)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, "<backends.md>", "exec"), _LOOP)  # noqa: S102
    return _LOOP


class DocsLoopHarness(BackendHarness):
    backend = "loop"
    max_transports = 9

    def open(self, config: Config, **options: Any) -> btlcore.Transport:
        t = _loop_backend()["open_loop"](config, **{**self.options, **options})
        self.opened.append(t)
        return t

    def reopen(self, address: bytes, config: Config) -> btlcore.Transport:
        return self.open(config, address=address)


@pytest.mark.timeout(120)
class TestDocsExampleBackendConformance(ConformanceTests):
    harness_class = DocsLoopHarness


# ------------------------------------------------------------------------------ a peer written from protocol.md


class DocPeer:
    """A peer written from docs/protocol.md alone (struct and the crc32c package; nothing of
    btlcore.wire): it answers the handshake, reassembles chunks, acknowledges with SACK
    ranges, and sends a message of its own.  If btlcore's engine talks to it, the page says
    enough to build a compatible peer."""

    HDR = "!BBBBIIIQQHH"

    def __init__(self, address: bytes, drop_seqs: set[int]) -> None:
        self.address = address
        self.inc = 0x0BADCAFE
        self.conn = 0x00C0FFEE
        self.isn = 5_000
        self.next_seq = self.isn + 1
        self.drop = set(drop_seqs)  # arrival order indexes to lose ("the network")
        self.arrivals = 0
        self.remote: dict[str, int] = {}
        self.cum = 0
        self.received: set[int] = set()
        self.chunks: dict[int, dict[int, bytes]] = {}
        self.messages: list[tuple[int, bytes]] = []
        self.data_acked = False
        self.max_ack_delay = 0  # µs: this peer ACKs every segment at once

    @staticmethod
    def seal(buf: bytearray) -> bytes:
        import crc32c as c32

        buf[2] |= 0x08
        crc = c32.crc32c(bytes(buf[16:]), c32.crc32c(bytes(buf[:12])))
        struct.pack_into("!I", buf, 12, crc)
        return bytes(buf)

    def header(self, typ: int, flags: int, seq: int, ack: int, tag: int, plen: int) -> bytearray:
        return bytearray(struct.pack(self.HDR, 1, typ, flags, 0, self.remote["conn"], self.inc, 0,
                                     seq, ack, tag, plen))

    def ack(self) -> bytes:
        above = sorted(s for s in self.received if s > self.cum)
        ranges: list[list[int]] = []
        for s in above:
            if ranges and s == ranges[-1][1] + 1:
                ranges[-1][1] = s
            else:
                ranges.append([s, s])
        body = struct.pack("!IBB2xI", 64, len(ranges), 0, 0)
        body += b"".join(struct.pack("!II", lo - self.cum, hi - lo + 1) for lo, hi in ranges)
        return self.seal(self.header(2, 0x01, 0, self.cum, 0, len(body)) + body)

    def receive(self, dg: bytes) -> list[bytes]:
        import crc32c as c32

        version, typ, flags, _r, dst, inc, crc, seq, ack, tag, plen = struct.unpack_from(self.HDR, dg)
        assert version == 1 and flags & 0x08
        assert crc == c32.crc32c(dg[16:], c32.crc32c(dg[:12])), "CRC rule of protocol.md §2"
        if typ == 3:  # HELLO: record the remote, answer with HELLO_ACK
            r_inc, r_conn, r_isn, echo, window, r_delay, alen = struct.unpack_from("!IIQIIIH", dg, 36)
            assert r_inc == inc and dg[66:66 + alen] == bytes(dg[66:]) and len(dg) == 66 + alen
            self.remote = {"inc": r_inc, "conn": r_conn, "isn": r_isn, "addr": alen, "max_ack_delay": r_delay}
            self.cum = r_isn
            body = struct.pack("!IIQIIIH", self.inc, self.conn, self.isn, r_inc, 64, self.max_ack_delay,
                               len(self.address))
            body += self.address
            return [self.seal(self.header(4, 0, 0, 0, 0, len(body)) + body)]
        assert dst == self.conn and inc == self.remote["inc"]
        if typ == 2:  # ACK
            if ack == self.next_seq - 1 and self.next_seq > self.isn + 1:
                self.data_acked = True
            return []
        assert typ == 1
        if flags & 0x01 and ack == self.next_seq - 1 and self.next_seq > self.isn + 1:
            self.data_acked = True
        self.arrivals += 1
        if self.arrivals in self.drop:
            return []  # lost on the way
        if seq in self.received or seq <= self.cum:
            return [self.ack()]
        self.received.add(seq)
        while self.cum + 1 in self.received:
            self.cum += 1
        pos = 36
        if flags & 0x02:
            msg_id, msg_len, off = struct.unpack_from("!III", dg, 36)
            pos += 12
            parts = self.chunks.setdefault(msg_id, {})
            parts[off] = dg[pos:]
            if sum(len(p) for p in parts.values()) == msg_len:
                self.messages.append((tag, b"".join(parts[o] for o in sorted(parts))))
        else:
            self.messages.append((tag, dg[pos:]))
        return [self.ack()]

    def data(self, tag: int, payload: bytes) -> bytes:
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        return self.seal(self.header(1, 0x01, seq, self.cum, tag, len(payload)) + payload)


def test_a_peer_written_from_protocol_md_interoperates() -> None:
    import random

    from btlcore.engine import EV_COMPLETE, EV_MESSAGE, Engine

    e = Engine(Config(), address=b"E", resolve=lambda a: bytes(a), data_mtu=1500, priority_mtu=768,
               crc=True, rng=random.Random(9), now=0.0)
    doc = DocPeer(b"D", drop_seqs={2})  # loses the second DATA segment: SACK + retransmission
    peer = e.connect(b"D", 0.0)
    big = bytes(range(256)) * 20  # 5120 bytes: four chunks at this MTU
    done: list[Any] = []
    e.send(peer, 9, big, done.append, 0.0)
    e.send(peer, 10, b"small", done.append, 0.0)
    got: list[tuple[int, bytes]] = []
    now = 0.0
    sent_own = False
    for _ in range(2000):
        replies = []
        for _, dest, buf in e.datagrams_to_send(now):
            assert dest == b"D"
            replies += doc.receive(bytes(buf))
        if peer.state.value == "established" and not sent_own:
            replies.append(doc.data(11, b"from the doc peer"))
            sent_own = True
        now += 0.0005
        for r in replies:
            e.receive_datagram(r, now)
        t = e.get_timer()
        if t is not None and t <= now:
            e.handle_timer(now)
        for ev in e.drain_events():
            if ev[0] == EV_COMPLETE:
                ev[1](ev[2])
            elif ev[0] == EV_MESSAGE:
                got.append((ev[2], bytes(ev[3])))
        if len(done) == 2 and got and doc.data_acked:
            break
    assert done == [None, None]
    assert sorted(doc.messages) == [(9, big), (10, b"small")]  # the doc peer delivers unordered
    assert got == [(11, b"from the doc peer")]
    assert doc.data_acked  # the engine acknowledged the doc peer's segment
    # each side's HELLO advertised its ACK delay (µs); the engine's RTO adds the doc peer's
    assert doc.remote["max_ack_delay"] == round(Config().ack_delay * 1e6)
    assert peer.timer.max_ack_delay == doc.max_ack_delay == 0
    assert e.stats()["num_resends"] >= 1


def test_hello_retry_schedule_as_documented() -> None:
    """protocol.md §5.3: HELLOs at 0, then +10, +20, +40 ... +640 ms, then every 1 s, until
    handshake_timeout fails the peer."""
    import random

    from btlcore.engine import Engine

    assert "10, 20, 40, ... 640 ms, 1 s, 1 s" in _read("protocol.md")
    e = Engine(Config(), address=b"E", resolve=lambda a: bytes(a), data_mtu=1500, priority_mtu=768,
               crc=True, rng=random.Random(2), now=0.0)
    peer = e.connect(b"X", 0.0)
    times = []
    now = 0.0
    while peer.state.value == "connecting":
        for _, _, buf in e.datagrams_to_send(now):
            assert buf[1] == wire.T_HELLO
            times.append(round(now, 6))
        t = e.get_timer()
        assert t is not None
        now = t
        e.handle_timer(now)
    gaps = [round(b - a, 6) for a, b in zip(times, times[1:])]
    assert gaps[:8] == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0]
    assert set(gaps[8:]) == {1.0}
    assert now == Config().handshake_timeout and peer.state.value == "failed"


# ------------------------------------------------------------------------------ the ACK policy of protocol.md §6.4


class RawSender:
    """Crafts DATA from a peer that has done its half of the handshake with engine ``e``, and
    collects the engine's standalone ACKs: to check protocol.md's ACK rules one by one."""

    def __init__(self, config: Config | None = None) -> None:
        import random

        from btlcore.engine import Engine

        self.e = Engine(config or Config(), address=b"E", resolve=lambda a: bytes(a), data_mtu=1500,
                        priority_mtu=768, crc=True, rng=random.Random(4), now=0.0)
        self.inc, self.conn, self.isn = 0x1234, 0x5678, 1000
        hello = wire.Hello(self.inc, self.conn, self.isn, 0, 4096, b"R")
        self.e.receive_datagram(wire.Datagram(wire.T_HELLO, src_incarnation=self.inc,
                                              payload=hello.encode()).encode(), 0.0)
        (reply,) = self.collect(0.0)
        assert reply.type == wire.T_HELLO_ACK
        self.dst = wire.Hello.decode(reply.payload).conn_id
        self.peer = self.e.peers_by_addr[b"R"]
        self.now = 0.0

    def collect(self, now: float) -> list[wire.Datagram]:
        return [wire.decode(bytes(b)) for _, _, b in self.e.datagrams_to_send(now)]

    def send(self, k: int, payload: bytes = b"x") -> list[wire.Datagram]:
        """DATA number ``isn + k`` arrives now; returns what the engine sends at once."""
        dg = wire.Datagram(wire.T_DATA, dst_conn=self.dst, src_incarnation=self.inc,
                           seq=self.isn + k, tag=1, payload=payload).encode()
        self.e.receive_datagram(dg, self.now)
        return [d for d in self.collect(self.now) if d.type == wire.T_ACK]

    def advance(self, dt: float) -> list[wire.Datagram]:
        self.now += dt
        t = self.e.get_timer()
        if t is not None and t <= self.now:
            self.e.handle_timer(self.now)
        return [d for d in self.collect(self.now) if d.type == wire.T_ACK]


def _ack_body(d: wire.Datagram) -> tuple[int, list[tuple[int, int]], int, int]:
    return wire.parse_ack_payload(d.payload)


def test_ack_policy_in_order_waits_ack_delay() -> None:
    r = RawSender()
    assert r.send(1) == []                       # in order: no ACK at once
    assert r.advance(100e-6) == []
    (ack,) = r.advance(100e-6)                   # ack_delay (200 µs) after the arrival
    window, ranges, delay, flags = _ack_body(ack)
    assert ack.ack == r.isn + 1 and ranges == [] and flags == 0 and window == 4096
    assert delay == 200                          # µs since the largest number arrived


def test_ack_policy_ack_frequency() -> None:
    r = RawSender()
    for k in range(1, 8):
        assert r.send(k) == []
    (ack,) = r.send(8)                           # the 8th unacknowledged segment: at once
    assert ack.ack == r.isn + 8


def test_ack_policy_out_of_order_sack_and_rate_limit() -> None:
    r = RawSender()
    (ack,) = r.send(2)                           # 1 missing: SACK news, at once
    assert ack.ack == r.isn and _ack_body(ack)[1] == [(2, 1)]
    assert r.send(4) == []                       # more news within ack_delay: rate limited
    (ack,) = r.advance(200e-6)                   # ... until last ACK + ack_delay
    assert _ack_body(ack)[1] == [(2, 1), (4, 1)]


def test_ack_policy_duplicate_and_out_of_window_at_once_rate_limited() -> None:
    r = RawSender()
    r.send(1)
    (ack,) = r.advance(1e-3)                     # the delayed ACK leaves (now: 1 ms)
    assert r.send(1) == []                       # a duplicate within ack_delay of it: rate limited
    (ack,) = r.advance(200e-6)                   # ... until last ACK + ack_delay, AF_DUPLICATE
    assert _ack_body(ack)[3] & wire.AF_DUPLICATE
    r.advance(1e-3)
    (ack,) = r.send(1)                           # a duplicate after a quiet ack_delay: at once
    assert _ack_body(ack)[3] & wire.AF_DUPLICATE and r.peer.counters.num_dup_recvs == 2
    r.advance(1e-3)
    (ack,) = r.send(1 + 4096 + 5)                # above the window: at once
    assert _ack_body(ack)[3] == 0 and r.peer.counters.num_oow_high_recvs == 1
    assert r.send(1 + 4096 + 6) == []            # another one at once after: rate limited
    (ack,) = r.advance(200e-6)
    assert r.peer.counters.num_oow_high_recvs == 2


def test_ack_truncation_keeps_the_highest_range() -> None:
    r = RawSender()
    for k in range(2, 2 + 2 * 70, 2):            # 70 ranges of one, every other one missing
        r.send(k)
        r.advance(1e-3)
    r.advance(1e-3)
    (ack,) = r.send(2 + 2 * 70)                  # one more range: 71
    window, ranges, delay, flags = _ack_body(ack)
    assert len(ranges) == wire.MAX_SACK_RANGES and flags & wire.AF_TRUNCATED
    assert ranges[:63] == [(2 * i, 1) for i in range(1, 64)]
    assert ranges[-1] == (2 * 71, 1)             # the highest range, always
    assert delay != 0xFFFFFFFF


def test_piggy_backed_ack_pays_the_debt() -> None:
    r = RawSender()
    r.send(1)                                    # an ACK is now owed (delayed)
    peer = r.peer
    assert peer.state.value == "established"
    r.e.send(peer, 2, b"reply", None, r.now)
    out = r.collect(r.now)
    assert [d.type for d in out] == [wire.T_DATA] and out[0].flags & wire.F_ACK
    assert out[0].ack == r.isn + 1
    assert r.advance(1e-3) == []                 # no standalone ACK follows


# ------------------------------------------------------------------------------ connections, protocol.md §5.4-§5.6


def _hello(r: RawSender, inc: int, conn: int, isn: int, *, dst: int = 0, echo: int = 0,
           delay_us: int = 200) -> None:
    body = wire.Hello(inc, conn, isn, echo, 4096, b"R", delay_us)
    r.e.receive_datagram(wire.Datagram(wire.T_HELLO, dst_conn=dst, src_incarnation=inc,
                                       payload=body.encode()).encode(), r.now)


def test_the_last_16_replaced_incarnations_and_connections_are_stale() -> None:
    """A late HELLO of one of the last 16 replaced incarnations, or of one up to a minute of
    the clock older than the recorded one, or of the last 16 replaced connections of the
    recorded incarnation, is stale; any other new incarnation is a restart."""
    from btlcore.engine import STALE_INCARNATION_WINDOW

    text = _read("protocol.md")
    assert "the last 16 that a restart\nreplaced" in text and "last 16 remote connection ids" in text
    assert STALE_INCARNATION_WINDOW == 60 * 1024 and "60 × 1024" in text
    r = RawSender()                              # incarnation 0x1234, connection 0x5678
    first = r.inc
    for k in range(1, 18):                       # 17 restarts: 0x1234 .. 0x1234 + 16 replaced
        _hello(r, first + k, 1, 1000)
    peer, stats = r.peer, r.e.stats
    assert stats()["num_peer_restarts"] == 17 and peer.remote_inc == first + 17
    stale = peer.counters.num_stale_recvs
    _hello(r, first + 1, 1, 1000)                # replaced, among the last 16: stale
    assert peer.counters.num_stale_recvs == stale + 1 and peer.remote_inc == first + 17
    _hello(r, first - 1000, 1, 1000)             # never seen, a little older: a late packet
    assert peer.counters.num_stale_recvs == stale + 2 and peer.remote_inc == first + 17
    older = (first + 17 - STALE_INCARNATION_WINDOW - 1) & 0xFFFFFFFF
    _hello(r, older, 1, 1000)                    # older than the window: a restart
    assert stats()["num_peer_restarts"] == 18 and peer.remote_inc == older
    _hello(r, first + 30, 1, 1000)               # later: a restart
    assert stats()["num_peer_restarts"] == 19 and peer.remote_inc == first + 30
    for conn in range(2, 20):                    # new connections, same incarnation: followed
        _hello(r, first + 30, conn, 1000 + conn)
    assert peer.remote_conn == 19 and stats()["num_peer_restarts"] == 19
    _hello(r, first + 30, 4, 1004)               # a replaced connection among the last 16: stale
    assert peer.counters.num_stale_recvs == stale + 3 and peer.remote_conn == 19
    _hello(r, first + 30, 2, 1002)               # replaced 17 connections ago: followed again
    assert peer.remote_conn == 2 and peer.counters.num_stale_recvs == stale + 3


def test_incarnations_as_documented(clean_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """protocol.md §5.1: the clock in 1/1024 s, strictly increasing in a process; on the
    simulator, (NIC instance + 1) << 12 and 12 random bits."""
    from btlcore import transport

    text = _read("protocol.md")
    assert "units of 1/1024 s" in text and "`(instance + 1) << 12 | r`" in text
    monkeypatch.setattr(transport, "_last_incarnation", 0)
    assert transport.make_incarnation(1000.0) == 1024_000
    assert transport.make_incarnation(1000.0) == 1024_001  # same instant: still later
    assert transport.make_incarnation(999.0) == 1024_002   # the clock stepped back: likewise
    assert transport.make_incarnation(1001.0) == 1025_024
    a, b = btlcore.open("sim"), btlcore.open("sim")
    for t in (a, b):
        assert t.engine.incarnation >> 12 == t.device.device.instance + 1
    a.close(); b.close()


def test_a_new_connection_in_the_same_incarnation_as_documented() -> None:
    from btlcore.engine import EV_COMPLETE

    # nothing sent on ours: the new remote connection is followed, ours stays
    r = RawSender()
    r.send(1)
    conn = r.peer.local_conn
    _hello(r, r.inc, 0x9999, 77_000, dst=conn, echo=r.e.incarnation, delay_us=1000)
    assert r.peer.local_conn == conn and r.peer.remote_conn == 0x9999
    assert r.peer.state.value == "established" and r.peer.timer.max_ack_delay == pytest.approx(1e-3)
    assert r.peer.window.cum == 77_000           # a new receive window at the new ISN
    # something sent: what is unacknowledged fails, and ours is a new connection
    r = RawSender()
    r.send(1)
    done: list[Any] = []
    r.e.send(r.peer, 2, b"unacknowledged", done.append, r.now)
    assert [d.type for d in r.collect(r.now)] == [wire.T_DATA]
    r.e.drain_events()
    conn = r.peer.local_conn
    _hello(r, r.inc, 0x9999, 77_000, dst=conn, echo=r.e.incarnation)
    events = r.e.drain_events()
    assert [ev[0] for ev in events] == [EV_COMPLETE]  # no "failed" or "restarted" event
    events[0][1](events[0][2])
    assert len(done) == 1 and isinstance(done[0], btlcore.PeerUnreachable)
    assert r.peer.local_conn != conn and r.peer.state.value == "connecting" and not r.peer.confirmed
    assert r.peer.remote_conn == 0x9999
    s = r.e.stats()
    assert s["num_peer_failures"] == s["num_peer_restarts"] == 0 and s["num_send_errors"] == 1
    out = r.collect(r.now)                       # HELLO_ACK owed, and our own HELLO
    assert sorted(d.type for d in out) == [wire.T_HELLO, wire.T_HELLO_ACK]
    for d in out:
        body = wire.Hello.decode(d.payload)
        assert d.dst_conn == 0x9999 and body.conn_id == r.peer.local_conn
        assert body.echo_incarnation == r.inc and body.max_ack_delay_us == 200
    stale = r.peer.counters.num_stale_recvs
    _hello(r, r.inc, r.conn, r.isn)              # a late HELLO of the replaced connection
    assert r.peer.counters.num_stale_recvs == stale + 1 and r.peer.remote_conn == 0x9999
    # connect() on a FAILED peer: a new connection
    r.e.handle_timer(r.now + Config().handshake_timeout + 1)
    assert r.peer.state.value == "failed"
    failed_conn = r.peer.local_conn
    assert r.e.connect(b"R", r.now) is r.peer and r.peer.state.value == "connecting"
    assert r.peer.local_conn != failed_conn


# ------------------------------------------------------------------------------ api.md's command snippets


def _snippet(command: str) -> list[str]:
    text = _read("api.md")
    m = re.search(rf"```\n\$ {re.escape(command)}\n(.*?)```", text, re.S)
    assert m, f"api.md shows no output of '{command}'"
    return [line for line in m.group(1).splitlines() if line != "..."]


def _shape(line: str) -> str:
    return re.sub(r"[0-9a-f]*\d[0-9a-f.]*", "N", line)


def _run_btl(argv: list[str]) -> list[str]:
    from btlcore.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = main(argv)
    assert rc == 0
    return out.getvalue().splitlines()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", [
    "btl demo",
    "btl transfer --seed 7 --messages 200 --size 8-20000 --loss 0.05 --burst 0.02,4 --reorder 0.01 --delay 1,0.2 --rate 1000",
])
def test_cli_snippets_have_the_shape_of_current_output(command: str, clean_env: Any) -> None:
    """The numbers may drift as the protocol is tuned; the lines must not."""
    shown = _snippet(command)
    real = _run_btl(command.split()[1:])
    assert [_shape(x) for x in real] == [_shape(x) for x in shown]
    assert real[-1] == shown[-1] == "  verified: yes"


def test_params_snippet_is_current() -> None:
    real = _run_btl(["params"])
    assert _snippet("btl params") == real[:len(_snippet("btl params"))]


def test_a_peer_written_from_protocol_md_interoperates_over_udp(clean_env: Any) -> None:
    """The same doc-written peer on a real UDP socket (its address in the udp backend's
    documented format, backends/udp/_address.py), against a btlcore transport on `udp`."""
    import socket
    import time

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind(("127.0.0.1", 0))
    except OSError as exc:  # pragma: no cover - no loopback here
        pytest.skip(f"no UDP loopback: {exc}")
    sock.setblocking(False)
    port = sock.getsockname()[1]
    # magic 'U', version 1, family 4, reserved, priority port, data port, IPv4
    address = struct.pack("!BBBBHH", 0x55, 1, 4, 0, port, port) + socket.inet_aton("127.0.0.1")
    doc = DocPeer(address, drop_seqs={3})
    t = btlcore.open("udp")
    try:
        peer = t.connect(address)
        big = bytes(range(256)) * 300  # 76800 bytes: chunked at any UDP MTU
        done: list[Any] = []
        got: list[bytes] = []
        t.on(11, lambda p, tag, data: got.append(bytes(data)))
        t.send(peer, 9, big, done.append)
        sent_own = False
        deadline = time.monotonic() + 20
        while not (done and got and doc.data_acked) and time.monotonic() < deadline:
            t.progress(timeout=0.001)
            while True:
                try:
                    dg, src = sock.recvfrom(65536)
                except BlockingIOError:
                    break
                for reply in doc.receive(dg):
                    sock.sendto(reply, src)
            if doc.remote and peer.state.value == "established" and not sent_own:
                hello_addr = t.address
                ip = socket.inet_ntoa(hello_addr[8:12])
                data_port = struct.unpack_from("!H", hello_addr, 6)[0]
                sock.sendto(doc.data(11, b"over udp"), (ip, data_port))
                sent_own = True
        assert done == [None]
        assert doc.messages == [(9, big)]
        assert got == [b"over udp"] and doc.data_acked
        assert doc.remote["max_ack_delay"] == round(t.config.ack_delay * 1e6)
    finally:
        t.close(flush=False)
        sock.close()


def test_api_md_lists_every_public_transport_member() -> None:
    import inspect

    from btlcore.transport import Transport

    text = _read("api.md").split("## Transport")[1].split("\n## ")[0]
    names = {n for n, _ in inspect.getmembers(Transport) if not n.startswith("_")}
    init = inspect.getsource(Transport.__init__)
    names |= set(re.findall(r"self\.([a-z][a-z_]*)\b(?:: [^=]+)? =", init))
    missing = sorted(n for n in names if f"`{n}" not in text)
    assert not missing, f"api.md's Transport table does not mention {missing}"


def test_api_md_names_every_exported_error() -> None:
    from btlcore import errors

    text = _read("api.md").split("## Errors")[1]
    for name, obj in vars(errors).items():
        if isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == errors.__name__:
            assert f"`{name}`" in text, name
