"""Version negotiation (RFC 9000 §6's, in small): a datagram of a version this end does not
speak is answered with a VERSION reply listing the versions it does, and a VERSION reply to
our own handshake that does not list our version fails that peer at once, with
:class:`~btlcore.errors.VersionMismatch`, instead of a handshake that times out in silence.

The reply goes to the datagram's observed source (through the device's ``reply_dest``; a
device that cannot answer a source sends none), is never larger than the datagram that
provoked it, answers no VERSION reply, and leaves at most once per source every
:data:`REPLY_INTERVAL` seconds.  A VERSION reply counts only if it echoes what an off-path
sender cannot know: our incarnation and the connection id our HELLO carried (a first HELLO
carries the sender's own connection id, see :meth:`.packetizer.Packetizer.build_hello`).

The receiver hands this part every datagram whose first byte is not ``WIRE_VERSION`` or
that is shorter than a header (:meth:`Versions.on_foreign`); the engine sends what
``state.replies`` holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from ..errors import VersionMismatch
from .peers import Peer, PeerState
from .state import EngineState
from .wire import (
    F_CRC,
    HEADER_LEN,
    SUPPORTED_VERSIONS,
    VERSION_NEGOTIATION,
    WIRE_VERSION,
    MalformedDatagram,
    crc_ok,
    parse_version_reply,
    version_reply,
)

log = logging.getLogger("btlcore.protocol.versions")

#: at most one VERSION reply per source in this many seconds
REPLY_INTERVAL: Final = 0.1
#: sources remembered for the rate limit; past this, the stale ones are forgotten, and while
#: it is still full no reply is sent (a flood from forged sources costs O(1) each)
MAX_SOURCES: Final = 4096
#: the VERSION reply's length: a datagram shorter than this gets none
REPLY_LEN: Final = len(version_reply(0, 0, SUPPORTED_VERSIONS))


class Versions:
    """Datagrams of other versions in, VERSION replies out; VERSION replies in."""

    __slots__ = ("_state", "counters", "peers_by_conn", "incarnation", "_replies", "_last",
                 "_fail_peer")

    def __init__(self, state: EngineState, fail_peer: Callable[[Peer, BaseException], None]) -> None:
        self._state = state  # for reply_dest and ack_channel
        self.counters = state.counters
        self.peers_by_conn = state.peers_by_conn
        self.incarnation = state.incarnation
        self._replies = state.replies
        self._last: dict[Any, float] = {}  # source -> when we last sent it a VERSION reply
        self._fail_peer = fail_peer

    def on_foreign(self, data: Any, source: Any, now: float) -> None:
        """A datagram that is not of our version, or too short to be one: a VERSION reply
        (to :meth:`on_version_reply`), or another version's (counted malformed, answered
        with a VERSION reply where allowed), or garbage (counted malformed)."""
        n = len(data)
        if n and data[0] == VERSION_NEGOTIATION:
            self.on_version_reply(data, source, now)
            return
        if n >= HEADER_LEN and data[2] & F_CRC and not crc_ok(data):
            # Read with the header layout every btlcore version has had, it carries a CRC32C
            # that fails: a datagram of ours (or of an older btlcore) damaged on the way --
            # a flipped version bit must not make us tell its sender it speaks another
            # version (that would fail a live handshake at once).  Only an intact datagram
            # of another version, or one without a CRC to check, is answered.
            self.counters.num_crc_errors += 1
            return
        self.counters.num_malformed_recvs += 1
        if n < max(REPLY_LEN, 12) or data[0] == WIRE_VERSION:
            return  # too short to answer without amplifying, or ours and too short
        reply_dest = self._state.reply_dest
        if source is None or reply_dest is None:
            return  # nowhere to answer but an address written inside: never that
        last = self._last
        if now - last.get(source, -REPLY_INTERVAL) < REPLY_INTERVAL:
            log.debug("VERSION reply to %r rate-limited", source)
            return
        if len(last) >= MAX_SOURCES:
            for old in [s for s, t in last.items() if now - t >= REPLY_INTERVAL]:
                del last[old]
            if len(last) >= MAX_SOURCES:
                return
        try:
            dest = reply_dest(source)
        except (ValueError, TypeError):
            return
        last[source] = now
        echo_dst = int.from_bytes(bytes(data[4:8]), "big")
        echo_inc = int.from_bytes(bytes(data[8:12]), "big")
        self._replies.append((self._state.ack_channel, dest,
                              version_reply(echo_dst, echo_inc, SUPPORTED_VERSIONS)))
        log.debug("version %d datagram from %r: VERSION reply sent", data[0], source)

    def on_version_reply(self, data: Any, source: Any, now: float) -> None:
        """A VERSION reply: if it answers a HELLO of ours still unanswered and does not list
        our version, that peer fails at once with :class:`VersionMismatch`."""
        try:
            dst, inc, listed = parse_version_reply(data)
        except MalformedDatagram:
            self.counters.num_malformed_recvs += 1
            return
        peer = self.peers_by_conn.get(dst)
        if inc != self.incarnation or peer is None or WIRE_VERSION in listed \
                or peer.state is not PeerState.CONNECTING or peer.remote_known or not peer.hello_count:
            # not ours, not to a handshake under way, or listing our version (then it answers
            # no datagram of ours: RFC 9000 §6.2 ignores it too)
            self.counters.num_unk_recvs += 1
            return
        exc = VersionMismatch(peer.address.hex(), WIRE_VERSION, listed)
        log.debug("VERSION reply from %r: %s", source, exc)  # (the transport logs the failure)
        self._fail_peer(peer, exc)
