"""A transfer as a time-sequence (Stevens) graph's data, from a capture or from a trace.

:func:`load` reads either a pcap/pcapng (:mod:`btlcore.captures`: the simulator's, with its
drops and their causes, or real UDP on any port) or a JSON-lines trace (:mod:`btlcore.trace`:
with the window, RTT and pacing rate over time) and returns one :class:`Flow` per direction
that carried data: its segments (first transmissions and retransmissions), the ACK line and
SACK blocks that came back, the drops, and the metrics where the source has them.  Sequence
numbers are relative to the flow's first data segment (1 is the first), times to the
source's first event.  :mod:`btlcore.plot` draws it; nothing here needs matplotlib.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

import attrs

from . import captures
from .protocol import wire

Point = tuple[float, int]  # (time, relative seq)


@attrs.define(slots=True)
class Flow:
    """One direction of data: ``sender`` -> ``receiver`` (addresses as the source names them)."""

    sender: str
    receiver: str
    base: int = 0  # the wire seq just below the first data segment's
    sent: list[Point] = attrs.Factory(list)  # first transmissions
    resent: list[Point] = attrs.Factory(list)  # retransmissions (a seq seen before)
    acks: list[Point] = attrs.Factory(list)  # the cumulative ACK, as it came back
    sacks: list[tuple[float, int, int]] = attrs.Factory(list)  # (time, first, last) received above it
    drops: dict[str, list[Point]] = attrs.Factory(dict)  # the simulator's, by cause
    cwnd: list[tuple[float, float]] = attrs.Factory(list)  # segments
    srtt: list[tuple[float, float]] = attrs.Factory(list)  # seconds
    min_rtt: list[tuple[float, float]] = attrs.Factory(list)
    pacing: list[tuple[float, float]] = attrs.Factory(list)  # bytes/s
    losses: list[float] = attrs.Factory(list)  # loss episodes' times (a trace's "congestion")

    def clip(self, start: float, end: float) -> Flow:
        """This flow between ``start`` and ``end`` (seconds) only."""
        def keep(points: list[Any]) -> list[Any]:
            return [p for p in points if start <= p[0] <= end]

        return Flow(self.sender, self.receiver, self.base, keep(self.sent), keep(self.resent), keep(self.acks),
                    keep(self.sacks), {c: keep(p) for c, p in self.drops.items() if keep(p)}, keep(self.cwnd),
                    keep(self.srtt), keep(self.min_rtt), keep(self.pacing),
                    [t for t in self.losses if start <= t <= end])

    @property
    def segments(self) -> int:
        return len(self.sent) + len(self.resent)

    def summary(self) -> str:
        drops = ", ".join(f"{cause} {len(p)}" for cause, p in sorted(self.drops.items()))
        return (f"{self.sender} -> {self.receiver}: {len(self.sent)} segments, {len(self.resent)} "
                f"retransmissions, {len(self.acks)} ACKs, {len(self.sacks)} SACK blocks"
                + (f", drops: {drops}" if drops else "")
                + (f", {len(self.cwnd)} cwnd samples" if self.cwnd else ""))


class SourceError(ValueError):
    """Neither a capture nor a trace, or nothing in it to plot."""


class _Builder:
    """Flows keyed by (sender, receiver), filled in file order with wire sequence numbers,
    made relative to each flow's lowest at the end."""

    def __init__(self) -> None:
        self.flows: dict[tuple[str, str], Flow] = {}
        self.seen: dict[tuple[str, str], set[int]] = {}
        self.span: dict[tuple[str, str], list[int]] = {}  # [lowest, highest] seq seen
        self.t0: float | None = None

    def time(self, t: float) -> float:
        if self.t0 is None:
            self.t0 = t
        return t - self.t0

    def data(self, t: float, sender: str, receiver: str, seq: int, retransmission: bool | None = None,
             drop_cause: str = "") -> None:
        """A data segment; ``retransmission`` None: one if its seq was seen before (a capture's
        order is not the send order: the simulator stamps arrivals and drops)."""
        key = (sender, receiver)
        flow = self.flows.get(key)
        if flow is None:
            flow = self.flows[key] = Flow(sender, receiver)
            self.seen[key] = set()
            self.span[key] = [seq, seq]
        seen = self.seen[key]
        again = seq in seen if retransmission is None else retransmission
        seen.add(seq)
        span = self.span[key]
        span[0], span[1] = min(span[0], seq), max(span[1], seq)
        point = (t, seq)
        if drop_cause:
            flow.drops.setdefault(drop_cause, []).append(point)
        (flow.resent if again else flow.sent).append(point)

    def corrupted(self, t: float, sender: str, receiver: str) -> None:
        """A data segment that arrived damaged: a drop at the flow's highest seq so far."""
        span = self.span.get((sender, receiver))
        if span is not None:
            self.flows[(sender, receiver)].drops.setdefault("corrupted", []).append((t, span[1]))

    def ack(self, t: float, ack: int, sack: Iterable[tuple[int, int]], key: tuple[str, str] | None = None,
            not_from: str = "") -> None:
        """An ACK of flow ``key`` (sender, receiver); None: of the flow whose sequence numbers
        it names (random 64-bit ISNs make that unambiguous, and it holds whatever ports the
        ACKs travel on: a udp device sends them from its priority socket, data from another),
        ``not_from`` excepted (the ACK's own sender: what it piggybacks acknowledges another
        flow)."""
        if key is None:
            key = next((k for k, (lo, hi) in self.span.items() if lo - 1 <= ack <= hi and k[0] != not_from),
                       None)
        flow = self.flows.get(key) if key is not None else None
        if flow is None:
            return  # (acknowledging no data: the handshake's)
        flow.acks.append((t, ack))
        for first, last in sack:
            flow.sacks.append((t, first, last))

    def result(self) -> list[Flow]:
        flows = [f for f in self.flows.values() if f.segments]
        for f in flows:
            base = f.base = min(self.seen[(f.sender, f.receiver)]) - 1
            f.sent = [(t, s - base) for t, s in f.sent]
            f.resent = [(t, s - base) for t, s in f.resent]
            f.acks = [(t, max(0, a - base)) for t, a in f.acks]
            f.sacks = [(t, lo - base, hi - base) for t, lo, hi in f.sacks]
            f.drops = {cause: [(t, s - base) for t, s in points] for cause, points in f.drops.items()}
        return sorted(flows, key=lambda f: -f.segments)


def from_capture(path: str | os.PathLike[str]) -> list[Flow]:
    """The flows of a capture.  Copies the simulator noted as duplicates are skipped; a
    datagram whose CRC32C fails is one the receiver drops: a data segment's is drawn as a drop
    (cause ``corrupted``), its sequence number unread (a flipped bit may be in it)."""
    b = _Builder()
    for c in captures.read(path):
        t = b.time(c.time)
        dg = c.datagram
        if c.comment.startswith("duplicate"):
            continue
        if not c.crc_ok:
            if dg.type == wire.T_DATA:
                b.corrupted(t, c.src, c.dst)
            continue
        if dg.type == wire.T_DATA:
            b.data(t, c.src, c.dst, dg.seq, drop_cause=c.drop_cause if c.dropped else "")
        if c.dropped:
            continue
        if dg.flags & wire.F_ACK:
            sack: list[tuple[int, int]] = []
            if dg.type == wire.T_ACK:
                try:
                    _, ranges, _, _ = wire.parse_ack_payload(dg.payload)
                except wire.MalformedDatagram:
                    ranges = []
                sack = [(dg.ack + s, dg.ack + s + n - 1) for s, n in ranges]
            b.ack(t, dg.ack, sack, not_from=c.src)
    return b.result()


def from_trace(path: str | os.PathLike[str]) -> list[Flow]:
    """The flows of a trace: each node's sends to a peer, the ACKs it received from it, and
    its window and RTT for that peer; a flow whose sender the trace does not cover (a ``btl
    serve`` trace) as its receiver saw it: the segments as they arrived (a seq again: a
    retransmission or a duplicate) and the ACKs it sent."""
    b, seen_by_receiver = _Builder(), _Builder()
    metrics: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except ValueError as exc:
                raise SourceError(f"{os.fspath(path)} line {n}: not JSON ({exc})") from None
            _trace_event(b, seen_by_receiver, ev, metrics)
    for ev in metrics:  # (after the flows exist: a window may be set before the first segment)
        flow = b.flows.get((ev["node"], ev.get("peer", "")))
        if flow is None:
            continue
        t = ev["_t"]
        if ev.get("event") == "congestion":
            if ev.get("trigger") == "loss":
                flow.losses.append(t)
            continue
        for key, series in (("cwnd", flow.cwnd), ("srtt", flow.srtt), ("min_rtt", flow.min_rtt),
                            ("pacing_rate", flow.pacing)):
            if ev.get(key) is not None:
                series.append((t, float(ev[key])))
    flows = b.result()
    senders = {(f.sender, f.receiver) for f in flows}
    flows += [f for f in seen_by_receiver.result() if (f.sender, f.receiver) not in senders]
    return sorted(flows, key=lambda f: -f.segments)


def _trace_event(b: _Builder, rx: _Builder, ev: dict[str, Any], metrics: list[dict[str, Any]]) -> None:
    kind = ev.get("event")
    if kind == "trace":
        if not str(ev.get("format", "")).startswith("btlcore-trace/"):
            raise SourceError(f"not a btlcore trace (format {ev.get('format')!r})")
        return
    if "t" not in ev or "node" not in ev:
        return
    t = b.time(float(ev["t"]))
    node, peer = ev["node"], ev.get("peer")
    if kind == "packet_sent" and ev.get("type") == "DATA" and peer:
        b.data(t, node, peer, int(ev["seq"]), bool(ev.get("retransmission")))
    elif kind == "packet_received" and peer and "ack" in ev:
        b.ack(t, int(ev["ack"]), [(int(lo), int(hi)) for lo, hi in ev.get("sack", ())], key=(node, peer))
    if kind == "packet_received" and ev.get("type") == "DATA" and peer:
        rx.data(t, peer, node, int(ev["seq"]))
    elif kind == "packet_sent" and peer and "ack" in ev:
        rx.ack(t, int(ev["ack"]), [(int(lo), int(hi)) for lo, hi in ev.get("sack", ())], key=(peer, node))
    elif kind in ("metrics_updated", "congestion") and peer:
        metrics.append({**ev, "_t": t})


def load(path: str | os.PathLike[str]) -> tuple[str, list[Flow]]:
    """(``"capture"`` or ``"trace"``, its flows, busiest first) of ``path``, told apart by
    content; SourceError when it is neither, or carries no data segment."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head in (b"\x0a\x0d\x0d\x0a", b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1",
                b"\xa1\xb2\x3c\x4d"):
        kind, flows = "capture", from_capture(path)
    elif head.startswith(b"{"):
        kind, flows = "trace", from_trace(path)
    else:
        raise SourceError(f"{os.fspath(path)!r} is neither a capture (pcap, pcapng) nor a btlcore "
                          "trace (JSON lines, from --trace)")
    if not flows:
        raise SourceError(f"{os.fspath(path)!r} has no btlcore data segment to plot")
    return kind, flows
