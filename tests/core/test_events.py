"""Typed events: what each one carries, and how Transport dispatches each type."""

from __future__ import annotations

from typing import Any

import pytest

import btlcore
from btlcore import Config
from btlcore.errors import BtlDeprecationWarning
from btlcore.protocol.events import (
    EV_COMPLETE,
    EV_MESSAGE,
    EV_PEER_FAILED,
    EV_PEER_RESTARTED,
    EV_PUT,
    EV_PUT_ERROR,
    MessageReceived,
    PeerFailed,
    PeerRestarted,
    PeerWritable,
    PutLanded,
    PutRefused,
    SendCompleted,
    legacy,
)
from btlcore.protocol.peers import Peer
from btlcore.protocol.rtt import RetransmitTimer
from btlcore.testing.enginepair import EnginePair


def test_events_are_immutable_and_slotted() -> None:
    ev = MessageReceived(None, 7, b"x")  # type: ignore[arg-type]
    assert (ev.peer, ev.tag, ev.data) == (None, 7, b"x") and tuple(ev) == (None, 7, b"x")
    with pytest.raises(AttributeError):
        ev.tag = 8  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ev.extra = 1  # type: ignore[attr-defined]
    assert not hasattr(ev, "__dict__")


def test_legacy_tuples() -> None:
    cb, exc, peer = print, ValueError("x"), object()
    assert legacy(MessageReceived(peer, 1, b"d")) == (EV_MESSAGE, peer, 1, b"d")  # type: ignore[arg-type]
    assert legacy(SendCompleted(cb, exc)) == (EV_COMPLETE, cb, exc)
    assert legacy(PutLanded(peer, 3, 4, 5)) == (EV_PUT, peer, 3, 4, 5)  # type: ignore[arg-type]
    assert legacy(PutRefused(peer, 3, 4, 5)) == (EV_PUT_ERROR, peer, 3, 4, 5)  # type: ignore[arg-type]
    assert legacy(PeerFailed(peer, exc)) == (EV_PEER_FAILED, peer, exc)  # type: ignore[arg-type]
    assert legacy(PeerRestarted(peer)) == (EV_PEER_RESTARTED, peer)  # type: ignore[arg-type]


def test_engine_hands_out_typed_events_and_the_old_forms_still_work() -> None:
    p = EnginePair(Config())
    p.handshake()
    done: list[Any] = []
    p.a.send(p.pa, 5, b"hello", done.append, p.now)
    for _, _, d in p.a.datagrams_to_send(p.now):
        p.b.receive_datagram(bytes(d), None, p.now)
    assert p.b.take_events() == [MessageReceived(p.pb, 5, b"hello")]
    assert p.b.take_events() == []
    p.b.ack_now()
    acks = [bytes(d) for _, _, d in p.b.datagrams_to_send(p.now)]
    with pytest.warns(BtlDeprecationWarning, match="receive_datagram"):
        p.a.receive_datagram(acks[0], p.now)  # the last release's (data, now)
    with pytest.warns(BtlDeprecationWarning, match="drain_events"):
        assert p.a.drain_events() == [(EV_COMPLETE, done.append, None)]


def test_transport_dispatches_every_event_type() -> None:
    t = btlcore.open("sim")
    try:
        seen: list[Any] = []
        # a peer the engine does not know (a real Peer: the compiled build checks the type)
        peer = Peer(b"\x02\x00\x00\x00\x00\x07", None, 7, 0, RetransmitTimer(True, 1.0, 0.001, 60.0, 1.0), 0)
        peer.adv_window = 0
        err = ValueError("boom")
        t.on(9, lambda p, tag, data: seen.append(("msg", p, tag, data)))
        t.on_put(lambda p, k, o, n: seen.append(("put", p, k, o, n)),
                 on_error=lambda p, k, o, n: seen.append(("refused", p, k, o, n)))
        t.on_peer(lambda what, p, e: seen.append((what, p, e)))
        t.engine.events[:] = [
            MessageReceived(peer, 9, b"m"), MessageReceived(peer, 4, b"inbox"),  # type: ignore[arg-type]
            SendCompleted(lambda e: seen.append(("done", e)), None),
            PutLanded(peer, 1, 2, 3), PutRefused(peer, 4, 5, 6),  # type: ignore[arg-type]
            PeerFailed(peer, err), PeerRestarted(peer), PeerWritable(peer),  # type: ignore[arg-type]
        ]
        t._dispatch(t.engine.take_events())
        assert seen == [("msg", peer, 9, b"m"), ("done", None), ("put", peer, 1, 2, 3),
                        ("refused", peer, 4, 5, 6), ("failed", peer, err), ("restarted", peer, None),
                        ("writable", peer, None)]
        assert peer.unconsumed == len(b"inbox")  # queued for recv(): held against the window
        msg = t.recv(0)
        assert msg is not None and (msg.peer, msg.tag, msg.data) == (peer, 4, b"inbox")
        assert peer.unconsumed == 0
    finally:
        t.close(flush=False)
