"""What the engine tells its driver: typed, immutable events, taken with
:meth:`btlcore.protocol.engine.Engine.take_events` and dispatched on their type::

    for event in engine.take_events():
        if type(event) is MessageReceived:
            handle(event.peer, event.tag, event.data)

They are ``typing.NamedTuple`` classes: immutable, slotted (no ``__dict__``) and, built as
tuples in the engine's hot paths (``tuple.__new__(MessageReceived, (peer, tag, data))``, see
:func:`_new`), a fraction of the cost of a dataclass.  Their fields unpack in order.

The integer-tagged tuples of the last release (``EV_*``) remain for one release through
:func:`legacy` (what the deprecated ``Engine.drain_events`` returns).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .peers import Peer

#: built without the generated ``__new__`` (a Python function): ``_new(Cls, (fields...))``
_new = tuple.__new__


class MessageReceived(NamedTuple):
    """A message arrived from ``peer``: its ``tag`` and its bytes (``data``; a ``bytearray``
    when it was reassembled from chunks, which the application may keep)."""

    peer: Peer
    tag: int
    data: bytes | bytearray


class SendCompleted(NamedTuple):
    """A send or a put finished: ``callback`` (what the application passed) is to be called
    with ``error``, None when the peer acknowledged it (a put: and it landed)."""

    callback: Callable[[BaseException | None], Any]
    error: BaseException | None


class PutLanded(NamedTuple):
    """A put from ``peer`` was written whole into our region ``key`` at ``offset``."""

    peer: Peer
    key: int
    offset: int
    length: int


class PutRefused(NamedTuple):
    """A put from ``peer`` could not be placed (unknown key, out of bounds, or the region
    was unexposed while it arrived); the sender's callback gets a PutError."""

    peer: Peer
    key: int
    offset: int
    length: int


class PeerFailed(NamedTuple):
    """``peer`` was declared dead (``error`` says why); everything pending toward it failed."""

    peer: Peer
    error: BaseException


class PeerRestarted(NamedTuple):
    """``peer`` came back as a new incarnation: what was pending toward its old life failed."""

    peer: Peer


class PeerClosed(NamedTuple):
    """``peer`` closed the connection (its CLOSE arrived: it closed its transport or
    disconnected us); ``error`` is None for a graceful close.  What was pending toward it
    failed with :class:`btlcore.errors.PeerClosed`."""

    peer: Peer
    error: BaseException | None


class PeerWritable(NamedTuple):
    """``peer``'s send buffer has room again after a send was refused with ``WouldBlock``
    (once per such refusal: when the buffer drained to half of ``send_buffer`` or less)."""

    peer: Peer


Event = (MessageReceived | SendCompleted | PutLanded | PutRefused | PeerFailed | PeerRestarted
         | PeerWritable | PeerClosed)

# The integer codes of the last release's event tuples (deprecated; see legacy())
EV_MESSAGE = 0  # (EV_MESSAGE, peer, tag, data)
EV_COMPLETE = 1  # (EV_COMPLETE, callback, exc_or_None)
EV_PUT = 2  # (EV_PUT, peer, key, offset, length): a put into an exposed region finished
EV_PUT_ERROR = 3  # (EV_PUT_ERROR, peer, key, offset, length): a put that did not fit
EV_PEER_FAILED = 4  # (EV_PEER_FAILED, peer, exc)
EV_PEER_RESTARTED = 5  # (EV_PEER_RESTARTED, peer)
EV_PEER_WRITABLE = 6  # (EV_PEER_WRITABLE, peer): new with PeerWritable, for completeness
EV_PEER_CLOSED = 7  # (EV_PEER_CLOSED, peer, None): new with graceful close

LEGACY_CODES: dict[type, int] = {
    MessageReceived: EV_MESSAGE, SendCompleted: EV_COMPLETE, PutLanded: EV_PUT,
    PutRefused: EV_PUT_ERROR, PeerFailed: EV_PEER_FAILED, PeerRestarted: EV_PEER_RESTARTED,
    PeerWritable: EV_PEER_WRITABLE,
    PeerClosed: EV_PEER_CLOSED,
}


def legacy(event: Event) -> tuple[Any, ...]:
    """``event`` as the last release's ``(EV_*, fields...)`` tuple."""
    return (LEGACY_CODES[type(event)], *event)
