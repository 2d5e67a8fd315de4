"""protocol.md §6.4, the ACK policy, checked rule by rule with datagrams crafted by hand:
the delayed ACK, the ACK frequency, SACK news and its rate limit, duplicates and
out-of-window segments, truncation to the highest, the latest and the lowest ranges, and the
piggy-backed ACK."""

from __future__ import annotations

from docskit import RawSender  # type: ignore[import-not-found]

from btlcore.protocol import wire


def _ack_body(d: wire.Datagram) -> tuple[int, list[tuple[int, int]], int, int]:
    return wire.parse_ack_payload(d.payload)


def test_ack_policy_in_order_waits_ack_delay() -> None:
    r = RawSender()
    assert r.send(1) == []                       # in order: no ACK at once
    assert r.advance(100e-6) == []
    (ack,) = r.advance(100e-6)                   # ack_delay (200 µs) after the arrival
    window, ranges, delay, flags = _ack_body(ack)
    assert ack.ack == r.isn + 1 and ranges == [] and flags == 0 and window == 4096
    assert delay == 200                          # µs since the largest number arrived


def test_ack_policy_ack_frequency() -> None:
    r = RawSender()
    for k in range(1, 8):
        assert r.send(k) == []
    (ack,) = r.send(8)                           # the 8th unacknowledged segment: at once
    assert ack.ack == r.isn + 8


def test_ack_policy_out_of_order_sack_and_rate_limit() -> None:
    r = RawSender()
    (ack,) = r.send(2)                           # 1 missing: SACK news, at once
    assert ack.ack == r.isn and _ack_body(ack)[1] == [(2, 1)]
    assert r.send(4) == []                       # more news within ack_delay: rate limited
    (ack,) = r.advance(200e-6)                   # ... until last ACK + ack_delay
    assert _ack_body(ack)[1] == [(2, 1), (4, 1)]


def test_ack_policy_duplicate_and_out_of_window_at_once_rate_limited() -> None:
    r = RawSender()
    r.send(1)
    (ack,) = r.advance(1e-3)                     # the delayed ACK leaves (now: 1 ms)
    assert r.send(1) == []                       # a duplicate within ack_delay of it: rate limited
    (ack,) = r.advance(200e-6)                   # ... until last ACK + ack_delay, AF_DUPLICATE
    assert _ack_body(ack)[3] & wire.AF_DUPLICATE
    r.advance(1e-3)
    (ack,) = r.send(1)                           # a duplicate after a quiet ack_delay: at once
    assert _ack_body(ack)[3] & wire.AF_DUPLICATE and r.peer.counters.num_dup_recvs == 2
    r.advance(1e-3)
    (ack,) = r.send(1 + 4096 + 5)                # above the window: at once
    assert _ack_body(ack)[3] == 0 and r.peer.counters.num_oow_high_recvs == 1
    assert r.send(1 + 4096 + 6) == []            # another one at once after: rate limited
    (ack,) = r.advance(200e-6)
    assert r.peer.counters.num_oow_high_recvs == 2


def test_ack_truncation_keeps_the_highest_range() -> None:
    r = RawSender()
    for k in range(2, 2 + 2 * 70, 2):            # 70 ranges of one, every other one missing
        r.send(k)
        r.advance(1e-3)
    r.advance(1e-3)
    (ack,) = r.send(2 + 2 * 70)                  # one more range: 71
    window, ranges, delay, flags = _ack_body(ack)
    assert len(ranges) == wire.MAX_SACK_RANGES and flags & wire.AF_TRUNCATED
    assert ranges[-1] == (2 * 71, 1)             # the highest range, always
    # with it, those of the latest arrivals until 32 are listed (each range here is one
    # arrival), then the lowest 32: ascending
    assert ranges == [(2 * i, 1) for i in range(1, 33)] + [(2 * i, 1) for i in range(40, 72)]
    assert delay != 0xFFFFFFFF


def test_piggy_backed_ack_pays_the_debt() -> None:
    r = RawSender()
    r.send(1)                                    # an ACK is now owed (delayed)
    peer = r.peer
    assert peer.state.value == "established"
    r.e.send(peer, 2, b"reply", None, r.now)
    out = r.collect(r.now)
    assert [d.type for d in out] == [wire.T_DATA] and out[0].flags & wire.F_ACK
    assert out[0].ack == r.isn + 1
    assert r.advance(1e-3) == []                 # no standalone ACK follows
