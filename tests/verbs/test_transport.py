"""The protocol engine over verbs: two transports on one RDMA port (rxe in the VM)."""

from __future__ import annotations

import os

import pytest

import btlcore
from btlcore import Config, PeerUnreachable


@pytest.fixture
def transports(need_verbs):
    opened = []

    def make(config=None, **options):
        t = btlcore.open("verbs", config=config or Config(), **options)
        opened.append(t)
        return t

    yield make
    for t in opened:
        if not t.closed:
            t.close(flush=False)


def test_no_crc_on_an_icrc_link(transports):
    t = transports()
    assert t.capabilities.integrity is True
    assert t.capabilities.mtu == t.device.device.active_mtu


def test_messages_both_ways_small_and_large(transports):
    a, b = transports(), transports()
    pa, pb = a.connect(b.address), b.connect(a.address)
    big = os.urandom(1 << 20)  # 1 MiB: ~260 chunks of the 4096-byte MTU
    done, got_a, got_b = [], [], []
    for tag in (1, 2):
        b.on(tag, lambda peer, tag, data: got_b.append((tag, bytes(data))))
    a.on(3, lambda peer, tag, data: got_a.append((tag, bytes(data))))
    a.send(pa, 1, b"hello b", callback=done.append)
    a.send(pa, 2, big, callback=done.append)
    b.send(pb, 3, b"hello a", callback=done.append)
    btlcore.run_until([a, b], lambda: len(done) == 3 and len(got_b) == 2 and got_a, timeout=60)
    assert sorted(got_b) == [(1, b"hello b"), (2, big)]
    assert got_a == [(3, b"hello a")]
    assert done == [None, None, None]
    assert a.device.device.tx_datagrams > 256 and b.device.device.rx_priority > 0


def test_many_messages_through_a_tiny_send_queue(transports):
    # cc=aimd: its window leaves in bursts that overrun 4 slots; bbr (the default) paces
    # the sends, which might never fill the queue, and this tests the device's push-back
    a = transports(Config(cc="aimd"), send_queue_depth=4, inline="off")
    b = transports()
    pa = a.connect(b.address)
    msgs = [os.urandom(100 + 37 * i) for i in range(200)]
    acked = []
    for m in msgs:
        a.send(pa, 5, m, callback=acked.append)
    got = []
    b.on(5, lambda peer, tag, data: got.append(bytes(data)))
    btlcore.run_until([a, b], lambda: len(got) == len(msgs) and len(acked) == len(msgs), timeout=60)
    assert got == msgs  # ordered delivery is the default
    assert acked == [None] * len(msgs)
    assert a.device.device.tx_pushbacks > 0


def test_put_over_verbs(transports):
    a, b = transports(), transports()
    region = bytearray(64 << 10)
    key = b.expose(region)
    landed = []
    b.on_put(lambda peer, k, off, n: landed.append((k, off, n)))
    data = os.urandom(20000)
    done = []
    a.put(a.connect(b.address), key, 1000, data, callback=done.append)
    btlcore.run_until([a, b], lambda: done and landed, timeout=30)
    assert done == [None] and bytes(region[1000:21000]) == data


def test_peer_that_dies_is_declared_unreachable(transports):
    cfg = Config(peer_timeout=1.0, rto_max=0.2, handshake_timeout=1.0)
    a, b = transports(cfg), transports(cfg)
    pa = a.connect(b.address)
    first, got = [], []
    b.on(1, lambda peer, tag, data: got.append(bytes(data)))
    a.send(pa, 1, b"before", callback=first.append)
    btlcore.run_until([a, b], lambda: first and got, timeout=10)
    assert got == [b"before"] and first == [None]
    b.engine.close()  # the peer dies (a crash: no CLOSE leaves it) ...
    b.close(flush=False)  # ... and its QPs are gone: nothing answers
    result = []
    a.send(pa, 1, b"after" * 1000, callback=result.append)
    btlcore.run_until([a], lambda: result, timeout=20)
    assert isinstance(result[0], PeerUnreachable), result


def test_many_peers_to_one(transports):
    server = transports()
    clients = [transports() for _ in range(3)]
    got: dict[bytes, list[bytes]] = {}
    server.on(9, lambda peer, tag, data: got.setdefault(peer.address, []).append(bytes(data)))
    acked = []
    for n, c in enumerate(clients):
        p = c.connect(server.address)
        for i in range(50):
            c.send(p, 9, b"client %d message %d " % (n, i) + bytes(i * 97), callback=acked.append)
    everyone = [server, *clients]
    btlcore.run_until(everyone, lambda: len(acked) == 150 and sum(map(len, got.values())) == 150,
                      timeout=60)
    assert acked == [None] * 150
    assert sorted(got) == sorted(c.address for c in clients)
    for n, c in enumerate(clients):
        assert got[c.address] == [b"client %d message %d " % (n, i) + bytes(i * 97) for i in range(50)]
    assert server.device.device.stats()["address_handles"] == 3


def test_loss_recovery_when_the_receive_queue_runs_dry(transports):
    # UD drops a datagram that finds no posted receive buffer: a receiver with 16 buffers
    # and a 1 MiB message (~260 datagrams in flight) loses many, and the core recovers them.
    # cc=aimd: its window leaves in bursts; bbr (the default) paces the sends, which may
    # leave 16 buffers enough (CI saw a run without one resend), and this tests recovery
    a = transports(Config(cc="aimd"))
    b = transports(recv_queue_depth=16)
    big = os.urandom(1 << 20)
    got, done = [], []
    b.on(4, lambda peer, tag, data: got.append(bytes(data)))
    a.send(a.connect(b.address), 4, big, callback=done.append)
    btlcore.run_until([a, b], lambda: got and done, timeout=120)
    assert got == [big] and done == [None]
    assert a.stats()["num_resends"] > 0
