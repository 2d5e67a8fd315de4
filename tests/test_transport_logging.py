"""Connection events go to Python logging under ``btlcore.transport`` (issue #11, item 13):
opened and closed at DEBUG, a failed peer at WARNING, a restarted one at INFO, hostile drops
and rate-limited replies at DEBUG under ``btlcore.protocol``, and nothing per packet above
DEBUG."""

from __future__ import annotations

import logging

import pytest

import btlcore
from btlcore import Config
from btlcore_sim import Fabric

LOGGER = "btlcore.transport"


def records(caplog: pytest.LogCaptureFixture, level: int | None = None) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and (level is None or r.levelno == level)]


def test_open_and_close_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    fab = Fabric(seed=1)
    t = btlcore.open("sim", fabric=fab)
    t.close()
    texts = [r.getMessage() for r in records(caplog, logging.DEBUG)]
    assert texts == [f"transport opened: backend sim, address {t.address.hex()}",
                     f"transport closed: backend sim, address {t.address.hex()}"]


def test_traffic_logs_nothing_above_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="btlcore")
    fab = Fabric(seed=1)
    a, b = btlcore.open("sim", fabric=fab), btlcore.open("sim", fabric=fab)
    got: list[bytes] = []
    b.on(1, lambda p, t, d: got.append(d))
    peer = a.connect(b.address)
    for i in range(200):
        a.send(peer, 1, bytes(i * 50))
    btlcore.run_until([a, b], lambda: len(got) == 200, timeout=10)
    a.close()
    b.close()
    # connection events only, nothing per packet: each side's peer up (INFO, when the
    # handshake completes), the rest at DEBUG
    ups = [r for r in caplog.records if r.name == "btlcore.protocol"]
    assert sorted(r.getMessage().split()[1] for r in ups) == sorted([a.address.hex(), b.address.hex()])
    assert all(r.levelno == logging.INFO and " up (connection " in r.getMessage() for r in ups)
    rest = [r for r in caplog.records if r.name != "btlcore.protocol"]
    assert [r for r in rest if r.levelno > logging.DEBUG] == []
    # opened and closed, twice, and b told that a closed the connection
    assert [r.getMessage() for r in rest] == [
        f"transport opened: backend sim, address {a.address.hex()}",
        f"transport opened: backend sim, address {b.address.hex()}",
        f"transport closed: backend sim, address {a.address.hex()}",
        f"peer {a.address.hex()} closed the connection",
        f"transport closed: backend sim, address {b.address.hex()}"]


def test_failed_peer_logged_as_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="btlcore")
    fab = Fabric(seed=1)
    cfg = Config(peer_timeout=0.5)
    a, b = btlcore.open("sim", fabric=fab, config=cfg), btlcore.open("sim", fabric=fab, config=cfg)
    events: list[str] = []
    a.on_peer(lambda event, peer, exc: events.append(event))
    peer = a.connect(b.address)
    btlcore.run_until([a, b], lambda: peer.state is btlcore.PeerState.ESTABLISHED, timeout=5)
    b.engine.close()  # b crashes: no CLOSE (a graceful close would be "closed")
    b.close(flush=False)
    failed: list[BaseException | None] = []
    a.send(peer, 1, b"into the void", failed.append)
    btlcore.run_until([a], lambda: bool(failed), timeout=30)
    assert events == ["failed"]  # the user's handler still gets the event
    (rec,) = records(caplog, logging.WARNING)
    assert rec.getMessage().startswith(f"peer {b.address.hex()} failed: ")
    a.close()


def test_restarted_peer_logged_as_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="btlcore")
    fab = Fabric(seed=1)
    a, b = btlcore.open("sim", fabric=fab), btlcore.open("sim", fabric=fab)
    peer = a.connect(b.address)
    btlcore.run_until([a, b], lambda: peer.state is btlcore.PeerState.ESTABLISHED, timeout=5)
    address = b.address
    b.engine.close()  # b crashes: no CLOSE (a graceful close would be "closed")
    b.close(flush=False)
    b2 = btlcore.open("sim", fabric=fab, address=address)
    b2.connect(a.address)
    btlcore.run_until([a, b2], lambda: bool(records(caplog, logging.INFO)), timeout=5)
    assert [r.getMessage() for r in records(caplog, logging.INFO)] == [f"peer {address.hex()} restarted"]
    a.close()
    b2.close()



def test_hostile_drops_and_rate_limited_replies_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    """A datagram from a source the connection does not use, a notice that echoes nothing of
    ours, and replies past the rate limit: each a DEBUG line under ``btlcore.protocol``,
    nothing above DEBUG."""
    from btlcore.protocol import wire
    from btlcore.protocol.guard import NOTICE_BURST
    from btlcore.testing.enginepair import EnginePair

    caplog.set_level(logging.DEBUG, logger="btlcore")
    p = EnginePair(Config(peer_timeout=30.0))
    p.handshake()
    caplog.clear()
    pb = p.pb
    pb.sources = (b"A", b"A2")  # both of a's channels known
    seg = wire.Datagram(wire.T_DATA, wire.F_ACK, p.pa.remote_conn, p.a.incarnation, p.pa.next_seq,
                        pb.window.cum, 9, payload=b"spoofed").encode()
    p.b.receive_datagram(seg, b"Z", p.now)
    notice = wire.Datagram(wire.T_UNKNOWN_CONN, 0, pb.remote_conn, p.a.incarnation, 5,
                           payload=wire.Notice(p.b.incarnation, 1234, wire.T_DATA).encode()).encode()
    p.b.receive_datagram(notice, b"A", p.now)
    stranger = wire.Datagram(wire.T_DATA, 0, 0xDEAD, 77, 1, payload=bytes(100)).encode()
    for _ in range(NOTICE_BURST + 5):  # a connection b does not know: notices, then none
        p.b.receive_datagram(stranger, b"Y", p.now)
    texts = [r.getMessage() for r in caplog.records if r.name == "btlcore.protocol"]
    assert any("from unexpected source b'Z' dropped" in t for t in texts), texts
    assert any("notice for conn" in t and "dropped" in t for t in texts), texts
    assert sum("rate-limited" in t for t in texts) == 5, texts
    assert [r for r in caplog.records if r.levelno > logging.DEBUG] == []
