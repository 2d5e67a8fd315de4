"""On the simulator, through transports: the peer's largest message (a transport parameter of
its handshake) is obeyed: MessageTooLarge through the callback before the handshake, at the
call after it, and the connection stays up (it used to end in a false peer death)."""

from __future__ import annotations

import pytest

import btlcore
from btlcore_sim import Fabric


def test_a_smaller_max_message_size_at_the_peer_is_an_error_not_a_death() -> None:
    fabric = Fabric(seed=6)
    a = btlcore.open("sim", fabric=fabric, config=btlcore.Config(peer_timeout=0.5))
    b = btlcore.open("sim", fabric=fabric, config=btlcore.Config(max_message_size=3000, peer_timeout=0.5))
    failed: list[object] = []
    got: list[bytes] = []
    done: dict[str, list[BaseException | None]] = {"big": [], "ok": []}
    try:
        a.on_peer(lambda kind, peer, error: failed.append((kind, error)))
        b.on(1, lambda peer, tag, data: got.append(bytes(data)))
        peer = a.connect(b.address)
        a.send(peer, 1, bytes(4000), done["big"].append)  # before the handshake: the callback
        a.send(peer, 1, bytes(3000), done["ok"].append)
        btlcore.run_until([a, b], lambda: bool(done["big"] and done["ok"]), timeout=5.0)
        assert isinstance(done["big"][0], btlcore.MessageTooLarge) and done["ok"] == [None]
        with pytest.raises(btlcore.MessageTooLarge, match="the peer's max_message_size=3000"):
            a.send(peer, 1, bytes(3001))  # after it: at the call
        btlcore.run_until([a, b], lambda: False if fabric.now < 2.0 else True, timeout=5.0)
        assert failed == [] and got == [bytes(3000)]
        assert peer.state is btlcore.PeerState.ESTABLISHED
    finally:
        a.close()
        b.close()
