"""Where a message becomes datagrams: segments cut from the send queue (chunking, channel
choice, cached header prefixes, gathered payloads), the ACK point stamped on every data
segment (piggy-backed ACKs), standalone ACKs and HELLOs built, and the send passes that
produce them.

Uses nothing of the other parts: only the shared :class:`~.state.EngineState` (constants,
header prefixes, and the work lists it marks: ``sending``, ``acking``, ``timed``,
``touched``).  Recovery calls :meth:`Packetizer.stamp` to resend a segment, the handshake
:meth:`Packetizer.build_hello`, the engine the send and ACK passes.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from math import ceil
from typing import Any, Final, cast

from .delivery import DeliverySampler, frame_size
from .pacing import BURST_GATHER
from .peers import Frame, OutMessage, Peer, Segment
from .state import DATA, PRIORITY, EngineState
from .window import MORE_ACKS
from .wire import (
    ACK_BODY,
    AF_DUPLICATE,
    AF_TRUNCATED,
    CRC_OFFSET,
    F_ACK,
    F_CHUNK,
    F_CRC,
    F_PUT,
    HEAD_PREFIX,
    HEAD_REST,
    HEAD_REST_CHUNK,
    HEAD_REST_CHUNK_PUT,
    HEAD_REST_PUT,
    HEADER,
    HEADER_LEN,
    HELLO_BODY,
    HF_CRC_REQUIRED,
    PUT_LEN,
    SACK_RANGE,
    SEQ_MASK,
    T_ACK,
    T_DATA,
    T_HELLO,
    U32_MASK,
    WIRE_VERSION,
    Hello,
    TransportParameters,
    crc32c,
    datagram_crc,
    padding_param,
    seal,
)

_U32: Final = struct.Struct("!I")
_U64: Final = struct.Struct("!Q")
_NO_CRC: Final = bytes(4)
# The per-segment packers and the CRC, bound once: the compiled build calls a Final directly
# (no method lookup on the Struct, no module-dict lookup of crc32c per call)
_pack_u64_into: Final = _U64.pack_into
_unpack_u64_from: Final[Callable[..., tuple[int]]] = _U64.unpack_from
_pack_rest: Final = HEAD_REST.pack
_pack_rest_chunk: Final = HEAD_REST_CHUNK.pack
_pack_rest_put: Final = HEAD_REST_PUT.pack
_pack_rest_chunk_put: Final = HEAD_REST_CHUNK_PUT.pack
#: an ACK after its header's prefix and CRC field: the header's rest and the ACK body
_pack_ack_rest: Final = struct.Struct(HEAD_REST.format + ACK_BODY.format[1:]).pack
_pack_sack_range: Final = SACK_RANGE.pack
_ACK_BODY_LEN: Final = ACK_BODY.size
_SACK_RANGE_LEN: Final = SACK_RANGE.size
_crc32c: Final = crc32c
#: deque.popleft called as a function (compiled, a method call looks it up by name each time)
_POPLEFT: Final = deque.popleft
#: the largest value mypyc keeps as a short int: a sequence number up to it needs no
#: ``& SEQ_MASK`` (a 64-bit mask is a slow long op compiled); ours start below 2**62
_SHORT: Final = (1 << 62) - 1
#: payloads up to this size are joined to their header before the CRC, so that one crc32c
#: call covers both (a call costs more than copying this much; GATHER_MIN is above it)
_JOIN_CRC: Final = 1024
#: a HELLO is padded as if the receiver's address were at least this long (udp 12 or 28
#: bytes, verbs 36, sim 6), so that the HELLO_ACK it provokes is never larger than itself
HELLO_PAD_ADDRESS: Final = 64
GATHER_MIN: Final = 2048  # with enable_gather, chunks from this size keep their payload uncopied
_PREFIXES_MAX = 4096  # header prefixes kept (EngineState.prefixes)
#: a size no chunk reaches; a short int (at most _SHORT), so that the size test per segment is
#: a C comparison compiled (1 << 62 is a boxed long there: a slow comparison per segment)
_NEVER: Final = 1 << 61


class Packetizer:
    """Messages to segments, and the datagrams of a send pass."""

    __slots__ = ("_state", "config", "incarnation", "address", "crc", "priority_limit", "_chunk_cap",
                 "_ack_channel", "_max_sack", "_prefixes", "_sending", "_acking", "_touched", "_timed",
                 "params", "hello_ack_len", "hello_room", "_pacer", "_sampler", "_send_credits",
                 "_recv_buffer", "_window", "_ack_prefixes")

    def __init__(self, state: EngineState) -> None:
        self._state = state  # for gather_min, which enable_gather changes
        self.config = state.config
        self.incarnation = state.incarnation
        self.address = state.address
        self.crc = state.crc
        self.priority_limit = state.priority_limit
        self._chunk_cap = state.chunk_cap
        self._ack_channel = state.ack_channel
        self._max_sack = state.max_sack
        self._prefixes = state.prefixes
        self._ack_prefixes: dict[int, tuple[bytes, int]] = {}  # (as state.prefixes, for ACKs)
        self._sending = state.sending
        self._acking = state.acking
        self._touched = state.touched
        self._timed = state.timed
        self._pacer = state.pacer
        self._sampler: DeliverySampler | None = state.sampler
        cfg = self.config
        # config values read per pass, in typed slots (Config's attributes are dict lookups
        # from compiled code)
        self._send_credits: int = cfg.send_credits
        self._recv_buffer: int = cfg.recv_buffer
        self._window: int = cfg.window
        # the limits we advertise in every HELLO and HELLO_ACK (the peer obeys them)
        self.params = TransportParameters(
            max_datagram_size=state.data_mtu, max_message_size=cfg.max_message_size,
            peer_timeout_ms=max(1, round(cfg.peer_timeout * 1000)), window_bytes=cfg.recv_buffer)
        #: the size of our HELLO_ACK: a HELLO smaller than this is not answered (a reply is
        #: never larger than what provoked it)
        self.hello_ack_len = HEADER_LEN + HELLO_BODY.size + len(self.address) + len(self.params.encode())
        # the largest HELLO body the handshake's channel takes
        self.hello_room = (state.priority_mtu if state.ack_channel == PRIORITY else state.data_mtu) - HEADER_LEN

    def enable_gather(self) -> None:
        """The driver can post a datagram given as a list of buffers (``sendmsg`` style): from
        now on a chunk of at least GATHER_MIN payload bytes (not a put) comes out of
        :meth:`datagrams_to_send` as ``[header, view of the message]``, its payload not
        copied (at 65000 B the copy was about 4 us of the sender's ~15 us per datagram);
        every other datagram stays one buffer.  The message must stay unchanged until its
        callback, as :meth:`send` already asks.  A no-op when no chunk can be that large."""
        self._pacer.burst = BURST_GATHER  # (the device batches: paced peers may send a few at once)
        if self._chunk_cap >= GATHER_MIN:
            self._state.gather_min = GATHER_MIN

    def stamp(self, peer: Peer, seg: Segment, now: float, out: list[Any]) -> None:
        """Fill in the current ACK point (and CRC) and count one transmission.  Where the ACK
        point has not moved since the datagram went out (a one-way bulk flow's resends, nearly
        always) it goes again as it was: no copy and no CRC over its payload."""
        buf: Any = seg.buf
        cum = peer.window.cum
        ack_w = cum if 0 <= cum <= _SHORT else cum & SEQ_MASK
        if _unpack_u64_from(buf[0] if type(buf) is list else buf, 24)[0] != ack_w:  # (else: as it was)
            if type(buf) is list:  # [header, payload] (enable_gather): a new header, same payload
                header = bytearray(buf[0])
                _pack_u64_into(header, 24, ack_w)
                if header[2] & F_CRC:
                    _U32.pack_into(header, CRC_OFFSET, datagram_crc(header, buf[1]))
                buf = seg.buf = [header, buf[1]]
            else:
                buf = seg.buf = bytearray(buf)  # a copy: a datagram handed out is never changed
                _pack_u64_into(buf, 24, ack_w)
                if buf[2] & F_CRC:  # (as when it was cut)
                    _U32.pack_into(buf, CRC_OFFSET, datagram_crc(buf))
        seg.sent_at = now
        seg.tx_count += 1
        peer.tx_serial += 1
        seg.tx_serial = peer.tx_serial
        # the ACK point rides along: no standalone ACK needed unless SACK news is waiting
        peer.ack_count = 0
        peer.ack_deadline = None
        if not peer.sack_dirty:
            peer.ack_now = False
        out.append((seg.channel, peer.dest, buf))

    def send_pass(self, out: list[Any], now: float, budget: int) -> None:
        credits_per_peer = self._send_credits
        sending = self._sending
        sampler, pacer = self._sampler, self._pacer
        for peer in list(sending.keys()):  # (compiled: one C copy, no iterator)
            rate = peer.pacing_rate  # (0.0: unpaced, the bucket never looked at)
            if rate and peer.pace_next > now:
                del sending[peer]
                pacer.wait(peer)  # back when the bucket allows (the timer heap)
                continue
            # (window_cap is within our own window: autotune.send_window)
            limit = peer.snd_una + min(peer.remote_window, peer.window_cap)
            unacked, resend, cwnd = peer.unacked, peer.resend, peer.cwnd
            # how many segments this peer may send now: credits, flow and congestion window
            room = limit + 1 - peer.next_seq  # (min() of three is a generic call compiled)
            if credits_per_peer < room:
                room = credits_per_peer
            left = budget - len(out)
            if left < room:
                room = left
            in_flight = len(unacked) - len(resend)
            if cwnd < in_flight + room:
                room = ceil(cwnd - in_flight)  # (exact: an int below a float is subtracted exactly)
            if rate:
                paced = pacer.room(peer, now, rate)
                if paced < room:
                    room = paced
            if room > 0 and peer.queue:
                first, start = peer.next_seq, len(out)
                self._cut_segments(peer, now, out, room)
                if sampler is not None:  # (an algorithm that takes rate samples)
                    sampler.sent(peer, first, now, not peer.queue and len(unacked) - len(resend) < cwnd)
                if rate:
                    nbytes = 0
                    for i in range(start, len(out)):
                        nbytes += frame_size(out[i][2])
                    pacer.spent(peer, nbytes, now, rate)
            del sending[peer]  # re-added by a new send or an ACK that opens the window ...
            if peer.queue and peer.next_seq <= limit and len(unacked) - len(resend) < cwnd:
                if rate and peer.pace_next > now:
                    pacer.wait(peer)  # ... or by the pacing timer
                else:
                    sending[peer] = None  # ... or, still able to send: round robin, to the back
            if len(out) >= budget:
                break
            depth = peer.next_seq - 1 - peer.snd_una
            if depth > peer.counters.max_send_window:
                peer.counters.max_send_window = depth

    def probe(self, peer: Peer, now: float, out: list[Any], n: int) -> int:
        """A retransmit timeout's probe of new data (timeout.py): up to ``n`` segments cut
        past the congestion window (RFC 9002: a probe is not held back by the congestion
        controller), within the flow-control window (the caller obeys the pacing); how many
        went."""
        room = peer.snd_una + min(peer.remote_window, peer.window_cap) + 1 - peer.next_seq
        if n < room:
            room = n
        if room <= 0 or not peer.queue:
            return 0
        first = peer.next_seq
        self._cut_segments(peer, now, out, room)
        if self._sampler is not None:
            self._sampler.sent(peer, first, now, False)
        return peer.next_seq - first

    def _cut_segments(self, peer: Peer, now: float, out: list[Any], room: int) -> None:
        """Where messages become datagrams: up to ``room`` segments cut from ``peer``'s queue and sent,
        each one immutable ``bytes`` (pieces joined once the CRC is computed; a payload up to _JOIN_CRC
        first joined to the header's rest, for one CRC call).  Runs per segment: state read into typed
        locals, written back at the end (_cut_done); packers and the CRC are Finals (see the top)."""
        queue, dest, crc, gather_min = peer.queue, peer.dest, peer.crc, self._state.gather_min
        unacked: dict[Any, Segment] = peer.unacked  # (keyed by a seq boxed once: see the loop)
        conn: int = peer.remote_conn
        seq: int = peer.next_seq
        serial: int = peer.tx_serial
        cum: int = peer.window.cum
        # the ACK point rides along (see stamp); boxed once (object): not again per segment
        ack_w: object = cum if 0 <= cum <= _SHORT else cum & SEQ_MASK
        nbytes = chunks = 0
        newest: Segment | None = None  # (the last cut: peer.newest, written back once)
        if not unacked:
            peer.last_progress = now  # the death clock runs only while something is unacked
        while room and queue:
            msg: OutMessage = queue[0]
            data = msg.data
            length, off = msg.length, msg.offset
            put_key, put = msg.put_key, msg.put_key is not None
            flags: int = (F_ACK | F_CRC if crc else F_ACK) | msg.flags | (F_PUT if put else 0)
            if msg.chunked:
                flags |= F_CHUNK
                cap: int = peer.chunk_cap - (PUT_LEN if put else 0)  # (the peer's largest datagram)
                channel = DATA
            else:
                cap = length
                channel = PRIORITY if HEADER_LEN + (PUT_LEN if put else 0) + length <= self.priority_limit else DATA
            key = conn << 8 | flags  # (the same as its last segment's, nearly always: kept on the peer)
            pre = peer.tx_prefix if key == peer.tx_prefix_key else self._peer_prefix(peer, key, conn, flags, crc)
            prefix, pre_crc = pre[0], cast(object, pre[1]) if crc else None  # (boxed once, as ack_w; only with crc)
            gather_at: int = gather_min if gather_min is not None and not put else _NEVER
            chunked = flags & F_CHUNK != 0
            first_seq, first_off, end_seq = seq, off, seq + room
            tag_w: object = msg.tag  # the message's header fields boxed once for all its segments (as ack_w)
            id_w, len_w = (cast(object, msg.msg_id), cast(object, length)) if chunked else (None, None)
            while seq < end_seq:
                n = cap if length - off > cap else length - off
                boxed: object = seq  # boxed once: the unacked key and (below _SHORT, always in practice) its wire value
                s = boxed if 0 <= seq <= _SHORT else seq & SEQ_MASK
                if put_key is not None:
                    if chunked:
                        rest = _pack_rest_chunk_put(s, ack_w, tag_w, n, id_w, len_w, off, put_key, msg.put_offset)
                    else:
                        rest = _pack_rest_put(s, ack_w, tag_w, n, put_key, msg.put_offset)
                elif chunked:
                    rest = _pack_rest_chunk(s, ack_w, tag_w, n, id_w, len_w, off)
                else:
                    rest = _pack_rest(s, ack_w, tag_w, n)
                payload = data if n == length else data[off:off + n]  # (a whole message: no slice)
                if crc and n <= _JOIN_CRC:  # one CRC call over rest and payload joined
                    rest += payload
                    frame: Frame = b"".join((prefix, _crc32c(rest, pre_crc).to_bytes(4, "big"), rest))
                else:
                    check = _crc32c(payload, _crc32c(rest, pre_crc)).to_bytes(4, "big") if crc else _NO_CRC
                    if n >= gather_at:
                        frame = [b"".join((prefix, check, rest)), payload]  # (see enable_gather)
                    else:
                        frame = b"".join((prefix, check, rest, payload))
                serial += 1
                unacked[boxed] = newest = Segment(seq, frame, channel, msg, now, 1, serial)
                out.append((channel, dest, frame))
                seq += 1
                off += n
                if off >= length:
                    break
            cut = seq - first_seq
            nbytes += off - first_off
            room -= cut
            msg.offset, msg.outstanding = off, msg.outstanding + cut
            if chunked:
                chunks += cut
            if off >= length:
                msg.cut_all = True
                _POPLEFT(queue)
                if put:  # the receiver's put status names it by its last segment's seq
                    peer.await_put_status((seq - 1) & SEQ_MASK, msg)
        self._cut_done(peer, seq, serial, chunks, nbytes, newest)

    def _cut_done(self, peer: Peer, seq: int, serial: int, chunks: int, nbytes: int, newest: Segment | None) -> None:
        """The end of :meth:`_cut_segments`: its locals written back, the sends counted."""
        frags = seq - peer.next_seq - chunks
        if newest is not None:
            peer.newest = newest
        peer.next_seq = seq
        peer.tx_serial = serial
        c = peer.counters
        c.num_chunk_sends += chunks
        c.num_frag_sends += frags
        c.num_total_sends += chunks + frags
        c.num_bytes_sent += nbytes
        self._timed[peer] = None
        # the ACK point rode along: no standalone ACK needed unless SACK news is waiting
        # (then the peer stays in acking; else it leaves it now, and ack_pass has nothing to walk)
        peer.ack_count = 0
        peer.ack_deadline = None
        if not peer.sack_dirty:
            peer.ack_now = False
            if peer in self._acking:
                del self._acking[peer]

    def _peer_prefix(self, peer: Peer, key: int, conn: int, flags: int, crc: bool) -> tuple[bytes, int]:
        """The prefix of a data segment to ``peer`` by ``key`` (``conn << 8 | flags``), from the
        shared ones (or new), kept on the peer for its next segments."""
        got = self._prefixes.get(key)
        pre = self._new_prefix(conn, flags, crc) if got is None else got
        peer.tx_prefix_key, peer.tx_prefix = key, pre
        return pre

    def _new_prefix(self, conn: int, flags: int, crc: bool, typ: int = T_DATA) -> tuple[bytes, int]:
        """A data (or ACK) header's first 12 bytes to ``conn`` with ``flags``, and their
        CRC32C, packed once and kept (the same for every segment: the incarnation is ours),
        by ``conn << 8 | flags`` (an ACK's apart, in ``_ack_prefixes``)."""
        prefixes = self._prefixes if typ == T_DATA else self._ack_prefixes
        if len(prefixes) >= _PREFIXES_MAX:  # peers come and go: stay bounded
            prefixes.clear()
        head = HEAD_PREFIX.pack(WIRE_VERSION, typ, flags, 0, conn, self.incarnation)
        pre = prefixes[conn << 8 | flags] = (head, crc32c(head) if crc else 0)
        return pre

    def ack_pass(self, out: list[Any], now: float, budget: int) -> None:
        """The standalone ACKs due.  ``acking`` is walked as it is (nothing in the loop adds
        to it or takes from it: a copy of it per pass cost ~500 instructions), and the peers
        it is done with (their debt paid: no deadline, nothing owed now) taken out after."""
        acking, touched = self._acking, self._touched
        # they leave acking after the walk (no copy of it to walk); made for the first one
        # (most passes settle nobody: an ACK owed, not yet due)
        settled: list[Peer] | None = None
        for peer in acking:
            if len(out) >= budget:
                break
            deadline = peer.ack_deadline
            if peer.ack_now or (deadline is not None and deadline <= now):
                if peer.remote_known:
                    out.append((self._ack_channel, peer.dest, self._build_ack(peer, now)))
                    peer.last_ack_sent = now
                    c = peer.counters
                    c.num_ack_sends += 1
                    c.num_total_sends += 1
                    if peer.window.unlisted:  # (ranges changed more than one ACK lists)
                        self._more_acks(peer, out, now, budget)
                peer.ack_count = 0
                peer.ack_deadline = None
                peer.ack_now = False
                peer.sack_dirty = False
                touched[peer] = None
            elif deadline is not None:
                continue  # owed, not yet due
            # (else a piggy-backed ACK paid the debt)
            if settled is None:
                settled = [peer]
            else:
                settled.append(peer)
        if settled is not None:
            for peer in settled:
                del acking[peer]

    def _more_acks(self, peer: Peer, out: list[Any], now: float, budget: int) -> None:
        """More standalone ACKs at once, up to MORE_ACKS, while the out-of-order ranges that
        changed since the last ACK do not all fit in one (a burst that opened hundreds):
        every range is listed before a truncated list may leave it out (protocol.md 6.2)."""
        w = peer.window
        n = 0
        while w.unlisted and n < MORE_ACKS and len(out) < budget:
            out.append((self._ack_channel, peer.dest, self._build_ack(peer, now)))
            n += 1
        c = peer.counters
        c.num_ack_sends += n
        c.num_total_sends += n

    def _build_ack(self, peer: Peer, now: float) -> bytearray:
        """A standalone ACK, built as a data segment is: the cached header prefix and its
        CRC, the rest of the header and the body packed at once, one CRC call, one join."""
        w = peer.window
        cum: int = w.cum
        ranges = w.sack_ranges(self._max_sack) if w.has_gaps else []
        ack_flags = AF_TRUNCATED if ranges and w.sack_truncated(self._max_sack) else 0
        if peer.dup_seen:
            ack_flags |= AF_DUPLICATE
            peer.dup_seen = False
        largest = cum + ranges[-1][0] + ranges[-1][1] - 1 if ranges else cum
        if largest == w.high:
            delay = min(int((now - peer.rx_high_time) * 1e6), U32_MASK - 1)
        else:
            delay = U32_MASK  # ranges were cut short: no RTT sample from this ACK
        nranges = len(ranges)
        window = peer.adv_window = self.advertised_window(peer)
        rest = _pack_ack_rest(0, cum if 0 <= cum <= _SHORT else cum & SEQ_MASK, 0,
                              _ACK_BODY_LEN + _SACK_RANGE_LEN * nranges, window, nranges, ack_flags, delay)
        if ranges:
            rest += b"".join([_pack_sack_range(start, length) for start, length in ranges])
        crc = peer.crc
        conn: int = peer.remote_conn
        flags = F_ACK | F_CRC if crc else F_ACK
        pre = self._ack_prefixes.get(conn << 8 | flags)
        prefix, pre_crc = pre if pre is not None else self._new_prefix(conn, flags, crc, T_ACK)
        check = _crc32c(rest, pre_crc).to_bytes(4, "big") if crc else _NO_CRC
        return bytearray(b"").join((prefix, check, rest))

    def advertised_window(self, peer: Peer) -> int:
        """The receive window to advertise to ``peer``, in segments: ``window``, less what
        ``recv_buffer`` cannot take any more -- the bytes delivered and not consumed
        (``Peer.unconsumed``) counted in full-size chunks.  Zero once they reach
        ``recv_buffer``: the sender stops until a window update (see Engine.set_unconsumed)."""
        free = self._recv_buffer - peer.unconsumed
        if free <= 0:
            return 0
        segments = free // self._chunk_cap
        window = self._window
        return window if segments >= window else segments if segments > 0 else 1

    def build_hello(self, peer: Peer, typ: int) -> bytearray:
        body = Hello(self.incarnation, peer.local_conn, peer.isn, peer.remote_inc,
                     self.config.window, self.address, int(self.config.ack_delay * 1e6),
                     self.params).encode()
        if typ == T_HELLO:
            # No smaller than the HELLO_ACK it provokes, which the receiver checks (a reply
            # never amplifies): its address may be longer than the one we resolved (a
            # dual-stack udp end advertises 28 bytes, reached at 12), so we pad as if it
            # were at least HELLO_PAD_ADDRESS bytes; its parameters as long as ours.  Within
            # the channel's MTU.
            want = HELLO_BODY.size + max(len(peer.address), HELLO_PAD_ADDRESS) + len(self.params.encode())
            body += padding_param(min(want, self.hello_room) - len(body))
        buf = bytearray(HEADER_LEN + len(body))
        # Always with a CRC32C, whatever either side's setting (a handshake is rare, and a
        # side that requires CRCs must be able to read it); hello_flags says whether we
        # require one on everything else.
        HEADER.pack_into(buf, 0, WIRE_VERSION, typ, F_CRC, HF_CRC_REQUIRED if self.crc else 0,
                         # a first HELLO (we know no connection of the peer's) carries our
                         # own id: a VERSION reply echoes it, so it names this handshake
                         peer.remote_conn or peer.local_conn, self.incarnation, 0, 0, 0, 0,
                         len(body))
        buf[HEADER_LEN:] = body
        seal(buf)
        return buf
