"""Exceptions a btlcore user can catch.  Every one of them says what went wrong in words."""

from __future__ import annotations


class BtlError(Exception):
    """Base class of every btlcore error."""


class BtlDeprecationWarning(DeprecationWarning):
    """What btlcore warns with when an old name or spelling is used (it keeps working for a
    release): one class, so a user's test suite can turn exactly btlcore's deprecations into
    errors (``-W error::btlcore.errors.BtlDeprecationWarning``), as btlcore's own does."""


class ConfigError(BtlError, ValueError):
    """A configuration value is out of range or of the wrong kind.

    The message names the parameter (as in code, and as its ``BTL_`` variable) and what is
    allowed."""


class BackendUnavailable(BtlError):
    """The asked-for backend is unknown or cannot run here; the message lists the others."""


class PeerError(BtlError):
    """A send or put could not be completed because of its peer."""


class PeerUnreachable(PeerError):
    """Nothing at all was heard from the peer for ``peer_timeout`` (the death rule), or it
    never answered the handshake."""


class PeerRestarted(PeerError):
    """The peer came back as a new incarnation; what was pending for the old one is dropped,
    never delivered to the new one."""


class PeerClosed(PeerError):
    """The connection was closed gracefully: the peer's CLOSE arrived (its transport closed
    or it disconnected us), or we disconnected it.  What was pending toward it fails with
    this error; a new ``connect()`` starts a new connection."""
class VersionMismatch(PeerUnreachable):
    """The peer speaks no protocol version this end speaks: it answered our handshake with a
    VERSION reply listing only others.  ``ours`` is this end's version, ``theirs`` what the
    peer listed."""

    def __init__(self, peer: str, ours: int, theirs: tuple[int, ...]) -> None:
        listed = ", ".join(str(v) for v in theirs)
        super().__init__(f"peer {peer} speaks protocol version {listed}, not this end's "
                         f"version {ours}: no common version")
        self.ours = ours
        self.theirs = theirs


class TransportClosed(BtlError):
    """The transport is closed (or closing) and takes no new work."""


class WouldBlock(BtlError, BlockingIOError):
    """A send or put does not fit in the peer's send buffer (``send_buffer`` bytes of messages
    accepted and not yet completed): nothing was queued.  Retry after ``on_peer("writable",
    peer, None)``, or pass ``send(..., timeout=T)`` to wait for room while progressing."""


class MessageTooLarge(BtlError, ValueError):
    """A message exceeds ``max_message_size``, ours or the largest the peer advertised in
    its handshake (raised by ``send()`` once the peer's limits are known, else given to the
    send's callback when they become known)."""


class PutError(BtlError):
    """The receiver refused a put: the key is unknown there, the put does not fit in the
    region, or the region was unexposed while the put was arriving (RDMA's remote access
    error).  Nothing of it is to be taken as written.  ``key``, ``offset``, ``length`` and
    ``reason`` say which put and why."""

    def __init__(self, key: int, offset: int, length: int, reason: str, peer: str = "") -> None:
        at = f" at peer {peer}" if peer else ""
        super().__init__(f"put of {length} bytes at offset {offset} into region key {key}{at} "
                         f"refused: {reason}")
        self.key = key
        self.offset = offset
        self.length = length
        self.reason = reason


class AddressUnreachable(PeerUnreachable, ValueError):
    """The peer's address cannot be reached from where this transport's device is bound (a
    loopback-bound device toward another host, no route): raised by ``connect()`` at once,
    naming both addresses, instead of a handshake that times out in silence."""
