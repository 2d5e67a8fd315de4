"""Read the sim fabric's pcapng back into frames and say precisely where two captures differ.

The fabric writes one Enhanced Packet Block per frame (interface 0 delivered, 1 dropped),
each an Ethernet/IPv4/UDP wrapping of the btlcore datagram, maybe with a comment.  A
difference is reported with the frame's index, time, direction and decoded header on both
sides, so a failing comparison names the first thing that changed, not just "not equal".
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import attrs

from scenarios import wire  # type: ignore[import-not-found]

_EPB = 0x00000006
_U32 = struct.Struct("<I")
_EPB_HEAD = struct.Struct("<IIIIIII")
_L2L4_LEN = 14 + 20 + 8
IFACES = ("delivered", "dropped")


@attrs.define(slots=True, frozen=True)
class Frame:
    """One captured frame: where it sits in the file and what it holds."""

    index: int
    iface: int
    ts_ns: int
    src: str
    dst: str
    comment: str
    data: bytes
    block: bytes

    def describe(self) -> str:
        where = f"#{self.index} t={self.ts_ns}ns {IFACES[self.iface]} {self.src}->{self.dst}"
        note = f" [{self.comment}]" if self.comment else ""
        return f"{where} {len(self.data)}B{note} {header_text(self.data)}"


def header_text(data: bytes) -> str:
    """The btlcore header fields of ``data`` (or why it does not decode)."""
    try:
        dg = wire.decode(data)
    except Exception as exc:  # a corrupted copy may not decode: say why
        return f"<undecodable: {exc}>"
    kind = wire.TYPE_NAMES.get(dg.type, str(dg.type))
    parts = [f"type={kind}", f"flags={dg.flags:#x}", f"conn={dg.dst_conn}",
             f"inc={dg.src_incarnation}", f"seq={dg.seq}", f"ack={dg.ack}", f"tag={dg.tag}",
             f"crc={dg.crc:#x}"]
    if dg.msg_id is not None:
        parts.append(f"chunk(msg={dg.msg_id} len={dg.msg_len} off={dg.offset})")
    if dg.put_key is not None:
        parts.append(f"put(key={dg.put_key} off={dg.put_offset})")
    parts.append(f"payload={len(dg.payload)}B")
    return " ".join(parts)


def _ip(raw: bytes) -> str:
    return ".".join(str(b) for b in raw)


def read_frames(raw: bytes) -> list[Frame]:
    """Every packet block of a fabric pcapng, in file order."""
    frames: list[Frame] = []
    pos = 0
    while pos < len(raw):
        kind, length = _U32.unpack_from(raw, pos)[0], _U32.unpack_from(raw, pos + 4)[0]
        if length < 12 or pos + length > len(raw):
            raise ValueError(f"truncated pcapng block at byte {pos}")
        block = raw[pos:pos + length]
        if kind == _EPB:
            _, _, iface, hi, lo, caplen, _ = _EPB_HEAD.unpack_from(block)
            packet = block[28:28 + caplen]
            comment = ""
            opt = 28 + caplen + (-caplen % 4)
            while opt + 4 <= length - 4:
                code, olen = struct.unpack_from("<HH", block, opt)
                if code == 0:
                    break
                if code == 1:
                    comment = block[opt + 4:opt + 4 + olen].decode("utf-8", "replace")
                opt += 4 + olen + (-olen % 4)
            frames.append(Frame(len(frames), iface, hi << 32 | lo, _ip(packet[26:30]),
                                _ip(packet[30:34]), comment, packet[_L2L4_LEN:], block))
        pos += length
    return frames


def _first_difference(label: str, old: list[Frame], new: list[Frame], unit: str = "frame"
                      ) -> str | None:
    """Where the sequences ``old`` (stored) and ``new`` (this run) first part, in words."""
    for i, (o, n) in enumerate(zip(old, new, strict=False)):
        if o.block == n.block:
            continue
        fields = [name for name in ("iface", "ts_ns", "src", "dst", "comment", "data")
                  if getattr(o, name) != getattr(n, name)]
        at = ""
        if "data" in fields:
            byte = next((k for k, (x, y) in enumerate(zip(o.data, n.data, strict=False)) if x != y),
                        min(len(o.data), len(n.data)))
            at = f"; first differing datagram byte: {byte}"
        return (f"{label}: {unit} {i} differs ({', '.join(fields) or 'block bytes'}{at}):\n"
                f"  stored: {o.describe()}\n  now:    {n.describe()}")
    if len(old) != len(new):
        longer, which = (old, "stored") if len(old) > len(new) else (new, "now")
        extra = longer[min(len(old), len(new))]
        return (f"{label}: {len(old)} frames stored, {len(new)} now; the first extra one "
                f"({which}): {extra.describe()}")
    return None


def _by_pair(frames: Iterable[Frame]) -> dict[tuple[str, str], list[Frame]]:
    groups: dict[tuple[str, str], list[Frame]] = {}
    for f in frames:
        groups.setdefault((f.src, f.dst), []).append(f)
    return groups


def differences(scenario: str, stored: bytes, now: bytes, per_peer: bool) -> list[str]:
    """What differs between two captures of ``scenario``: nothing (an empty list) if the
    files are byte-identical or, ``per_peer``, if every (src, dst) frame sequence is."""
    if stored == now:
        return []
    old, new = read_frames(stored), read_frames(now)
    problems: list[str] = []
    if not per_peer:
        diff = _first_difference(f"{scenario} (whole capture)", old, new)
        problems.append(diff or f"{scenario}: frames equal but the file bytes differ "
                                "(section or interface blocks)")
        return problems
    if stored[:_header_len(stored)] != now[:_header_len(now)]:
        problems.append(f"{scenario}: the pcapng section/interface blocks differ")
    g_old, g_new = _by_pair(old), _by_pair(new)
    for pair in sorted(set(g_old) | set(g_new)):
        diff = _first_difference(f"{scenario} {pair[0]}->{pair[1]}", g_old.get(pair, []),
                                 g_new.get(pair, []), unit="frame of this direction")
        if diff:
            problems.append(diff)
    return problems


def _header_len(raw: bytes) -> int:
    """Bytes before the first packet block (section header and interface descriptions)."""
    pos = 0
    while pos < len(raw) and _U32.unpack_from(raw, pos)[0] != _EPB:
        pos += _U32.unpack_from(raw, pos + 4)[0]
    return pos
