"""Statistics: counters agree with what actually crossed the link; module = sum of peers."""

from __future__ import annotations

import json

from btlcore import Config
from btlcore.protocol.stats import (
    MODULE_COUNTERS,
    PEER_COUNTERS,
    ModuleCounters,
    PeerCounters,
    aggregate,
    stats_json,
    stats_line,
)
from btlcore.protocol.wire import T_ACK, T_DATA, T_HELLO, T_HELLO_ACK
from btlcore.testing.enginepair import EngineNet, EnginePair, safe_decode


def lossy_run() -> EnginePair:
    p = EnginePair(Config(window=32))
    p.add_hook(lambda s, d, raw, k: "drop" if k % 9 == 4 else (("dup", 1) if k % 11 == 5 else
                                                             (("delay", 0.0007) if k % 7 == 3 else None)))
    for i in range(60):
        p.send(0, 1, 1, bytes([i]) * (i * 97 % 4000), key=("a", i))
        if i % 3 == 0:
            p.send(1, 0, 2, bytes([i]) * 300, key=("b", i))
    p.run(lambda: all(v for v in p.completions.values()))
    p.run_idle()
    return p


def test_send_counters_add_up_and_match_the_link() -> None:
    p = lossy_run()
    for side, eng in ((0, p.a), (1, p.b)):
        st = eng.stats()
        assert st["num_total_sends"] == (st["num_frag_sends"] + st["num_chunk_sends"] + st["num_resends"]
                                         + st["num_ack_sends"] + st["num_hello_sends"])
        assert st["num_resends"] == st["num_fast_retrans"] + st["num_timeout_retrans"]
        logged = [safe_decode(raw) for _t, s, _d, raw in p.log if s == side]
        assert len(logged) == st["num_total_sends"]  # every datagram, HELLOs included
        assert sum(d.type == T_DATA for d in logged) == st["num_frag_sends"] + st["num_chunk_sends"] + st["num_resends"]
        assert sum(d.type == T_ACK for d in logged) == st["num_ack_sends"]
        assert sum(d.type in (T_HELLO, T_HELLO_ACK) for d in logged) == st["num_hello_sends"]
        assert st["num_resends"] > 0


def test_receive_counters_match_the_link() -> None:
    p = lossy_run()
    for side, eng in ((0, p.a), (1, p.b)):
        st = eng.stats()
        arrived = [safe_decode(raw) for _t, _s, d, raw in p.arrivals if d == side]
        data = sum(d.type == T_DATA for d in arrived)
        assert data == st["num_total_recvs"]
        assert st["num_total_recvs"] == (st["num_frag_recvs"] + st["num_chunk_recvs"] + st["num_dup_recvs"]
                                         + st["num_oow_low_recvs"] + st["num_oow_high_recvs"]
                                         + st["num_reassembly_drops"] + st["num_badfrag_recvs"])
        assert sum(d.type == T_ACK for d in arrived) == st["num_ack_recvs"]
        assert st["num_dup_recvs"] > 0


def test_message_counters() -> None:
    p = lossy_run()
    a, b = p.a.stats(), p.b.stats()
    assert a["num_msgs_sent"] == a["num_msgs_completed"] == 60 == b["num_msgs_delivered"]
    assert b["num_msgs_sent"] == b["num_msgs_completed"] == 20 == a["num_msgs_delivered"]
    assert a["num_bytes_sent"] == b["num_bytes_delivered"] == sum(i * 97 % 4000 for i in range(60))
    assert a["num_send_errors"] == b["num_send_errors"] == 0
    assert 0 < a["max_send_window"] <= 32
    assert 0 < b["max_recv_window"] <= 32


def test_module_stats_are_sum_over_peers() -> None:
    net = EngineNet(4, Config())
    for j in (1, 2, 3):
        for i in range(j * 5):
            net.send(0, j, 1, bytes(j * 1000), key=(j, i))
    net.add_hook(lambda s, d, raw, k: "drop" if k % 6 == 2 else None)
    net.run(lambda: all(v for v in net.completions.values()))
    net.engines[0].receive_datagram(b"junk", None, net.now)
    a = net.engines[0]
    st = a.stats()
    peers = list(a.peers_by_addr.values())
    assert len(peers) == 3
    for name in PEER_COUNTERS:
        values = [getattr(pc.counters, name) for pc in peers]
        assert st[name] == (max(values) if name.startswith("max_") else sum(values)), name
    for name in MODULE_COUNTERS:
        assert st[name] == getattr(a.counters, name)
    assert st["num_malformed_recvs"] == 1
    assert st["num_msgs_sent"] == 5 + 10 + 15


def test_aggregate_and_formats() -> None:
    p1, p2 = PeerCounters(num_total_sends=3, max_send_window=7), PeerCounters(num_total_sends=4, max_send_window=5)
    m = ModuleCounters(num_crc_errors=2)
    agg = aggregate(m, [p1, p2])
    assert agg["num_total_sends"] == 7 and agg["max_send_window"] == 7 and agg["num_crc_errors"] == 2
    assert set(agg) == set(PEER_COUNTERS) | set(MODULE_COUNTERS)
    line = stats_line("btl0", agg)
    assert line.startswith("btl0: S/s 7 (0 resends")
    assert "crc 2, malformed 0" in line and "win hw send 7 recv 0" in line
    assert json.loads(stats_json(agg, label="x")) == {**agg, "label": "x"}


def test_stats_survive_restart() -> None:
    p = EnginePair()
    p.handshake()
    p.send(0, 1, 1, b"x", key=0)
    p.run(lambda: p.completions[0])
    before = p.pb.counters.num_msgs_delivered
    p.restart(0)
    p.a.connect(b"B", p.now)
    p.run(lambda: p.established(0, 1))
    assert p.pb.counters.num_msgs_delivered == before  # b's counters for a are kept
    assert p.b.stats()["num_peer_restarts"] == 1


def test_duplicate_and_old_ack_counters() -> None:
    p = EnginePair(Config(ack_delay=0.0))
    p.handshake()
    p.send(0, 1, 1, b"one", key=1)
    p.run(lambda: p.completions[1])
    first_ack = [raw for _t, s, _d, raw in p.log if s == 1 and safe_decode(raw).type == T_ACK][-1]
    p.send(0, 1, 1, b"two", key=2)
    p.run(lambda: p.completions[2])
    p.run_idle()
    last_ack = [raw for _t, s, _d, raw in p.log if s == 1 and safe_decode(raw).type == T_ACK][-1]
    c = p.pa.counters
    dup0, old0 = c.num_dup_acks, c.num_old_dup_acks
    p.a.receive_datagram(last_ack, None, p.now)  # the same ACK point again: a duplicate ACK
    assert (c.num_dup_acks, c.num_old_dup_acks) == (dup0 + 1, old0)
    p.a.receive_datagram(first_ack, None, p.now)  # an ACK point behind the current one: old
    assert c.num_old_dup_acks == old0 + 1
    assert p.pa.snd_una == p.pa.next_seq - 1  # nothing moved backwards


def test_bytes_held_counts_what_arrived_and_waits_for_a_hole() -> None:
    """``bytes_held``: the receiver's message bytes from a peer that arrived but wait, in
    reassembly (chunks above a lost one) or, ordered, whole behind an earlier message."""
    from btlcore.protocol.stats import path_state
    from btlcore.protocol.wire import CHUNK_LEN, HEADER_LEN

    p = EnginePair(Config(), mtu=1500)
    p.handshake()
    rx = p.b.peers_by_addr[b"A"]
    assert path_state(rx)["bytes_held"] == 0
    p.faults.drop(src=0, dst=1, type="DATA", nth=1)  # the first chunk of `big`: a hole at its start
    big = bytes(range(256)) * 20  # 5120 B: four chunks at this MTU
    p.send(0, 1, 7, big, key="big")
    p.send(0, 1, 7, b"small", key="small")  # complete, but behind `big` (ordered)
    held: list[int] = []
    p.run(lambda: held.append(int(path_state(rx)["bytes_held"])) is None and len(p.delivered[1]) == 2)
    chunk = 1500 - HEADER_LEN - CHUNK_LEN
    assert max(held) == len(big) - chunk + len(b"small")  # all but the lost chunk, and `small`
    assert path_state(rx)["bytes_held"] == 0
