"""Back-pressure on virtual time: the per-peer send buffer (WouldBlock, PeerWritable) and the
receive window that data delivered but not consumed shrinks (to zero, and open again)."""

from __future__ import annotations

import pytest

from btlcore import Config, WouldBlock
from btlcore.errors import BtlError
from btlcore.protocol.events import PeerWritable
from btlcore.protocol.wire import ACK_BODY, T_ACK, T_DATA
from btlcore.testing.enginepair import EnginePair


def pair(**cfg: object) -> EnginePair:
    p = EnginePair(Config(**cfg))  # type: ignore[arg-type]
    p.handshake()
    return p


def writables(p: EnginePair) -> list[object]:
    return [e for _t, i, e in p.timeline if i == 0 and type(e) is PeerWritable]


def test_would_block_is_a_btl_error_and_a_blocking_io_error() -> None:
    assert issubclass(WouldBlock, BtlError) and issubclass(WouldBlock, BlockingIOError)


def test_a_send_that_does_not_fit_raises_and_queues_nothing() -> None:
    p = pair(send_buffer=10_000)
    p.send(0, 1, 1, bytes(6000), key="first")
    sent = p.pa.counters.num_msgs_sent
    queued = len(p.pa.queue)
    with pytest.raises(WouldBlock, match="send_buffer=10000"):
        p.send(0, 1, 1, bytes(6000), key="second")
    assert p.pa.counters.num_msgs_sent == sent and len(p.pa.queue) == queued
    assert p.pa.send_queued == 6000 and p.pa.counters.num_send_blocks == 1
    p.send(0, 1, 1, bytes(4000), key="fits")  # what fits is still accepted
    p.run(lambda: p.completions["first"] and p.completions["fits"])
    assert p.completions["second"] == []  # refused: its callback never fires
    assert p.pa.send_queued == 0
    assert [bytes(d) for _a, _t, d in p.delivered[1]] == [bytes(6000), bytes(4000)]


def test_an_empty_buffer_takes_a_message_larger_than_itself() -> None:
    p = pair(send_buffer=1000)
    p.send(0, 1, 1, bytes(50_000), key="big")
    with pytest.raises(WouldBlock):
        p.send(0, 1, 1, b"x", key="small")
    p.run(lambda: p.completions["big"])
    p.send(0, 1, 1, b"x", key="small")  # emptied: accepted again
    p.run(lambda: p.completions["small"])
    assert p.completions == {"big": [None], "small": [None]}


def test_writable_fires_once_per_refusal_when_the_buffer_drains_to_half() -> None:
    p = pair(send_buffer=8000)
    for k in range(8):
        p.send(0, 1, 1, bytes(1000), key=k)
    with pytest.raises(WouldBlock):
        p.send(0, 1, 1, bytes(1000), key="refused")
    with pytest.raises(WouldBlock):  # refused twice: still one event
        p.send(0, 1, 1, bytes(1000), key="refused")
    p.run(lambda: all(p.completions[k] for k in range(8)))
    p.run_idle()
    events = writables(p)
    assert len(events) == 1 and events[0].peer is p.pa  # type: ignore[attr-defined]
    # the event came once half had drained, before everything completed
    at = next(t for t, i, e in p.timeline if type(e) is PeerWritable)
    last = max(t for t, i, e in p.timeline if i == 0 and type(e).__name__ == "SendCompleted")
    assert at <= last
    # no refusal since: no more events, however many ACKs arrive
    for k in range(8, 16):
        p.send(0, 1, 1, bytes(500), key=k)
    p.run(lambda: all(p.completions[k] for k in range(8, 16)))
    p.run_idle()
    assert len(writables(p)) == 1


def test_a_failed_peer_empties_its_send_buffer_without_a_writable_event() -> None:
    p = pair(send_buffer=4000, peer_timeout=0.2)
    p.send(0, 1, 1, bytes(3000), key="a")
    with pytest.raises(WouldBlock):
        p.send(0, 1, 1, bytes(3000), key="b")
    p.faults.partition(p.now, None, [1])
    p.run(lambda: p.completions["a"], max_time=p.now + 5)
    assert p.pa.send_queued == 0 and not writables(p)


def acks_windows(p: EnginePair, src: int) -> list[int]:
    out = []
    for _t, d in p.sent(src, T_ACK):
        out.append(ACK_BODY.unpack_from(d.payload)[0])
    return out


def test_unconsumed_data_closes_the_window_and_a_window_update_reopens_it() -> None:
    cfg = Config(recv_buffer=20_000, window=64)
    p = EnginePair(cfg, mtu=1500)
    p.handshake()
    chunk = p.b.state.chunk_cap
    assert p.b.packetizer.advertised_window(p.pb) == min(64, 20_000 // chunk)
    p.b.set_unconsumed(p.pb, 20_000)  # the application holds the whole budget
    assert p.b.packetizer.advertised_window(p.pb) == 0
    p.send(0, 1, 1, b"a" * 100, key=0)
    p.run(lambda: p.completions[0])
    p.run_idle()
    assert p.pa.remote_window == 0 and acks_windows(p, 1)[-1] == 0
    # zero window: the sender stops, queue kept, nothing sent however long we wait
    p.send(0, 1, 1, b"b" * 5000, key=1)
    before = len(p.sent(0, T_DATA))
    p.run_idle(p.now + 30)
    assert len(p.sent(0, T_DATA)) == before and p.completions[1] == []
    assert p.pa.state.value == "established"  # a stopped sender is not a dead peer
    # the application reads: the window opens, an ACK says so at once, the sender resumes
    p.b.set_unconsumed(p.pb, 0)
    p.run(lambda: p.completions[1], max_time=p.now + 1)
    assert acks_windows(p, 1)[-1] > 0
    assert [bytes(d) for _a, _t, d in p.delivered[1]] == [b"a" * 100, b"b" * 5000]


def test_window_shrinks_in_proportion_and_never_below_one_before_the_budget() -> None:
    p = pair(recv_buffer=100_000, window=4096)
    pk, pb = p.b.packetizer, p.pb
    chunk = p.b.state.chunk_cap
    full = pk.advertised_window(pb)
    assert full == min(4096, 100_000 // chunk)
    p.b.set_unconsumed(pb, 50_000)
    assert pk.advertised_window(pb) == 50_000 // chunk
    p.b.set_unconsumed(pb, 100_000 - 1)
    assert pk.advertised_window(pb) == 1
    p.b.set_unconsumed(pb, 10**9)
    assert pk.advertised_window(pb) == 0


def test_set_unconsumed_is_silent_while_the_window_shrinks() -> None:
    p = pair(recv_buffer=100_000)
    p.run_idle()
    acks = p.pb.counters.num_ack_sends
    for n in range(0, 100_000, 10_000):
        p.b.set_unconsumed(p.pb, n)
    p.run_idle()
    assert p.pb.counters.num_ack_sends == acks
