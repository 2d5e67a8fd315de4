"""HELLO and HELLO_ACK: connection ids, ISNs, incarnations (a restart told from a late packet
of an older life), and a peer's reset or restart.

From the other parts it gets, at construction, recovery's ``fail_messages`` (a restart or a
reset fails what was pending) and the packetizer's ``build_hello``; recovery and the receiver
call :meth:`Handshake.confirm`, the receiver :meth:`Handshake.on_hello`, the engine
:meth:`Handshake.new_peer`, :meth:`Handshake.start_hello`, :meth:`Handshake.reset_peer` and
the HELLO pass.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Final

from ..errors import MessageTooLarge, PeerUnreachable
from ..errors import PeerRestarted as RestartError
from .autotune import initial_cap, send_window
from .events import PeerRestarted, SendCompleted
from .packetizer import Packetizer
from .peers import OutMessage, Peer, PeerEvent, PeerState
from .recovery import Recovery
from .rtt import RetransmitTimer
from .state import EngineState
from .window import ReceiveWindow
from .wire import (
    CHUNK_LEN,
    HEADER_LEN,
    PUT_LEN,
    T_HELLO,
    T_HELLO_ACK,
    Hello,
    TransportParameters,
)

#: what a HELLO without a parameter block is taken to advertise
_NO_PARAMS: Final = TransportParameters()

_HELLO_INTERVAL_MAX: Final = 1.0

#: a closed connection's id stays out of use this many peer_timeouts (its late datagrams
#: are never taken for a new connection's); see lifecycle.py
QUARANTINE_TIMEOUTS: Final = 3

#: how much older (in incarnation units: 1/1024 s of the clock the driver built them from)
#: a HELLO's incarnation may be than the one we know and still be a late packet of an older
#: life; anything else that differs is a restart
STALE_INCARNATION_WINDOW: Final = 60 * 1024


def stale_incarnation(candidate: int, current: int) -> bool:
    """True if ``candidate`` is slightly older than ``current`` (serial arithmetic on 32
    bits): a delayed packet of a previous life, not a restart."""
    return 0 < (current - candidate) & 0xFFFFFFFF <= STALE_INCARNATION_WINDOW


class Handshake:
    """Connection set-up, and what a HELLO says about the peer's life."""

    __slots__ = ("_state", "config", "crc", "incarnation", "counters", "events", "peers_by_addr",
                 "peers_by_conn", "_cc", "_rng", "_hello", "_timed", "_touched", "_sending", "_acking",
                 "_ack_channel", "_unschedule", "_fail_messages", "_build_hello", "hello_ack_len",
                 "_challenge", "_learn_remote", "_foreign", "_on_handshake_rtt")

    def __init__(self, state: EngineState, packetizer: Packetizer, recovery: Recovery) -> None:
        self._state = state  # for closed and resolve
        self.config = state.config
        self.crc = state.crc
        self.incarnation = state.incarnation
        self.counters = state.counters
        self.events = state.events
        self.peers_by_addr = state.peers_by_addr
        self.peers_by_conn = state.peers_by_conn
        self._cc = state.cc
        # the algorithm's optional hook for the handshake's RTT sample (looked up once)
        self._on_handshake_rtt: Callable[[Peer, float], None] | None = getattr(state.cc, "on_handshake_rtt", None)
        self._rng = state.rng
        self._hello = state.hello
        self._timed = state.timed
        self._touched = state.touched
        self._sending = state.sending
        self._acking = state.acking
        self._ack_channel = state.ack_channel
        self._unschedule = state.unschedule
        self._fail_messages = recovery.fail_messages
        self._build_hello = packetizer.build_hello
        self.hello_ack_len = packetizer.hello_ack_len
        self._challenge: Callable[..., bool] | None = None  # guard.py's, set by wire_guard
        self._learn_remote: Callable[[Peer], None] = lambda peer: None
        self._foreign: Callable[[Peer, Any], bool] = lambda peer, source: False

    def wire_guard(self, challenge: Callable[..., bool], learn_remote: Callable[[Peer], None],
                   foreign: Callable[[Peer, Any], bool]) -> None:
        """The guard's ``challenge`` (a live peer's restart must be proven), ``learn_remote``
        (a notice names a peer by its conn id) and ``foreign`` (a source the device says is
        not the peer's)."""
        self._challenge, self._learn_remote, self._foreign = challenge, learn_remote, foreign

    def new_peer(self, address: bytes, dest: Any) -> Peer:
        cfg = self.config
        conn = self._fresh_conn_id()
        timer = RetransmitTimer(cfg.rto_mode == "adaptive", cfg.rto_initial, cfg.rto_min,
                                cfg.rto_max, cfg.retrans_timeout, cfg.ack_delay)
        peer = Peer(address, dest, conn, self._rng.randrange(1, 1 << 62), timer, cfg.window,
                    cfg.peer_timeout)
        self._cc.on_new_peer(peer)
        peer.crc = self.crc
        self._own_limits(peer)
        self.peers_by_addr[address] = peer
        self.peers_by_conn[conn] = peer
        return peer

    def _own_limits(self, peer: Peer) -> None:
        """Until the peer's handshake says otherwise, it is held to our own limits."""
        state = self._state
        peer.max_message = self.config.max_message_size
        peer.single_cap = state.single_cap
        peer.chunk_cap = state.chunk_cap
        peer.peer_timeout = self.config.peer_timeout

    def _learn_limits(self, peer: Peer, params: TransportParameters | None) -> None:
        """Obey the limits the peer advertised (its transport parameters): the largest
        message it takes (what is queued beyond it fails now, through its callback, with
        MessageTooLarge), the largest datagram (our segments are cut to fit), its receive
        window in bytes (what we have in flight to it), and ``peer_timeout`` (the smaller of
        the two ends' wins, as QUIC's max_idle_timeout)."""
        p = params if params is not None else _NO_PARAMS
        cfg, state = self.config, self._state
        peer.max_message = min(p.max_message_size, cfg.max_message_size)
        if p.peer_timeout_ms:
            peer.peer_timeout = min(cfg.peer_timeout, p.peer_timeout_ms / 1000)
        datagram = min(state.data_mtu, p.max_datagram_size)
        peer.single_cap = min(state.single_cap, datagram - HEADER_LEN)
        peer.chunk_cap = min(state.chunk_cap, datagram - HEADER_LEN - CHUNK_LEN)
        # its receive window in bytes (its recv_buffer; 0: none) caps what is in flight to
        # it, in our largest chunks: never less than one segment, so any message still goes;
        # and the congestion window's cap starts from it (autotune.py)
        peer.window_cap = send_window(cfg, peer.chunk_cap, p.window_bytes)
        peer.cwnd_cap = initial_cap(cfg, state.cwnd_max, peer)
        if peer.queue:
            kept: deque[OutMessage] = deque()
            for msg in peer.queue:
                if msg.offset or msg.done:  # (cut already: our limits held it)
                    kept.append(msg)
                elif msg.length > peer.max_message:
                    msg.done = True
                    peer.counters.num_send_errors += 1
                    if msg.callback is not None:
                        self.events.append(SendCompleted(msg.callback, MessageTooLarge(
                            f"message of {msg.length} bytes exceeds the peer's max_message_size="
                            f"{peer.max_message} (advertised in its handshake)")))
                else:
                    msg.chunked = msg.length > peer.single_cap - (PUT_LEN if msg.put_key is not None else 0)
                    kept.append(msg)
            peer.queue = kept

    def _fresh_conn_id(self) -> int:
        while True:
            conn = self._rng.randrange(1, 1 << 32)
            if conn not in self.peers_by_conn and conn not in self._state.quarantine:
                return conn

    def start_hello(self, peer: Peer, now: float) -> None:
        peer.hello_next = now
        peer.hello_interval = self.config.handshake_interval
        peer.hello_started = now
        peer.hello_sent_at = None  # (the first HELLO's time: the handshake's RTT sample)
        self._hello[peer] = None
        self._timed[peer] = None

    def confirm(self, peer: Peer, now: float) -> None:
        """The peer has shown it knows our current incarnation."""
        peer.confirmed = True
        peer.inbound_since = None
        self._touched[peer] = None
        if peer.remote_known and peer.state is PeerState.CONNECTING:
            peer.transition(PeerEvent.CONFIRMED)
            peer.hello_next = None
            peer.hello_started = None
            peer.last_progress = now
            peer.last_heard = now  # (the death clock starts)
            if peer.queue:
                self._sending[peer] = None

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

    def on_hello(self, typ: int, dst: int, hello: Hello, wants_crc: bool, source: Any, now: float) -> None:
        """A HELLO or HELLO_ACK (checked): learn the peer, follow its restarts and new
        connections, answer a HELLO, confirm the connection."""
        reply = None
        reply_dest = self._state.reply_dest
        if typ == T_HELLO and source is not None and reply_dest is not None:
            # The HELLO_ACK goes where the HELLO came from, never to an address written
            # inside it (a stranger could aim our replies at anyone).  A device that cannot
            # answer sources (no reply_dest) answers the resolved address, as before.
            try:
                reply = reply_dest(source)
            except (ValueError, TypeError):
                self.counters.num_malformed_recvs += 1
                return
        peer = self._hello_peer(typ, dst, hello, source, now)
        if peer is None:
            return
        c = peer.counters
        c.num_hello_recvs += 1
        self._touched[peer] = None  # (its timers are looked at again)
        if hello.incarnation in peer.past_incarnations:
            c.num_stale_recvs += 1  # a late HELLO of an incarnation already replaced
            return
        if hello.conn_id in peer.past_remote_conns and hello.incarnation == peer.remote_inc:
            c.num_stale_recvs += 1  # a late HELLO of a connection already replaced
            return
        if self._challenge is not None and self._unproven(peer, dst, hello, source) \
                and self._challenge(peer, typ, dst, hello, wants_crc, source, now):
            return  # would replace a live connection: proven first, at the peer's known address (guard.py)
        renewed = self._hello_renews(peer, hello, now)
        if renewed is None:
            return  # stale
        peer.last_heard = now
        # CRC32C on what we send it if either side requires one: crc=on at one end and
        # off (or auto on a device with integrity) at the other still talk
        peer.crc = self.crc or wants_crc
        peer.source = source  # where its handshake came from (as the device reports it)
        if source is not None and not peer.sources:
            peer.sources = (source,)  # the first source its connection may use (guard.py)
        if not peer.remote_known:
            peer.remote_known = True
            peer.remote_inc = hello.incarnation
            peer.remote_conn = hello.conn_id
            self._learn_remote(peer)  # (a notice names it by this id: guard.py)
            peer.remote_isn = hello.isn
            # how long the peer may sit on an ACK: part of our retransmit timeout
            peer.timer.set_max_ack_delay(min(hello.max_ack_delay_us * 1e-6, 1.0))
            peer.remote_window = max(8, hello.window)
            peer.window = ReceiveWindow(hello.isn, self.config.window)
            self._learn_limits(peer, hello.params)
        if typ == T_HELLO:
            peer.reply_dest = reply
            peer.hello_reply = True
            self._hello[peer] = None
        if renewed:
            # this datagram was addressed to our old connection: the peer cannot know the
            # new one until our HELLO, or the HELLO_ACK we owe it, tells it.  A HELLO answered
            # at its observed source needs no HELLO of ours besides, to the address written
            # inside it (a stranger's HELLO must not make us send there: its own retries get
            # HELLO_ACKs until it confirms)
            if typ == T_HELLO_ACK or reply is None:
                self.start_hello(peer, now)
        # A HELLO_ACK proves the peer knows our current connection (it was looked up by
        # it); a HELLO does only if it is addressed to it.
        elif hello.echo_incarnation == self.incarnation and (typ == T_HELLO_ACK or dst == peer.local_conn):
            first = not peer.confirmed
            if first and typ == T_HELLO_ACK and peer.hello_sent_at is not None:
                self._handshake_rtt(peer, now - peer.hello_sent_at)
            self.confirm(peer, now)
            if first and typ == T_HELLO_ACK:
                # let the other side know at once that we know it (confirms it)
                peer.ack_now = True
                self._acking[peer] = None
        elif peer.state is PeerState.CONNECTING and peer.hello_next is None and peer.queue:
            self.start_hello(peer, now)

    def _handshake_rtt(self, peer: Peer, since_first: float) -> None:
        """The HELLO_ACK that confirms the connection came ``since_first`` after our first
        HELLO.  With one HELLO sent that is the round trip: the timer's first sample.  With
        retries (``handshake_interval`` below the path's round trip, or a HELLO lost) the
        answer may be to a later HELLO: no sample (Karn's rule), but an upper bound of the
        RTT, never below it: the first timeout need not wait longer than such a sample
        would make it, and an algorithm that paces may spread its first window over it
        (slower than the path allows, never faster)."""
        if peer.hello_count == 1:
            peer.timer.sample(since_first)
        if since_first < self.config.rto_initial / 3:  # (below the initial RTT guess: news)
            peer.timer.bound(since_first)  # (no sample, but no need to wait the initial timeout)
            if self._on_handshake_rtt is not None:
                self._on_handshake_rtt(peer, since_first)

    def _unproven(self, peer: Peer, dst: int, hello: Hello, source: Any) -> bool:
        """Would this HELLO or HELLO_ACK replace a live connection (a restart, or a new
        connection in the same incarnation) without naming ours, or from a source the
        connection does not use?  Then it counts only once a challenge proves it.  (A peer
        neither confirmed nor holding our sends has no known address to challenge: a
        stranger's HELLO may have named it.)"""
        if not peer.remote_known or not (peer.state is PeerState.ESTABLISHED or (
                peer.state is PeerState.CONNECTING and (peer.confirmed or peer.queue or peer.unacked))):
            return False
        if dst == peer.local_conn and (source is None or not peer.sources or source in peer.sources):
            return False
        if hello.incarnation != peer.remote_inc:
            return not stale_incarnation(hello.incarnation, peer.remote_inc)
        return hello.conn_id != peer.remote_conn or hello.isn != peer.remote_isn

    def _hello_peer(self, typ: int, dst: int, hello: Hello, source: Any, now: float) -> Peer | None:
        """The peer a HELLO (by its address: it may be new) or a HELLO_ACK (by our connection
        id) is from; None, counted, if there is none or none may be made, if the device says
        ``source`` is not a known peer's, or if it is an altered copy of the peer's HELLO."""
        peer = self.peers_by_addr.get(hello.address) if typ == T_HELLO else self.peers_by_conn.get(dst)
        if peer is not None and source is not None and self._foreign(peer, source):
            # A peer we know sends from the sources its device names, nowhere else: a HELLO
            # from another (a copy, altered or not, that someone else sent) changes nothing --
            # not its connection, its liveness, its CRC choice nor where our reply goes
            peer.counters.num_source_drops += 1
            return None
        if peer is not None and peer.remote_known and hello.conn_id == peer.remote_conn \
                and hello.isn != peer.remote_isn and hello.incarnation == peer.remote_inc:
            # a connection's conn id and ISN are drawn together, never one without the other:
            # this is an altered copy of its HELLO (the fuzz test's), not a new connection
            self.counters.num_forged_drops += 1
            return None
        if typ == T_HELLO:
            if peer is None:
                if not self.config.accept_peers or self._state.closed:
                    self.counters.num_unk_recvs += 1
                    return None
                if len(self.peers_by_addr) >= self.config.max_peers and not self._sweep_inbound(now):
                    self.counters.num_refused_peers += 1
                    return None
                try:
                    dest = self._state.resolve(hello.address)
                except (ValueError, TypeError):
                    self.counters.num_malformed_recvs += 1
                    return None
                peer = self.new_peer(hello.address, dest)
                peer.inbound_since = now
        elif peer is None or hello.echo_incarnation != self.incarnation:
            self.counters.num_unk_recvs += 1
            return None
        return peer

    def _hello_renews(self, peer: Peer, hello: Hello, now: float) -> bool | None:
        """What a HELLO says about the peer's life: a restart, a new connection, or a
        failed peer speaking again.  True if we took a new connection id; None if stale."""
        c = peer.counters
        renewed = False  # we took a new connection id in this call
        if peer.state is PeerState.CLOSING:
            c.num_stale_recvs += 1  # we are closing it: nothing new starts until that ends
            return None
        if peer.state is PeerState.CLOSED and peer.remote_known and not self._state.closed:
            # closed gracefully: a HELLO of the closed connection is late; any other (a new
            # life, or a new connection of the same life) starts a new connection
            if (hello.incarnation == peer.remote_inc and hello.conn_id == peer.remote_conn) \
                    or stale_incarnation(hello.incarnation, peer.remote_inc):
                c.num_stale_recvs += 1
                return None
            self.reset_peer(peer)
            return False
        if peer.remote_known and hello.incarnation != peer.remote_inc:
            if stale_incarnation(hello.incarnation, peer.remote_inc):
                c.num_stale_recvs += 1  # an older life's HELLO, delayed in the network
                return None
            self._restart_peer(peer, now)
            renewed = True
        elif peer.remote_known and (hello.conn_id != peer.remote_conn or hello.isn != peer.remote_isn) \
                and not self._state.closed:
            # Same incarnation, new connection: the other side started afresh with us (it had
            # declared us dead, or it saw a restart of ours race its handshake).
            if peer.next_seq == peer.isn + 1 and peer.state is not PeerState.FAILED:
                # We sent nothing on the old connection: simply follow it.  Its old segments
                # cannot pass for new ones: they sit ~2**61 away from the new random ISN.
                peer.remember_conn(peer.remote_conn)
                peer.remote_known = False
                peer.ready.clear()
                self._state.drop_reassembly(peer)  # (the bytes it held go back to the budgets)
            else:
                # What it had not acknowledged may or may not have been delivered before it
                # reset: fail it (at most once, never twice), and start a new connection of
                # our own that it learns from our HELLO.
                self._fail_messages(peer, PeerUnreachable(
                    f"peer {peer.address.hex()} reset the connection (it had declared us dead)"))
                self.reset_peer(peer)
                renewed = True
        elif peer.state is PeerState.FAILED and not peer.remote_known and not self._state.closed:
            # it never answered our handshake and we gave up; now it speaks: a new connection
            self.reset_peer(peer)
        elif peer.state is PeerState.FAILED or peer.state is PeerState.CLOSED:
            c.num_stale_recvs += 1
            return None
        return renewed

    def _restart_peer(self, peer: Peer, now: float) -> None:
        """The peer came back as a new incarnation: fail what was meant for the old one and
        start afresh (new connection id and ISN, so nothing stale can be delivered)."""
        self.counters.num_peer_restarts += 1
        self._fail_messages(peer, RestartError(
            f"peer {peer.address.hex()} restarted (incarnation {peer.remote_inc:#x} -> new)"))
        peer.remember_incarnation(peer.remote_inc)
        self.reset_peer(peer)
        self.events.append(PeerRestarted(peer))

    def reset_peer(self, peer: Peer) -> None:
        """Forget the connection with ``peer`` and make it ready for a new one: a new
        connection id and ISN (so that nothing of the old connection can be taken for the
        new), fresh windows and timers.  Counters and history stay."""
        if peer.remote_known:
            peer.remember_conn(peer.remote_conn)
        if peer.state is PeerState.CLOSED:  # its old id stays unused a while (lifecycle.py)
            quarantine, now = self._state.quarantine, self._state.now
            if len(quarantine) > 4096:  # expired entries go when it grows
                for old in [c for c, until in quarantine.items() if until <= now]:
                    del quarantine[old]
            quarantine[peer.local_conn] = now + QUARANTINE_TIMEOUTS * peer.peer_timeout
        peer.transition(PeerEvent.RESET)  # (Peer.__init__ below leaves it in that state)
        keep = (peer.counters, peer.user_data, peer.past_incarnations, peer.past_remote_conns)
        unconsumed = peer.unconsumed  # (what the driver holds for its application stays held)
        self._state.drop_reassembly(peer)
        self.peers_by_conn.pop(peer.local_conn, None)
        self._unschedule(peer)
        cfg = self.config
        timer = RetransmitTimer(cfg.rto_mode == "adaptive", cfg.rto_initial, cfg.rto_min,
                                cfg.rto_max, cfg.retrans_timeout, cfg.ack_delay)
        conn = self._fresh_conn_id()
        Peer.__init__(peer, peer.address, peer.dest, conn, self._rng.randrange(1, 1 << 62),
                      timer, cfg.window, cfg.peer_timeout)
        peer.counters, peer.user_data, peer.past_incarnations, peer.past_remote_conns = keep
        peer.unconsumed = unconsumed
        self._cc.on_new_peer(peer)
        peer.crc = self.crc
        self._own_limits(peer)
        self.peers_by_conn[conn] = peer

    def hello_pass(self, out: list[Any], now: float, budget: int) -> None:
        for peer in list(self._hello):
            if len(out) >= budget:
                break
            if peer.hello_reply:
                dest = peer.dest if peer.reply_dest is None else peer.reply_dest
                out.append((self._ack_channel, dest, self._build_hello(peer, T_HELLO_ACK)))
                peer.hello_reply = False
                peer.reply_dest = None
                peer.counters.num_hello_sends += 1
                peer.counters.num_total_sends += 1
            if peer.hello_next is not None and peer.hello_next <= now and not peer.confirmed:
                out.append((self._ack_channel, peer.dest, self._build_hello(peer, T_HELLO)))
                peer.counters.num_hello_sends += 1
                peer.counters.num_total_sends += 1
                peer.hello_count += 1
                if peer.hello_sent_at is None:
                    peer.hello_sent_at = now
                peer.hello_next = now + peer.hello_interval
                peer.hello_interval = min(peer.hello_interval * 2, _HELLO_INTERVAL_MAX)
            if peer.hello_next is None or peer.confirmed:
                peer.hello_next = None if peer.confirmed else peer.hello_next
            if not peer.hello_reply and peer.hello_next is None:
                del self._hello[peer]
            self._touched[peer] = None
