"""Where a datagram becomes a delivered message: the one receive path for data segments.

From the other parts it gets, at construction, recovery's ``on_cum_ack``,
``detect_losses``, ``on_ack`` (what a datagram acknowledges) and ``put_done`` (a put status
completes a put), and the handshake's ``confirm`` and ``on_hello``; the rest is the shared
:class:`~.state.EngineState`.  The engine calls :meth:`Receiver.receive_datagrams` and
:meth:`Receiver.dispatch`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, cast

from .events import Event, MessageReceived, PutLanded, PutRefused, _new
from .guard import Guard
from .handshake import Handshake
from .lifecycle import Lifecycle
from .peers import OutMessage, Peer, PeerState, Reassembly
from .recovery import Recovery
from .state import EngineState
from .versions import Versions
from .window import ABOVE_WINDOW, DUPLICATE, NEW
from .window import SEQ_HALF as _HALF
from .window import SEQ_WRAP as _WRAP
from .wire import (
    CHUNK,
    CHUNK_LEN,
    CRC_OFFSET,
    F_ACK,
    F_CHUNK,
    F_CRC,
    F_PUT,
    F_STATUS,
    HEADER,
    HEADER_CHUNK,
    HEADER_LEN,
    HF_CRC_REQUIRED,
    PAYLOAD_AT,
    PS_LANDED,
    PS_OUT_OF_BOUNDS,
    PS_UNEXPOSED,
    PS_UNKNOWN_KEY,
    PUT,
    PUT_STATUS,
    SEQ_MASK,
    SEQ_SHORT,
    T_ACK,
    T_CHALLENGE,
    T_CLOSE,
    T_CLOSE_ACK,
    T_DATA,
    T_HELLO,
    T_HELLO_ACK,
    T_PING,
    T_RESPONSE,
    T_UNKNOWN_CONN,
    UNKNOWN_FLAGS,
    WIRE_VERSION,
    Hello,
    MalformedDatagram,
    crc32c,
)

_FAILED: Final = PeerState.FAILED
_ESTABLISHED: Final = PeerState.ESTABLISHED
_CLOSING: Final = PeerState.CLOSING

_NOT_FAST: Final = UNKNOWN_FLAGS | F_PUT | F_STATUS  # flags that keep a datagram off the in-order fast path
_CHUNKED: Final = HEADER_LEN + CHUNK_LEN  # where a chunk's payload starts
#: the start value of receive_datagrams' last_src, which it types Any through it (a source is
#: of any type; compiled by mypyc, a local typed int would take ints only); Final: compiled,
#: read from a static, not looked up in the module's dict at every call
_ANY: Final[Any] = -1
#: a datagram up to this size has its CRC32C computed over a slice of it, a copy of its tail
#: (``bytes``) or a view (``memoryview``): copying a few hundred bytes costs less than making a
#: memoryview of it and slicing that (per small datagram, compiled: about 1,100 instructions
#: of ~13,000 in a ping-pong receive): the fast path then makes a view (``view``) only where
#: it keeps one.  Other bytes-like types are read through a memoryview (slicing some, ctypes
#: arrays, makes no buffer).  The CRC of the header's first 12 bytes is cached per peer (_head_crc).
#: Without a CRC to check, every ``bytes`` or ``memoryview`` datagram is taken so (``small``).
_COPY_MAX: Final = 1024
_DUP_ACK_SHARE: Final = 0.125  # duplicates are answered at most 8 times per ack_delay (see _on_not_new)
_SLICED: Final = (bytes, memoryview)
#: built in the hot path as tuples (events._new); bound here so that compiled code reads them
#: from a static, not from the module's dict (events.py is pure Python)
_MESSAGE_RECEIVED: Final = MessageReceived
_NEW_EVENT: Final = _new
# likewise the unpacks (else a bound method made per call; typed: every field is an int, so
# the fields unpacked are typed ints, not Any) and memoryview (else a builtins lookup)
_UNPACK_CHUNKED: Final[Callable[..., tuple[int, ...]]] = HEADER_CHUNK.unpack_from
_UNPACK: Final[Callable[..., tuple[int, ...]]] = HEADER.unpack_from
_MEMORYVIEW: Final = memoryview
# the fast path's slices, made once (compiled, ``view[a:]`` builds a slice object each time)
_CRC_HEAD: Final = slice(None, CRC_OFFSET)
#: marks an ACK's entry in the peer's cached header CRC (``_head_crc``'s key: bit 48 is above
#: the incarnation's 32 bits, shifted by 16), so that a data segment never takes it
_ACK_HEAD: Final = 1 << 48
_CRC_TAIL: Final = slice(CRC_OFFSET + 4, None)
_CHUNK_PAYLOAD: Final = slice(_CHUNKED, None)
_PAYLOAD: Final = slice(HEADER_LEN, None)  # (a whole segment's payload)


def _view(data: Any) -> Any:
    """``data`` as a memoryview: itself if it is one (a device's datagram), not a new view of it."""
    return data if type(data) is _MEMORYVIEW else _MEMORYVIEW(data)


class Receiver:
    """Data segments in: ordering, reassembly, puts, put statuses, ACK debt.

    What the hot path reads is in typed slots: the parts it calls (``_recovery``,
    ``_handshake``, compiled classes, so a compiled call is a C call) and the configuration
    values it needs (``Config`` is an attrs class: each read of it is a dict lookup)."""

    __slots__ = ("_state", "config", "crc", "counters", "events", "peers_by_conn", "regions", "_acking",
                 "_timed", "_sending", "_ack_frequency", "_ack_delay", "_recovery", "_handshake",
                 "_min_hello", "_versions", "_rx_limit", "_lifecycle", "_guard", "_ordered",
                 "_max_message", "_max_reassemblies", "_recv_buffer", "_extent_peer", "_extent_all")

    def __init__(self, state: EngineState, recovery: Recovery, handshake: Handshake,
                 versions: Versions, lifecycle: Lifecycle, guard: Guard) -> None:
        self._state = state  # for now and closed
        self.config = config = state.config
        self.crc = state.crc
        self.counters = state.counters
        self.events = state.events
        self.peers_by_conn: dict[Any, Peer] = state.peers_by_conn  # (Any: the fast path looks up a boxed dst)
        self.regions = state.regions
        self._acking = state.acking
        self._timed = state.timed
        self._sending = state.sending
        self._ack_frequency: int = state.ack_frequency
        self._ack_delay: float = state.ack_delay
        self._recovery = recovery  # on_cum_ack, detect_losses, on_ack, put_done
        self._handshake = handshake  # confirm, on_hello
        self._lifecycle = lifecycle
        self._min_hello = handshake.hello_ack_len  # a smaller HELLO is not answered
        self._versions = versions  # on_foreign
        # the transport's reassembly budget: never below one largest message (else that
        # message could never be put together)
        self._rx_limit: int = max(config.reassembly_limit, config.max_message_size)
        self._guard = guard  # notices, challenges, source checks (guard.py)
        self._ordered: bool = config.ordered
        self._max_message: int = config.max_message_size
        self._max_reassemblies: int = config.max_reassemblies
        self._recv_buffer: int = config.recv_buffer
        # what a message's whole extent (Reassembly.add) may take the holdings to: half of
        # each budget, so that extents (bytes not yet arrived) never crowd out the chunks of
        # the peer's other messages, nor other peers'
        self._extent_peer: int = self._recv_buffer // 2
        self._extent_all: int = self._rx_limit // 2

    def receive_datagrams(self, batch: Iterable[Any], now: float, sources: Sequence[Any] | None = None) -> None:
        """A poll's datagrams (``sources``: where each came from, or None); first, the common case: the next segment."""
        (st := self._state).now = now  # (st.rx_held: what reassembly holds, every peer)
        if st.closed:
            return  # nobody will read them: neither deliver nor acknowledge
        events, acking, timed, freq = self.events, self._acking, self._timed, self._ack_frequency
        peer: Peer | None = None  # the connection's, looked up when it changes (dispatch resets last_dst)
        last_src, last_dst, last_inc, k = _ANY, -1, -1, -1  # (the source passed last; below, typed ints: C tests)
        version = typ = flags = hflags = dst = inc = crc = seq_w = ack_w = tag = plen = msg_id = msg_len = off = 0
        conn: object = 0  # dst as unpacked (boxed): the key of peers_by_conn, not boxed again
        for data in batch:
            k += 1
            n = len(data)
            typ = -1
            # the chunk extension too, in the same unpack, if the flags say so (a bytes datagram's: read unboxed)
            if n >= _CHUNKED and (type(data) is not bytes or data[2] & F_CHUNK):
                version, typ, flags, hflags, conn, inc, crc, seq_w, ack_w, tag, plen, msg_id, msg_len, off \
                    = _UNPACK_CHUNKED(data)
            elif n >= HEADER_LEN:
                version, typ, flags, hflags, conn, inc, crc, seq_w, ack_w, tag, plen = _UNPACK(data)
            # the fast path's tests, before believing anything (else dispatch); each `:=` only notes a value
            if typ != T_DATA or version != WIRE_VERSION or flags & _NOT_FAST or (
                    ((dst := cast(int, conn)) != last_dst or inc != last_inc)
                    and ((peer := self.peers_by_conn.get(conn)) is None or inc != peer.remote_inc or not peer.confirmed
                         or not peer.remote_known or peer.state is not _ESTABLISHED
                         or (last_dst := dst) < 0 or (last_inc := inc) < 0 or (last_src := _ANY) is None)) or (
                    pr := peer) is None or (sources is not None and (src := sources[k]) is not last_src  # (pr: typed)
                    and (last_src is _ANY or src != last_src)  # (a pointer test first: most batches hold one)
                    and (src not in pr.sources or (last_src := src) is None)) or (
                    crc32c(data[_CRC_TAIL] if (small := n <= _COPY_MAX and type(data) in _SLICED)
                           else (view := _MEMORYVIEW(data))[_CRC_TAIL],
                           pr.rx_crc_head if pr.rx_crc_key == inc << 16 | flags << 8 | hflags and pr.rx_crc_conn == dst
                           else self._head_crc(pr, data, dst, inc, flags, hflags)) != crc
                    if flags & F_CRC else self.crc or not (small := type(data) in _SLICED)
                    and (view := _MEMORYVIEW(data)) is None):
                last_dst = -1
                self.dispatch(data, None if sources is None else sources[k], now)
                continue
            if n != (_CHUNKED if flags & F_CHUNK else HEADER_LEN) + plen:
                self.counters.num_malformed_recvs += 1  # drop before anything in it is believed
                continue
            (c := pr.counters).num_total_recvs += 1
            pr.last_heard = now  # the death rule's clock: heard from
            if flags & F_ACK and ack_w != (una if (una := pr.snd_una) <= SEQ_SHORT else una & SEQ_MASK):
                self._on_piggyback_ack(pr, ack_w, now)
            seq = (w := pr.window).cum + 1  # (cum is never negative)
            # in order, whole or a middle chunk in reassembly within the budgets (_over_budget); else general
            if seq_w != (seq if seq <= SEQ_SHORT else seq & SEQ_MASK) or w._starts or flags & F_CHUNK and (
                    (ras := pr.reassembly.get(msg_id)) is None or ras.msg_len != msg_len or ras.put_key is not None
                    or plen <= 0 or off + plen >= msg_len or ras.received + plen >= msg_len
                    or st.rx_held + plen > self._rx_limit):
                self._on_segment(pr, _view(data) if small else view, n, flags, seq_w, tag, plen, now, msg_id,
                                 msg_len, off)  # (the chunk's fields, unpacked above: with F_CHUNK, n >= _CHUNKED)
                continue
            w.cum = seq
            if seq > w.high:
                w.high, pr.rx_high_time = seq, now
            if not flags & F_CHUNK:
                c.num_frag_recvs, c.num_msgs_delivered = c.num_frag_recvs + 1, c.num_msgs_delivered + 1
                c.num_bytes_delivered += plen
                events.append(_NEW_EVENT(_MESSAGE_RECEIVED, (
                    pr, tag, data[HEADER_LEN:] if type(data) is bytes
                    else (data[_PAYLOAD] if small else view[_PAYLOAD]).tobytes())))
            else:
                c.num_chunk_recvs += 1
                view = _view(data) if small else view  # (a small datagram's CRC made none)
                assert ras is not None  # (the test above took it)
                parts = ras.parts
                if parts is not None and off == ras.received and (type(data) is bytes or type(view.obj) is bytes):
                    parts.append(view[_CHUNK_PAYLOAD])  # Reassembly.add, inline: kept, not copied
                    grow = plen
                else:  # (what it holds more: the chunk, or 0 into a spread message)
                    grow = ras.add(off, view[_CHUNK_PAYLOAD])
                ras.received, pr.rx_held, st.rx_held = ras.received + plen, pr.rx_held + grow, st.rx_held + grow
            pr.ack_count += 1
            if pr.ack_count >= freq:
                pr.ack_now = True
            elif pr.ack_deadline is None:
                pr.ack_deadline = now + self._ack_delay
            acking[pr] = timed[pr] = None

    def _head_crc(self, peer: Peer, data: Any, dst: int, inc: int, flags: int, hflags: int, kind: int = 0) -> int:
        """The CRC32C of a fast-path data segment's first 12 bytes (version and type known: the
        rest are its flags, hello flags, dst_conn and incarnation), the same for every segment
        of a connection with the same flags: computed once per peer and key, as the sender
        packs its prefixes once (a crc32c call on 12 bytes costs about as much as on 2 kB).
        The fast path reads the peer's cached value itself (a call per segment costs the pure
        build more than the comparison) and calls this on a miss.  ``kind``: ``_ACK_HEAD`` for
        an ACK's (its type byte differs; the general path checks ACKs with it)."""
        key = inc << 16 | flags << 8 | hflags | kind
        if key != peer.rx_crc_key or dst != peer.rx_crc_conn:
            peer.rx_crc_conn, peer.rx_crc_key, peer.rx_crc_head = dst, key, crc32c(_MEMORYVIEW(data)[_CRC_HEAD])
        return peer.rx_crc_head

    def dispatch(self, data: Any, source: Any, now: float) -> None:
        """The general handler for any datagram: checked (version, flags, CRC), counted if
        bad, then handed on by type: data to :meth:`_on_data`, an ACK to recovery's
        ``on_ack``, a HELLO or HELLO_ACK to the handshake's ``on_hello``."""
        n = len(data)
        if n < HEADER_LEN or data[0] != WIRE_VERSION:
            self._versions.on_foreign(data, source, now)  # a VERSION reply, another version, garbage
            return
        version, typ, flags, _r, dst, inc, crc, seq_w, ack_w, tag, plen = _UNPACK(data)
        if flags & UNKNOWN_FLAGS:
            self.counters.num_malformed_recvs += 1
            return
        view = memoryview(data)  # one view for the CRC and the payload copy
        of_conn = typ == T_DATA or typ == T_ACK or typ == T_PING
        peer = self.peers_by_conn.get(dst) if of_conn else None  # (looked up once: CRC, then checks)
        if flags & F_CRC:  # (an ACK's first 12 bytes are its connection's every time: their CRC cached, as DATA's)
            head = self._head_crc(peer, view, dst, inc, flags, _r, _ACK_HEAD) if typ == T_ACK and peer is not None \
                else crc32c(view[:CRC_OFFSET])
            if crc32c(view[CRC_OFFSET + 4:], head) != crc:
                self.counters.num_crc_errors += 1
                return
        elif self.crc:  # we require a CRC: a frame without one may have lost its flag bit
            self.counters.num_crc_errors += 1
            return
        if of_conn:
            if peer is None:
                self.counters.num_unk_recvs += 1  # (a quarantined connection's too)
                self._guard.unknown(data, source)  # (a notice, rate-limited)
                return
            state = peer.state
            if inc != peer.remote_inc or not peer.remote_known or state is _FAILED \
                    or state is PeerState.CLOSED:
                peer.counters.num_stale_recvs += 1
                return
            if source is not None and source not in peer.sources and not self._guard.source_ok(peer, source):
                return  # from a source the connection does not use: dropped, counted
            if state is _CLOSING:  # late datagrams of a connection we close get a CLOSE
                self._lifecycle.on_late(peer, now)
                return
            if typ == T_PING:
                if n != HEADER_LEN + plen:
                    self.counters.num_malformed_recvs += 1
                    return
                self._lifecycle.on_ping(peer, now)
                return
            peer.last_heard = now
            if typ == T_DATA:
                self._on_data(peer, view, n, flags, seq_w, ack_w, tag, plen, now)
            else:
                self._recovery.on_ack(peer, view, n, ack_w, plen, now)
        elif typ == T_HELLO or typ == T_HELLO_ACK:
            if n != HEADER_LEN + plen or (typ == T_HELLO and n < self._min_hello):
                # (a HELLO smaller than our HELLO_ACK would make our reply amplify it: a
                # version-2 HELLO is padded so that it never is)
                self.counters.num_malformed_recvs += 1
                return
            try:
                hello = Hello.decode(view[HEADER_LEN:])
            except MalformedDatagram:
                self.counters.num_malformed_recvs += 1
                return
            if hello.incarnation != inc or inc == 0:
                self.counters.num_malformed_recvs += 1
                return
            self._handshake.on_hello(typ, dst, hello, bool(_r & HF_CRC_REQUIRED), source, now)
        elif typ == T_CLOSE or typ == T_CLOSE_ACK:
            if n != HEADER_LEN + plen:
                self.counters.num_malformed_recvs += 1
                return
            peer = self._guard.close_peer(data, dst, inc, source)  # its ids and its source
            if peer is not None:
                self._lifecycle.on_close(typ, peer, view[HEADER_LEN:], now)
        elif typ == T_UNKNOWN_CONN:
            self._guard.on_notice(data, dst, inc, seq_w, now, source)
        elif typ == T_CHALLENGE:
            self._guard.on_challenge(data, dst, seq_w, plen)
        elif typ == T_RESPONSE:
            self._guard.on_response(data, inc, plen, now)
        else:
            self.counters.num_malformed_recvs += 1


    def _on_data(self, peer: Peer, data: memoryview, n: int, flags: int, seq_w: int, ack_w: int,
                 tag: int, plen: int, now: float) -> None:
        """A data segment the fast path did not take (its peer unconfirmed, a put, a put
        status...): checked, its piggy-backed ACK applied, then :meth:`_on_segment`."""
        if n != PAYLOAD_AT[flags & (F_CHUNK | F_PUT)] + plen:  # malformed: drop before anything in it is believed
            self.counters.num_malformed_recvs += 1
            return
        peer.counters.num_total_recvs += 1
        if not peer.confirmed:
            self._handshake.confirm(peer, now)
        if flags & F_ACK and ack_w != peer.snd_una & SEQ_MASK:
            self._on_piggyback_ack(peer, ack_w, now)
        self._on_segment(peer, data, n, flags, seq_w, tag, plen, now)

    def _on_piggyback_ack(self, peer: Peer, ack_w: int, now: float) -> None:
        """A piggy-backed ACK with news (every reply in a ping-pong), applied before the
        segment carrying it: it touches only send-side state, so the receive path sees the
        same state either way, and events keep their order (completions first)."""
        at_cum = self._recovery.on_cum_ack(peer, ack_w, now)
        if at_cum is not None:
            # a piggy-backed ACK carries no delay: sample only when it acknowledges the
            # last thing we sent (a reply to it), which bounds the error to the peer's
            # own turnaround (the rule, Karn's and the resend's bound: Recovery.sample_rtt)
            if at_cum.seq == peer.next_seq - 1:
                self._recovery.sample_rtt(peer, at_cum, now, 0.0)
            if peer.unacked:  # (with nothing unacked it has nothing to do)
                self._recovery.detect_losses(peer)

    def _on_segment(self, peer: Peer, data: memoryview, n: int, flags: int, seq_w: int,
                    tag: int, plen: int, now: float, msg_id: int = -1, msg_len: int = 0, off: int = 0) -> None:
        """The general receive handler for a data segment (its length checked, its ACK
        applied): place it in the window, then reassemble, place a put, take a put status or
        deliver, in order if ordered, and note the ACK it is owed.  ``msg_id``, ``msg_len``,
        ``off``: a chunk's fields if the caller unpacked them (``msg_id`` -1: not)."""
        c = peer.counters
        pos = PAYLOAD_AT[flags & (F_CHUNK | F_PUT)]
        w = peer.window
        cum = w.cum
        d = seq_w - cum - 1  # how far above the next expected, mod 2**64 the nearer way
        if not 0 <= d <= SEQ_SHORT:  # (compiled, the masking is a boxed long operation)
            d &= SEQ_MASK
            if d >= _HALF:
                d -= _WRAP
        seq = cum + 1 + d
        ras = None
        if flags & F_STATUS and (flags & (F_CHUNK | F_PUT) or plen != PUT_STATUS.size):
            self.counters.num_malformed_recvs += 1  # a put status is one unchunked body
            return
        if flags & F_CHUNK:
            if msg_id < 0:
                msg_id, msg_len, off = CHUNK.unpack_from(data, HEADER_LEN)
            if off + plen > msg_len or msg_len > self._max_message or (plen == 0 and msg_len):
                c.num_badfrag_recvs += 1
                return
            ras = peer.reassembly.get(msg_id)
            if ras is None:
                # At the cap, a new message is refused (not accepted, so not ACKed: it comes
                # again) -- except the one holding the next in-order sequence number: later
                # messages filling every slot must never lock out the one the window waits on.
                if len(peer.reassembly) >= self._max_reassemblies and seq != cum + 1 \
                        and not w.holds(seq) and cum < seq <= cum + w.size:
                    c.num_reassembly_drops += 1
                    return
            elif ras.msg_len != msg_len or (ras.put_key is None) is bool(flags & F_PUT):
                # (a chunk of a message where a put is being placed, or the reverse: the two
                # keep different state, and a sender never reuses a live message id)
                c.num_badfrag_recvs += 1
                return
            if not flags & F_PUT and (peer.rx_held + plen > self._recv_buffer
                                      or self._state.rx_held + plen > self._rx_limit) \
                    and cum < seq <= cum + w.size and not w.holds(seq) and self._over_budget(peer, ras, plen):
                return  # (not accepted, so not acknowledged: the sender sends it again)
        verdict = w.accept(seq)
        if verdict != NEW:
            self._on_not_new(peer, verdict, now)
            return
        new_cum = w.cum
        if seq == w.high:
            peer.rx_high_time = now
        item: Event | None = None
        seq_done = seq
        if flags & F_STATUS:
            # the outcome of a put of ours (accepted like any segment, so ACKed and never
            # delivered twice); nothing for the application's message handlers
            self._on_put_status(peer, data, pos)
        elif flags & F_PUT:
            item, seq_done = self._on_put(peer, data, pos, flags, seq, tag, plen, msg_id, msg_len, off, ras)
        elif flags & F_CHUNK:
            item, seq_done = self._on_chunk(peer, data, pos, seq, tag, plen, msg_id, msg_len, off, ras)
        else:
            c.num_frag_recvs += 1
            item = _NEW_EVENT(_MESSAGE_RECEIVED, (peer, tag, bytes(data[pos:])))
            c.num_msgs_delivered += 1
            c.num_bytes_delivered += plen
        self._deliver(peer, item, seq_done, cum, new_cum)
        self._owe_ack(peer, seq, cum, new_cum, now)

    def _on_not_new(self, peer: Peer, verdict: int, now: float) -> None:
        """A duplicate, or a segment outside the window: count it, and tell the sender where
        we are at once -- but no more than one ACK per ack_delay, however many duplicates a
        faulty network delivers; a duplicate, no more than eight (an eighth of ack_delay
        apart): a sender probing after timeouts did not hear our ACKs, and a burst on the
        ACK path counted in frames is left only by more of them (timeout.py)."""
        c = peer.counters
        if verdict == DUPLICATE:
            c.num_dup_recvs += 1
            peer.dup_seen = True
        elif verdict == ABOVE_WINDOW:
            c.num_oow_high_recvs += 1
        else:
            c.num_oow_low_recvs += 1
        spacing = self._ack_delay * _DUP_ACK_SHARE if verdict == DUPLICATE else self._ack_delay
        if now - peer.last_ack_sent >= spacing:
            peer.ack_now = True
        else:
            due = peer.last_ack_sent + spacing
            if peer.ack_deadline is None or due < peer.ack_deadline:
                peer.ack_deadline = due
        self._acking[peer] = None
        self._timed[peer] = None

    def _on_chunk(self, peer: Peer, data: memoryview, pos: int, seq: int, tag: int, plen: int,
                  msg_id: int, msg_len: int, off: int, ras: Reassembly | None) -> tuple[Event | None, int]:
        """A new chunk of a message: reassemble; the message and the seq it completes at once
        its last byte is in."""
        c = peer.counters
        c.num_chunk_recvs += 1
        if ras is None:
            ras = peer.reassembly[msg_id] = Reassembly(msg_len, tag, None, 0)
        st = self._state
        # a chunk above a gap may make the message its whole extent, within half of each
        # budget (_extent_peer, _extent_all)
        grow = ras.add(off, data[pos:], min(self._extent_peer - peer.rx_held, self._extent_all - st.rx_held))
        ras.received += plen
        peer.rx_held += grow
        st.rx_held += grow
        if off + plen == msg_len:
            ras.last_seq = seq
        if ras.received < msg_len:
            return None, seq
        del peer.reassembly[msg_id]
        held = ras.held
        peer.rx_held -= held
        st.rx_held -= held
        peer.ack_now = True  # usnic ACKs a completed large message at once
        message = ras.take()
        if message is None:  # chunks that overlap instead of tiling it: a lying sender
            c.num_badfrag_recvs += 1
            return None, ras.last_seq
        c.num_msgs_delivered += 1
        c.num_bytes_delivered += msg_len
        return _NEW_EVENT(_MESSAGE_RECEIVED, (peer, ras.tag, message)), ras.last_seq

    def _over_budget(self, peer: Peer, ras: Reassembly | None, plen: int) -> bool:
        """A new chunk would take reassembly past a budget: count it and say so (the caller
        drops it).  The peer's budget (``recv_buffer``) is for its messages other than this
        chunk's own, so that one message larger than the budget still comes through (it
        grows only with bytes that arrive, up to ``max_message_size``); the transport's
        (``reassembly_limit``) holds for every byte.  Memory per peer thus stays within
        ``recv_buffer + max_message_size``, and within ``reassembly_limit`` in all (a
        message's extent counts whole, and is taken only within half of each budget)."""
        if ras is not None and ras.filled >= 0:
            return False  # its extent is held already: the chunk takes no memory more
        if self._state.rx_held + plen > self._rx_limit:
            self.counters.num_rx_memory_drops += 1
            return True
        if peer.rx_held - (0 if ras is None else ras.received) + plen > self._recv_buffer:
            peer.counters.num_rx_budget_drops += 1
            return True
        return False

    def _on_put(self, peer: Peer, data: memoryview, pos: int, flags: int, seq: int, tag: int, plen: int,
                msg_id: int, msg_len: int, off: int, ras: Reassembly | None) -> tuple[Event | None, int]:
        """A new segment of a put: write it into the exposed region; once the whole put is
        in, its event and a put status to the sender.  Accepted (and so ACKed) either way:
        the put status tells the sender the outcome."""
        c = peer.counters
        key, poff = PUT.unpack_from(data, HEADER_LEN + (CHUNK_LEN if flags & F_CHUNK else 0))
        region = self.regions.get(key)
        start = poff + off
        fits = region is not None and start + plen <= len(region) \
            and (not flags & F_CHUNK or poff + msg_len <= len(region))
        if not flags & F_CHUNK:
            if fits:
                region[start:start + plen] = data[pos:]  # type: ignore[index]
                c.num_puts_delivered += 1
                self._send_put_status(peer, seq, PS_LANDED)
                return PutLanded(peer, key, poff, plen), seq
            c.num_put_errors += 1
            self._send_put_status(peer, seq, PS_UNKNOWN_KEY if region is None else PS_OUT_OF_BOUNDS)
            return PutRefused(peer, key, poff, plen), seq
        new = ras is None
        if ras is None:
            ras = peer.reassembly[msg_id] = Reassembly(msg_len, tag, key, poff)
        if fits and not ras.failed:
            region[start:start + plen] = data[pos:]  # type: ignore[index]
        elif not ras.failed:
            # an unknown key, out of bounds, or the region was unexposed mid-way:
            # reported once, when the whole put has arrived
            ras.failed = (PS_OUT_OF_BOUNDS if region is not None
                          else PS_UNKNOWN_KEY if new else PS_UNEXPOSED)
            c.num_put_errors += 1
        ras.received += plen
        if off + plen == msg_len:
            ras.last_seq = seq
        if ras.received < msg_len:
            return None, seq
        del peer.reassembly[msg_id]
        peer.ack_now = True
        if not ras.failed:
            c.num_puts_delivered += 1
        self._send_put_status(peer, ras.last_seq, ras.failed)
        return (PutRefused if ras.failed else PutLanded)(peer, key, poff, msg_len), ras.last_seq

    def _deliver(self, peer: Peer, item: Event | None, seq_done: int, cum: int, new_cum: int) -> None:
        """Delivery: at once when unordered; in sequence order otherwise (``item`` completes
        at ``seq_done``; the window moved from ``cum`` to ``new_cum``)."""
        if not self._ordered:
            if item is not None:
                self.events.append(item)
        elif item is not None and seq_done == new_cum == cum + 1 and not peer.ready:
            self.events.append(item)  # in order, nothing waiting
        else:
            ready = peer.ready
            if item is not None:
                ready[seq_done] = item
            if new_cum > cum and ready:
                events = self.events
                for s in range(cum + 1, new_cum + 1):
                    it = ready.pop(s, None)
                    if it is not None:
                        events.append(it)

    def _owe_ack(self, peer: Peer, seq: int, cum: int, new_cum: int, now: float) -> None:
        """ACK debt for a new segment ``seq`` (the window moved from ``cum`` to ``new_cum``)."""
        peer.ack_count += 1
        if seq != new_cum or new_cum > cum + 1:
            # a new gap, or a gap filled: the sender's loss detection wants to know soon,
            # but under heavy reordering no more than one ACK per ack_delay
            peer.sack_dirty = True
            if now - peer.last_ack_sent >= self._ack_delay:
                peer.ack_now = True
            else:
                due = peer.last_ack_sent + self._ack_delay
                if peer.ack_deadline is None or due < peer.ack_deadline:
                    peer.ack_deadline = due
            depth = peer.window.high - new_cum
            c = peer.counters
            if depth > c.max_recv_window:
                c.max_recv_window = depth
        elif peer.ack_count >= self._ack_frequency:
            peer.ack_now = True
        elif peer.ack_deadline is None:
            peer.ack_deadline = now + self._ack_delay
        self._acking[peer] = None
        self._timed[peer] = None

    def _send_put_status(self, peer: Peer, put_seq: int, status: int) -> None:
        """A put from ``peer`` has wholly arrived: tell it the outcome (``status``, a wire.PS_*
        code) in a put status, a tiny reliable message (priority channel, ahead of queued
        messages) naming the put by the seq of its last segment.  Called once per put: only a new segment (never
        a duplicate) completes one."""
        msg = OutMessage(0, memoryview(PUT_STATUS.pack(put_seq & SEQ_MASK, status)), None, 0, False)
        msg.flags = F_STATUS
        queue = peer.queue
        if isinstance(queue, tuple):
            queue = peer.queue = deque()
        # At the head of the queue, not behind whatever bulk we have for the peer (the put's
        # callback waits for it) -- but after a message partly cut, whose chunks must keep
        # consecutive sequence numbers.
        if queue and queue[0].offset:
            queue.insert(1, msg)
        else:
            queue.appendleft(msg)
        peer.counters.num_put_status_sends += 1
        if peer.state is _ESTABLISHED:
            self._sending[peer] = None

    def _on_put_status(self, peer: Peer, data: memoryview, pos: int) -> None:
        """The receiver of a put of ours says how it went: complete the put if every segment
        of it is acknowledged already (else the last ACK will)."""
        put_seq, status = PUT_STATUS.unpack_from(data, pos)
        peer.counters.num_put_status_recvs += 1
        msg = peer.puts.pop(put_seq, None) if peer.puts else None
        if msg is None or msg.done:
            return  # no put of ours ends there (a confused peer): nothing to complete
        msg.put_status = status
        if msg.outstanding == 0:
            self._recovery.put_done(peer, msg)
