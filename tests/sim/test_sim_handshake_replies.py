"""On the simulator: a HELLO_ACK goes to the frame's source NIC, never to the address written
inside the HELLO; a VERSION reply that does not list our version fails the peer at once."""

from __future__ import annotations

from typing import Any

import btlcore
from btlcore.device import Channel
from btlcore.protocol import wire
from btlcore.registry import open_device
from btlcore_sim import Fabric


def _frames(fabric: Fabric, ops: Any) -> list[tuple[bytes, Any]]:
    got: list[tuple[bytes, Any]] = []
    while True:
        datagrams, sources = ops.poll_recv_from(256)
        if not datagrams:
            return got
        got += [(bytes(d), s) for d, s in zip(datagrams, sources, strict=True)]


def test_hello_ack_goes_to_the_source_nic() -> None:
    fabric = Fabric(seed=3)
    victim = btlcore.open("sim", fabric=fabric)
    sender, witness = open_device("sim", {"fabric": fabric}), open_device("sim", {"fabric": fabric})
    try:
        body = wire.Hello(0x4321, 0x77, 1000, 0, 64, witness.local_address(), 0,
                          wire.TransportParameters()).encode() + wire.padding_param(200)
        hello = wire.Datagram(wire.T_HELLO, dst_conn=0x77, src_incarnation=0x4321, payload=body).encode()
        sender.post_send(Channel.PRIORITY, sender.resolve(victim.address), hello)
        for _ in range(50):
            victim.progress()
            fabric.run(fabric.now + 0.01)
        to_sender = [wire.decode(d) for d, _ in _frames(fabric, sender)]
        assert [d.type for d in to_sender] == [wire.T_HELLO_ACK] and to_sender[0].dst_conn == 0x77
        assert _frames(fabric, witness) == []
    finally:
        victim.close()


def test_version_reply_fails_the_peer_and_its_sends_at_once() -> None:
    fabric = Fabric(seed=4)
    t = btlcore.open("sim", fabric=fabric, config=btlcore.Config(handshake_timeout=30.0))
    other = open_device("sim", {"fabric": fabric})  # a later release: it speaks version 3 only
    events: list[tuple[str, Any]] = []
    done: list[BaseException | None] = []
    try:
        t.on_peer(lambda kind, peer, error: events.append((kind, error)))
        peer = t.connect(other.local_address())
        t.send(peer, 1, b"hello", done.append)
        hello = b""
        for _ in range(20):
            t.progress()
            fabric.run(fabric.now + 0.001)
            frames = _frames(fabric, other)
            if frames:
                hello = frames[0][0]
                break
        assert hello and hello[1] == wire.T_HELLO
        other.post_send(Channel.PRIORITY, other.resolve(t.address),
                        wire.version_reply(int.from_bytes(hello[4:8], "big"),
                                           int.from_bytes(hello[8:12], "big"), (3,)))
        start = fabric.now
        for _ in range(20):
            fabric.run(fabric.now + 0.001)
            t.progress()
            if done:
                break
        assert fabric.now - start < 0.05  # at once, not after handshake_timeout
        assert len(done) == 1 and isinstance(done[0], btlcore.VersionMismatch)
        assert [(kind, type(err)) for kind, err in events] == [("failed", btlcore.VersionMismatch)]
        assert "version 3" in str(done[0]) and "version 2" in str(done[0])
    finally:
        t.close()
