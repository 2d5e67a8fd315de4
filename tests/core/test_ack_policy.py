"""When a receiver's standalone ACKs leave (protocol.md §6.4), on virtual time: the debt is
counted from the first unacknowledged segment across receive passes, paid at once after
``ack_frequency`` segments, else ``ack_delay`` after that first segment; a receive pass
(one ``receive_datagrams`` batch) owes at most one ACK however many segments it holds."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from btlcore import Config
from btlcore.protocol.wire import T_ACK, T_DATA, decode, parse_ack_payload
from btlcore.testing.enginepair import EnginePair


def _sent(p: EnginePair, src: int, typ: int, since: int) -> list[tuple[float, bytes]]:
    return [(t, raw) for t, s, _d, raw in p.log[since:] if s == src and decode(raw).type == typ]


def _stream(p: EnginePair, n: int, size: int = 1000) -> int:
    """``n`` messages of one segment each from a to b, run until all are acknowledged; the
    log's mark before them."""
    mark = len(p.log)
    for i in range(n):
        p.send(0, 1, 1, bytes(size), key=i)
    p.run(lambda: all(p.completions.get(i) for i in range(n)))
    return mark


@pytest.mark.parametrize("delay", [1e-3, 20e-6])
def test_paced_stream_acked_once_per_ack_frequency(delay: float) -> None:
    # bbr (the default) paces: every segment lands alone, in a receive pass of its own
    p = EnginePair(Config(), batch_receive=True, delay=delay)
    p.handshake()
    n = 403
    arrivals = len(p.arrivals)
    mark = _stream(p, n)
    passes = Counter(t for t, s, _d, _raw in p.arrivals[arrivals:] if s == 0)
    assert max(passes.values()) == 1  # (else this would not test a paced stream)
    data = _sent(p, 0, T_DATA, mark)
    acks = _sent(p, 1, T_ACK, mark)
    assert len(data) == n
    # the count runs on across passes: one ACK per 8 segments, the tail's after ack_delay
    assert len(acks) <= math.ceil(n / 8) + 1
    assert decode(acks[-1][1]).ack == p.pa.isn + n


def test_one_receive_pass_owes_one_ack() -> None:
    # unpaced, a window leaves in one send pass and lands in one receive pass
    p = EnginePair(Config(cc="aimd", cwnd_initial=64), batch_receive=True)
    p.handshake()
    mark = _stream(p, 40)
    data = _sent(p, 0, T_DATA, mark)
    assert len({t for t, _raw in data}) == 1  # (one burst: the premise)
    (ack,) = _sent(p, 1, T_ACK, mark)
    t_ack, raw = ack
    assert t_ack == data[0][0] + p.delay  # at once: the count passed ack_frequency
    assert decode(raw).ack == p.pa.isn + 40


def test_count_carries_over_between_passes() -> None:
    p = EnginePair(Config(cc="aimd", ack_frequency=8, ack_delay=5e-3), batch_receive=True)
    p.handshake()
    b, pb = p.b, p.pb
    mark = len(p.log)
    for i in range(5):
        p.send(0, 1, 1, b"x", key=i)
    p.advance(p.now + p.delay)  # the five land in one pass
    assert p.delivered[1] and len(p.delivered[1]) == 5
    assert pb.ack_count == 5 and _sent(p, 1, T_ACK, mark) == []
    first = pb.ack_deadline
    assert first == pytest.approx(p.now + 5e-3)
    for i in range(5, 8):
        p.send(0, 1, 1, b"x", key=i)
    p.advance(p.now + p.delay)  # three more: the eighth since the ACK point was sent
    p.step()
    (ack,) = _sent(p, 1, T_ACK, mark)
    assert ack[0] < first and decode(ack[1]).ack == p.pa.isn + 8
    assert pb.ack_count == 0 and pb.ack_deadline is None and b is p.b


def test_tail_of_a_stream_acked_ack_delay_after_its_first_segment() -> None:
    # the segments after the last ACK but one wait no longer than ack_delay from the first of them
    p = EnginePair(Config(ack_delay=200e-6), batch_receive=True, delay=1e-3)
    p.handshake()
    n = 8 * 20 + 3
    arrivals = len(p.arrivals)
    mark = _stream(p, n)
    landed = {decode(raw).seq: t for t, s, _d, raw in p.arrivals[arrivals:]
              if s == 0 and decode(raw).type == T_DATA}
    *_, (_t, before), (t_last, raw) = _sent(p, 1, T_ACK, mark)
    first, last = decode(before).ack + 1, decode(raw).ack
    assert last == p.pa.isn + n and 0 < last - first + 1 < 8  # a tail below ack_frequency
    assert t_last == pytest.approx(landed[first] + 200e-6, abs=1e-9)
    _window, _ranges, delay_us, _flags = parse_ack_payload(decode(raw).payload)
    # the ACK reports how long it held the largest number back (a's RTT sample excludes it)
    assert abs(delay_us - (t_last - landed[last]) * 1e6) <= 1


def test_lone_message_acked_within_ack_delay() -> None:
    p = EnginePair(Config(ack_delay=300e-6), batch_receive=True)
    p.handshake()
    p.advance(p.now + 0.05)
    mark = _stream(p, 1, 64)
    (t_data, _), = _sent(p, 0, T_DATA, mark)
    (t_ack, _), = _sent(p, 1, T_ACK, mark)
    assert t_ack == pytest.approx(t_data + p.delay + 300e-6, abs=1e-9)
