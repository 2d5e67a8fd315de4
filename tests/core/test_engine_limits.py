"""Limits: message size, concurrent reassemblies, tags, send credits between peers."""

from __future__ import annotations

import random

import pytest

from btlcore import Config
from btlcore.errors import MessageTooLarge
from btlcore.protocol.engine import Engine
from btlcore.protocol.wire import T_DATA
from btlcore.testing.enginepair import EngineNet, EnginePair, safe_decode


def pair(config_b: Config | None = None, **cfg: object) -> EnginePair:
    # aimd: these tests count the datagrams of each send pass, unpaced
    p = EnginePair(Config(**{"cc": "aimd", **cfg}), config_b=config_b)  # type: ignore[arg-type]
    p.handshake()
    return p


def test_max_message_size_enforced_at_send() -> None:
    p = pair(max_message_size=5000)
    p.send(0, 1, 1, bytes(5000), key="ok")
    with pytest.raises(MessageTooLarge, match="5001 bytes exceeds max_message_size=5000"):
        p.send(0, 1, 1, bytes(5001), key="big")
    p.run(lambda: p.completions["ok"])
    assert p.completions["big"] == []  # raised: no callback
    assert p.a.stats()["num_msgs_sent"] == 1


def test_receiver_refuses_chunks_of_oversized_message() -> None:
    p = pair(config_b=Config(max_message_size=3000, peer_timeout=0.3), peer_timeout=0.3)
    p.pa.max_message = 1 << 20  # a sender ignoring the limit b advertised (else: MessageTooLarge)
    p.send(0, 1, 1, bytes(4000), key="big")
    p.run_idle(2)
    assert p.pb.counters.num_badfrag_recvs >= 3
    assert p.delivered[1] == []
    assert p.pb.reassembly == {}


@pytest.mark.parametrize("tag", [-1, 65536, 1 << 20])
def test_tag_out_of_range(tag: int) -> None:
    p = pair()
    with pytest.raises(ValueError, match="tags are 0 to 65535"):
        p.send(0, 1, tag, b"x")
    assert not p.pa.queue  # nothing was queued


def deque_empty():
    from collections import deque
    return deque()


@pytest.mark.parametrize("tag", [0, 1, 65535])
def test_tag_extremes_delivered(tag: int) -> None:
    p = pair()
    p.send(0, 1, tag, b"t", key=tag)
    p.run(lambda: p.completions[tag])
    assert p.delivered[1] == [(b"A", tag, b"t")]


def test_max_reassemblies_drops_unacked_then_recovers() -> None:
    p = pair(config_b=Config(max_reassemblies=1))
    # the last chunk of the first message is lost: its reassembly stays open while the
    # second message's chunks arrive
    p.faults.drop(where=lambda d: d.type == T_DATA and d.offset is not None and d.msg_id == 1
                 and d.offset + len(d.payload) == d.msg_len, count=1)
    m1, m2 = bytes(range(256)) * 20, bytes(range(255, -1, -1)) * 20
    p.send(0, 1, 1, m1, key=1)
    p.send(0, 1, 2, m2, key=2)
    p.run(lambda: p.completions[1] and p.completions[2])
    assert p.delivered[1] == [(b"A", 1, m1), (b"A", 2, m2)]
    assert p.pb.counters.num_reassembly_drops >= 1
    assert p.pb.reassembly == {}
    assert p.completions == {1: [None], 2: [None]}


def test_max_reassemblies_unordered_mode() -> None:
    p = pair(config_b=Config(max_reassemblies=2, ordered=False), ordered=False)
    p.add_hook(lambda s, d, raw, k: "drop" if s == 0 and k % 4 == 1 else None)
    msgs = [bytes([i]) * 4000 for i in range(8)]
    for i, m in enumerate(msgs):
        p.send(0, 1, i, m, key=i)
    p.run(lambda: all(p.completions[i] for i in range(8)))
    p.run_idle()
    assert sorted(p.delivered[1]) == sorted((b"A", i, m) for i, m in enumerate(msgs))
    assert len(p.pb.reassembly) == 0


def test_send_credits_round_robin_between_peers() -> None:
    net = EngineNet(3, Config(send_credits=2, cc="aimd"))  # (aimd: unpaced send passes)
    for j in (1, 2):
        net.connect(0, j)
    net.run(lambda: net.established(0, 1) and net.established(0, 2))
    net.run_idle()
    for i in range(6):
        net.send(0, 1, 1, b"b%d" % i, key=("b", i))
        net.send(0, 2, 1, b"c%d" % i, key=("c", i))
    a = net.engines[0]
    passes = []
    for _ in range(3):
        passes.append([dest for _ch, dest, _buf in a.datagrams_to_send(net.now)])
    assert passes == [[b"B", b"B", b"C", b"C"]] * 3
    assert a.datagrams_to_send(net.now) == []


def test_send_budget_respected_and_fairness_kept() -> None:
    net = EngineNet(3, Config(send_credits=4, cc="aimd"))  # (aimd: unpaced send passes)
    for j in (1, 2):
        net.connect(0, j)
    net.run(lambda: net.established(0, 1) and net.established(0, 2))
    net.run_idle()
    for i in range(8):
        net.send(0, 1, 1, b"b", key=("b", i))
        net.send(0, 2, 1, b"c", key=("c", i))
    a = net.engines[0]
    first = [d for _c, d, _b in a.datagrams_to_send(net.now, budget=3)]
    assert first == [b"B", b"B", b"B"]
    # b was cut short by the budget and went to the back of the line: c goes first now
    second = [d for _c, d, _b in a.datagrams_to_send(net.now, budget=100)]
    assert second == [b"C"] * 4 + [b"B"] * 4
    third = [d for _c, d, _b in a.datagrams_to_send(net.now, budget=100)]
    assert third == [b"C"] * 4 + [b"B"]


def test_many_peers_all_delivered() -> None:
    net = EngineNet(5, Config())
    for j in range(1, 5):
        for i in range(10):
            net.send(0, j, i, bytes([j, i]) * 1000, key=(j, i))
    net.run(lambda: all(net.completions[(j, i)] for j in range(1, 5) for i in range(10)))
    for j in range(1, 5):
        assert net.delivered[j] == [(b"A", i, bytes([j, i]) * 1000) for i in range(10)]


def test_tiny_mtu_rejected() -> None:
    with pytest.raises(ValueError, match="too small"):
        Engine(Config(), address=b"A", resolve=lambda a: a, data_mtu=60, priority_mtu=60, crc=True,
               rng=random.Random(1), now=0.0)
    e = Engine(Config(mtu=200), address=b"A", resolve=lambda a: a, data_mtu=1500, priority_mtu=768,
               crc=True, rng=random.Random(1), now=0.0)
    assert e.data_mtu == 200 and e.priority_mtu == 200


def test_small_mtu_end_to_end() -> None:
    p = EnginePair(Config(mtu=128, window=64), mtu=1500)
    p.handshake()
    m = bytes(range(256)) * 10
    p.send(0, 1, 1, m, key=0)
    p.run(lambda: p.completions[0])
    assert p.delivered[1] == [(b"A", 1, m)]
    assert max(len(raw) for _t, _s, _d, raw in p.log) <= 128


@pytest.mark.parametrize("ordered", [True, False])
def test_reassembly_slot_held_by_later_message_does_not_deadlock(ordered: bool) -> None:
    """max_reassemblies=1, window 8: message 3's chunks take the only reassembly slot while
    message 2 (all of whose chunks were refused) still needs it, and message 3's last chunk
    lies beyond the window until message 2 is acknowledged.  The segment right after the
    cumulative point must always be accepted, or this deadlocks (found by test_properties)."""
    p = EnginePair(Config(window=8, max_reassemblies=1, cc="none", ordered=ordered, peer_timeout=3.0),
                   mtu=160)
    p.handshake()
    isn = p.pa.isn

    def late_third(s: int, d: int, raw: bytes, k: int) -> object:
        dg = safe_decode(raw)
        return ("delay", 0.001) if s == 0 and dg is not None and dg.type == T_DATA and dg.seq == isn + 3 else None
    p.add_hook(late_third)
    msgs = [bytes([i]) * n for i, n in enumerate((259, 449, 337))]  # 3, 5 and 4 chunks
    for i, m in enumerate(msgs):
        p.send(0, 1, i, m, key=i)
    p.run(lambda: all(p.completions[i] for i in range(3)), max_time=2.0)
    assert p.completions == {0: [None], 1: [None], 2: [None]}
    assert sorted(p.delivered[1]) == [(b"A", i, m) for i, m in enumerate(msgs)]
    assert p.pb.counters.num_reassembly_drops > 0
