"""Transport parameters: the limits each end advertises in its HELLO / HELLO_ACK, obeyed by
the other (a send larger than the peer's largest message fails with MessageTooLarge, never
as a peer death; the smaller peer_timeout wins; no datagram larger than the peer's)."""

from __future__ import annotations

import pytest

from btlcore import Config
from btlcore.errors import MessageTooLarge, PeerUnreachable
from btlcore.protocol.events import PeerFailed
from btlcore.protocol.wire import T_DATA, T_HELLO, T_HELLO_ACK, Hello, decode
from btlcore.testing.enginepair import EnginePair


def test_different_max_message_size_is_an_error_not_a_peer_death() -> None:
    """The receiver takes at most 3000 B messages, the sender 64 MiB: a 4000 B message fails
    with MessageTooLarge and the connection stays up (it used to end in a false peer death:
    the receiver dropped every chunk, the sender timed out)."""
    p = EnginePair(Config(peer_timeout=0.5), config_b=Config(max_message_size=3000, peer_timeout=0.5))
    p.send(0, 1, 1, bytes(4000), key="big")  # before the handshake: through the callback
    p.send(0, 1, 2, b"small", key="small")
    p.run(lambda: p.completions["big"] and p.completions["small"], max_time=5)
    assert isinstance(p.completions["big"][0], MessageTooLarge)
    assert "3000" in str(p.completions["big"][0])
    assert p.completions["small"] == [None]
    p.run_idle(3)
    assert not any(isinstance(e, PeerFailed) for e in p.other_events[0] + p.other_events[1])
    assert p.established(0, 1)
    assert p.delivered[1] == [(b"A", 2, b"small")]
