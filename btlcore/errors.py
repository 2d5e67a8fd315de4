"""Exceptions a btlcore user can catch.  Every one of them says what went wrong in words."""

from __future__ import annotations


class BtlError(Exception):
    """Base class of every btlcore error."""


class ConfigError(BtlError, ValueError):
    """A configuration value is out of range or of the wrong kind.

    The message names the parameter (as in code, and as its ``BTL_`` variable) and what is
    allowed."""


class BackendUnavailable(BtlError):
    """The asked-for backend is unknown or cannot run here; the message lists the others."""


class PeerError(BtlError):
    """A send or put could not be completed because of its peer."""


class PeerUnreachable(PeerError):
    """The peer stopped acknowledging (no progress within ``peer_timeout``, or a segment was
    retransmitted ``max_retries`` times), or never answered the handshake."""


class PeerRestarted(PeerError):
    """The peer came back as a new incarnation; what was pending for the old one is dropped,
    never delivered to the new one."""


class TransportClosed(BtlError):
    """The transport is closed (or closing) and takes no new work."""


class MessageTooLarge(BtlError, ValueError):
    """A message exceeds ``max_message_size``."""
