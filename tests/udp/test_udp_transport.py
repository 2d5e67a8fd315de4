"""The transport's progress loop on the UDP device: what a round trip costs in reads."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

import btlcore


def _count_reads(t: btlcore.Transport) -> dict[str, list[int]]:
    """Wrap the device's reads: ``batched`` (recvmmsg) and ``one`` (recvfrom, the read of a
    lone datagram, which a busy wait's spin makes on every turn), each as [reads that found a
    datagram, reads that found nothing]."""
    device = t.device.device
    counts = {"batched": [0, 0], "one": [0, 0]}
    real = device._mmsg_parts[0]

    def recv(fd: int, first: int, count: int) -> int:
        k = real(fd, first, count)
        counts["batched"][k == 0] += 1
        return k

    def one(real_one: Any) -> Any:
        def recv_one(*args: Any) -> Any:
            try:
                got = real_one(*args)
            except BlockingIOError:
                counts["one"][1] += 1
                raise
            counts["one"][0] += 1
            return got
        return recv_one

    device._mmsg_parts = (recv, *device._mmsg_parts[1:])
    device._recv_from = tuple(one(r) for r in device._recv_from)
    return counts


@pytest.mark.parametrize("busy_poll", [False, True])
def test_round_trips_read_only_sockets_that_have_data(busy_poll: bool) -> None:
    # progress(timeout) waits before it reads: epoll/select says which socket is readable,
    # so an echo costs no read of an empty socket on either side; a busy wait spins reading
    # the sockets themselves, and the read that finds the datagram is the only one
    a = btlcore.open("udp", bind="127.0.0.1:0", recvmmsg="on", busy_poll=busy_poll)
    b = btlcore.open("udp", bind="127.0.0.1:0", recvmmsg="on", busy_poll=busy_poll)
    stop = threading.Event()
    b.on(1, lambda peer, tag, data: b.send(peer, 1, data))
    b.on(2, lambda peer, tag, data: stop.set())

    def serve() -> None:
        while not stop.is_set():
            b.progress(timeout=0.05)
        b.flush(1.0)

    # (wrapped before the server's thread starts: a spin already under way reads unwrapped)
    mine, theirs = _count_reads(a), _count_reads(b)
    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        got: list[bytes] = []
        a.on(1, lambda peer, tag, data: got.append(bytes(data)))
        peer = a.connect(b.address)
        a.send(peer, 1, b"warm-up")
        btlcore.run_until([a], lambda: len(got) == 1, timeout=5)
        before = [{k: list(v) for k, v in c.items()} for c in (mine, theirs)]
        for i in range(50):
            a.send(peer, 1, b"ping %d" % i)
            while len(got) < i + 2:
                a.progress(timeout=1.0)
        assert got[1:] == [b"ping %d" % i for i in range(50)]
        for counts in ({k: [n - m for n, m in zip(v, was[k], strict=True)] for k, v in c.items()}
                       for c, was in zip((mine, theirs), before, strict=True)):
            if busy_poll:
                # each datagram read by the spin's own read, which found it; batched reads only
                # for a backlog (a pass late under load: two datagrams queued, the second found
                # by one more read), never more than two (both sockets) a backlog
                extra = counts["one"][0] - 50
                assert extra >= 0 and counts["one"][1] > 0 and sum(counts["batched"]) <= 2 * extra, counts
            else:  # each read after epoll said the socket is readable: none finds it empty
                found = counts["batched"][0] + counts["one"][0]
                assert found >= 50 and counts["batched"][1] == 0 and counts["one"][1] == 0, counts
        stopped: list[object] = []
        a.send(peer, 2, b"stop", callback=stopped.append)
        btlcore.run_until([a], lambda: bool(stopped), timeout=5)
    finally:
        stop.set()
        server.join(5)
        a.close()
        b.close()


@pytest.mark.parametrize("mtu", [1472, 8972, 65000])
@pytest.mark.parametrize("lossy", [False, True], ids=["lossless", "lossy"])
def test_gathered_bulk_arrives_intact(mtu: int, lossy: bool) -> None:
    # bulk chunks leave as [header, view of the message] (no copy); a send filter (here
    # dropping every 7th datagram) sees them joined, and retransmissions re-stamp both parts
    a = btlcore.open("udp", bind="127.0.0.1:0", config=btlcore.Config(mtu=mtu))
    b = btlcore.open("udp", bind="127.0.0.1:0", config=btlcore.Config(mtu=mtu))
    try:
        gathering = a.engine.state.gather_min is not None
        assert gathering == (mtu >= 4096)  # below GATHER_MIN + headers, nothing to gather
        if lossy:
            count = [0]

            def keep(channel: int, data: bytes) -> bool:
                assert isinstance(data, (bytes, bytearray, memoryview))
                count[0] += 1
                return count[0] % 7 != 0

            a.add_send_filter(keep)
        got: list[bytes] = []
        b.on(1, lambda peer, tag, data: got.append(bytes(data)))
        peer = a.connect(b.address)
        rng = random.Random(mtu)
        msgs = [rng.randbytes(n) for n in (1, 3000, 1 << 20, 250_001, 5 * mtu + 17)]
        done: list[object] = []
        for m in msgs:
            a.send(peer, 1, m, callback=done.append)
        btlcore.run_until([a, b], lambda: len(done) == len(msgs) and len(got) == len(msgs), timeout=20)
        assert got == msgs and done == [None] * len(msgs)
        assert (a.stats()["num_resends"] > 0) == lossy
        assert b.stats()["num_crc_errors"] == 0
    finally:
        a.close()
        b.close()
