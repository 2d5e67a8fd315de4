"""protocol.md §5.4-§5.6, connections: which late HELLOs are stale (the last 16 replaced
incarnations and connection ids, a minute of the clock), and what a new connection in the
same incarnation does, checked with HELLOs crafted by hand."""

from __future__ import annotations

from typing import Any

import pytest
from docskit import RawSender, read  # type: ignore[import-not-found]

import btlcore
from btlcore.config import Config
from btlcore.protocol import wire


def _hello(r: RawSender, inc: int, conn: int, isn: int, *, dst: int = 0, echo: int = 0,
           delay_us: int = 200) -> None:
    body = wire.Hello(inc, conn, isn, echo, 4096, b"R", delay_us, wire.TransportParameters())
    renewed = dst != r.peer.local_conn and (inc, conn, isn) != (r.peer.remote_inc, r.peer.remote_conn,
                                                                r.peer.remote_isn)
    # padded so that it is no smaller than the HELLO_ACK it provokes (§1.8)
    r.e.receive_datagram(wire.Datagram(wire.T_HELLO, dst_conn=dst, src_incarnation=inc,
                                       payload=body.encode() + wire.padding_param(64)).encode(),
                         None, r.now)
    # a new incarnation for a live peer is challenged at its known address (§ "Restart,
    # verified"): the sender, being that peer, answers, and the HELLO counts
    for d in r.collect(r.now) if renewed else ():
        if d.type == wire.T_CHALLENGE and d.dst_conn == conn:
            r.e.receive_datagram(wire.Datagram(wire.T_RESPONSE, src_incarnation=inc,
                                               payload=d.payload).encode(), None, r.now)


def test_the_last_16_replaced_incarnations_and_connections_are_stale() -> None:
    """A late HELLO of one of the last 16 replaced incarnations, or of one up to a minute of
    the clock older than the recorded one, or of the last 16 replaced connections of the
    recorded incarnation, is stale; any other new incarnation is a restart."""
    from btlcore.protocol.handshake import STALE_INCARNATION_WINDOW

    text = read("protocol.md")
    assert "the last 16 that a restart\nreplaced" in text and "last 16 remote connection ids" in text
    assert STALE_INCARNATION_WINDOW == 60 * 1024 and "60 × 1024" in text
    r = RawSender()                              # incarnation 0x1234, connection 0x5678
    first = r.inc
    for k in range(1, 18):                       # 17 restarts: 0x1234 .. 0x1234 + 16 replaced
        _hello(r, first + k, 1, 1000)
    peer, stats = r.peer, r.e.stats
    assert stats()["num_peer_restarts"] == 17 and peer.remote_inc == first + 17
    stale = peer.counters.num_stale_recvs
    _hello(r, first + 1, 1, 1000)                # replaced, among the last 16: stale
    assert peer.counters.num_stale_recvs == stale + 1 and peer.remote_inc == first + 17
    _hello(r, first - 1000, 1, 1000)             # never seen, a little older: a late packet
    assert peer.counters.num_stale_recvs == stale + 2 and peer.remote_inc == first + 17
    older = (first + 17 - STALE_INCARNATION_WINDOW - 1) & 0xFFFFFFFF
    _hello(r, older, 1, 1000)                    # older than the window: a restart
    assert stats()["num_peer_restarts"] == 18 and peer.remote_inc == older
    _hello(r, first + 30, 1, 1000)               # later: a restart
    assert stats()["num_peer_restarts"] == 19 and peer.remote_inc == first + 30
    for conn in range(2, 20):                    # new connections, same incarnation: followed
        _hello(r, first + 30, conn, 1000 + conn)
    assert peer.remote_conn == 19 and stats()["num_peer_restarts"] == 19
    _hello(r, first + 30, 4, 1004)               # a replaced connection among the last 16: stale
    assert peer.counters.num_stale_recvs == stale + 3 and peer.remote_conn == 19
    _hello(r, first + 30, 2, 1002)               # replaced 17 connections ago: followed again
    assert peer.remote_conn == 2 and peer.counters.num_stale_recvs == stale + 3


def test_a_new_connection_in_the_same_incarnation_as_documented() -> None:
    from btlcore.protocol.events import SendCompleted

    # nothing sent on ours: the new remote connection is followed, ours stays
    r = RawSender()
    r.send(1)
    conn = r.peer.local_conn
    _hello(r, r.inc, 0x9999, 77_000, dst=conn, echo=r.e.incarnation, delay_us=1000)
    assert r.peer.local_conn == conn and r.peer.remote_conn == 0x9999
    assert r.peer.state.value == "established" and r.peer.timer.max_ack_delay == pytest.approx(1e-3)
    assert r.peer.window.cum == 77_000           # a new receive window at the new ISN
    # something sent: what is unacknowledged fails, and ours is a new connection
    r = RawSender()
    r.send(1)
    done: list[Any] = []
    r.e.send(r.peer, 2, b"unacknowledged", done.append, r.now)
    assert [d.type for d in r.collect(r.now)] == [wire.T_DATA]
    r.e.take_events()
    conn = r.peer.local_conn
    _hello(r, r.inc, 0x9999, 77_000, dst=conn, echo=r.e.incarnation)
    events = r.e.take_events()
    assert [type(ev) for ev in events] == [SendCompleted]  # no "failed" or "restarted" event
    events[0].callback(events[0].error)
    assert len(done) == 1 and isinstance(done[0], btlcore.PeerUnreachable)
    assert r.peer.local_conn != conn and r.peer.state.value == "connecting" and not r.peer.confirmed
    assert r.peer.remote_conn == 0x9999
    s = r.e.stats()
    assert s["num_peer_failures"] == s["num_peer_restarts"] == 0 and s["num_send_errors"] == 1
    out = r.collect(r.now)                       # HELLO_ACK owed, and our own HELLO
    assert sorted(d.type for d in out) == [wire.T_HELLO, wire.T_HELLO_ACK]
    for d in out:
        body = wire.Hello.decode(d.payload)
        assert d.dst_conn == 0x9999 and body.conn_id == r.peer.local_conn
        assert body.echo_incarnation == r.inc and body.max_ack_delay_us == 200
    stale = r.peer.counters.num_stale_recvs
    _hello(r, r.inc, r.conn, r.isn)              # a late HELLO of the replaced connection
    assert r.peer.counters.num_stale_recvs == stale + 1 and r.peer.remote_conn == 0x9999
    # connect() on a FAILED peer: a new connection
    r.e.handle_timer(r.now + Config().handshake_timeout + 1)
    assert r.peer.state.value == "failed"
    failed_conn = r.peer.local_conn
    assert r.e.connect(b"R", r.now) is r.peer and r.peer.state.value == "connecting"
    assert r.peer.local_conn != failed_conn
