"""Death means silence, on the paths where it is hardest (issue #12, item 4), on the simulator's
virtual time: a live peer that keeps answering is never declared dead, however slow, lossy or
stalled the path, and every byte arrives."""

from __future__ import annotations

import hashlib

import pytest

import btlcore
from btlcore import Config, Transport
from btlcore_sim import Fabric, LinkModel

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _pair(link: LinkModel, config: Config, seed: int = 1) -> tuple[Fabric, Transport, Transport]:
    fabric = Fabric(seed=seed, default=link)
    a = btlcore.open("sim", fabric=fabric, name="a", config=config)
    b = btlcore.open("sim", fabric=fabric, name="b", config=config)
    return fabric, a, b


def _transfer(a: Transport, b: Transport, messages: list[bytes], timeout: float,
              reader: bool = True) -> tuple[list[BaseException | None], list[bytes], list[str]]:
    """Send ``messages`` a -> b (b's handler keeps them); the completions, what arrived, and
    every peer event either side saw."""
    got: list[bytes] = []
    done: list[BaseException | None] = []
    events: list[str] = []
    b.on(1, lambda peer, tag, data: got.append(bytes(data)))
    for t in (a, b):
        t.on_peer(lambda event, peer, exc: events.append(event))
    peer = a.connect(b.address)
    for m in messages:
        a.send(peer, 1, m, done.append)
    btlcore.run_until([a, b], lambda: len(done) == len(messages) and len(got) == len(messages),
                      timeout=timeout)
    return done, got, events


def _digest(chunks: list[bytes]) -> str:
    return hashlib.sha256(b"".join(chunks)).hexdigest()


def test_a_slow_link_behind_a_long_queue_survives() -> None:
    # 10 Mb/s behind a 1 MiB queue (839 ms of it: the round trip grows to ~0.9 s), 20 x 1 MB:
    # the transfer that declared a live peer dead on main before #12
    link = LinkModel(rate_mbps=10.0, delay=0.05, queue_limit=1 << 20)
    _fabric, a, b = _pair(link, Config(send_buffer=32 << 20))  # (all queued at once)
    messages = [bytes([i]) * 1_000_000 for i in range(20)]
    done, got, events = _transfer(a, b, messages, timeout=120.0)
    assert done == [None] * 20 and _digest(got) == _digest(messages)
    assert "failed" not in events
    assert a.stats()["num_peer_failures"] == 0 == b.stats()["num_peer_failures"]


def test_a_long_lossy_path_survives() -> None:
    # 50 ms one way, 10% random loss both ways, a short peer_timeout (2 s): silence that long
    # needs some 20 round trips in a row of everything lost, which a live path never shows
    link = LinkModel(delay=0.05, loss=0.10)
    _fabric, a, b = _pair(link, Config(peer_timeout=2.0))
    messages = [bytes([i % 256]) * (1000 + 97 * i) for i in range(150)]
    done, got, events = _transfer(a, b, messages, timeout=600.0)
    assert done == [None] * 150 and sorted(got) == sorted(messages)
    assert "failed" not in events
    assert a.stats()["num_resends"] > 0  # (the path did lose)


def test_a_zero_window_for_many_peer_timeouts_survives() -> None:
    # the receiver's application does not read for 5 peer_timeouts: its window is zero, the
    # sender stops and probes; both stay up, and the transfer completes once it reads
    config = Config(peer_timeout=1.0, recv_buffer=64_000)
    _fabric, a, b = _pair(LinkModel(delay=0.001), config)
    peer = a.connect(b.address)
    done: list[BaseException | None] = []
    events: list[str] = []
    for t in (a, b):
        t.on_peer(lambda event, p, exc: events.append(event))
    messages = [bytes([i]) * 20_000 for i in range(20)]
    for m in messages:
        a.send(peer, 1, m, done.append)
    stalled = a.now() + 5.0
    btlcore.run_until([a, b], lambda: a.now() >= stalled, timeout=10.0)
    assert len(done) < 20  # (the window closed: it is still waiting)
    assert a.peer_stats(peer)["num_ack_recvs"] > 0 and "failed" not in events
    got: list[bytes] = []

    def drain() -> bool:
        while (m := b.recv(timeout=0)) is not None:
            got.append(bytes(m.data))
        return len(got) == 20 and len(done) == 20

    btlcore.run_until([a, b], drain, timeout=30.0)
    assert done == [None] * 20 and got == messages and "failed" not in events
