"""Transport-level behaviour not covered elsewhere: periodic stats lines, the receive
budget per pass, device push-back held in the backlog (never lost)."""

from __future__ import annotations

import pytest

import btlcore
from btlcore import Config
from btlcore_sim import Fabric, LinkModel


def test_stats_line_every_interval_of_the_transport_clock(capsys) -> None:
    fab = Fabric(seed=1, default=LinkModel(delay=1e-3))
    a = btlcore.open("sim", fabric=fab, config=Config(stats_interval=0.01))
    b = btlcore.open("sim", fabric=fab)
    peer = a.connect(b.address)
    for _ in range(50):
        a.send(peer, 1, bytes(3000))
    btlcore.run_until([a, b], lambda: fab.now >= 0.055, timeout=1)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("btlcore[sim")]
    assert 4 <= len(lines) <= 7  # about one per 10 virtual ms over 55 ms
    assert all("S/s" in line and "ACK r" in line for line in lines)


def test_recv_budget_bounds_one_pass() -> None:
    fab = Fabric(seed=1)
    a = btlcore.open("sim", fabric=fab)
    b = btlcore.open("sim", fabric=fab, config=Config(recv_budget=5, ack_frequency=1000))
    got = []
    b.on(1, lambda p, t, d: got.append(d))
    peer = a.connect(b.address)
    btlcore.run_until([a, b], lambda: peer.state is btlcore.PeerState.ESTABLISHED, timeout=1)
    for i in range(20):
        a.send(peer, 1, bytes([i]))
    a.progress()
    fab.advance(None)
    b.progress()
    assert len(got) == 5  # one pass took five datagrams
    btlcore.run_until([a, b], lambda: len(got) == 20, timeout=1)
    assert got == [bytes([i]) for i in range(20)]


def test_device_pushback_is_held_not_lost() -> None:
    # a NIC send queue of 4 at 10 Mbit/s: most posts are refused at first
    fab = Fabric(seed=2, default=LinkModel(rate_mbps=10.0, delay=1e-4))
    a = btlcore.open("sim", fabric=fab, send_queue_depth=4)
    b = btlcore.open("sim", fabric=fab)
    got = []
    b.on(1, lambda p, t, d: got.append(bytes(d)))
    peer = a.connect(b.address)
    msgs = [bytes([i % 256]) * 4000 for i in range(60)]
    for m in msgs:
        a.send(peer, 1, m)
    btlcore.run_until([a, b], lambda: len(got) == 60, timeout=30)
    assert got == msgs
    assert a.stats()["num_send_pushbacks"] > 0 and a.stats()["num_resends"] == 0


def test_a_raising_handler_does_not_hold_back_what_is_due() -> None:
    # the receiver's pass dispatches before it sends: the ACK it owes must still leave
    fab = Fabric(seed=3)
    a = btlcore.open("sim", fabric=fab)
    b = btlcore.open("sim", fabric=fab, config=Config(ack_frequency=1))

    def boom(peer, tag, data):
        raise RuntimeError("handler failed")

    b.on(1, boom)
    peer = a.connect(b.address)
    btlcore.run_until([a, b], lambda: peer.state is btlcore.PeerState.ESTABLISHED, timeout=1)
    done: list[object] = []
    a.send(peer, 1, b"x", callback=done.append)
    a.progress()
    fab.advance(None)
    with pytest.raises(RuntimeError, match="handler failed"):
        b.progress()
    fab.advance(None)
    a.progress()
    assert done == [None] and a.stats()["num_resends"] == 0


def test_poll_completions_skipped_only_where_sends_complete_at_once() -> None:
    # UDP's sendto completes in post_send: the transport does not ask every pass; the
    # simulator's sends complete later and are still reaped
    udp = btlcore.open("udp", host="127.0.0.1")
    try:
        assert udp._poll_completions is None
        udp.progress()
    finally:
        udp.close()
    sim = btlcore.open("sim", fabric=Fabric(seed=1))
    try:
        assert sim._poll_completions is not None
    finally:
        sim.close()
