"""What a stranger may not do: tear down a live connection, or make us send at will.

Four rules (issue #11, items 3 and 4), kept here so the parts that receive stay short:

* **Unknown connection notices.**  A datagram for a connection this end does not know (it
  restarted, or never had it) is answered with a small T_UNKNOWN_CONN notice to the
  datagram's observed source (RFC 9000 §10.3's stateless reset, in spirit): never larger
  than what provoked it, never in answer to a notice, and at most ``NOTICE_BURST`` at once,
  ``NOTICE_RATE`` a second (a token bucket): a flood of garbage buys the sender nothing.
* **A notice counts only if it echoes what an off-path sender cannot know**: the header
  names the connection by our peer's random conn id, the body our incarnation and the
  CRC32C of a datagram we really sent and that is still unacknowledged (its seq in the
  header).  The digest is computed only when a notice arrives, over the one segment the
  notice names: nothing is kept or hashed on the send path.  An accepted notice is a
  restart: pending sends fail with ``PeerRestarted`` and the next send starts a new
  handshake (new conn id and ISN: nothing of the old life reaches the new one).
* **A HELLO with a new incarnation for a live peer is challenged** before it counts (as is
  one announcing a new connection in the same incarnation without naming ours): a
  T_CHALLENGE with a fresh random 64-bit nonce goes to the peer's *known* address (never to
  where the HELLO came from), addressed to the conn id the HELLO announced; only a
  T_RESPONSE echoing the nonce and that incarnation lets the HELLO through (RFC 9000
  §8.2's PATH_CHALLENGE).  A stranger, even spoofing the peer's source address, never sees
  the nonce; the live peer does not answer a challenge for a conn id it does not have.
* **Source checks.**  A connection's datagrams come from at most ``MAX_SOURCES`` sources
  (one per channel: a udp peer sends from two sockets).  The first is the one its accepted
  handshake came from; the second is learnt from the first datagram of the connection that
  passes every other check (its random conn id, the peer's incarnation, the CRC: an
  off-path sender cannot forge it) -- or, when the device can say (its optional
  ``btl_device_peer_sources``: sim and udp do), exactly the ones it names; any other
  source is dropped and counted
  (``num_source_drops``).  The receive fast path compares a datagram's source only when it
  differs from the previous datagram's (as it caches the peer).

And ICMP: :meth:`Guard.path_error` (a port unreachable the device read) fails a peer only
if it has *also* been silent for ``ICMP_SILENCE`` of its ``peer_timeout``; alone it is
counted and ignored (ICMP is easy to forge).

Hostile drops and rate-limited replies are logged under ``btlcore.protocol`` at DEBUG (one
line each) and INFO (a restart proven by a notice or a challenge).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from ..errors import PeerUnreachable
from .peers import Peer, PeerState
from .state import EngineState
from .wire import (
    CHALLENGE_BODY,
    CLOSE_BODY,
    HEADER,
    HEADER_LEN,
    NOTICE_BODY,
    NOTICE_LEN,
    SEQ_MASK,
    T_CHALLENGE,
    T_DATA,
    T_RESPONSE,
    WIRE_VERSION,
    Hello,
    datagram_crc,
    notice_for,
    seal,
    unwrap_seq,
)

log = logging.getLogger("btlcore.protocol")

#: notices a transport may send in one burst, and per second after it (a token bucket)
NOTICE_BURST: Final = 20
NOTICE_RATE: Final = 100.0
#: sources a connection's datagrams may come from (one per channel)
MAX_SOURCES: Final = 2
#: a challenge is not repeated for the same peer sooner than this (seconds)
CHALLENGE_INTERVAL: Final = 0.1
#: an ICMP error fails a peer silent for this fraction of its peer_timeout, never sooner
ICMP_SILENCE: Final = 0.5

_FAILED: Final = PeerState.FAILED
_CLOSED: Final = PeerState.CLOSED
#: the last item of ``Peer.sources`` when the device named them (nothing more is learnt)
_EXACT: Any = object()


class _Challenge:
    """A HELLO held until its sender proves it answers at the peer's known address."""

    __slots__ = ("nonce", "sent_at", "incarnation", "hello")

    def __init__(self, nonce: int, sent_at: float, incarnation: int, hello: tuple[Any, ...]) -> None:
        self.nonce = nonce
        self.sent_at = sent_at
        self.incarnation = incarnation
        self.hello = hello  # on_hello's arguments, replayed once the challenge is answered


class Guard:
    """Notices, challenges, source checks and ICMP (see the module docstring)."""

    __slots__ = ("_state", "counters", "peers_by_addr", "peers_by_conn", "_rng", "_tokens",
                 "_refill_at", "_by_remote", "_challenges", "_proven", "_restart_peer",
                 "_on_hello", "_fail_peer", "peer_sources")

    def __init__(self, state: EngineState, restart_peer: Callable[[Peer, float], None],
                 fail_peer: Callable[[Peer, BaseException], None]) -> None:
        self._state = state
        self.counters = state.counters
        self.peers_by_addr = state.peers_by_addr
        self.peers_by_conn = state.peers_by_conn
        self._rng = state.rng
        self._tokens = float(NOTICE_BURST)
        self._refill_at = state.now
        # our peers by *their* conn id (what a notice names), filled as handshakes learn it
        # and checked on use (a reset peer's old entry is simply a miss)
        self._by_remote: dict[int, Peer] = {}
        self._challenges: dict[Peer, _Challenge] = {}
        # (incarnation, conn id) a challenge proved, until its HELLO replays
        self._proven: dict[Peer, tuple[int, int]] = {}
        self._restart_peer = restart_peer
        self._fail_peer = fail_peer
        self._on_hello: Callable[..., None] | None = None
        # the device's btl_device_peer_sources, if it has one (the transport sets it): a
        # peer's exact sources, instead of learning them
        self.peer_sources: Callable[[Any], Any] | None = None

    def wire(self, on_hello: Callable[..., None]) -> None:
        """The handshake's ``on_hello`` (a proven HELLO is replayed through it)."""
        self._on_hello = on_hello

    # ------------------------------------------------------------------ replies, limited

    def _reply(self, source: Any, buf: bytes, what: str) -> bool:
        """Queue ``buf`` to ``source`` (where a datagram came from); False, counted, if the
        device cannot answer a source or the bucket is empty."""
        reply_dest = self._state.reply_dest
        if source is None or reply_dest is None:
            return False
        now = self._state.now
        tokens = min(float(NOTICE_BURST), self._tokens + (now - self._refill_at) * NOTICE_RATE)
        self._refill_at = now
        if tokens < 1.0:
            self._tokens = tokens
            self.counters.num_replies_limited += 1
            log.debug("%s to %r not sent: replies are rate-limited", what, source)
            return False
        self._tokens = tokens - 1.0
        try:
            dest = reply_dest(source)
        except (ValueError, TypeError):
            return False
        if dest is None:
            return False
        self._state.replies.append((self._state.ack_channel, dest, buf))
        return True

    # ------------------------------------------------------------------ notices

    def unknown(self, data: Any, source: Any) -> None:
        """A well-formed datagram (its CRC checked) for a connection we do not know: answer
        with a notice, if it may have one (see the module docstring)."""
        if len(data) < NOTICE_LEN:
            return  # a notice would be larger than what provoked it (or it is one)
        buf = notice_for(data, self._state.incarnation)
        if buf is not None and self._reply(source, buf, "unknown-connection notice"):
            self.counters.num_notice_sends += 1

    def learn_remote(self, peer: Peer) -> None:
        """The handshake learnt ``peer.remote_conn``: a notice may name it."""
        by_remote = self._by_remote
        if len(by_remote) >= 4 * max(16, len(self.peers_by_addr)):  # forget replaced ids
            by_remote.clear()
            by_remote.update((p.remote_conn, p) for p in self.peers_by_addr.values() if p.remote_known)
        by_remote[peer.remote_conn] = peer

    def on_notice(self, data: Any, dst: int, inc: int, seq_w: int, now: float, source: Any = None) -> None:
        """An UNKNOWN_CONN notice (CRC checked): a restart of the peer if it echoes an
        unacknowledged datagram of ours to it, byte for byte, from a source the peer is known
        to send from (its new life answers from the same socket; an observer who saw the
        datagram could compute the echo, but not send from there); else dropped, counted."""
        if len(data) != NOTICE_LEN:
            self.counters.num_malformed_recvs += 1
            return
        echo_inc, digest, echo_type = NOTICE_BODY.unpack_from(data, HEADER_LEN)
        peer = self._by_remote.get(dst)
        seg = None
        if peer is not None and peer.remote_known and peer.remote_conn == dst \
                and echo_inc == self._state.incarnation and echo_type == T_DATA \
                and peer.state is not _FAILED and peer.state is not _CLOSED:
            seg = peer.unacked.get(unwrap_seq(seq_w, peer.snd_una))
        if peer is None or seg is None or _digest(seg.buf) != digest:
            self.counters.num_forged_drops += 1
            log.debug("unknown-connection notice for conn %#x dropped: it echoes no datagram "
                      "of ours", dst)
            return
        if source is not None and not self._sent_by(peer, source):
            peer.counters.num_source_drops += 1  # (nothing is learnt from a notice)
            log.debug("notice for peer %s from unexpected source %r dropped", peer.address.hex(), source)
            return
        log.info("peer %s restarted: its new life (incarnation %#x) does not know the "
                 "connection", peer.address.hex(), inc)
        self._restart_peer(peer, now)

    def close_peer(self, data: Any, dst: int, inc: int, source: Any) -> Peer | None:
        """The peer a CLOSE or CLOSE_ACK (CRC checked) really comes from, or None (dropped,
        counted): it must name the connection by ids an off-path sender cannot know -- our
        conn id in the header, the peer's incarnation, its own conn id and our incarnation
        in the body -- and come from a source the connection uses.  For the CLOSE handler."""
        peer = self.peers_by_conn.get(dst)
        if len(data) != HEADER_LEN + CLOSE_BODY.size:
            self.counters.num_malformed_recvs += 1
            return None
        conn_id, echo_inc, _reason = CLOSE_BODY.unpack_from(data, HEADER_LEN)
        if peer is None or not peer.remote_known or inc != peer.remote_inc \
                or conn_id != peer.remote_conn or echo_inc != self._state.incarnation:
            self.counters.num_forged_drops += 1
            log.debug("CLOSE for conn %#x dropped: it does not name a connection of ours", dst)
            return None
        if source is not None and source not in peer.sources and not self.source_ok(peer, source):
            return None
        return peer

    # ------------------------------------------------------------------ challenges

    def challenge(self, peer: Peer, typ: int, dst: int, hello: Hello, wants_crc: bool,
                  source: Any, now: float) -> bool:
        """A HELLO that would replace a live peer's connection (a new incarnation, or a new
        conn id or ISN in the same one) and does not name our conn id: True (held, a
        challenge sent) until a response proves it; False once proven (the caller goes on)."""
        if self._proven.get(peer) == (hello.incarnation, hello.conn_id):
            del self._proven[peer]
            return False
        pending = self._challenges.get(peer)
        if pending is not None and now - pending.sent_at < CHALLENGE_INTERVAL:
            self.counters.num_forged_drops += 1  # (one challenge at a time)
            return True
        nonce = self._rng.getrandbits(64)
        self._challenges[peer] = _Challenge(nonce, now, hello.incarnation,
                                            (typ, dst, hello, wants_crc, source))
        # (the header's seq carries the ISN the HELLO announced: the peer answers only for
        # its own connection's conn id and ISN, so a copy of its HELLO with another ISN, or
        # anything else changed, is never proven by the live peer's answer)
        buf = _control(T_CHALLENGE, hello.conn_id, self._state.incarnation, nonce, peer.crc, hello.isn)
        self._state.replies.append((self._state.ack_channel, peer.dest, buf))  # its KNOWN address
        self.counters.num_challenge_sends += 1
        log.debug("HELLO of a new incarnation %#x for live peer %s: challenged", hello.incarnation,
                  peer.address.hex())
        return True

    def on_challenge(self, data: Any, dst: int, isn_w: int, plen: int) -> None:
        """A CHALLENGE to one of our connections: answer at the peer's known address.  For a
        connection we do not have (the conn id, or the ISN in the header's seq, is not ours:
        a spoofed or altered HELLO named it), nothing."""
        peer = self.peers_by_conn.get(dst)
        if plen != CHALLENGE_BODY.size or len(data) != HEADER_LEN + plen:
            self.counters.num_malformed_recvs += 1
            return
        if peer is None or peer.state is _FAILED or peer.state is _CLOSED or isn_w != peer.isn & SEQ_MASK:
            self.counters.num_unk_recvs += 1
            return
        (nonce,) = CHALLENGE_BODY.unpack_from(data, HEADER_LEN)
        buf = _control(T_RESPONSE, peer.remote_conn, self._state.incarnation, nonce, peer.crc)
        self._state.replies.append((self._state.ack_channel, peer.dest, buf))

    def on_response(self, data: Any, inc: int, plen: int, now: float) -> None:
        """A RESPONSE: if it echoes a pending challenge's nonce from the incarnation it
        challenged, replay the held HELLO (now it counts)."""
        if plen != CHALLENGE_BODY.size or len(data) != HEADER_LEN + plen:
            self.counters.num_malformed_recvs += 1
            return
        (nonce,) = CHALLENGE_BODY.unpack_from(data, HEADER_LEN)
        found = next(((peer, pending) for peer, pending in self._challenges.items()
                      if pending.nonce == nonce and pending.incarnation == inc), None)
        if found is None:
            self.counters.num_forged_drops += 1
            log.debug("challenge response dropped: it echoes no nonce of ours")
            return
        peer, pending = found
        del self._challenges[peer]
        self._proven[peer] = (inc, pending.hello[2].conn_id)
        log.info("peer %s restarted (incarnation %#x, proven by a challenge)", peer.address.hex(), inc)
        if self._on_hello is not None:
            self._on_hello(*pending.hello[:5], now)

    def forget(self, peer: Peer) -> None:
        """A peer left the tables: drop what was held for it."""
        self._challenges.pop(peer, None)
        self._proven.pop(peer, None)

    # ------------------------------------------------------------------ sources

    def source_ok(self, peer: Peer, source: Any) -> bool:
        """May ``peer``'s connection datagram come from ``source``?  Learns the second
        source (see the module docstring); counts and logs a refusal."""
        known = peer.sources
        if source in known:
            return True
        if not (known and known[-1] is _EXACT):
            exact = self._exact_sources(peer)
            if exact:  # the device knows them: exactly those, whatever came first
                peer.sources = exact + (_EXACT,)
                if source in exact:
                    return True
            elif len(known) < MAX_SOURCES and peer.remote_known:
                peer.sources = known + (source,)
                return True
        peer.counters.num_source_drops += 1
        log.debug("datagram for peer %s from unexpected source %r dropped", peer.address.hex(), source)
        return False

    def _sent_by(self, peer: Peer, source: Any) -> bool:
        """Is ``source`` one ``peer`` sends from (the device's word, else the sources learnt;
        with none known yet, any)?  Learns nothing."""
        if source in peer.sources:
            return True
        exact = self._exact_sources(peer)
        return source in exact if exact else not peer.sources

    def foreign(self, peer: Peer, source: Any) -> bool:
        """True if the device names ``peer``'s sources and ``source`` is not one of them (a
        handshake datagram from it is someone else's; without the device's word, False)."""
        known = peer.sources
        if source in known:
            return False
        if known and known[-1] is _EXACT:
            return True
        exact = self._exact_sources(peer)
        return bool(exact) and source not in exact

    def _exact_sources(self, peer: Peer) -> tuple[Any, ...]:
        """The device's answer for ``peer`` (btl_device_peer_sources), or () if none."""
        if self.peer_sources is None:
            return ()
        try:
            return tuple(self.peer_sources(peer.dest) or ())
        except (ValueError, TypeError, AttributeError):
            return ()

    # ------------------------------------------------------------------ ICMP

    def path_error(self, dest: Any, now: float) -> bool:
        """The device read an ICMP error (port unreachable) for ``dest``: fail the peer there
        if it has also gone silent; True if one was failed."""
        timeout = self._state.config.peer_timeout
        for peer in self.peers_by_addr.values():
            if peer.dest is dest or peer.dest == dest or dest in peer.sources \
                    or dest in self._exact_sources(peer):
                break
        else:
            return False
        self.counters.num_icmp_errors += 1
        if peer.state is _FAILED or peer.state is _CLOSED or not peer.has_outstanding():
            return False
        heard = max(peer.last_progress, peer.rx_high_time, peer.hello_started or 0.0)
        if now - heard < ICMP_SILENCE * timeout:
            log.debug("ICMP error for live peer %s ignored (heard %.3f s ago)", peer.address.hex(), now - heard)
            return False
        log.info("peer %s failed: silent for %.3f s and its port is unreachable (ICMP)",
                 peer.address.hex(), now - heard)
        self._fail_peer(peer, PeerUnreachable(
            f"peer {peer.address.hex()} is unreachable: silent for {now - heard:.3f} s and ICMP "
            f"reports its port closed"))
        return True


def _digest(buf: Any) -> int:
    """CRC32C of a datagram as sent (``[header, payload]`` for a gathered one)."""
    if type(buf) is list:
        return datagram_crc(buf[0], buf[1])
    return datagram_crc(buf)


def _control(typ: int, dst: int, incarnation: int, nonce: int, crc: bool, isn: int = 0) -> bytes:
    """A CHALLENGE (``isn``: the challenged connection's, in the seq field) or RESPONSE
    datagram (CRC-sealed if the peer wants one)."""
    buf = bytearray(HEADER_LEN + CHALLENGE_BODY.size)
    HEADER.pack_into(buf, 0, WIRE_VERSION, typ, 0, 0, dst, incarnation, 0, isn & SEQ_MASK, 0, 0,
                     CHALLENGE_BODY.size)
    CHALLENGE_BODY.pack_into(buf, HEADER_LEN, nonce)
    if crc:
        seal(buf)
    return bytes(buf)
