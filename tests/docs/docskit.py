"""Helpers shared by the docs tests: reading a page, its tables, its runnable blocks and
command snippets, and a raw peer that crafts datagrams by hand to check protocol.md's rules
one by one."""

from __future__ import annotations

import contextlib
import io
import random
import re
from pathlib import Path
from typing import Any

import pytest

from btlcore.config import Config
from btlcore.protocol import wire

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def read(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def row(text: str, first_cell: str) -> str:
    """The markdown table row whose first cell is ``first_cell`` (exactly one)."""
    rows = [line for line in text.splitlines()
            if line.startswith("|") and line.split("|")[1].strip() == first_cell]
    assert len(rows) == 1, f"expected one table row for {first_cell}, found {len(rows)}"
    return rows[0]


def cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


# ------------------------------------------------------------------------------ runnable code


def runnable_blocks(name: str) -> list[tuple[int, str]]:
    """Every ``python runnable`` block of a page, with the line it starts on."""
    text = read(name)
    blocks = []
    for m in re.finditer(r"^```python runnable\n(.*?)^```$", text, re.S | re.M):
        blocks.append((text[:m.start()].count("\n") + 1, m.group(1)))
    return blocks


def block_params(name: str) -> list[Any]:
    """A page's runnable blocks as pytest params with ids ``page:line``."""
    try:
        blocks = runnable_blocks(name)
    except FileNotFoundError:
        return []
    return [pytest.param(name, code, id=f"{name}:{line}") for line, code in blocks]


def run_block(doc: str, code: str) -> None:
    namespace: dict[str, Any] = {"__name__": f"docs_example_{doc}"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"<{doc}>", "exec"), namespace)  # noqa: S102 - the docs' own code


# ------------------------------------------------------------------------------ command snippets


def snippet(command: str) -> list[str]:
    """The output api.md shows for ``$ command`` (without its ``...`` lines)."""
    text = read("api.md")
    m = re.search(rf"```\n\$ {re.escape(command)}\n(.*?)```", text, re.S)
    assert m, f"api.md shows no output of '{command}'"
    return [line for line in m.group(1).splitlines() if line != "..."]


def shape(line: str) -> str:
    return re.sub(r"[0-9a-f]*\d[0-9a-f.]*", "N", line)


def run_btl(argv: list[str]) -> list[str]:
    from btlcore.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = main(argv)
    assert rc == 0
    return out.getvalue().splitlines()


# ------------------------------------------------------------------------------ a hand-made peer


class RawSender:
    """Crafts DATA from a peer that has done its half of the handshake with engine ``e``, and
    collects the engine's standalone ACKs: to check protocol.md's ACK rules one by one."""

    def __init__(self, config: Config | None = None) -> None:
        from btlcore.protocol.engine import Engine

        self.e = Engine(config or Config(), address=b"E", resolve=lambda a: bytes(a), data_mtu=1500,
                        priority_mtu=768, crc=True, rng=random.Random(4), now=0.0)
        self.inc, self.conn, self.isn = 0x1234, 0x5678, 1000
        hello = wire.Hello(self.inc, self.conn, self.isn, 0, 4096, b"R", 0, wire.TransportParameters())
        # padded so that it is no smaller than the HELLO_ACK it provokes (protocol.md §1.8)
        self.e.receive_datagram(wire.Datagram(wire.T_HELLO, src_incarnation=self.inc,
                                              payload=hello.encode() + wire.padding_param(64)).encode(),
                                None, 0.0)
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
        self.e.receive_datagram(dg, None, self.now)
        return [d for d in self.collect(self.now) if d.type == wire.T_ACK]

    def advance(self, dt: float) -> list[wire.Datagram]:
        self.now += dt
        t = self.e.next_deadline()
        if t is not None and t <= self.now:
            self.e.handle_timer(self.now)
        return [d for d in self.collect(self.now) if d.type == wire.T_ACK]
