"""Back-pressure and receive memory through the Transport: a producer faster than a slow
simulated link is held back by WouldBlock with bounded memory and a live peer; data left
unread closes the window without killing anyone; ``send(timeout=)`` waits, then refuses; and
forged chunks claiming 64 MiB each, sent at a real udp endpoint from a third socket, cost
what arrived while a live transfer beside them verifies."""

from __future__ import annotations

import socket
import threading
import tracemalloc

import pytest

import btlcore
from btlcore import Config, WouldBlock
from btlcore.protocol.wire import F_ACK, T_DATA, Datagram
from btlcore_sim import Fabric, LinkModel


def sim_pair(cfg: Config, link: LinkModel) -> tuple[btlcore.Transport, btlcore.Transport]:
    fabric = Fabric(seed=5, default=link)
    return btlcore.open("sim", config=cfg, fabric=fabric), btlcore.open("sim", config=cfg, fabric=fabric)


def test_a_producer_faster_than_a_slow_link_blocks_with_bounded_memory() -> None:
    send_buffer = 256 * 1024
    cfg = Config(send_buffer=send_buffer, peer_timeout=1.0)
    a, b = sim_pair(cfg, LinkModel(delay=1e-3, rate_mbps=10, queue_limit=1 << 20))  # (btl transfer's queue)
    with a, b:
        got = [0]
        b.on(1, lambda p, t, d: got.__setitem__(0, got[0] + len(d)))
        events: list[str] = []
        a.on_peer(lambda event, p, exc: events.append(event))
        peer = a.connect(b.address)
        message = bytes(64 * 1024)
        total = 8 << 20  # 6.7 s of the link: far longer than peer_timeout
        sent = blocks = most = 0
        tracemalloc.start()
        try:
            while sent < total:
                try:
                    a.send(peer, 1, message)
                    sent += len(message)
                    most = max(most, peer.send_queued)
                except WouldBlock:
                    blocks += 1
                    n = events.count("writable")
                    btlcore.run_until([a, b], lambda n=n: events.count("writable") > n, timeout=30)
            btlcore.run_until([a, b], lambda: got[0] == total, timeout=30)
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert blocks > 0 and "writable" in events
        assert "failed" not in events  # slow, and alive
        assert most <= send_buffer
        # the sender's buffer, the simulated link's queue (1 MiB), copies in flight: a fraction
        # of the 8 MiB a sender without back-pressure queues
        assert peak < (1 << 20) + 4 * send_buffer, f"peak {peak >> 10} KiB"
        assert a.now() > 5 * cfg.peer_timeout  # it did take that long
        assert a.stats()["num_send_blocks"] == blocks


def test_data_left_unread_closes_the_window_and_recv_opens_it() -> None:
    cfg = Config(recv_buffer=256 * 1024, send_buffer=128 * 1024, peer_timeout=0.5)
    a, b = sim_pair(cfg, LinkModel(delay=1e-3))
    with a, b:
        events: list[str] = []
        a.on_peer(lambda event, p, exc: events.append(event))
        peer = a.connect(b.address)
        sent_ids: list[int] = []
        blocked = False
        for i in range(40):  # 1.3 MB toward a receiver that does not read (a refused one is skipped)
            try:
                a.send(peer, 1, bytes([i]) * 32 * 1024)
                sent_ids.append(i)
            except WouldBlock:
                blocked = True
                n = events.count("writable")
                try:
                    btlcore.run_until([a, b], lambda n=n: events.count("writable") > n, timeout=5 * cfg.peer_timeout)
                except TimeoutError:
                    break  # the window is shut: nothing drains any more
        sent = len(sent_ids)
        assert blocked and sent < 40
        bpeer = b.engine.peers_by_addr[a.address]
        assert bpeer.unconsumed >= cfg.recv_buffer
        assert peer.remote_window == 0
        assert "failed" not in events and peer.state.value == "established"
        got: list[btlcore.Message] = []

        def read() -> bool:  # the application reads: the window opens, the rest flows
            m = b.recv(timeout=0)
            while m is not None:
                got.append(m)
                m = b.recv(timeout=0)
            return len(got) >= sent

        btlcore.run_until([a, b], read, timeout=10)
        assert [m.data[0] for m in got] == sent_ids
        assert bpeer.unconsumed == 0


def test_send_timeout_waits_then_refuses_and_queues_nothing() -> None:
    cfg = Config(send_buffer=10_000)
    a, b = sim_pair(cfg, LinkModel(delay=1e-3))
    with a, b:
        peer = a.connect(b.address)
        a.send(peer, 1, bytes(8000))
        before = a.now()
        queued = peer.send_queued
        with pytest.raises(WouldBlock):  # b never progresses: nothing drains
            a.send(peer, 1, bytes(8000), timeout=0.25)
        assert a.now() >= before + 0.25 and peer.send_queued == queued
        with pytest.raises(ValueError, match="timeout"):
            a.send(peer, 1, bytes(8000), timeout=-1)
        with pytest.raises(WouldBlock):
            a.put(peer, 1, 0, bytes(8000), timeout=0.0)


def test_send_timeout_on_udp_waits_for_a_peer_driven_elsewhere() -> None:
    cfg = Config(send_buffer=256 * 1024)
    with btlcore.open("udp", config=cfg) as a, btlcore.open("udp", config=cfg) as b:
        total = 64
        got: list[int] = []
        stop = threading.Event()

        def serve() -> None:
            b.on(1, lambda p, t, d: got.append(len(d)))
            while not stop.is_set() and len(got) < total:
                b.progress(timeout=0.01)

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            peer = a.connect(b.address)
            for _ in range(total):
                a.send(peer, 1, bytes(64 * 1024), timeout=10)
                assert peer.send_queued <= cfg.send_buffer
            btlcore.run_until([a], lambda: peer.send_queued == 0, timeout=20)
        finally:
            stop.set()
            thread.join()
        assert got == [64 * 1024] * total
        assert a.stats()["num_send_blocks"] > 0


def test_forged_chunks_at_a_udp_endpoint_cost_what_arrived() -> None:
    """40 forged 1 KB chunks, each claiming a 64 MiB message, from a third socket (with the ids
    of b's connection to a, as an on-path attacker would know them), while c's transfer to b
    verifies."""
    from btlcore_udp import _address

    cfg = Config(max_message_size=64 << 20)
    with btlcore.open("udp", config=cfg) as a, btlcore.open("udp", config=cfg) as b, \
            btlcore.open("udp", config=cfg) as c:
        got: list[bytes] = []
        b.on(5, lambda p, t, d: got.append(bytes(d)))
        done: list[BaseException | None] = []
        a.send(a.connect(b.address), 5, b"hello", done.append)
        btlcore.run_until([a, b], lambda: bool(done) and bool(got), timeout=5)
        victim = b.engine.peers_by_addr[a.address]
        _family, ip, _pport, dport, _scope = _address.decode(b.address)
        attacker = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            cum = victim.window.cum
            for i in range(40):
                d = Datagram(T_DATA, F_ACK, victim.local_conn, a.engine.incarnation, cum + 2 + i, 0, 9,
                             msg_id=900 + i, msg_len=64 << 20, offset=i * 4096, payload=bytes(1024))
                attacker.sendto(d.encode(), (ip, dport))
            message = bytes(range(256)) * 4096  # 1 MiB, live beside the attack
            c.send(c.connect(b.address), 5, message, done.append)
            btlcore.run_until([a, b, c], lambda: len(done) == 2 and len(got) == 2, timeout=10)
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            attacker.close()
        assert done == [None, None] and got[1] == message
        # the forged chunks held at most what arrived (or nothing, if dropped on arrival)
        assert b.engine.state.rx_held <= 40 * 1024
        assert peak - base < 16 << 20, f"{(peak - base) >> 20} MiB"
