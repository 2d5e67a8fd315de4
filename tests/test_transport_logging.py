"""Connection events go to Python logging under ``btlcore.transport`` (issue #11, item 13):
opened and closed at DEBUG, a failed peer at WARNING, a restarted one at INFO, and nothing
per packet above DEBUG."""

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
    assert [r for r in caplog.records if r.levelno > logging.DEBUG] == []
    # opened and closed, twice, and b told that a closed the connection: nothing per packet
    assert [r.getMessage() for r in caplog.records] == [
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
