"""The state btlcore keeps for one remote peer: who it is (handshake, incarnations), what we
sent it (send window, retransmit state), and what it sent us (receive window, reassembly,
ACK debt).  The logic that moves this state lives in :mod:`btlcore.protocol` (see its docstring).

The connection's state (:class:`PeerState`) changes only through :data:`TRANSITIONS`, one
table of (state, event) -> next state, applied by :meth:`Peer.transition`; a pair that is not
in the table is a bug in the engine and raises :class:`InvalidTransition`.  Everything that
changes ``Peer.state`` goes through it (h11's ``_state.py`` is the model).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .invalid import InvalidTransition as InvalidTransition
from .stats import PeerCounters
from .window import ReceiveWindow, SackScoreboard

#: connection events (up; the transport logs failed, restarted and closed) at INFO, never
#: anything per packet above DEBUG
log = logging.getLogger("btlcore.protocol")

if TYPE_CHECKING:
    from .events import Event
    from .rtt import RetransmitTimer

#: a datagram as handed to the device: one buffer, or [header, payload] (a gathered send)
Frame = bytes | bytearray | list[Any]

#: a completion callback: called once with None (success) or the exception that failed it
Callback = Callable[[BaseException | None], Any]


class PeerState(enum.Enum):
    CONNECTING = "connecting"  # handshake under way (a new peer starts here)
    ESTABLISHED = "established"
    FAILED = "failed"  # declared dead; every pending operation failed
    CLOSING = "closing"  # we sent CLOSE and wait for its CLOSE_ACK (late datagrams get a CLOSE)
    CLOSED = "closed"  # closed by either end or by our transport: the connection is over


class PeerEvent(enum.Enum):
    """What moves a connection from one state to another."""

    CONFIRMED = "confirmed"  # each side knows the other's incarnation, connection and ISN
    FAILED = "failed"  # declared dead: handshake, peer or retry timeout
    RESET = "reset"  # a new connection to the same address: a restart, a reset, a reconnect
    CLOSED = "closed"  # the local transport closed
    CLOSE = "close"  # we close it (Transport.close or disconnect): CLOSE sent, resent until acknowledged
    CLOSE_DONE = "close_done"  # our CLOSE was acknowledged, or close_timeout passed
    PEER_CLOSED = "peer_closed"  # the peer's CLOSE (naming this connection's ids) arrived


_C, _E, _F, _X = PeerState.CONNECTING, PeerState.ESTABLISHED, PeerState.FAILED, PeerState.CLOSED
_G: Final = PeerState.CLOSING

#: (state, event) -> next state: every change of Peer.state, and nothing else
TRANSITIONS: dict[tuple[PeerState, PeerEvent], PeerState] = {
    # state             event                   next state
    (_C, PeerEvent.CONFIRMED): _E,
    (_C, PeerEvent.FAILED): _F,
    (_E, PeerEvent.FAILED): _F,
    (_C, PeerEvent.RESET): _C,
    (_E, PeerEvent.RESET): _C,
    (_F, PeerEvent.RESET): _C,
    (_C, PeerEvent.CLOSED): _X,
    (_E, PeerEvent.CLOSED): _X,
    # graceful close (docs/protocol.md §11): ours, then the peer's
    (_C, PeerEvent.CLOSE): _G,
    (_E, PeerEvent.CLOSE): _G,
    (_G, PeerEvent.CLOSE_DONE): _X,
    (_G, PeerEvent.CLOSED): _X,
    (_G, PeerEvent.PEER_CLOSED): _X,  # both ends closed at once
    (_C, PeerEvent.PEER_CLOSED): _X,
    (_E, PeerEvent.PEER_CLOSED): _X,
    (_X, PeerEvent.RESET): _C,  # a new connection after a closed one (its ids quarantined)
}


class OutMessage:
    """A message (or put) on its way out: cut into segments lazily, as the window opens, and
    complete once every segment is acknowledged -- a put once, in addition, the receiver's
    put status has come back (it says whether the put landed)."""

    __slots__ = ("tag", "data", "length", "callback", "msg_id", "offset", "outstanding",
                 "chunked", "put_key", "put_offset", "done", "cut_all", "flags", "put_status")

    def __init__(self, tag: int, data: memoryview | bytes, callback: Callback | None, msg_id: int,
                 chunked: bool, put_key: int | None = None, put_offset: int = 0) -> None:
        self.tag = tag
        self.data = data
        self.length = len(data)
        self.callback = callback
        self.msg_id = msg_id
        self.offset = 0  # next byte to put in a segment
        self.outstanding = 0  # segments sent and not yet acknowledged
        self.chunked = chunked
        self.put_key = put_key
        self.put_offset = put_offset
        self.done = False  # its callback has fired (or it failed)
        self.cut_all = False  # its last segment has been cut
        self.flags = 0  # header flags its segments carry besides the usual (F_STATUS)
        self.put_status: int | None = None  # a put: the receiver's status code, once known


class Segment:
    """One sequenced datagram held until acknowledged.  ``buf`` is the whole datagram; a
    retransmission re-stamps its ACK and CRC fields in a copy."""

    __slots__ = ("seq", "buf", "channel", "msg", "sent_at", "tx_count", "tx_serial", "lost", "rs", "size")

    # set only when the engine samples delivery rates (delivery.py), at every transmission:
    # the connection's (delivered, delivered_time, first_sent_time, app_limited) then, and
    # the datagram's size in bytes
    rs: tuple[int, float, float, bool]
    size: int

    def __init__(self, seq: int, buf: Frame, channel: int, msg: OutMessage,
                 sent_at: float = 0.0, tx_count: int = 0, tx_serial: int = 0) -> None:
        self.seq = seq
        self.buf = buf
        self.channel = channel
        self.msg = msg
        self.sent_at = sent_at
        self.tx_count = tx_count
        self.tx_serial = tx_serial
        self.lost = 0  # queued for retransmission: 0 no, else recovery.LOST_FAST/LOST_TIMEOUT


class Reassembly:
    """A chunked message being put back together (or a chunked put being tracked).

    It holds what arrived, never what the header claims (``msg_len`` is a stranger's word
    until every byte is in) -- except within a budget: the receiver counts what it holds
    (:attr:`held`) against ``Peer.rx_held`` and ``EngineState.rx_held``, and :meth:`add`
    returns what it holds more.  Chunks that arrive in order as immutable ``bytes`` datagrams
    (the simulator's) are kept as views of those datagrams (``parts``) and joined once the
    last one is in (one copy).  Anything else (a datagram the device will reuse) switches to
    ``buf``, the in-order prefix, appended to as chunks arrive (``+=``: one copy, the
    allocator growing it in place).

    A chunk above a gap then makes the message *spread*, if the caller's ``room`` lets it
    hold its whole extent (``msg_len``, counted from then on, whatever arrived): ``buf``
    grows to the end of the highest chunk, a gap left as zeros, so that a chunk above a gap
    costs one copy and no object (appended, as the chunks after a loss arrive in order), and
    the chunk that fills a gap is copied to its place.  Only its ends are noted: the prefix
    (``filled``), the run growing above the gap (``run_at``/``run_end``) and the runs gaps
    left behind (``runs``, start -> end).  Without the room, chunks above a gap wait in
    ``pending`` (copies) until it fills.

    Delivered only if the chunks tile the message exactly: the prefix reaches ``msg_len``
    and the bytes received add up to it (a lying sender's overlapping chunks fail either
    test; the second is what keeps a spread message whose bytes an overlapping chunk wrote
    over from ever being handed up)."""

    __slots__ = ("buf", "parts", "pending", "msg_len", "received", "tag", "last_seq", "put_key",
                 "put_offset", "failed", "filled", "runs", "run_at", "run_end")

    def __init__(self, msg_len: int, tag: int, put_key: int | None, put_offset: int) -> None:
        self.buf: bytearray | None = None  # the in-order prefix, once a chunk cannot be kept
        self.parts: list[memoryview] | None = [] if put_key is None else None  # kept chunks
        self.pending: dict[int, bytes] | None = None  # chunks above the prefix, by offset
        self.msg_len = msg_len
        self.received = 0
        self.tag = tag
        self.last_seq = -1
        self.put_key = put_key
        self.put_offset = put_offset
        # a put that could not be placed: its put status code (wire.PS_*), reported when
        # the whole put arrived; 0 while every chunk landed
        self.failed = 0
        # spread: the end of the in-order prefix (-1: not spread), the runs above it
        self.filled = -1
        self.runs: dict[int, int] | None = None
        self.run_at = self.run_end = -1

    @property
    def held(self) -> int:
        """Bytes this message holds as the budgets count them: its extent once spread, else
        what arrived."""
        return self.msg_len if self.filled >= 0 else self.received

    def add(self, off: int, chunk: memoryview, room: int = 0) -> int:
        """Take the chunk at ``off`` (a view of the datagram; before ``received`` counts it);
        ``room``: how many bytes more this message may be counted for, to spread.  Returns
        how many more it is counted for (the chunk's length; the rest of the extent, on
        spreading; 0 once spread)."""
        buf = self.buf
        if buf is not None and off == len(buf) and not self.pending and self.filled < 0:  # the common case first
            buf += chunk
            return len(chunk)
        if self.filled >= 0:
            self._place(off, chunk)
            return 0
        parts = self.parts
        if parts is not None:
            if off == self.received and type(chunk.obj) is bytes:
                parts.append(chunk)  # immutable: kept, not copied
                return len(chunk)
            buf = self.buf = bytearray().join(parts)
            self.parts = None
        if buf is None:
            return 0  # (a put's chunks go to its region: nothing is kept here)
        if off == len(buf):
            buf += chunk
            pending = self.pending
            if pending:  # the gap before them is filled: move them onto the prefix
                nxt = pending.pop(len(buf), None)
                while nxt is not None:
                    buf += nxt
                    nxt = pending.pop(len(buf), None)
        elif off > len(buf):
            grow = self.msg_len - self.received
            if grow <= room:
                self._spread(buf)
                self._place(off, chunk)
                return grow
            if self.pending is None:
                self.pending = {}
            self.pending[off] = bytes(chunk)
        # (off below the prefix: a chunk overlapping what is in, which no sender makes; take()
        # then finds the message short and the receiver drops it)
        return len(chunk)

    def _spread(self, buf: bytearray) -> None:
        """From now on chunks go to their places (the prefix ends at ``len(buf)``); the
        chunks that waited above it go there first."""
        self.filled = len(buf)
        self.runs = {}
        pending = self.pending
        if pending:
            self.pending = None
            for at in sorted(pending):
                self._place(at, memoryview(pending[at]))

    def _place(self, off: int, chunk: memoryview) -> None:
        """A chunk of a spread message to its place: appended at the top (a gap before it
        as zeros), or into a gap; the prefix or a run grows."""
        filled = self.filled
        if off < filled:
            return  # (overlapping what is in: the message will not tile)
        end = off + len(chunk)
        buf = self.buf
        runs = self.runs
        assert buf is not None and runs is not None
        top = len(buf)
        if off == top:
            buf += chunk
        elif off > top:
            buf += bytes(off - top)
            buf += chunk
        else:  # into a gap (a view: the bytearray's own slice assignment copies the chunk first)
            if end > top:
                buf += bytes(end - top)  # (a liar's chunk across the top)
            memoryview(buf)[off:end] = chunk
        if off == filled:  # the gap closes: take in the runs it reaches
            while True:
                if end == self.run_at:
                    end = self.run_end
                    self.run_at = self.run_end = -1
                elif runs and end in runs:
                    end = runs.pop(end)
                else:
                    break
            self.filled = end
        elif off == self.run_end:
            self.run_end = end
        else:  # a new run above another gap: the one growing is set aside
            if self.run_at >= 0:
                runs[self.run_at] = self.run_end
            self.run_at, self.run_end = off, end

    def take(self) -> bytearray | None:
        """The whole message, once ``received`` reached ``msg_len`` (call once); None if the
        chunks did not tile it (a lying sender's overlapping offsets)."""
        out = bytearray().join(self.parts) if self.parts is not None else self.buf
        whole = self.filled == self.msg_len if self.filled >= 0 else out is not None and len(out) == self.msg_len
        self.parts = self.buf = self.pending = self.runs = None
        return out if whole and self.received == self.msg_len else None


class Peer:
    """Everything about one remote peer.  Users hold it as the handle returned by
    ``Transport.connect`` and passed to message handlers."""

    __slots__ = (
        # identity and handshake
        "address", "dest", "local_conn", "remote_conn", "remote_inc", "state", "confirmed",
        "remote_known", "inbound_since", "crc", "hello_next", "hello_count", "hello_sent_at", "hello_interval",
        "hello_started", "hello_reply", "reply_dest",
        # the peer's limits (transport parameters of its handshake) and what follows from them
        "max_message", "single_cap", "chunk_cap", "peer_timeout", "window_cap",
        "error", "user_data", "source", "sources", "past_incarnations", "past_remote_conns", "remote_isn",
        # send side
        "isn", "next_seq", "snd_una", "queue", "unacked", "newest", "resend", "scoreboard",
        "tx_serial", "acked_data", "acked_priority", "reo_mult", "reo_persist", "loss_seq_limit", "cwnd",
        "ssthresh", "pacing_rate", "cwnd_cap", "tune_at",
        "recovery_serial", "timeouts", "probe_seq", "probe_serial", "probe_dup", "timer",
        "last_progress", "rto_base", "msg_counter", "puts",
        # delivery-rate sampling (delivery.py) and pacing (pacing.py)
        "delivered", "delivered_time", "first_sent_time", "app_limited_at", "inflight_bytes",
        "rs_acked", "rs_lost", "rs_seg", "delivery_rate", "pace_next", "pace_wait",
        "pace_jitter", "pace_seed",
        "undo_cwnd", "undo_ssthresh", "undo_retrans", "probe_sent", "tlp_progress", "tlp_seg",
        "remote_window", "send_queued", "send_blocked",
        # liveness and close (lifecycle.py): the death clock, keepalive and zero-window probes
        "last_heard", "ping_at", "ping_due", "persist", "close_reason", "close_next",
        "close_interval", "close_until", "close_reply",
        # receive side
        "window", "rx_high_time", "dup_seen", "last_ack_sent", "ready", "reassembly", "ack_count", "ack_deadline",
        "ack_now",
        "sack_dirty", "rx_held", "unconsumed", "adv_window", "rx_crc_conn", "rx_crc_key", "rx_crc_head",
        "tx_prefix_key", "tx_prefix", "counters",
        # timers (the engine's heap)
        "timed", "timed_order",
        # the congestion controller's own per-connection state (congestion/; None until set)
        "cc_state",
    )

    # the header prefix (and its CRC32C) of our last data segment to it, by its key ``conn <<
    # 8 | flags`` (tx_prefix_key; -1: none yet): Packetizer._cut_segments looks here first
    tx_prefix: tuple[bytes, int]

    # liveness and close (lifecycle.py): when the last valid datagram from it arrived (the
    # death rule's clock), when we last PINGed it, whether a PING is due, the zero-window
    # probe's interval (0: not probing); while CLOSING, our CLOSE's reason (wire.CR_*), next
    # resend, interval and give-up time; a CLOSE or CLOSE_ACK owed to it (wire.T_*)
    last_heard: float
    ping_at: float
    ping_due: bool
    persist: float
    close_reason: int | None
    close_next: float | None
    close_interval: float
    close_until: float
    close_reply: int | None

    def __init__(self, address: bytes, dest: Any, local_conn: int, isn: int,
                 timer: RetransmitTimer, window: int, peer_timeout: float = 10.0) -> None:
        self.address, self.dest = address, dest
        self.local_conn = local_conn
        self.remote_conn = self.remote_inc = 0
        self.state = PeerState.CONNECTING  # where a connection starts (TRANSITIONS moves it on)
        self.confirmed = False  # the peer knows our current incarnation
        self.remote_known = False  # we know its incarnation, connection id and ISN
        # created by its HELLO and not confirmed yet: since when (None otherwise)
        self.inbound_since: float | None = None
        self.crc = False  # put a CRC32C on what we send it (we or it require one; the engine sets it)
        self.hello_next: float | None = None  # when to (re)send a HELLO
        self.hello_interval = 0.0
        self.hello_count = 0  # HELLOs sent (with one, the handshake's RTT sample is exact)
        self.hello_sent_at: float | None = None  # the first HELLO of this handshake, when
        self.hello_started: float | None = None
        self.hello_reply = False  # a HELLO_ACK is owed
        self.reply_dest: Any = None  # where to: the HELLO's source as a dest (None: ``dest``)
        # its limits (ours, then its transport parameters): largest message, payloads, peer_timeout
        self.max_message, self.single_cap, self.chunk_cap = (1 << 32) - 1, 0, 0
        self.peer_timeout = peer_timeout
        self.window_cap = window  # segments in flight its byte window allows (autotune.send_window)
        self.error: BaseException | None = None
        self.user_data: Any = None
        self.source: Any = None  # where its last accepted handshake came from (None: not reported)
        self.sources: tuple[Any, ...] = ()  # where its connection's datagrams may come from (guard.py)
        # incarnations this address had before (a late HELLO of one is no restart)
        self.past_incarnations: tuple[int, ...] = ()
        self.past_remote_conns: tuple[int, ...] = ()  # likewise, connections
        self.remote_isn = 0
        self.isn, self.next_seq = isn, isn + 1
        self.snd_una = isn  # everything up to here is acknowledged
        # queue and resend: deques once used, an empty tuple until then (a deque costs ~770 B)
        self.queue: deque[OutMessage] | tuple[()] = ()
        self.unacked: dict[int, Segment] = {}  # in transmission order (a resend: del, insert)
        self.newest: Segment | None = None  # the last put at unacked's end (tlp.newest_unacked)
        self.resend: deque[Segment] | tuple[()] = ()
        self.scoreboard, self.tx_serial = SackScoreboard(), 0
        self.acked_data = self.acked_priority = 0  # per channel: highest serial acknowledged
        self.loss_seq_limit: int | None = None  # no loss declared above (truncated SACK)
        self.cwnd = 0.0  # congestion window, segments (set by the engine)
        self.ssthresh = self.cwnd_cap = float("inf")  # (cwnd_cap: the window's cap, autotune.py)
        self.pacing_rate = 0.0  # bytes/s the congestion controller wants sends spread at (0: unpaced)
        self.new_flight()
        self.recovery_serial = 0  # losses of segments sent before this serial: same episode
        # timeouts in a row without progress; the first one's probes, judged when acknowledged
        self.timeouts = 0
        self.probe_seq: int | None = None
        self.probe_serial, self.probe_dup = 0, False
        self.reo_mult = 1  # reordering allowance, in quarters of an RTT (grows on spurious resends)
        self.reo_persist = 0  # loss episodes the widened allowance lasts (RACK's reo_wnd_persist)
        self.timer = timer
        self.last_progress = 0.0  # last time the peer acknowledged something new
        self.rto_base = 0.0  # the retransmit timer counts from max(this, oldest send)
        self.msg_counter = 0
        # puts cut whole and waiting for the receiver's put status, by the wire seq of their
        # last segment (what the status names); None until the first put (an empty dict is 64 B)
        self.puts: dict[int, OutMessage] | None = None
        self.remote_window = window
        self.send_queued = 0  # bytes of messages accepted, not completed (unsent or unacked)
        self.send_blocked = False  # a send was refused: PeerWritable once drained to half
        # liveness and close (lifecycle.py; the slots' annotations above say what each is)
        self.last_heard = self.ping_at = self.persist = self.close_interval = self.close_until = 0.0
        self.ping_due, self.close_reason, self.close_next, self.close_reply = False, None, None, None
        self.window = ReceiveWindow(0, window)  # rebased on the peer's ISN at handshake
        self.last_ack_sent = -1.0
        self.dup_seen = False  # a duplicate arrived since our last standalone ACK
        self.rx_high_time = 0.0  # when the highest sequence number so far arrived
        self.ready: dict[int, Event] = {}  # ordered mode: seq -> deliverable
        self.reassembly: dict[int, Reassembly] = {}
        self.ack_count = 0  # segments received since we last told the peer our ACK point
        self.ack_deadline: float | None = None
        self.ack_now = self.sack_dirty = False
        self.rx_held = 0  # bytes its messages in reassembly hold (in EngineState.rx_held too)
        self.unconsumed = 0  # bytes delivered and not taken yet (Engine.set_unconsumed)
        self.adv_window = window  # the receive window our last ACK advertised, segments
        self.rx_crc_conn = self.rx_crc_key = self.rx_crc_head = self.tx_prefix_key = -1  # (_head_crc; tx_prefix)
        self.counters = PeerCounters()
        self.timed, self.timed_order = False, 0  # the engine keeps times for it; since when (ties)
        self.cc_state: Any = None  # the congestion controller's, set by its on_new_peer

    @property
    def acked_serial(self) -> tuple[int, int]:
        """The highest transmission serial acknowledged, per channel (data, priority): two
        ints, not a list (compiled: unboxed, and 72 bytes less per peer)."""
        return self.acked_data, self.acked_priority

    def to_end(self, seg: Segment) -> None:
        """``seg`` (in ``unacked``) goes again or is declared lost: to the end of ``unacked``,
        transmission order, as its newest segment (``newest``: tlp.newest_unacked)."""
        unacked = self.unacked
        del unacked[seg.seq]
        unacked[seg.seq] = seg
        self.newest = seg

    def new_flight(self) -> None:
        """Delivery-rate sampling's state (delivery.py, only for an algorithm that takes
        samples: its docstring says what each is), pacing's (pacing.py: the bucket's next
        empty moment, whether sends wait for it on the timer heap), undo's and the tail-loss
        probe's start over."""
        self.delivered = self.app_limited_at = self.inflight_bytes = self.rs_acked = self.rs_lost = 0
        self.delivered_time = self.first_sent_time = self.delivery_rate = self.pace_next = 0.0
        self.rs_seg: Segment | None = None
        self.pace_wait = False
        # pacing's jitter: how late pace_next is on its slot, and the generator's state
        # (xorshift32, never 0; from the ISN, so a seeded run is reproducible)
        self.pace_jitter = 0.0
        self.pace_seed = (self.isn * 2654435761 & 0xFFFFFFFF) or 1
        # undo (undo.py): the window and threshold before the last decrease (0.0: nothing to
        # undo), that episode's retransmissions not yet proven spurious, and the original send
        # time of the last timeout's oldest probe
        self.undo_cwnd = self.undo_ssthresh = self.probe_sent = 0.0
        self.undo_retrans = 0
        self.tune_at = 0.0  # autotune.py: the cap grows again no sooner than this
        self.tlp_progress = -1.0  # tlp.py: last_progress when the tail's probe was sent ...
        self.tlp_seg: Segment | None = None  # ... and this segment waits to go as one

    def __repr__(self) -> str:
        return f"<Peer {self.address.hex()} {self.state.value} conn={self.local_conn:#x}>"

    def transition(self, event: PeerEvent) -> PeerState:
        """Move the connection's state by ``event`` (see :data:`TRANSITIONS`)."""
        new = TRANSITIONS.get((self.state, event))
        if new is None:
            allowed = sorted(e.value for (s, e) in TRANSITIONS if s is self.state)
            raise InvalidTransition(f"peer {self.address.hex()}: event {event.value!r} in state "
                                    f"{self.state.value!r} (allowed there: {', '.join(allowed) or 'none'})")
        self.state = new
        if new is PeerState.ESTABLISHED:
            log.info("peer %s up (connection %#x)", self.address.hex(), self.local_conn)
        return new

    def shed(self) -> None:
        """Give back what the emptied buffers still hold (a used deque keeps its 64-slot
        block, ~760 B; a dict its grown table): the keepalive calls this on a silent peer.
        Only what is empty is replaced, so it is safe at any moment."""
        if not self.queue:
            self.queue = ()
        if not self.resend:
            self.resend = ()
        if not self.unacked:
            self.unacked = {}
        if not self.ready:
            self.ready = {}
        if not self.reassembly:
            self.reassembly = {}
        if not self.puts:
            self.puts = None

    def await_put_status(self, wire_seq: int, msg: OutMessage) -> None:
        """A put cut whole waits for the receiver's status, named by its last segment's wire seq."""
        if self.puts is None:
            self.puts = {}
        self.puts[wire_seq] = msg

    def new_resend(self) -> deque[Segment]:
        self.resend = deque()
        return self.resend

    def remember_incarnation(self, inc: int) -> None:
        """Keep the last 16 replaced incarnations (a late HELLO of one is stale)."""
        self.past_incarnations = (self.past_incarnations + (inc,))[-16:]

    def remember_conn(self, conn: int) -> None:
        self.past_remote_conns = (self.past_remote_conns + (conn,))[-16:]

    @property
    def in_flight(self) -> int:
        return self.next_seq - 1 - self.snd_una

    def has_outstanding(self) -> bool:
        """Unacknowledged or unsent work toward this peer, or a put awaiting its status."""
        return bool(self.unacked or self.queue or self.puts)
