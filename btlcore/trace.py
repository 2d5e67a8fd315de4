"""An event trace of a transport, one JSON object a line, in the spirit of qlog.

Turned on per transport (``btlcore.open(..., trace="run.jsonl")``, ``Transport(...,
trace=...)``, ``BTL_TRACE=run.jsonl``, ``btl transfer/serve --trace run.jsonl``); off, it
costs nothing: no tracer exists, and nothing on a per-packet path checks for one.  On, it
sees a transport through two seams and changes nothing it sees:

* the device's calls (``post_send``, ``post_send_many``, ``poll_recv``, ``poll_recv_from``),
  wrapped at the transport's start (:meth:`Tracer.attach`): every datagram sent and received,
  in the same batches as untraced;
* the congestion controller, wrapped when the engine is built (``Engine(wrap_cc=...)``,
  :class:`TracedCongestion`): when a connection starts, a loss episode, persistent
  congestion, a spurious loss undone; and, at each of those and after each ACK processed, the
  peer's window, RTT and pacing rate, written when one of them changed.

Every line has ``t`` (seconds on the transport's clock: virtual time on the simulator, so a
trace lines up with the fabric's pcap), ``node`` (the transport's address, hex) and
``event``; most have ``peer`` (the peer's address, hex).  The events::

    trace                the first line of a file: {"format": "btlcore-trace/1"}
    transport_opened     backend, cc (the congestion control algorithm)
    packet_sent          type (DATA, ACK, ...), size; DATA: seq, tag, len, retransmission
    packet_received      (true when this seq was sent before); ACK: ack, window, sack
                         ([[first, last], ...] received above ack); any with the ACK flag: ack
    connection_started   the congestion controller set the first window
    metrics_updated      cwnd, ssthresh (segments; null: unbounded), srtt, min_rtt, rttvar
                         (seconds; null: no sample yet), pacing_rate (bytes/s; 0: unpaced)
    congestion           trigger: loss (a loss episode began), persistent_congestion, spurious
    transport_closed     the transport's counters

Several transports of one process may trace to one file (``btl transfer`` on the simulator
does): they share one writer, told apart by ``node``; the file is created (emptied) when the
first of them opens it.  ``btl plot`` reads the file.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from .device import hookimpl
from .protocol import wire
from .protocol.congestion import CongestionControl
from .protocol.peers import Peer

FORMAT = "btlcore-trace/1"
#: the variable that turns tracing on for every transport of a process (a file path)
ENV = "BTL_TRACE"

#: what ``trace=`` takes (Transport, btlcore.open)
TracePath = str | os.PathLike[str]

_HEADER = wire.HEADER
_INF = float("inf")


class _Writer:
    """One trace file, shared by the transports of this process that trace to it (each in
    its own thread, maybe: one line is written at a time)."""

    __slots__ = ("path", "file", "users", "lock")

    def __init__(self, path: str) -> None:
        self.path = path
        self.file: IO[str] = open(path, "w", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115
        self.users = 0
        self.lock = threading.Lock()
        self.file.write(json.dumps({"t": 0.0, "event": "trace", "format": FORMAT}) + "\n")

    def write(self, line: str) -> None:
        with self.lock:
            self.file.write(line)


_writers: dict[str, _Writer] = {}
_writers_lock = threading.Lock()


def open_trace(trace: TracePath | None) -> Tracer | None:
    """The tracer a transport gets for its ``trace`` argument (a path), else for ``BTL_TRACE``;
    None when neither is set: tracing off."""
    if trace is None:
        trace = os.environ.get(ENV) or None
    if trace is None:
        return None
    if not isinstance(trace, (str, os.PathLike)) or not os.fspath(trace):
        raise TypeError(f"trace must be a file path (str or os.PathLike) or None, not {trace!r}")
    return Tracer(os.fspath(trace))


def _number(value: float | None) -> float | None:
    """A float for JSON: None for no value or for an unbounded (infinite) one."""
    if value is None or value == _INF:
        return None
    return value


class Tracer:
    """One transport's trace (see the module docstring); a tool plugin for the transport's
    open and close, and the wrapper of its device calls and its congestion controller."""

    __slots__ = ("_writer", "_clock", "node", "_peers_by_conn", "_peers", "_by_remote", "_high", "_last",
                 "_dirty")

    def __init__(self, path: str) -> None:
        key = os.path.abspath(path)
        with _writers_lock:
            writer = _writers.get(key)
            if writer is None or writer.file.closed:
                writer = _writers[key] = _Writer(path)
            writer.users += 1
        self._writer = writer
        self._clock: Callable[[], float] = lambda: 0.0
        self.node = ""
        self._peers_by_conn: Mapping[int, Peer] = {}
        self._peers: Mapping[bytes, Peer] = {}
        self._by_remote: dict[int, Peer] = {}  # remote conn id -> peer (for what we send)
        self._high: dict[int, int] = {}  # remote conn id -> highest DATA seq sent
        self._last: dict[Peer, tuple[Any, ...]] = {}  # the metrics last written
        self._dirty: dict[Peer, None] = {}  # peers whose window changed since

    # ------------------------------------------------------------------ writing

    def emit(self, event: str, peer: Peer | None = None, **fields: Any) -> None:
        """Write one event now (``fields``: JSON-serialisable)."""
        line: dict[str, Any] = {"t": round(self._clock(), 9), "node": self.node, "event": event}
        if peer is not None:
            line["peer"] = peer.address.hex()
        line.update(fields)
        self._writer.write(json.dumps(line) + "\n")

    def wrap_cc(self, cc: CongestionControl) -> CongestionControl:
        """The engine's seam: its congestion controller, observed (``Engine(wrap_cc=...)``)."""
        return TracedCongestion(cc, self)

    # ------------------------------------------------------------------ the transport

    @hookimpl
    def btl_transport_opened(self, transport: Any) -> None:
        self.attach(transport)

    @hookimpl
    def btl_transport_closed(self, transport: Any, stats: Mapping[str, Any]) -> None:
        self.flush()
        self.emit("transport_closed", stats={k: v for k, v in stats.items() if isinstance(v, (int, float))})
        self.close()

    def attach(self, transport: Any) -> None:
        """Wrap ``transport``'s device calls (see the module docstring)."""
        self._clock = transport.now
        self.node = bytes(transport.address).hex()
        engine = transport.engine
        self._peers_by_conn, self._peers = engine.peers_by_conn, engine.peers_by_addr
        post, many, poll, poll_from = transport._post, transport._many, transport._poll, transport._poll_from

        def traced_post(channel: int, dest: Any, buf: Any) -> bool:
            taken: bool = post(channel, dest, buf)
            if taken:
                self._sent(dest, buf)
            return taken

        def traced_many(batch: Sequence[tuple[int, Any, Any]]) -> int:
            taken: int = many(batch)
            for _, dest, buf in batch[:taken]:
                self._sent(dest, buf)
            return taken

        def traced_poll(budget: int) -> Any:
            got = poll(budget)
            for buf in got:
                self._received(buf)
            return got

        def traced_poll_from(budget: int) -> Any:
            got, sources = poll_from(budget)
            for buf in got:
                self._received(buf)
            return got, sources

        transport._post = traced_post
        if many is not None:
            transport._many = traced_many
        transport._poll = traced_poll
        if poll_from is not None:
            transport._poll_from = traced_poll_from
        self.emit("transport_opened", backend=transport.backend, cc=transport.config.cc)

    def flush(self) -> None:
        """Write the metrics of the peers whose window changed since the last check."""
        if self._dirty:
            dirty = list(self._dirty)
            self._dirty.clear()
            for peer in dirty:
                self.metrics(peer)

    def close(self) -> None:
        writer = self._writer
        with writer.lock:
            writer.users -= 1
            writer.file.flush()
            if writer.users <= 0:
                writer.file.close()
                with _writers_lock:
                    if _writers.get(os.path.abspath(writer.path)) is writer:
                        del _writers[os.path.abspath(writer.path)]

    # ------------------------------------------------------------------ datagrams

    def _peer_sent_to(self, conn: int, dest: Any) -> Peer | None:
        """The peer a datagram to ``dest`` with dst_conn ``conn`` went to (by its remote conn
        id, remembered; a first HELLO, with none yet, by its destination)."""
        peer = self._by_remote.get(conn)
        if peer is None:
            for p in list(self._peers.values()):
                if (conn and p.remote_conn == conn) or (not conn and p.dest == dest):
                    peer = p
                    if conn:
                        self._by_remote[conn] = p
                    break
        return peer

    def _sent(self, dest: Any, buf: Any) -> None:
        self.flush()
        raw = b"".join(bytes(part) for part in buf) if type(buf) is list else bytes(buf)
        fields = describe(raw)
        if fields is None:
            return
        fields.pop("address", None)  # (our own, in a HELLO we send)
        conn = int.from_bytes(raw[4:8], "big")
        if fields["type"] == "DATA":
            seq = fields["seq"]
            high = self._high.get(conn)
            fields["retransmission"] = high is not None and seq <= high
            if high is None or seq > high:
                self._high[conn] = seq
        self.emit("packet_sent", self._peer_sent_to(conn, dest), **fields)

    def _received(self, buf: Any) -> None:
        self.flush()
        raw = bytes(buf)
        fields = describe(raw)
        if fields is None:
            return
        peer = self._peers_by_conn.get(int.from_bytes(raw[4:8], "big"))
        if peer is None and "address" in fields:
            peer = self._peers.get(bytes.fromhex(fields["address"]))
        self.emit("packet_received", peer, **fields)
        if peer is not None and "ack" in fields:
            self._dirty[peer] = None  # (its RTT may change once the engine has it: written at the next flush)

    # ------------------------------------------------------------------ metrics

    def metrics(self, peer: Peer) -> None:
        """Write ``peer``'s window, RTT and pacing rate if one changed since last written."""
        timer = peer.timer
        now = (peer.cwnd, peer.ssthresh, timer.srtt, timer.min_rtt, timer.rttvar, peer.pacing_rate)
        if self._last.get(peer) == now:
            return
        self._last[peer] = now
        cwnd, ssthresh, srtt, min_rtt, rttvar, pacing = now
        self.emit("metrics_updated", peer, cwnd=_number(cwnd), ssthresh=_number(ssthresh),
                  srtt=_number(srtt), min_rtt=_number(min_rtt), rttvar=_number(rttvar),
                  pacing_rate=_number(pacing))

    def congestion(self, peer: Peer, trigger: str) -> None:
        self.emit("congestion", peer, trigger=trigger)
        self.metrics(peer)


def describe(raw: bytes) -> dict[str, Any] | None:
    """A datagram's fields as a trace shows them; None if it is not btlcore's."""
    if len(raw) >= 4 and raw[0] == wire.VERSION_NEGOTIATION:
        return {"type": "VERSION", "size": len(raw)}
    if len(raw) < wire.HEADER_LEN:
        return None
    version, typ, flags, _h, _dst, _inc, _crc, seq, ack, tag, plen = _HEADER.unpack_from(raw)
    out: dict[str, Any] = {"type": wire.TYPE_NAMES.get(typ, str(typ)), "size": len(raw)}
    if version != wire.WIRE_VERSION:
        out["version"] = version
    if typ == wire.T_DATA:
        out.update(seq=seq, tag=tag, len=plen)
    if flags & wire.F_ACK:
        out["ack"] = ack
    if typ == wire.T_ACK:
        try:
            window, ranges, delay, _ = wire.parse_ack_payload(memoryview(raw)[wire.HEADER_LEN:])
        except wire.MalformedDatagram:
            return out
        out.update(window=window, ack_delay_us=delay,
                   sack=[[ack + start, ack + start + length - 1] for start, length in ranges])
    elif typ in (wire.T_HELLO, wire.T_HELLO_ACK):
        try:
            out["address"] = wire.Hello.decode(memoryview(raw)[wire.HEADER_LEN:]).address.hex()
        except wire.MalformedDatagram:
            pass
    return out


class TracedCongestion:
    """A congestion controller, observed: every call goes to the algorithm first, then the
    tracer notes what changed.  Optional hooks (``on_rate_sample``, ``on_spurious``) exist
    here exactly when the algorithm has them, so tracing changes no code path the engine
    takes."""

    __slots__ = ("_inner", "_tracer", "_dirty", "_inner_on_ack", "cwnd_max")

    def __init__(self, inner: CongestionControl, tracer: Tracer) -> None:
        self._inner = inner
        self._tracer = tracer
        self._dirty = tracer._dirty
        self._inner_on_ack = inner.on_ack
        self.cwnd_max = inner.cwnd_max

    def on_new_peer(self, peer: Peer) -> None:
        self._inner.on_new_peer(peer)
        self._tracer.emit("connection_started", peer)
        self._tracer.metrics(peer)

    def on_ack(self, peer: Peer) -> None:
        self._inner_on_ack(peer)
        self._dirty[peer] = None  # (written once per batch of ACKs: see Tracer.flush)

    def on_loss_episode(self, peer: Peer) -> None:
        self._inner.on_loss_episode(peer)
        self._tracer.congestion(peer, "loss")

    def on_persistent_congestion(self, peer: Peer) -> None:
        self._inner.on_persistent_congestion(peer)
        self._tracer.congestion(peer, "persistent_congestion")

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)  # AttributeError when the algorithm lacks it
        if name == "on_spurious":
            tracer = self._tracer

            def on_spurious(peer: Peer) -> None:
                value(peer)
                tracer.congestion(peer, "spurious")

            return on_spurious
        if name == "on_rate_sample":
            dirty = self._dirty

            def on_rate_sample(peer: Peer, sample: Any) -> None:
                value(peer, sample)
                dirty[peer] = None

            return on_rate_sample
        return value
