"""The protocol engine: reliable, exactly-once delivery over unreliable datagrams, sans I/O.

Bytes and ``now`` go in; datagrams to send and the next deadline come out.  Nothing here
touches a socket, a thread, a sleep or a clock: :class:`btlcore.transport.Transport` (or a
test) drives it::

    engine.receive_datagram(data, now)      # every datagram the device delivered
    engine.handle_timer(now)                # when now >= engine.get_timer()
    for channel, dest, buf in engine.datagrams_to_send(now, budget):
        device.post_send(channel, dest, buf)
    for event in engine.drain_events(): ...  # deliveries and completions, see EV_*

Where things happen, for a newcomer:

* a message becomes datagrams in :meth:`Engine._cut_segments` (called from the send pass in
  :meth:`Engine.datagrams_to_send`);
* a lost segment is noticed in :meth:`Engine._detect_losses` (SACK/packet threshold: fast
  retransmit) and :meth:`Engine.handle_timer` (retransmit timeout);
* a datagram becomes a delivered message in :meth:`Engine._on_data`;
* the handshake and incarnations are in :meth:`Engine._on_hello`.

A progress pass sends, in this order (usnic's): retransmissions (at most
``max_resends_per_pass``), new segments (round robin over peers, ``send_credits`` each),
standalone ACKs that are due, then handshakes.
"""

from __future__ import annotations

import random
import struct
from collections import deque
from itertools import islice
from collections.abc import Callable, Iterable
from math import ceil
from typing import Any

from ..config import Config
from ..errors import MessageTooLarge, PeerRestarted, PeerUnreachable, PutError, TransportClosed
from .peers import Callback, OutMessage, Peer, PeerState, Reassembly, Segment
from .recovery import RetransmitTimer
from .stats import ModuleCounters, aggregate
from .wire import (
    ACK_BODY, AF_DUPLICATE, AF_TRUNCATED, CHUNK, CHUNK_LEN, CRC_OFFSET, F_ACK, F_CHUNK, F_CRC, F_PUT, F_STATUS,
    HEAD_PREFIX, PS_LANDED, PS_OUT_OF_BOUNDS, PS_UNEXPOSED, PS_UNKNOWN_KEY, PUT_STATUS, PUT_STATUS_NAMES,
    HF_CRC_REQUIRED,
    HEAD_REST, HEAD_REST_CHUNK, HEAD_REST_CHUNK_PUT, HEAD_REST_PUT, HEADER, HEADER_LEN,
    HELLO_BODY, KNOWN_FLAGS, MAX_SACK_RANGES, PUT, PUT_LEN, SACK_RANGE, SEQ_MASK, T_ACK, T_DATA,
    T_HELLO, T_HELLO_ACK, U32_MASK, WIRE_VERSION, Hello, MalformedDatagram, crc32c, datagram_crc, seal,
)
from .window import ABOVE_WINDOW, DUPLICATE, NEW, ReceiveWindow

# Events the engine hands to its driver (first item of each tuple)
EV_MESSAGE = 0  # (EV_MESSAGE, peer, tag, data)
EV_COMPLETE = 1  # (EV_COMPLETE, callback, exc_or_None)
EV_PUT = 2  # (EV_PUT, peer, key, offset, length): a put into an exposed region finished
EV_PUT_ERROR = 3  # (EV_PUT_ERROR, peer, key, offset, length): a put that did not fit
EV_PEER_FAILED = 4  # (EV_PEER_FAILED, peer, exc)
EV_PEER_RESTARTED = 5  # (EV_PEER_RESTARTED, peer)

PRIORITY = 0
DATA = 1

_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")
_NO_CRC = bytes(4)
_UNKNOWN_FLAGS = 0xFF & ~KNOWN_FLAGS
_NOT_FAST = _UNKNOWN_FLAGS | F_PUT | F_STATUS  # flags that keep a datagram off receive_datagrams' short path
_HEADER_CHUNK = struct.Struct(HEADER.format + CHUNK.format[1:])  # header + chunk extension
# where a data segment's payload starts, by its F_CHUNK | F_PUT bits
_PAYLOAD_AT = {0: HEADER_LEN, F_CHUNK: HEADER_LEN + CHUNK_LEN, F_PUT: HEADER_LEN + PUT_LEN,
               F_CHUNK | F_PUT: HEADER_LEN + CHUNK_LEN + PUT_LEN}
_FAILED = PeerState.FAILED
_ESTABLISHED = PeerState.ESTABLISHED
_HALF = 1 << 63
_WRAP = 1 << 64
_HELLO_INTERVAL_MAX = 1.0
LOST_FAST = 1  # Segment.lost: declared lost by the fast-retransmit rule
LOST_TIMEOUT = 2  # ... by the retransmit timeout
TIMEOUT_PROBES = 2  # segments a retransmit timeout resends
CWND_BETA = 0.7  # multiplicative decrease per loss episode (CUBIC's; Reno halves)
CWND_BETA_RANDOM = 0.8  # ... when the RTT shows no queue: the loss was likely not congestion (Veno)
VENO_BACKLOG = 3.0  # segments this flow keeps queued (cwnd x (1 - min_rtt/srtt)) below which a loss looks random
REO_PERSIST = 16  # loss episodes a widened reordering allowance lasts (RFC 8985's reo_wnd_persist)
PERSISTENT_TIMEOUTS = 3  # timeouts in a row that mean persistent congestion: slow start again
GATHER_MIN = 2048  # with enable_gather, chunks from this size keep their payload uncopied
_PREFIXES_MAX = 4096  # header prefixes kept (Engine._prefixes)
_NEVER = 1 << 62  # a size no chunk reaches


#: how much older (in incarnation units: 1/1024 s of the clock the driver built them from)
#: a HELLO's incarnation may be than the one we know and still be a late packet of an older
#: life; anything else that differs is a restart
STALE_INCARNATION_WINDOW = 60 * 1024


def stale_incarnation(candidate: int, current: int) -> bool:
    """True if ``candidate`` is slightly older than ``current`` (serial arithmetic on 32
    bits): a delayed packet of a previous life, not a restart."""
    return 0 < (current - candidate) & 0xFFFFFFFF <= STALE_INCARNATION_WINDOW


class Engine:
    """One local endpoint talking to any number of peers over one device."""

    def __init__(
        self,
        config: Config,
        *,
        address: bytes,
        resolve: Callable[[bytes], Any],
        data_mtu: int,
        priority_mtu: int,
        crc: bool,
        rng: random.Random,
        now: float,
        incarnation: int | None = None,
    ) -> None:
        self.config = config
        self.address = address
        self._resolve = resolve
        self._rng = rng
        # Incarnations are ordered (see stale_incarnation): the driver passes one made from
        # the wall clock (Transport does), so that a late HELLO of an older life is told
        # from a restart; a bare engine draws a random one.
        self.incarnation = incarnation if incarnation else rng.randrange(1, 1 << 32)
        self.data_mtu = min(data_mtu, config.mtu) if config.mtu else data_mtu
        self.priority_mtu = min(priority_mtu, self.data_mtu)
        self.priority_limit = min(config.priority_limit, self.priority_mtu)
        if self.data_mtu < HEADER_LEN + CHUNK_LEN + PUT_LEN + 1:
            raise ValueError(f"device MTU {self.data_mtu} is too small for btlcore's headers")
        self.crc = crc  # we require a CRC32C on everything we receive (and so send one)
        self._ack_channel = PRIORITY if self.priority_limit else DATA
        self._max_sack = max(0, min(MAX_SACK_RANGES,
                                    ((self.priority_mtu if self.priority_limit else self.data_mtu)
                                     - HEADER_LEN - ACK_BODY.size) // SACK_RANGE.size))
        self._granularity = 1e-6 if not config.ack_delay else config.ack_delay
        self._ack_frequency = config.ack_frequency
        self._ack_delay = config.ack_delay
        # congestion control off: a window so large it never binds
        self._cwnd_max = float(config.cwnd_max) if config.cwnd_max else float("inf")
        self._cwnd_initial = float(min(config.cwnd_initial, config.cwnd_max)) if config.cwnd_max else float("inf")
        self._single_cap = self.data_mtu - HEADER_LEN  # payload of an unchunked message
        self._chunk_cap = self.data_mtu - HEADER_LEN - CHUNK_LEN
        self._gather_min: int | None = None  # chunk size from which payloads stay uncopied
        # a data header's first 12 bytes and their CRC32C, by remote_conn << 8 | flags: the
        # same for every segment to a peer (incarnation is ours), so packed once, not per pass
        self._prefixes: dict[int, tuple[bytes, int]] = {}
        self.peers_by_addr: dict[bytes, Peer] = {}
        self.peers_by_conn: dict[int, Peer] = {}
        self.counters = ModuleCounters()
        self.events: list[tuple[Any, ...]] = []
        self.regions: dict[int, memoryview] = {}
        self._next_region = 1
        self.closed = False
        self._now = now
        # the peers with something to do, as insertion-ordered sets (dict keys)
        self._resending: dict[Peer, None] = {}
        self._sending: dict[Peer, None] = {}
        self._acking: dict[Peer, None] = {}
        self._hello: dict[Peer, None] = {}
        self._timed: dict[Peer, None] = {}

    # ------------------------------------------------------------------ user operations

    def connect(self, address: bytes, now: float) -> Peer:
        """Return the peer at ``address``, starting a handshake if it is new."""
        self._now = now
        if self.closed:
            raise TransportClosed("transport is closed")
        peer = self.peers_by_addr.get(address)
        if peer is None:
            peer = self._new_peer(bytes(address), self._resolve(bytes(address)))
        elif peer.state is PeerState.FAILED:
            self._reset_peer(peer)  # connecting again after a failure: a new connection
        peer.inbound_since = None  # the application holds it now: never swept
        if peer.state is PeerState.CONNECTING and peer.hello_next is None and not peer.confirmed:
            self._start_hello(peer, now)
        return peer

    def send(self, peer: Peer, tag: int, data: Any, callback: Callback | None, now: float,
             put_key: int | None = None, put_offset: int = 0) -> OutMessage:
        """Queue a message (or, with ``put_key``, a put) for ``peer``."""
        self._now = now
        if self.closed:
            raise TransportClosed("transport is closed")
        state = peer.state
        if state is _FAILED:
            raise peer.error or PeerUnreachable(f"peer {peer.address.hex()} has failed")
        if not 0 <= tag <= 0xFFFF:
            raise ValueError(f"tag {tag} is out of range: tags are 0 to 65535")
        if type(data) is bytes:
            view = memoryview(data)  # already flat bytes: no cast needed
        else:
            view = memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")
        size = len(view)
        if size > self.config.max_message_size:
            raise MessageTooLarge(
                f"message of {size} bytes exceeds max_message_size={self.config.max_message_size}")
        extra = PUT_LEN if put_key is not None else 0
        chunked = size > self._single_cap - extra
        peer.msg_counter += 1
        msg = OutMessage(tag, view, callback, peer.msg_counter & U32_MASK, chunked, put_key, put_offset)
        queue = peer.queue
        if type(queue) is tuple:  # made on first use: an idle peer holds no deque (~770 B),
            queue = peer.queue = deque()  # and kept once emptied (not one per message)
        queue.append(msg)
        peer.counters.num_msgs_sent += 1
        if state is _ESTABLISHED:
            self._sending[peer] = None
        elif peer.hello_next is None and not peer.confirmed:
            self._start_hello(peer, now)
        return msg

    def expose(self, buffer: Any) -> int:
        """Expose a writable buffer to puts from peers; returns its key."""
        view = memoryview(buffer).cast("B")
        if view.readonly:
            raise ValueError("a put target must be writable (bytearray, memoryview of one, ...)")
        key = self._next_region
        self._next_region += 1
        self.regions[key] = view
        return key

    def unexpose(self, key: int) -> None:
        self.regions.pop(key, None)

    def close(self) -> None:
        """Fail everything still pending and refuse new work."""
        if self.closed:
            return
        self.closed = True
        for peer in list(self.peers_by_addr.values()):
            if peer.state not in (PeerState.FAILED, PeerState.CLOSED):
                self._fail_messages(peer, TransportClosed("transport closed before the peer acknowledged"))
                peer.state = PeerState.CLOSED
        self._resending.clear()
        self._sending.clear()
        self._acking.clear()
        self._hello.clear()
        self._timed.clear()

    # ------------------------------------------------------------------ introspection

    def has_outstanding(self) -> bool:
        """True while some message is unsent or unacknowledged (what close() flushes)."""
        return any(p.has_outstanding() for p in self.peers_by_addr.values()
                   if p.state is not PeerState.FAILED)

    def has_work(self) -> bool:
        """True if a send pass would produce something right now."""
        if self._resending or self._sending:
            return True
        for peer in self._acking:
            if peer.ack_now:
                return True
        for peer in self._hello:
            if peer.hello_reply:
                return True
        return False

    def ack_now(self) -> None:
        """Owe no ACK: make every pending standalone ACK due at once (close/flush, so that
        the peers' last messages complete without waiting for their retransmit timer)."""
        for peer in self._acking:
            peer.ack_now = True

    def stats(self) -> dict[str, int]:
        return aggregate(self.counters, (p.counters for p in self.peers_by_addr.values()))

    def drain_events(self) -> list[tuple[Any, ...]]:
        events, self.events = self.events, []
        return events

    # ------------------------------------------------------------------ receive path

    def receive_datagram(self, data: Any, now: float) -> None:
        """Process one datagram from the device.  Malformed, corrupted, stale and unknown
        datagrams are dropped and counted; nothing here raises on bad input."""
        self._now = now
        if self.closed:
            return  # nobody will read it: neither deliver nor acknowledge
        n = len(data)
        if n < HEADER_LEN:
            self.counters.num_malformed_recvs += 1
            return
        version, typ, flags, _r, dst, inc, crc, seq_w, ack_w, tag, plen = HEADER.unpack_from(data)
        if version != WIRE_VERSION or flags & _UNKNOWN_FLAGS:
            self.counters.num_malformed_recvs += 1
            return
        view = memoryview(data)  # one view for the CRC and the payload copy
        if flags & F_CRC:
            if crc32c(view[CRC_OFFSET + 4:], crc32c(view[:CRC_OFFSET])) != crc:
                self.counters.num_crc_errors += 1
                return
        elif self.crc:  # we require a CRC: a frame without one may have lost its flag bit
            self.counters.num_crc_errors += 1
            return
        if typ == T_DATA or typ == T_ACK:
            peer = self.peers_by_conn.get(dst)
            if peer is None:
                self.counters.num_unk_recvs += 1
                return
            if inc != peer.remote_inc or not peer.remote_known or peer.state is _FAILED:
                peer.counters.num_stale_recvs += 1
                return
            if typ == T_DATA:
                self._on_data(peer, view, n, flags, seq_w, ack_w, tag, plen, now)
            else:
                self._on_ack(peer, view, n, ack_w, plen, now)
        elif typ == T_HELLO or typ == T_HELLO_ACK:
            if n != HEADER_LEN + plen:
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
            self._on_hello(typ, dst, hello, bool(_r & HF_CRC_REQUIRED), now)
        else:
            self.counters.num_malformed_recvs += 1

    def receive_datagrams(self, batch: Iterable[Any], now: float) -> None:
        """Process a device poll's worth of datagrams, in order, all arrived by ``now``.

        The same as :meth:`receive_datagram` on each (the tests compare state, events and
        output byte for byte), only cheaper per datagram: the in-order data segments of
        :meth:`_on_data`'s fast path, the bulk of any transfer, are handled inline here, with
        what they need from the engine looked up once per batch rather than once per
        datagram (about a tenth of the receiver's time).  An intact data segment of a known
        peer that is not for the fast path (a reply carrying a new ACK, a first or last
        chunk, a segment out of order) goes to :meth:`_on_data` as receive_datagram would
        send it; anything else, and anything doubtful (a bad CRC, an unknown or stale peer,
        an ACK, a HELLO), through :meth:`receive_datagram`, which checks and counts it."""
        self._now = now
        if self.closed:
            return  # nobody will read them: neither deliver nor acknowledge
        single, on_data = self.receive_datagram, self._on_data
        head, head_chunk = HEADER.unpack_from, _HEADER_CHUNK.unpack_from
        peers = self.peers_by_conn
        events = self.events
        acking, timed = self._acking, self._timed
        freq, deadline = self._ack_frequency, now + self._ack_delay
        check = crc32c
        require_crc = self.crc
        # the (dst, inc) of the last datagram whose peer passed the checks: only a fallback
        # to receive_datagram (a handshake, a failure...) can change what they read
        last_dst = last_inc = -1
        peer: Any = None
        for data in batch:
            n = len(data)
            if n >= HEADER_LEN + CHUNK_LEN:  # the chunk extension too, in the same unpack
                version, typ, flags, _r, dst, inc, crc, seq_w, ack_w, tag, plen, msg_id, msg_len, off \
                    = head_chunk(data)
            elif n >= HEADER_LEN:
                version, typ, flags, _r, dst, inc, crc, seq_w, ack_w, tag, plen = head(data)
            else:
                last_dst = -1
                single(data, now)
                continue
            # the fast path's conditions (see _on_data), read before believing anything,
            # then the CRC; a frame failing any of them takes the full path
            if typ != T_DATA or version != WIRE_VERSION or flags & _NOT_FAST:
                last_dst = -1
                single(data, now)
                continue
            if dst != last_dst or inc != last_inc:
                peer = peers.get(dst)
                if peer is None or inc != peer.remote_inc or not peer.confirmed \
                        or not peer.remote_known or peer.state is _FAILED:
                    last_dst = -1
                    single(data, now)
                    continue
                last_dst, last_inc = dst, inc
            view = memoryview(data)
            if flags & F_CRC:
                if check(view[CRC_OFFSET + 4:], check(view[:CRC_OFFSET])) != crc:
                    last_dst = -1
                    single(data, now)  # (counts the CRC error)
                    continue
            elif require_crc:
                last_dst = -1
                single(data, now)
                continue
            # a data segment of a known peer, intact: receive_datagram would pass it to
            # _on_data now, and so do we unless it is one of the fast path's
            w = peer.window
            cum = w.cum
            if seq_w != (cum + 1) & SEQ_MASK or w._starts \
                    or (flags & F_ACK and ack_w != peer.snd_una & SEQ_MASK):
                last_dst = -1
                on_data(peer, view, n, flags, seq_w, ack_w, tag, plen, now)  # (a reply: new ACK)
                continue
            if flags & F_CHUNK:
                ras = peer.reassembly.get(msg_id)
                # a chunk in the middle of a message being reassembled (not its first nor last)
                if n != HEADER_LEN + CHUNK_LEN + plen or ras is None or ras.msg_len != msg_len \
                        or ras.put_key is not None or plen <= 0 or off + plen >= msg_len \
                        or ras.received + plen >= msg_len:
                    last_dst = -1
                    on_data(peer, view, n, flags, seq_w, ack_w, tag, plen, now)
                    continue
            elif n != HEADER_LEN + plen:
                last_dst = -1
                on_data(peer, view, n, flags, seq_w, ack_w, tag, plen, now)
                continue
            else:
                ras = None
            # from here on, _on_data's fast path, inline
            c = peer.counters
            c.num_total_recvs += 1
            seq = w.cum = cum + 1
            if seq > w.high:
                w.high = seq
                peer.rx_high_time = now
            if ras is None:
                c.num_frag_recvs += 1
                c.num_msgs_delivered += 1
                c.num_bytes_delivered += plen
                events.append((EV_MESSAGE, peer, tag, bytes(view[HEADER_LEN:])))
            else:
                c.num_chunk_recvs += 1
                parts = ras.parts
                if parts is not None and off == ras.received and type(view.obj) is bytes:
                    parts.append(view[HEADER_LEN + CHUNK_LEN:])  # kept, not copied
                else:
                    ras.add(off, view[HEADER_LEN + CHUNK_LEN:])
                ras.received += plen
            peer.ack_count += 1
            if peer.ack_count >= freq:
                peer.ack_now = True
            elif peer.ack_deadline is None:
                peer.ack_deadline = deadline
            acking[peer] = None
            timed[peer] = None

    def _on_data(self, peer: Peer, data: memoryview, n: int, flags: int, seq_w: int, ack_w: int,
                 tag: int, plen: int, now: float) -> None:
        pos = _PAYLOAD_AT[flags & (F_CHUNK | F_PUT)]
        if n != pos + plen:  # malformed: drop before anything in it is believed
            self.counters.num_malformed_recvs += 1
            return
        c = peer.counters
        c.num_total_recvs += 1
        if not peer.confirmed:
            self._confirm(peer, now)
        if flags & F_ACK and ack_w != peer.snd_una & SEQ_MASK:
            # A piggy-backed ACK with news (every reply in a ping-pong) is applied first, on
            # every path: it touches only send-side state, so the receive paths below see
            # the same state either way, and events keep their order (completions first).
            at_cum = self._on_cum_ack(peer, ack_w, now)
            if at_cum is not None:
                # a piggy-backed ACK carries no delay: sample only when it acknowledges the
                # last thing we sent (a reply to it), which bounds the error to the peer's
                # own turnaround
                if at_cum.tx_count == 1 and at_cum.seq == peer.next_seq - 1:
                    peer.timer.sample(now - at_cum.sent_at)
                if peer.unacked:  # (with nothing unacked it has nothing to do)
                    self._detect_losses(peer)
        w = peer.window
        cum = w.cum
        if seq_w == (cum + 1) & SEQ_MASK and not w._starts and not flags & F_STATUS:
            # The common cases, kept short: the next segment in order, no holes to fill;
            # and either a whole message, or a chunk in the middle of a message being
            # reassembled (not its first nor last).  (A put status is no message: below.)
            ras = None
            if pos != HEADER_LEN and flags & (F_CHUNK | F_PUT) == F_CHUNK:
                msg_id, msg_len, off = CHUNK.unpack_from(data, HEADER_LEN)
                ras = peer.reassembly.get(msg_id)
                if ras is not None and (ras.msg_len != msg_len or ras.put_key is not None or plen <= 0
                                        or off + plen >= msg_len or ras.received + plen >= msg_len):
                    ras = None
            if pos == HEADER_LEN or ras is not None:
                seq = w.cum = cum + 1
                if seq > w.high:
                    w.high = seq
                    peer.rx_high_time = now
                if ras is None:
                    c.num_frag_recvs += 1
                    c.num_msgs_delivered += 1
                    c.num_bytes_delivered += plen
                    self.events.append((EV_MESSAGE, peer, tag, bytes(data[HEADER_LEN:])))
                else:
                    c.num_chunk_recvs += 1
                    parts = ras.parts
                    if parts is not None and off == ras.received and type(data.obj) is bytes:
                        parts.append(data[pos:])  # Reassembly.add, inline: kept, not copied
                    else:
                        ras.add(off, data[pos:])
                    ras.received += plen
                peer.ack_count += 1
                if peer.ack_count >= self._ack_frequency:
                    peer.ack_now = True
                elif peer.ack_deadline is None:
                    peer.ack_deadline = now + self._ack_delay
                self._acking[peer] = None
                self._timed[peer] = None
                return
        seq = cum + 1 + ((seq_w - cum - 1) & SEQ_MASK)
        if seq - cum - 1 >= _HALF:
            seq -= _WRAP
        msg_len = off = 0
        ras = None
        if flags & F_STATUS and (flags & (F_CHUNK | F_PUT) or plen != PUT_STATUS.size):
            self.counters.num_malformed_recvs += 1  # a put status is one unchunked body
            return
        if flags & F_CHUNK:
            msg_id, msg_len, off = CHUNK.unpack_from(data, HEADER_LEN)
            if off + plen > msg_len or msg_len > self.config.max_message_size or (plen == 0 and msg_len):
                c.num_badfrag_recvs += 1
                return
            ras = peer.reassembly.get(msg_id)
            if ras is None:
                # At the cap, a new message is refused (not accepted, so not ACKed: it comes
                # again) -- except the one holding the next in-order sequence number: later
                # messages filling every slot must never lock out the one the window waits on.
                if len(peer.reassembly) >= self.config.max_reassemblies and seq != cum + 1 \
                        and not w.holds(seq) and cum < seq <= cum + w.size:
                    c.num_reassembly_drops += 1
                    return
            elif ras.msg_len != msg_len or (ras.put_key is None) is bool(flags & F_PUT):
                # (a chunk of a message where a put is being placed, or the reverse: the two
                # keep different state, and a sender never reuses a live message id)
                c.num_badfrag_recvs += 1
                return
        verdict = w.accept(seq)
        if verdict != NEW:
            if verdict == DUPLICATE:
                c.num_dup_recvs += 1
                peer.dup_seen = True
            elif verdict == ABOVE_WINDOW:
                c.num_oow_high_recvs += 1
            else:
                c.num_oow_low_recvs += 1
            # tell the sender where we are at once -- but no more than one ACK per
            # ack_delay, however many duplicates a faulty network delivers
            if now - peer.last_ack_sent >= self._ack_delay:
                peer.ack_now = True
            else:
                due = peer.last_ack_sent + self._ack_delay
                if peer.ack_deadline is None or due < peer.ack_deadline:
                    peer.ack_deadline = due
            self._acking[peer] = None
            self._timed[peer] = None
            return
        new_cum = w.cum
        if seq == w.high:
            peer.rx_high_time = now
        item = None
        if flags & F_STATUS:
            # the outcome of a put of ours (accepted like any segment, so ACKed and never
            # delivered twice); nothing for the application's message handlers
            seq_done = seq
            self._on_put_status(peer, data, pos)
        elif flags & F_PUT:
            key, poff = PUT.unpack_from(data, HEADER_LEN + (CHUNK_LEN if flags & F_CHUNK else 0))
            region = self.regions.get(key)
            start = poff + off
            fits = region is not None and start + plen <= len(region) \
                and (not flags & F_CHUNK or poff + msg_len <= len(region))
            if not flags & F_CHUNK:
                if fits:
                    region[start:start + plen] = data[pos:]  # type: ignore[index]
                    item = (EV_PUT, peer, key, poff, plen)
                    c.num_puts_delivered += 1
                    self._send_put_status(peer, seq, PS_LANDED)
                else:
                    c.num_put_errors += 1
                    item = (EV_PUT_ERROR, peer, key, poff, plen)
                    self._send_put_status(peer, seq, PS_UNKNOWN_KEY if region is None else PS_OUT_OF_BOUNDS)
                seq_done = seq
            else:
                new = ras is None
                if new:
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
                if ras.received >= msg_len:
                    del peer.reassembly[msg_id]
                    item = (EV_PUT_ERROR if ras.failed else EV_PUT, peer, key, poff, msg_len)
                    seq_done = ras.last_seq
                    peer.ack_now = True
                    if not ras.failed:
                        c.num_puts_delivered += 1
                    self._send_put_status(peer, seq_done, ras.failed)
            # accepted (and so ACKed) either way; the put status tells the sender the outcome
        elif flags & F_CHUNK:
            c.num_chunk_recvs += 1
            if ras is None:
                ras = peer.reassembly[msg_id] = Reassembly(msg_len, tag, None, 0)
            ras.add(off, data[pos:])
            ras.received += plen
            if off + plen == msg_len:
                ras.last_seq = seq
            if ras.received >= msg_len:
                del peer.reassembly[msg_id]
                item = (EV_MESSAGE, peer, ras.tag, ras.take())
                seq_done = ras.last_seq
                c.num_msgs_delivered += 1
                c.num_bytes_delivered += msg_len
                peer.ack_now = True  # usnic ACKs a completed large message at once
        else:
            c.num_frag_recvs += 1
            item = (EV_MESSAGE, peer, tag, bytes(data[pos:]))
            seq_done = seq
            c.num_msgs_delivered += 1
            c.num_bytes_delivered += plen
        # delivery: at once when unordered; in sequence order otherwise
        if not self.config.ordered:
            if item is not None:
                self.events.append(item)
        elif item is not None and seq_done == new_cum == cum + 1 and not peer.ready:
            self.events.append(item)  # in order, nothing waiting: the fast path
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
        # ACK debt
        peer.ack_count += 1
        if seq != new_cum or new_cum > cum + 1:
            # a new gap, or a gap filled: the sender's loss detection wants to know soon,
            # but under heavy reordering no more than one ACK per ack_delay
            peer.sack_dirty = True
            if now - peer.last_ack_sent >= self.config.ack_delay:
                peer.ack_now = True
            else:
                due = peer.last_ack_sent + self.config.ack_delay
                if peer.ack_deadline is None or due < peer.ack_deadline:
                    peer.ack_deadline = due
            depth = w.high - new_cum
            if depth > c.max_recv_window:
                c.max_recv_window = depth
        elif peer.ack_count >= self.config.ack_frequency:
            peer.ack_now = True
        elif peer.ack_deadline is None:
            peer.ack_deadline = now + self.config.ack_delay
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
        if type(queue) is tuple:
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
        msg = peer.puts.pop(put_seq, None)
        if msg is None or msg.done:
            return  # no put of ours ends there (a confused peer): nothing to complete
        msg.put_status = status
        if msg.outstanding == 0:
            self._put_done(peer, msg)

    def _put_done(self, peer: Peer, msg: OutMessage) -> None:
        """A put is acknowledged and its status is in: its callback gets None if it landed,
        else a PutError."""
        msg.done = True
        c = peer.counters
        status = msg.put_status
        exc = None
        if status == PS_LANDED:
            c.num_msgs_completed += 1
        else:
            c.num_puts_refused += 1
            reason = PUT_STATUS_NAMES.get(status, f"refused (put status {status})")  # type: ignore[arg-type]
            exc = PutError(msg.put_key, msg.put_offset, msg.length, reason,  # type: ignore[arg-type]
                           peer.address.hex())
        if msg.callback is not None:
            self.events.append((EV_COMPLETE, msg.callback, exc))

    def _on_cum_ack(self, peer: Peer, ack_w: int, now: float) -> Segment | None:
        """Apply a cumulative ACK (piggy-backed or standalone).  Returns the segment at the
        new ACK point if this ACK acknowledged it (None if nothing new was acked)."""
        una = peer.snd_una
        cum = una + ((ack_w - una) & SEQ_MASK)
        if cum - una >= _HALF or cum == una:
            return None  # old or duplicate
        if cum >= peer.next_seq:
            cum = peer.next_seq - 1  # ACKs for what we never sent: ignore the excess
            if cum <= una:
                return None
        if cum == una + 1:  # one segment (each ping-pong reply): no loop to set up
            top = peer.unacked.pop(cum, None)
            if top is not None:
                self._acked(peer, top)
        else:
            pop, acked = peer.unacked.pop, self._acked  # (once per ACK: the loop runs per segment)
            top = None
            for s in range(una + 1, cum + 1):
                seg = pop(s, None)
                if seg is not None:
                    acked(peer, seg)
                    top = seg
        peer.snd_una = cum
        if peer.scoreboard._starts:  # (no SACK ranges recorded: nothing to forget)
            peer.scoreboard.prune(cum)
        if peer.loss_seq_limit is not None and peer.loss_seq_limit < cum:
            peer.loss_seq_limit = cum
        self._progress(peer, now)
        if top is None or top.seq != cum:
            return None
        return top

    def _acked(self, peer: Peer, seg: Segment) -> None:
        """``seg`` is acknowledged: count it against its message, complete the message."""
        acked_serial = peer.acked_serial
        if seg.tx_serial > acked_serial[seg.channel]:
            acked_serial[seg.channel] = seg.tx_serial
        if seg.tx_count > 1:
            # Acked sooner after the retransmission than any round trip takes: the original
            # arrived, it was only late.  Widen the reordering allowance (RACK's reo_wnd_mult).
            min_rtt = peer.timer.min_rtt
            if min_rtt is not None and self._now - seg.sent_at < min_rtt * 0.5 and peer.reo_mult < 16:
                peer.reo_mult += 1
                peer.reo_persist = REO_PERSIST
        if peer.cwnd < self._cwnd_max:  # AIMD: slow start, then one segment per window
            peer.cwnd += 1.0 if peer.cwnd < peer.ssthresh else 1.0 / peer.cwnd
        msg = seg.msg
        msg.outstanding -= 1
        if msg.cut_all and msg.outstanding == 0 and not msg.done:
            if msg.put_key is not None:
                if msg.put_status is not None:  # (else its put status, still to come, completes it)
                    self._put_done(peer, msg)
                return
            msg.done = True
            if msg.flags:
                return  # a put status of ours: no application message, not counted as one
            peer.counters.num_msgs_completed += 1
            if msg.callback is not None:
                self.events.append((EV_COMPLETE, msg.callback, None))

    def _progress(self, peer: Peer, now: float) -> None:
        """Something new was acknowledged: restart the death clock and the retransmit
        timer, end the backoff, reopen the window."""
        peer.last_progress = now
        peer.rto_base = now
        peer.timer.backoff = 1
        peer.timeouts = 0
        if peer.probe_seq is not None and peer.snd_una >= peer.probe_seq:
            # A timeout's probes are acknowledged.  Had the originals arrived, the receiver
            # would have reported a duplicate (AF_DUPLICATE): without one, they were lost,
            # which is a loss episode like any other (RFC 8985's TLP rule).
            if not peer.probe_dup and peer.probe_serial >= peer.recovery_serial:
                self._loss_episode(peer)
            peer.probe_seq = None
        if peer.queue and peer.state is PeerState.ESTABLISHED:
            self._sending[peer] = None

    def _on_ack(self, peer: Peer, data: memoryview, n: int, ack_w: int, plen: int, now: float) -> None:
        c = peer.counters
        if n != HEADER_LEN + plen or plen < ACK_BODY.size:
            self.counters.num_malformed_recvs += 1
            return
        window, nranges, ack_flags, ack_delay = ACK_BODY.unpack_from(data, HEADER_LEN)
        if nranges > MAX_SACK_RANGES or plen != ACK_BODY.size + nranges * SACK_RANGE.size:
            self.counters.num_malformed_recvs += 1
            return
        c.num_ack_recvs += 1
        if not peer.confirmed:
            self._confirm(peer, now)
        peer.remote_window = max(8, window)
        if ack_flags & AF_DUPLICATE:
            peer.probe_dup = True  # (only read while a timeout's probes are out)
            if peer.reo_mult < 16 and peer.counters.num_resends:
                peer.reo_mult += 1  # a resend was not needed: allow more reordering (RACK)
                peer.reo_persist = REO_PERSIST
        una = peer.snd_una
        cum = una + ((ack_w - una) & SEQ_MASK)
        if cum - una >= _HALF:
            cum -= _WRAP
            c.num_old_dup_acks += 1
        at_cum = self._on_cum_ack(peer, ack_w, now)
        largest = cum  # the largest sequence number this ACK acknowledges
        sample = at_cum
        sacked_new = False
        if nranges:
            unacked = peer.unacked
            top = peer.next_seq - 1
            base = HEADER_LEN + ACK_BODY.size
            for i in range(nranges):
                start, length = SACK_RANGE.unpack_from(data, base + i * SACK_RANGE.size)
                lo = max(cum + start, peer.snd_una + 1)
                hi = min(cum + start + length - 1, top)
                if ack_flags & AF_TRUNCATED and i == nranges - 1:
                    # ranges were left out below this one: what lies between is unknown,
                    # so no loss may be declared there
                    peer.loss_seq_limit = largest
                elif i == nranges - 1:
                    peer.loss_seq_limit = None
                largest = hi
                for a, b in peer.scoreboard.add(lo, hi):
                    for s in range(a, b + 1):
                        seg = unacked.pop(s, None)
                        if seg is not None:
                            self._acked(peer, seg)
                            sacked_new = True
                            sample = seg
            if sacked_new and at_cum is None:
                self._progress(peer, now)
        # RTT: only from the largest acknowledged segment, newly acked, sent once (Karn),
        # less the time the receiver held the ACK
        if sample is not None and sample.seq == largest and sample.tx_count == 1 \
                and ack_delay != U32_MASK:
            peer.timer.sample(now - sample.sent_at - ack_delay * 1e-6)
        if at_cum is None and not sacked_new and cum == una:
            c.num_dup_acks += 1
        if peer.unacked:  # (with nothing unacked it has nothing to do)
            self._detect_losses(peer)

    def _detect_losses(self, peer: Peer) -> None:
        """Fast retransmit, RACK-style (RFC 8985): a segment is lost once a transmission made
        on its channel ``fast_retransmit_threshold`` or more sends after it was acknowledged
        (counted in transmission serials, so a retransmission is judged against what was sent
        after it)
        *and* it was sent longer ago than an RTT plus a reordering allowance.  The time
        condition keeps reordering from looking like loss; :meth:`get_timer` arms the check
        for a segment that meets only the first."""
        thr = self.config.fast_retransmit_threshold
        limits = (peer.acked_serial[0] - thr, peer.acked_serial[1] - thr)
        top = limits[0] if limits[0] > limits[1] else limits[1]
        if top < 0 or not peer.unacked:
            return
        reo = self._reorder_time(peer)
        now = self._now
        seq_limit = peer.loss_seq_limit
        lost = []
        for seg in peer.unacked.values():
            # (the same expression as the timer in get_timer, so that the check it arms
            # always finds the segment due: no float rounding between the two)
            if seg.tx_serial > top or seg.sent_at + reo > now:
                break
            # judged only against its own channel: a tiny message on the priority channel
            # overtaking bulk queued on the data channel is not a loss
            if not seg.lost and seg.tx_serial <= limits[seg.channel] \
                    and (seq_limit is None or seg.seq <= seq_limit):
                lost.append(seg)
        if lost:
            if lost[-1].tx_serial >= peer.recovery_serial:
                # a new loss episode: decrease once (losses of what was sent before now
                # count against this same episode)
                self._loss_episode(peer)
            unacked = peer.unacked
            resend = peer.resend or peer.new_resend()
            for seg in lost:
                seg.lost = LOST_FAST
                unacked.move_to_end(seg.seq)
                resend.append(seg)
            self._resending[peer] = None

    @staticmethod
    def _loss_episode(peer: Peer) -> None:
        """Multiplicative decrease, once per loss episode.  TCP Veno's rule picks the factor:
        if the round trip shows (almost) no queue built by this flow, the loss was more likely
        random than congestion, and the cut is gentler; either way the window decreases, so
        AIMD still converges where the estimate is wrong (a shallow-buffered switch)."""
        t = peer.timer
        beta = CWND_BETA
        if t.min_rtt and t.srtt and peer.cwnd * (1.0 - t.min_rtt / t.srtt) < VENO_BACKLOG:
            beta = CWND_BETA_RANDOM
        peer.ssthresh = peer.cwnd = max(peer.cwnd * beta, 2.0)
        peer.recovery_serial = peer.tx_serial + 1
        if peer.reo_persist:
            # a widened reordering allowance lasts REO_PERSIST loss episodes without a new
            # spurious resend, then goes back to a quarter RTT (RACK): a network that
            # reordered or duplicated once does not slow loss detection for good
            peer.reo_persist -= 1
            if not peer.reo_persist:
                peer.reo_mult = 1

    def _reorder_time(self, peer: Peer) -> float:
        """How long after its send a segment may still arrive late rather than be lost."""
        srtt = peer.timer.srtt
        if srtt is None:
            return self.config.rto_initial
        return srtt + srtt * 0.25 * peer.reo_mult + self._granularity

    # ------------------------------------------------------------------ handshake

    def _new_peer(self, address: bytes, dest: Any) -> Peer:
        cfg = self.config
        conn = self._fresh_conn_id()
        timer = RetransmitTimer(cfg.rto_mode == "adaptive", cfg.rto_initial, cfg.rto_min,
                                cfg.rto_max, cfg.retrans_timeout, cfg.ack_delay)
        peer = Peer(address, dest, conn, self._rng.randrange(1, 1 << 62), timer, cfg.window)
        peer.cwnd = self._cwnd_initial
        peer.crc = self.crc
        self.peers_by_addr[address] = peer
        self.peers_by_conn[conn] = peer
        return peer

    def _fresh_conn_id(self) -> int:
        while True:
            conn = self._rng.randrange(1, 1 << 32)
            if conn not in self.peers_by_conn:
                return conn

    def _start_hello(self, peer: Peer, now: float) -> None:
        peer.hello_next = now
        peer.hello_interval = self.config.handshake_interval
        peer.hello_started = now
        self._hello[peer] = None
        self._timed[peer] = None

    def _confirm(self, peer: Peer, now: float) -> None:
        """The peer has shown it knows our current incarnation."""
        peer.confirmed = True
        peer.inbound_since = None
        if peer.remote_known and peer.state is PeerState.CONNECTING:
            peer.state = PeerState.ESTABLISHED
            peer.hello_next = None
            peer.hello_started = None
            peer.last_progress = now
            if peer.queue:
                self._sending[peer] = None

    def _unschedule(self, peer: Peer) -> None:
        """Take ``peer`` off every work list (it failed, is reset, or is forgotten)."""
        for table in (self._resending, self._sending, self._acking, self._hello, self._timed):
            table.pop(peer, None)

    def _sweep_inbound(self, now: float) -> bool:
        """At the peer cap: forget peers that a HELLO created and that never confirmed within
        ``handshake_timeout`` (the application never saw them: nothing was delivered).  A
        flood of HELLOs from forged addresses leaves only such peers.  True if room was made."""
        limit = now - self.config.handshake_timeout
        gone = [p for p in self.peers_by_addr.values()
                if p.inbound_since is not None and p.inbound_since <= limit and not p.unacked and not p.queue]
        for peer in gone:
            del self.peers_by_addr[peer.address]
            self.peers_by_conn.pop(peer.local_conn, None)
            self._unschedule(peer)
        return len(self.peers_by_addr) < self.config.max_peers

    def _on_hello(self, typ: int, dst: int, hello: Hello, wants_crc: bool, now: float) -> None:
        if typ == T_HELLO:
            peer = self.peers_by_addr.get(hello.address)
            if peer is None:
                if not self.config.accept_peers or self.closed:
                    self.counters.num_unk_recvs += 1
                    return
                if len(self.peers_by_addr) >= self.config.max_peers and not self._sweep_inbound(now):
                    self.counters.num_refused_peers += 1
                    return
                try:
                    dest = self._resolve(hello.address)
                except (ValueError, TypeError):
                    self.counters.num_malformed_recvs += 1
                    return
                peer = self._new_peer(hello.address, dest)
                peer.inbound_since = now
        else:
            peer = self.peers_by_conn.get(dst)
            if peer is None or hello.echo_incarnation != self.incarnation:
                self.counters.num_unk_recvs += 1
                return
        c = peer.counters
        c.num_hello_recvs += 1
        if hello.incarnation in peer.past_incarnations:
            c.num_stale_recvs += 1  # a late HELLO of an incarnation already replaced
            return
        if hello.conn_id in peer.past_remote_conns and hello.incarnation == peer.remote_inc:
            c.num_stale_recvs += 1  # a late HELLO of a connection already replaced
            return
        renewed = False  # we took a new connection id in this call
        if peer.remote_known and hello.incarnation != peer.remote_inc:
            if stale_incarnation(hello.incarnation, peer.remote_inc):
                c.num_stale_recvs += 1  # an older life's HELLO, delayed in the network
                return
            self._restart_peer(peer, now)
            renewed = True
        elif peer.remote_known and (hello.conn_id != peer.remote_conn or hello.isn != peer.remote_isn) \
                and not self.closed:
            # Same incarnation, new connection: the other side started afresh with us (it had
            # declared us dead, or it saw a restart of ours race its handshake).
            if peer.next_seq == peer.isn + 1 and peer.state is not PeerState.FAILED:
                # We sent nothing on the old connection: simply follow it.  Its old segments
                # cannot pass for new ones: they sit ~2**61 away from the new random ISN.
                peer.remember_conn(peer.remote_conn)
                peer.remote_known = False
                peer.ready.clear()
                peer.reassembly.clear()
            else:
                # What it had not acknowledged may or may not have been delivered before it
                # reset: fail it (at most once, never twice), and start a new connection of
                # our own that it learns from our HELLO.
                self._fail_messages(peer, PeerUnreachable(
                    f"peer {peer.address.hex()} reset the connection (it had declared us dead)"))
                self._reset_peer(peer)
                renewed = True
        elif peer.state is PeerState.FAILED and not peer.remote_known and not self.closed:
            # it never answered our handshake and we gave up; now it speaks: a new connection
            self._reset_peer(peer)
        elif peer.state is PeerState.FAILED or peer.state is PeerState.CLOSED:
            c.num_stale_recvs += 1
            return
        # CRC32C on what we send it if either side requires one: crc=on at one end and
        # off (or auto on a device with integrity) at the other still talk
        peer.crc = self.crc or wants_crc
        if not peer.remote_known:
            peer.remote_known = True
            peer.remote_inc = hello.incarnation
            peer.remote_conn = hello.conn_id
            peer.remote_isn = hello.isn
            # how long the peer may sit on an ACK: part of our retransmit timeout
            peer.timer.set_max_ack_delay(min(hello.max_ack_delay_us * 1e-6, 1.0))
            peer.remote_window = max(8, hello.window)
            peer.window = ReceiveWindow(hello.isn, self.config.window)
        if typ == T_HELLO:
            peer.hello_reply = True
            self._hello[peer] = None
        if renewed:
            # this datagram was addressed to our old connection: the peer cannot know the
            # new one until our HELLO tells it
            self._start_hello(peer, now)
        # A HELLO_ACK proves the peer knows our current connection (it was looked up by
        # it); a HELLO does only if it is addressed to it.
        elif hello.echo_incarnation == self.incarnation and (typ == T_HELLO_ACK or dst == peer.local_conn):
            first = not peer.confirmed
            if first and typ == T_HELLO_ACK and peer.hello_count == 1 and peer.hello_sent_at is not None:
                peer.timer.sample(now - peer.hello_sent_at)  # one HELLO, one answer: an RTT
            self._confirm(peer, now)
            if first and typ == T_HELLO_ACK:
                # let the other side know at once that we know it (confirms it)
                peer.ack_now = True
                self._acking[peer] = None
        elif peer.state is PeerState.CONNECTING and peer.hello_next is None and peer.queue:
            self._start_hello(peer, now)

    def _restart_peer(self, peer: Peer, now: float) -> None:
        """The peer came back as a new incarnation: fail what was meant for the old one and
        start afresh (new connection id and ISN, so nothing stale can be delivered)."""
        self.counters.num_peer_restarts += 1
        self._fail_messages(peer, PeerRestarted(
            f"peer {peer.address.hex()} restarted (incarnation {peer.remote_inc:#x} -> new)"))
        peer.remember_incarnation(peer.remote_inc)
        self._reset_peer(peer)
        self.events.append((EV_PEER_RESTARTED, peer))

    def _reset_peer(self, peer: Peer) -> None:
        """Forget the connection with ``peer`` and make it ready for a new one: a new
        connection id and ISN (so that nothing of the old connection can be taken for the
        new), fresh windows and timers.  Counters and history stay."""
        if peer.remote_known:
            peer.remember_conn(peer.remote_conn)
        keep = (peer.counters, peer.user_data, peer.past_incarnations, peer.past_remote_conns)
        self.peers_by_conn.pop(peer.local_conn, None)
        self._unschedule(peer)
        cfg = self.config
        timer = RetransmitTimer(cfg.rto_mode == "adaptive", cfg.rto_initial, cfg.rto_min,
                                cfg.rto_max, cfg.retrans_timeout, cfg.ack_delay)
        conn = self._fresh_conn_id()
        Peer.__init__(peer, peer.address, peer.dest, conn, self._rng.randrange(1, 1 << 62),
                      timer, cfg.window)
        peer.counters, peer.user_data, peer.past_incarnations, peer.past_remote_conns = keep
        peer.cwnd = self._cwnd_initial
        peer.crc = self.crc
        self.peers_by_conn[conn] = peer

    # ------------------------------------------------------------------ failure

    def _fail_messages(self, peer: Peer, exc: BaseException) -> None:
        """Complete every pending operation toward ``peer`` with ``exc``, exactly once."""
        msgs: dict[int, OutMessage] = {}
        for seg in peer.unacked.values():
            msgs[id(seg.msg)] = seg.msg
        for msg in peer.queue:
            msgs[id(msg)] = msg
        for msg in peer.puts.values():  # acknowledged, waiting for their put status
            msgs[id(msg)] = msg
        for msg in msgs.values():
            if not msg.done:
                msg.done = True
                if msg.flags:
                    continue  # a put status of ours: nobody waits on it
                peer.counters.num_send_errors += 1
                if msg.callback is not None:
                    self.events.append((EV_COMPLETE, msg.callback, exc))
        peer.unacked.clear()
        peer.queue = ()
        peer.puts.clear()
        peer.resend = ()
        peer.reassembly.clear()
        peer.ready.clear()

    def _fail_peer(self, peer: Peer, exc: BaseException) -> None:
        self.counters.num_peer_failures += 1
        self._fail_messages(peer, exc)
        peer.state = PeerState.FAILED
        peer.error = exc
        peer.hello_next = None
        self._unschedule(peer)
        self.events.append((EV_PEER_FAILED, peer, exc))

    # ------------------------------------------------------------------ timers

    def get_timer(self, pending_work: bool = True) -> float | None:
        """The next time :meth:`handle_timer` or a send pass has something to do.  With
        ``pending_work=False``, timers only: a driver whose device refuses sends for now
        must not be told that queued sends are due."""
        if pending_work and (self._resending or self._sending):
            return self._now
        best = None
        cfg = self.config
        idle = None
        for peer in self._timed:
            t = None
            unacked = peer.unacked
            if unacked:
                for front in unacked.values():  # (_rto_front, inlined: called every pass)
                    if not front.lost:
                        sent_at = front.sent_at
                        t = (sent_at if sent_at > peer.rto_base else peer.rto_base) + peer.timer.rto
                        if front.tx_serial <= peer.acked_serial[front.channel] - cfg.fast_retransmit_threshold \
                                and (peer.loss_seq_limit is None or front.seq <= peer.loss_seq_limit):
                            loss_check = sent_at + self._reorder_time(peer)
                            if loss_check < t:
                                t = loss_check
                        break
                death = peer.last_progress + cfg.peer_timeout
                if t is None or death < t:
                    t = death
            elif peer.puts:  # everything acknowledged, put statuses still owed: a death clock
                t = max(peer.last_progress, peer.rx_high_time) + cfg.peer_timeout
            if peer.ack_now or peer.hello_reply:
                t = self._now
            elif peer.ack_deadline is not None and (t is None or peer.ack_deadline < t):
                t = peer.ack_deadline
            if peer.hello_next is not None:
                if t is None or peer.hello_next < t:
                    t = peer.hello_next
                if peer.hello_started is not None:
                    give_up = peer.hello_started + cfg.handshake_timeout
                    if give_up < t:
                        t = give_up
            if t is None:
                if idle is None:
                    idle = []
                idle.append(peer)
            elif best is None or t < best:
                best = t
        if idle:
            for peer in idle:
                del self._timed[peer]
        return best

    @staticmethod
    def _rto_front(peer: Peer) -> Segment | None:
        for seg in peer.unacked.values():
            if not seg.lost:
                return seg
        return None

    def handle_timer(self, now: float) -> None:
        """Retransmit timeouts, peer death, handshake retries and give-ups."""
        self._now = now
        cfg = self.config
        for peer in list(self._timed):
            if not peer.unacked and peer.puts \
                    and max(peer.last_progress, peer.rx_high_time) + cfg.peer_timeout <= now:
                # a put's data was acknowledged but its status never came, and the peer has
                # sent nothing since: it died in between (a hang otherwise)
                self._fail_peer(peer, PeerUnreachable(
                    f"peer {peer.address.hex()} sent no put status and nothing else for "
                    f"{cfg.peer_timeout:g} s"))
                continue
            if peer.unacked:
                # (deadlines are compared exactly as get_timer computes them: a difference
                # instead of a sum can round the other way and livelock virtual time)
                if peer.last_progress + cfg.peer_timeout <= now:
                    self._fail_peer(peer, PeerUnreachable(
                        f"peer {peer.address.hex()} acknowledged nothing for {cfg.peer_timeout:g} s"))
                    continue
                self._detect_losses(peer)
                front = self._rto_front(peer)
                if front is not None and max(front.sent_at, peer.rto_base) + peer.timer.rto <= now:
                    # A timeout resends the two oldest segments (probes), not the whole
                    # window: their ACK lets the loss rule find the rest without a storm.
                    # Two, not one: on a link losing in bursts, a lone probe per timeout
                    # can stay inside the burst for many timeouts in a row.
                    probes = [seg for seg in islice(
                        (g for g in peer.unacked.values() if not g.lost), TIMEOUT_PROBES)]
                    resend = peer.resend or peer.new_resend()
                    for seg in probes:
                        seg.lost = LOST_TIMEOUT
                        peer.unacked.move_to_end(seg.seq)
                        resend.append(seg)
                    peer.timer.expired()
                    peer.rto_base = now  # the next timeout counts from this one
                    # A timeout alone says little: lost ACKs cause it as well as lost data.
                    # The first one's probes are judged when acknowledged (see _progress);
                    # only several in a row, nothing acknowledged, mean persistent
                    # congestion and restart slow start (QUIC's PTO and persistent
                    # congestion, RFC 9002).
                    peer.timeouts += 1
                    if peer.timeouts >= PERSISTENT_TIMEOUTS:
                        if peer.tx_serial >= peer.recovery_serial:
                            peer.ssthresh = max(peer.cwnd / 2, 2.0)
                            peer.cwnd = min(self._cwnd_initial, peer.ssthresh)
                            peer.recovery_serial = peer.tx_serial + 1
                        peer.probe_seq = None
                    elif peer.probe_seq is None:
                        peer.probe_seq = max(seg.seq for seg in probes)
                        peer.probe_serial = probes[0].tx_serial
                        peer.probe_dup = False
                    self._resending[peer] = None
            if peer.hello_started is not None and peer.state is PeerState.CONNECTING \
                    and peer.hello_started + cfg.handshake_timeout <= now:
                self._fail_peer(peer, PeerUnreachable(
                    f"peer {peer.address.hex()} did not answer the handshake within "
                    f"{cfg.handshake_timeout:g} s"))

    # ------------------------------------------------------------------ send pass

    def datagrams_to_send(self, now: float, budget: int = 1 << 30,
                          resends: bool = True) -> list[tuple[int, Any, bytes | bytearray]]:
        """Up to ``budget`` datagrams to post now, as ``(channel, dest, datagram)``.

        The engine counts them as sent, and never changes a datagram it handed out (a
        retransmission re-stamps a copy), so the device may keep one without copying.  A
        driver calling it several times in one progress pass asks for ``resends`` only the
        first time, so that ``max_resends_per_pass`` holds per pass."""
        self._now = now
        out: list[tuple[int, Any, bytes | bytearray]] = []
        cfg = self.config
        if self._resending and resends:
            self._resend_pass(out, now, min(budget, cfg.max_resends_per_pass))
        if self._sending and len(out) < budget:
            self._send_pass(out, now, budget)
        if self._acking and len(out) < budget:
            self._ack_pass(out, now, budget)
        if self._hello and len(out) < budget:
            self._hello_pass(out, now, budget)
        return out

    def enable_gather(self) -> None:
        """The driver can post a datagram given as a list of buffers (``sendmsg`` style): from
        now on a chunk of at least GATHER_MIN payload bytes (not a put) comes out of
        :meth:`datagrams_to_send` as ``[header, view of the message]``, its payload not
        copied (at 65000 B the copy was about 4 us of the sender's ~15 us per datagram);
        every other datagram stays one buffer.  The message must stay unchanged until its
        callback, as :meth:`send` already asks.  A no-op when no chunk can be that large."""
        if self._chunk_cap >= GATHER_MIN:
            self._gather_min = GATHER_MIN

    def _stamp(self, peer: Peer, seg: Segment, now: float, out: list[Any]) -> None:
        """Fill in the current ACK point (and CRC) and count one transmission."""
        buf: Any = seg.buf
        if type(buf) is list:  # [header, payload] (enable_gather): a new header, same payload
            header = bytearray(buf[0])
            _U64.pack_into(header, 24, peer.window.cum & SEQ_MASK)
            if header[2] & F_CRC:
                _U32.pack_into(header, CRC_OFFSET, datagram_crc(header, buf[1]))
            buf = seg.buf = [header, buf[1]]
        else:
            buf = seg.buf = bytearray(buf)  # a copy: a datagram handed out is never changed
            _U64.pack_into(buf, 24, peer.window.cum & SEQ_MASK)
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

    def _resend_pass(self, out: list[Any], now: float, cap: int) -> None:
        sent = 0
        max_retries = self.config.max_retries
        for peer in list(self._resending):
            resend = peer.resend
            c = peer.counters
            while resend and sent < cap:
                seg = resend.popleft()
                if not seg.lost or peer.unacked.get(seg.seq) is not seg:
                    continue  # acknowledged meanwhile
                if seg.tx_count >= max_retries:
                    self._fail_peer(peer, PeerUnreachable(
                        f"peer {peer.address.hex()}: segment {seg.seq} unacknowledged after "
                        f"{seg.tx_count} transmissions (max_retries={max_retries})"))
                    break
                if seg.lost == LOST_FAST:
                    c.num_fast_retrans += 1
                else:
                    c.num_timeout_retrans += 1
                seg.lost = 0
                peer.unacked.move_to_end(seg.seq)
                self._stamp(peer, seg, now, out)
                c.num_resends += 1
                c.num_total_sends += 1
                sent += 1
            if not resend:
                self._resending.pop(peer, None)
            if sent >= cap:
                break

    def _send_pass(self, out: list[Any], now: float, budget: int) -> None:
        cfg = self.config
        credits_per_peer = cfg.send_credits
        window = cfg.window
        sending = self._sending
        for peer in list(sending):
            limit = peer.snd_una + min(window, peer.remote_window)
            unacked, resend, cwnd = peer.unacked, peer.resend, peer.cwnd
            # how many segments this peer may send now: credits, flow and congestion window
            room = min(credits_per_peer, limit + 1 - peer.next_seq, budget - len(out))
            in_flight = len(unacked) - len(resend)
            if cwnd < in_flight + room:
                room = ceil(cwnd - in_flight)  # (exact: an int below a float is subtracted exactly)
            if room > 0 and peer.queue:
                self._cut_segments(peer, now, out, room)
            del sending[peer]  # re-added by a new send or an ACK that opens the window ...
            if peer.queue and peer.next_seq <= limit and len(unacked) - len(resend) < cwnd:
                sending[peer] = None  # ... or, still able to send: round robin, to the back
            if len(out) >= budget:
                break
            depth = peer.next_seq - 1 - peer.snd_una
            if depth > peer.counters.max_send_window:
                peer.counters.max_send_window = depth

    def _cut_segments(self, peer: Peer, now: float, out: list[Any], room: int) -> None:
        """Where messages become datagrams: cut up to ``room`` segments from the head of
        ``peer``'s queue and send them.

        Each datagram is one immutable ``bytes``, joined from the header's pieces and the
        payload slice once the CRC was computed over them: the payload is copied once, and
        the device need not copy it again.  This runs once per segment sent, so the state it
        touches is read into locals once per call and written back at the end."""
        queue = peer.queue
        unacked = peer.unacked
        dest = peer.dest
        append = out.append
        crc = peer.crc
        gather_min = self._gather_min
        conn, inc = peer.remote_conn, self.incarnation
        seq = peer.next_seq
        serial = peer.tx_serial
        ack_w = peer.window.cum & SEQ_MASK  # the ACK point rides along (see _stamp)
        prefixes = self._prefixes
        nbytes = chunks = frags = 0
        if not unacked:
            peer.last_progress = now  # the death clock runs only while something is unacked
        while room and queue:
            msg = queue[0]
            data, length, tag, off, msg_id = msg.data, msg.length, msg.tag, msg.offset, msg.msg_id
            put = msg.put_key is not None
            flags = (F_ACK | F_CRC if crc else F_ACK) | msg.flags
            if msg.chunked:
                flags |= F_CHUNK
                cap = self._chunk_cap - (PUT_LEN if put else 0)
                channel = DATA
            else:
                cap = length
                pos = HEADER_LEN + (PUT_LEN if put else 0)
                channel = PRIORITY if pos + length <= self.priority_limit else DATA
            if put:
                flags |= F_PUT
            pre = prefixes.get(conn << 8 | flags)
            if pre is None:
                if len(prefixes) >= _PREFIXES_MAX:  # peers come and go: stay bounded
                    prefixes.clear()
                head = HEAD_PREFIX.pack(WIRE_VERSION, T_DATA, flags, 0, conn, inc)
                pre = prefixes[conn << 8 | flags] = (head, crc32c(head) if crc else 0)
            prefix, pre_crc = pre
            # (per segment below: as few operations as possible; counts are taken after)
            gather_at = gather_min if gather_min is not None and not put else _NEVER
            first_seq, first_off = seq, off
            end_seq = seq + room
            while seq < end_seq:
                n = length - off
                if n > cap:
                    n = cap
                if flags & F_CHUNK:
                    if put:
                        rest = HEAD_REST_CHUNK_PUT.pack(seq & SEQ_MASK, ack_w, tag, n, msg_id, length,
                                                        off, msg.put_key, msg.put_offset)
                    else:
                        rest = HEAD_REST_CHUNK.pack(seq & SEQ_MASK, ack_w, tag, n, msg_id, length, off)
                elif put:
                    rest = HEAD_REST_PUT.pack(seq & SEQ_MASK, ack_w, tag, n, msg.put_key, msg.put_offset)
                else:
                    rest = HEAD_REST.pack(seq & SEQ_MASK, ack_w, tag, n)
                payload = data[off:off + n]
                check = _U32.pack(crc32c(payload, crc32c(rest, pre_crc))) if crc else _NO_CRC
                if n >= gather_at:
                    frame = [b"".join((prefix, check, rest)), payload]  # (see enable_gather)
                else:
                    frame = b"".join((prefix, check, rest, payload))
                serial += 1
                # first transmission: sent now, once, with this serial
                unacked[seq] = Segment(seq, frame, channel, msg, now, 1, serial)
                append((channel, dest, frame))
                seq += 1
                off += n
                if off >= length:
                    break
            cut = seq - first_seq
            nbytes += off - first_off
            room -= cut
            msg.offset = off
            msg.outstanding += cut
            if flags & F_CHUNK:
                chunks += cut
            else:
                frags += cut
            if off >= length:
                msg.cut_all = True
                queue.popleft()
                if put:  # the receiver's put status names it by its last segment's seq
                    peer.puts[(seq - 1) & SEQ_MASK] = msg
        peer.next_seq = seq
        peer.tx_serial = serial
        c = peer.counters
        c.num_chunk_sends += chunks
        c.num_frag_sends += frags
        c.num_total_sends += chunks + frags
        c.num_bytes_sent += nbytes
        self._timed[peer] = None
        # the ACK point rode along: no standalone ACK needed unless SACK news is waiting
        peer.ack_count = 0
        peer.ack_deadline = None
        if not peer.sack_dirty:
            peer.ack_now = False

    def _ack_pass(self, out: list[Any], now: float, budget: int) -> None:
        for peer in list(self._acking):
            if len(out) >= budget:
                break
            if peer.ack_now or (peer.ack_deadline is not None and peer.ack_deadline <= now):
                if peer.remote_known:
                    out.append((self._ack_channel, peer.dest, self._build_ack(peer, now)))
                    peer.last_ack_sent = now
                    peer.counters.num_ack_sends += 1
                    peer.counters.num_total_sends += 1
                peer.ack_count = 0
                peer.ack_deadline = None
                peer.ack_now = False
                peer.sack_dirty = False
                del self._acking[peer]
            elif peer.ack_deadline is None and not peer.ack_now:
                del self._acking[peer]  # a piggy-backed ACK paid the debt

    def _build_ack(self, peer: Peer, now: float) -> bytearray:
        w = peer.window
        ranges = w.sack_ranges(self._max_sack) if w.has_gaps else []
        ack_flags = AF_TRUNCATED if ranges and w.sack_truncated(self._max_sack) else 0
        if peer.dup_seen:
            ack_flags |= AF_DUPLICATE
            peer.dup_seen = False
        largest = w.cum + ranges[-1][0] + ranges[-1][1] - 1 if ranges else w.cum
        if largest == w.high:
            delay = min(int((now - peer.rx_high_time) * 1e6), U32_MASK - 1)
        else:
            delay = U32_MASK  # ranges were cut short: no RTT sample from this ACK
        body = ACK_BODY.size + SACK_RANGE.size * len(ranges)
        buf = bytearray(HEADER_LEN + body)
        HEADER.pack_into(buf, 0, WIRE_VERSION, T_ACK, F_ACK | F_CRC if peer.crc else F_ACK, 0,
                         peer.remote_conn, self.incarnation, 0, 0, w.cum & SEQ_MASK, 0, body)
        ACK_BODY.pack_into(buf, HEADER_LEN, self.config.window, len(ranges), ack_flags, delay)
        pos = HEADER_LEN + ACK_BODY.size
        for start, length in ranges:
            SACK_RANGE.pack_into(buf, pos, start, length)
            pos += SACK_RANGE.size
        if peer.crc:
            seal(buf)
        return buf

    def _hello_pass(self, out: list[Any], now: float, budget: int) -> None:
        for peer in list(self._hello):
            if len(out) >= budget:
                break
            if peer.hello_reply:
                out.append((self._ack_channel, peer.dest, self._build_hello(peer, T_HELLO_ACK)))
                peer.hello_reply = False
                peer.counters.num_hello_sends += 1
                peer.counters.num_total_sends += 1
            if peer.hello_next is not None and peer.hello_next <= now and not peer.confirmed:
                out.append((self._ack_channel, peer.dest, self._build_hello(peer, T_HELLO)))
                peer.counters.num_hello_sends += 1
                peer.counters.num_total_sends += 1
                peer.hello_count += 1
                peer.hello_sent_at = now
                peer.hello_next = now + peer.hello_interval
                peer.hello_interval = min(peer.hello_interval * 2, _HELLO_INTERVAL_MAX)
            if peer.hello_next is None or peer.confirmed:
                peer.hello_next = None if peer.confirmed else peer.hello_next
            if not peer.hello_reply and peer.hello_next is None:
                del self._hello[peer]

    def _build_hello(self, peer: Peer, typ: int) -> bytearray:
        body = Hello(self.incarnation, peer.local_conn, peer.isn, peer.remote_inc,
                     self.config.window, self.address, int(self.config.ack_delay * 1e6)).encode()
        buf = bytearray(HEADER_LEN + len(body))
        # Always with a CRC32C, whatever either side's setting (a handshake is rare, and a
        # side that requires CRCs must be able to read it); hello_flags says whether we
        # require one on everything else.
        HEADER.pack_into(buf, 0, WIRE_VERSION, typ, F_CRC, HF_CRC_REQUIRED if self.crc else 0,
                         peer.remote_conn, self.incarnation, 0, 0, 0, 0, len(body))
        buf[HEADER_LEN:] = body
        seal(buf)
        return buf


assert HELLO_BODY.size == 30
