"""A connection's life after the handshake: liveness (the one death rule, keepalive and
zero-window probes) and its end (graceful CLOSE, disconnect, quarantine).

* **Death rule.**  A peer is dead once nothing at all (data, ACK, PING, handshake, CLOSE_ACK)
  was heard from it for ``peer.peer_timeout``, whether or not data is outstanding; never
  while it keeps answering.  ``Peer.last_heard`` is written on the receive path, per valid
  datagram; recovery's timers read it (:meth:`.recovery.Recovery._timer_times`).
* **Keepalive.**  After a third of ``peer_timeout`` of silence a PING goes out (answered at
  once with an ACK), then another a third later: a live idle peer stays up, a vanished one
  is reported failed within ``peer_timeout``.  An idle peer costs one heap entry, touched
  once per probe.
* **Zero-window probe.**  When the peer advertises a zero window and data waits, the sender
  stops and PINGs on a doubling interval (TCP's persist timer); the ACK that answers carries
  the window, and keeps the peer alive.
* **Close** (RFC 9000 §10.2).  :meth:`Lifecycle.start_close` sends a CLOSE naming the
  connection by its ids (both connection ids and both incarnations: an off-path sender
  cannot forge one), resends it on a doubling interval until the CLOSE_ACK comes or
  ``close_timeout`` (at most 8 retransmit timeouts) passes, and answers late datagrams only
  with CLOSE.  The peer acknowledges, reports :class:`~.events.PeerClosed` and fails what
  was pending with :class:`btlcore.errors.PeerClosed`.  A peer whose every CLOSE was lost
  learns by the death rule.  A CLOSE or CLOSE_ACK is handled only once
  :meth:`.guard.Guard.close_peer` found its ids right and its source one the connection
  uses (an observer who saw both directions knows the ids, not the peer's sockets).
* **Quarantine.**  A closed connection's local id stays out of use for ``3 * peer_timeout``
  (:data:`QUARANTINE_TIMEOUTS`): late datagrams of it are dropped and counted, never taken
  for a new connection's.
"""

from __future__ import annotations

from typing import Any, Final

from ..errors import PeerClosed as PeerClosedError
from ..errors import PeerUnreachable, TransportClosed
from .events import PeerClosed
from .handshake import QUARANTINE_TIMEOUTS as QUARANTINE_TIMEOUTS  # (kept by reset_peer)
from .peers import Peer, PeerEvent, PeerState
from .recovery import KEEPALIVE_FRACTION, Recovery
from .state import EngineState
from .wire import (
    CLOSE_BODY,
    CLOSE_REASON_NAMES,
    CR_CLOSED,
    F_CRC,
    HEADER,
    HEADER_LEN,
    PING_BODY,
    T_CLOSE,
    T_CLOSE_ACK,
    T_PING,
    WIRE_VERSION,
    seal,
)

_ESTABLISHED: Final = PeerState.ESTABLISHED
_CONNECTING: Final = PeerState.CONNECTING
_CLOSING: Final = PeerState.CLOSING
_CLOSED: Final = PeerState.CLOSED

CLOSE_RTOS: Final = 8  # close_timeout is at most this many retransmit timeouts (a few round trips)


class Lifecycle:
    """Liveness and close: PINGs, CLOSEs and CLOSE_ACKs, sent from the control pass."""

    __slots__ = ("_state", "config", "incarnation", "counters", "events", "peers_by_conn",
                 "_control", "_timed", "_touched", "_acking", "_sending", "_resending",
                 "_ack_channel", "_fail_messages", "_unschedule", "_fail_peer", "_keepalive")

    def __init__(self, state: EngineState, recovery: Recovery) -> None:
        self._state = state
        self.config = state.config
        self.incarnation = state.incarnation
        self.counters = state.counters
        self.events = state.events
        self.peers_by_conn = state.peers_by_conn
        self._control = state.control
        self._timed = state.timed
        self._touched = state.touched
        self._acking = state.acking
        self._sending = state.sending
        self._resending = state.resending
        self._ack_channel = state.ack_channel
        self._fail_messages = recovery.fail_messages
        self._fail_peer = recovery.fail_peer
        self._unschedule = state.unschedule
        # read per timer refresh: a typed slot, not a Config attribute (a dict lookup compiled)
        self._keepalive: bool = state.config.keepalive

    # -- liveness (recovery's timers call these: Recovery.wire) --------------------------

    def live_at(self, peer: Peer) -> float:
        """The earliest of an established peer's death clock (nothing heard for
        peer_timeout), its keepalive PING (a third of it) and its zero-window probe: the
        expressions :meth:`liveness` compares with now, spelled the same."""
        heard = peer.last_heard
        timeout = peer.peer_timeout
        t = heard + timeout
        if self._keepalive:
            keep = (heard if heard > peer.ping_at else peer.ping_at) + timeout / KEEPALIVE_FRACTION
            if keep < t:
                t = keep
        if peer.remote_window == 0 and peer.queue and not peer.unacked:
            probe = peer.ping_at + (peer.persist or peer.timer.rto)
            if probe < t:
                t = probe
        return t

    def liveness(self, peer: Peer, now: float) -> bool:
        """An established peer is due: dead (True), or a keepalive / zero-window PING due."""
        heard = peer.last_heard
        timeout = peer.peer_timeout
        if heard + timeout <= now:
            self._fail_peer(peer, PeerUnreachable(
                f"peer {peer.address.hex()}: nothing heard from it for {timeout:g} s"))
            return True
        ping = False
        if self._keepalive and \
                (heard if heard > peer.ping_at else peer.ping_at) + timeout / KEEPALIVE_FRACTION <= now:
            ping = True
            peer.shed()  # silent for a third of peer_timeout: idle, its buffers' memory goes back
        if peer.remote_window == 0 and peer.queue and not peer.unacked:
            interval = peer.persist or peer.timer.rto
            if peer.ping_at + interval <= now:
                ping = True
                # the persist timer backs off, up to the keepalive's pace
                peer.persist = min(2 * interval, timeout / KEEPALIVE_FRACTION)
        if ping:
            peer.ping_at = now
            peer.ping_due = True
            self._control[peer] = None
        return False

    # -- close ------------------------------------------------------------------------

    def start_close(self, peer: Peer, reason: int, now: float) -> None:
        """Close the connection with ``peer`` (after the caller's flush): what is still
        pending fails now (TransportClosed for our transport's close, PeerClosed for a
        disconnect), then a CLOSE goes out and is resent until acknowledged."""
        state = peer.state
        if state is not _ESTABLISHED and state is not _CONNECTING:
            return  # failed, closing or closed already
        if reason == CR_CLOSED:
            exc: BaseException = TransportClosed("transport closed before the peer acknowledged")
        else:
            exc = PeerClosedError(f"peer {peer.address.hex()} was disconnected by this end")
        self._fail_messages(peer, exc)
        peer.error = PeerClosedError(f"peer {peer.address.hex()}: connection closed by this end")
        self._unschedule(peer)
        peer.hello_next = peer.hello_started = None
        peer.transition(PeerEvent.CLOSE)
        if not peer.remote_known:  # it never learned our connection: nothing to tell it
            self._close_done(peer)
            return
        peer.close_reason = reason
        rto = peer.timer.rto
        peer.close_interval = rto / 2  # (doubled as each CLOSE goes: the first waits one RTO)
        peer.close_next = now
        peer.close_until = now + min(self.config.close_timeout, CLOSE_RTOS * rto)
        self._control[peer] = None
        self._timed[peer] = None

    def closing(self) -> bool:
        """True while some peer waits for the acknowledgement of our CLOSE."""
        return any(p.state is _CLOSING for p in self._state.peers_by_addr.values())

    def close_timer(self, peer: Peer, now: float) -> None:
        """A CLOSING peer's timer: resend the CLOSE, or give up after close_timeout."""
        if peer.close_until <= now:
            self._close_done(peer)  # every CLOSE lost: the peer learns by the death rule
        elif peer.close_next is not None and peer.close_next <= now:
            self._control[peer] = None

    def _close_done(self, peer: Peer) -> None:
        """Our close of ``peer`` is over (acknowledged or given up)."""
        peer.transition(PeerEvent.CLOSE_DONE)
        peer.close_next = None
        self._unschedule(peer)

    def on_close(self, typ: int, peer: Peer, body: memoryview, now: float) -> None:
        """A CLOSE or CLOSE_ACK of ``peer``'s connection: its header checked, CRC verified,
        its ids and source proven by :meth:`.guard.Guard.close_peer`."""
        _conn_id, _echo_inc, reason = CLOSE_BODY.unpack_from(body)
        peer.last_heard = now
        state = peer.state
        if typ == T_CLOSE_ACK:
            if state is _CLOSING:
                self._close_done(peer)
            return
        # a CLOSE: acknowledge it, every copy (our CLOSE_ACK may be lost)
        peer.close_reply = T_CLOSE_ACK
        peer.close_reason = reason
        self._control[peer] = None
        self._touched[peer] = None
        if state is _CLOSING:  # both ends closed at once: this CLOSE answers ours too
            peer.transition(PeerEvent.PEER_CLOSED)
            peer.close_next = None
            self._unschedule(peer)
            self._control[peer] = None  # (unschedule took it off the list: the CLOSE_ACK is owed)
        elif state is _ESTABLISHED or state is _CONNECTING:
            why = CLOSE_REASON_NAMES.get(reason, f"reason {reason}")
            exc = PeerClosedError(f"peer {peer.address.hex()} closed the connection ({why})")
            self._fail_messages(peer, exc)
            peer.error = exc
            peer.transition(PeerEvent.PEER_CLOSED)
            peer.hello_next = peer.hello_started = None
            self._unschedule(peer)
            self._control[peer] = None  # (as above)
            self.events.append(PeerClosed(peer, None))

    def on_late(self, peer: Peer, now: float) -> None:
        """A datagram of the connection we are closing: answer it only with a CLOSE, no more
        than one per retransmit timeout however many arrive."""
        peer.last_heard = now
        if peer.close_next is not None and peer.close_next - peer.close_interval + peer.timer.rto <= now:
            peer.close_next = now
            self._control[peer] = None

    # -- liveness ---------------------------------------------------------------------

    def on_ping(self, peer: Peer, now: float) -> None:
        """A PING (its ids checked): answer with an ACK at once."""
        peer.last_heard = now
        if peer.state is _CLOSING:
            self.on_late(peer, now)
            return
        if peer.state is not _ESTABLISHED and peer.state is not _CONNECTING:
            return
        peer.ack_now = True
        self._acking[peer] = None
        self._timed[peer] = None
        peer.shed()  # the other side heard nothing from us for a third of peer_timeout: idle

    def probe(self, peer: Peer) -> None:
        """A keepalive or zero-window probe is due (from recovery's timer)."""
        peer.ping_due = True
        self._control[peer] = None

    # -- the control pass -------------------------------------------------------------

    def control_pass(self, out: list[Any], now: float, budget: int) -> None:
        """PINGs, CLOSEs and CLOSE_ACKs owed, at most ``budget`` datagrams in ``out``."""
        control = self._control
        for peer in list(control):
            if len(out) >= budget:
                break
            del control[peer]
            if peer.close_reply is not None:
                out.append(self._build(peer, peer.close_reply, peer.close_reason or 0))
                peer.close_reply = None
            if peer.state is _CLOSING and peer.close_next is not None and peer.close_next <= now:
                out.append(self._build(peer, T_CLOSE, peer.close_reason or 0))
                peer.close_interval *= 2
                peer.close_next = now + peer.close_interval  # (so the last CLOSE went at
                # close_next - close_interval: on_late's rate limit)
            if peer.ping_due:
                peer.ping_due = False
                if peer.state is _ESTABLISHED:
                    out.append(self._build(peer, T_PING, 0))
                    peer.ping_at = now
            self._touched[peer] = None

    def _build(self, peer: Peer, typ: int, reason: int) -> tuple[int, Any, bytearray]:
        """A CLOSE, CLOSE_ACK or PING to ``peer`` (version 2 types, fixed 12-byte bodies)."""
        body_len = CLOSE_BODY.size if typ != T_PING else PING_BODY.size
        buf = bytearray(HEADER_LEN + body_len)
        HEADER.pack_into(buf, 0, WIRE_VERSION, typ, F_CRC if peer.crc else 0, 0,
                         peer.remote_conn, self.incarnation, 0, 0, 0, 0, body_len)
        if typ != T_PING:
            CLOSE_BODY.pack_into(buf, HEADER_LEN, peer.local_conn, peer.remote_inc, reason)
        if peer.crc:
            seal(buf)
        peer.counters.num_total_sends += 1
        return (self._ack_channel, peer.dest, buf)
