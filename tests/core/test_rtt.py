"""RetransmitTimer: RFC 6298 arithmetic, clamping, backoff and the fixed mode."""

from __future__ import annotations

import pytest

from btlcore.protocol.rtt import GRANULARITY, RetransmitTimer


def adaptive(initial: float = 0.02, lo: float = 0.001, hi: float = 2.0) -> RetransmitTimer:
    return RetransmitTimer(True, initial, lo, hi, 0.005)


def test_initial_rto_clamped() -> None:
    assert adaptive(0.02).rto == 0.02
    assert adaptive(0.0001, lo=0.001).rto == 0.001
    assert adaptive(5.0, hi=2.0).rto == 2.0
    t = adaptive()
    assert t.srtt is None and t.min_rtt is None


def test_first_sample_rfc6298() -> None:
    t = adaptive()
    t.sample(0.010)
    assert t.srtt == 0.010
    assert t.rttvar == 0.005
    assert t.rto == pytest.approx(0.010 + 4 * 0.005)
    assert t.min_rtt == 0.010


def test_subsequent_samples_rfc6298() -> None:
    t = adaptive()
    t.sample(0.010)
    t.sample(0.020)
    rttvar = 0.75 * 0.005 + 0.25 * abs(0.010 - 0.020)
    srtt = 0.875 * 0.010 + 0.125 * 0.020
    assert t.rttvar == rttvar and t.srtt == srtt
    assert t.rto == srtt + 4 * rttvar
    t.sample(0.004)
    assert t.min_rtt == 0.004
    rttvar = 0.75 * rttvar + 0.25 * abs(srtt - 0.004)
    srtt = 0.875 * srtt + 0.125 * 0.004
    assert t.rto == srtt + 4 * rttvar


def test_granularity_floor_when_variance_vanishes() -> None:
    t = adaptive(lo=1e-6)
    for _ in range(200):
        t.sample(0.010)
    assert t.rttvar < GRANULARITY / 4
    assert t.rto == t.srtt + GRANULARITY


def test_rto_clamped_to_bounds() -> None:
    t = adaptive(lo=0.05, hi=0.5)
    t.sample(0.001)
    assert t.rto == 0.05
    t2 = adaptive(lo=0.05, hi=0.5)
    t2.sample(1.0)
    assert t2.rto == 0.5


def test_negative_sample_ignored() -> None:
    t = adaptive()
    t.sample(-0.001)
    assert t.srtt is None and t.rto == 0.02


def test_backoff_doubles_up_to_cap_and_progress_resets() -> None:
    t = adaptive(initial=0.1, hi=1.0)
    seen = [t.rto]
    for _ in range(6):
        t.expired()
        seen.append(t.rto)
    assert seen == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    assert t.backoff == 16  # stops doubling once the cap binds
    t.progress()
    assert t.backoff == 1 and t.rto == 0.1


def test_backoff_applies_to_sampled_rto() -> None:
    t = adaptive()
    t.sample(0.010)
    base = t.rto
    t.expired()
    assert t.rto == 2 * base
    t.sample(0.010)  # a sample does not end the backoff by itself
    assert t.backoff == 2


def test_fixed_mode_ignores_samples_and_backoff() -> None:
    t = RetransmitTimer(False, 0.02, 0.001, 2.0, 0.005)
    assert t.rto == 0.005
    t.sample(0.5)
    t.expired()
    t.expired()
    assert t.rto == 0.005 and t.backoff == 1
    assert t.srtt == 0.5  # still measured (for loss detection), just not used for the RTO


def test_peer_ack_delay_added_to_rto() -> None:
    t = RetransmitTimer(True, 0.02, 1e-6, 2.0, 0.005, max_ack_delay=0.003)
    t.sample(0.010)
    assert t.rto == pytest.approx(0.010 + 4 * 0.005 + 0.003)
    t.set_max_ack_delay(0.02)
    t.sample(0.010)
    srtt, rttvar = t.srtt, t.rttvar
    assert t.rto == pytest.approx(srtt + 4 * rttvar + 0.02)
    fixed = RetransmitTimer(False, 0.02, 1e-6, 2.0, 0.005, max_ack_delay=0.5)
    assert fixed.rto == 0.005


def test_ack_delay_leaves_the_min_rtt_whole_and_never_takes_srtt_below_it() -> None:
    """RFC 9002 section 5.3: the min RTT is the sample as measured (a receiver's word on its
    ACK delay cannot take it lower); srtt takes the sample less the delay, but only where
    that stays at or above the min RTT."""
    t = adaptive()
    t.sample(0.010, 0.008)  # less the delay, 2 ms: below the min RTT (this sample, 10 ms)
    assert t.min_rtt == 0.010
    assert t.srtt == 0.010
    t.sample(0.030, 0.015)  # less the delay, 15 ms: at or above the min RTT, so taken
    assert t.min_rtt == 0.010
    assert t.srtt == pytest.approx(0.875 * 0.010 + 0.125 * 0.015)
    t.sample(0.012, 0.006)  # 6 ms is below the min RTT: the sample is taken whole
    assert t.srtt == pytest.approx(0.875 * (0.875 * 0.010 + 0.125 * 0.015) + 0.125 * 0.012)
    assert t.min_rtt == 0.010
