"""Each link impairment, measured with a fixed seed against its model.

Tolerances are about five standard errors of the statistic at the sample size used, so a
correct model passes for any seed and a wrong one (off by a factor, wrong parameter) fails.
"""

from __future__ import annotations

import math
import statistics

import pytest

from btlcore.device import Channel
from btlcore.errors import ConfigError
from btlcore.protocol import wire
from btlcore_sim import Fabric, LinkModel

from simkit import Pair, frame, paced, seq_of, tiny  # type: ignore[import-not-found]


def _blast(pair: Pair, n: int, size: int = 40) -> list[int]:
    """Post n frames at once (draining b as it fills) and return the seqs b received."""
    got: list[int] = []
    for seq in range(n):
        assert pair.a.post_send(Channel.DATA, pair.ab, tiny(seq, size))
        if seq % 1024 == 1023:
            got.extend(seq_of(f) for f in pair.b.poll_recv(1 << 30))
    got.extend(seq_of(f) for f in pair.drain())
    return got


def _runs(lost: list[int]) -> list[int]:
    """Lengths of the runs of consecutive numbers in the sorted list ``lost``."""
    runs: list[int] = []
    prev = None
    for s in lost:
        if prev is not None and s == prev + 1:
            runs[-1] += 1
        else:
            runs.append(1)
        prev = s
    return runs


# -- LinkModel validation -------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("loss", -0.1), ("loss", 1.5), ("loss", "0.1"), ("duplicate", 2), ("corrupt", -1),
    ("reorder", 1.1), ("delay", -1e-3), ("jitter", -1), ("rate_mbps", -5),
    ("queue_limit", -1), ("queue_limit", 1.5), ("mtu", 0), ("mtu", 1.5),
    ("jitter_dist", "gamma"), ("burst", (0.5,)), ("burst", (1.0, 3)), ("burst", (0.1, 0.5)),
    ("burst", (0.6, 1)), ("burst", "x"),
])
def test_link_model_rejects_bad_values_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=repr(field)):
        LinkModel(**{field: value})


def test_reorder_needs_a_delay() -> None:
    with pytest.raises(ConfigError, match="delay"):
        LinkModel(reorder=0.1)
    assert LinkModel(reorder=0.1, delay=1e-3).reorder == 0.1


def test_gilbert_elliott_transition_probabilities() -> None:
    q, r = LinkModel(burst=(0.2, 5)).gilbert_elliott()
    assert r == pytest.approx(0.2)
    assert q == pytest.approx(0.2 * 0.2 / 0.8)
    assert q / (q + r) == pytest.approx(0.2)  # the stationary share of Bad is p
    assert LinkModel().gilbert_elliott() == (0.0, 0.0)


def test_default_model_is_ideal_and_others_are_not() -> None:
    assert LinkModel().ideal
    assert not LinkModel(delay=1e-6).ideal
    assert not LinkModel(mtu=1500).ideal


# -- loss -----------------------------------------------------------------------------------


def test_random_loss_rate(make_pair) -> None:
    n, p = 20000, 0.1
    pair = make_pair(LinkModel(loss=p), seed=11)
    got = _blast(pair, n)
    lost = n - len(got)
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(lost - n * p) < 5 * sigma
    assert pair.fabric.stats()["a->b"]["drops"] == {"loss": lost}
    assert got == sorted(got)  # loss alone never reorders
    # independent losses: runs of consecutive losses are short (mean 1/(1-p) ~ 1.11)
    assert statistics.mean(_runs(sorted(set(range(n)) - set(got)))) < 1.25


@pytest.mark.parametrize("p, mean_len", [(0.05, 4.0), (0.2, 10.0), (0.3, 1.0)])
def test_gilbert_elliott_loss_rate_and_mean_burst_length(make_pair, p: float, mean_len: float) -> None:
    n = 100_000
    pair = make_pair(LinkModel(burst=(p, mean_len)), seed=12)
    got = set(_blast(pair, n))
    lost = sorted(set(range(n)) - got)
    runs = _runs(lost)
    # bursts are geometric with mean L: the mean of k of them has a standard error of
    # sqrt(1 - 1/L) * L / sqrt(k)
    k = len(runs)
    sem = math.sqrt(1 - 1 / mean_len) * mean_len / math.sqrt(k)
    assert abs(statistics.mean(runs) - mean_len) < 5 * sem + 0.01
    # the loss rate of a two-state Markov chain: variance p(1-p)/n * (1+lam)/(1-lam), where
    # lam = 1 - q - r is the chain's memory
    q, r = LinkModel(burst=(p, mean_len)).gilbert_elliott()
    lam = 1 - q - r
    assert abs(len(lost) / n - p) < 5 * math.sqrt(p * (1 - p) / n * (1 + lam) / (1 - lam))
    assert pair.fabric.stats()["a->b"]["drops"] == {"burst": len(lost)}


# -- duplicate and corrupt ------------------------------------------------------------------


def test_duplicate_rate(make_pair) -> None:
    n, p = 20000, 0.05
    pair = make_pair(LinkModel(duplicate=p), seed=13)
    got = _blast(pair, n)
    extra = len(got) - n
    assert sorted(set(got)) == list(range(n))
    assert abs(extra - n * p) < 5 * math.sqrt(n * p * (1 - p))
    stats = pair.fabric.stats()["a->b"]
    assert stats["duplicated"] == extra
    assert stats["offered"] == n and stats["delivered"] == n + extra


def test_corruption_flips_one_bit_and_fails_the_crc(make_pair) -> None:
    n, p = 10000, 0.1
    pair = make_pair(LinkModel(corrupt=p), seed=14, recv_queue_depth=n)
    sent = {s: frame(s, 120) for s in range(n)}
    for s in range(n):
        assert pair.a.post_send(Channel.DATA, pair.ab, sent[s])
    got = pair.drain()
    assert len(got) == n  # corruption delivers (a wrong frame), it does not drop
    bad = [f for f in got if not wire.crc_ok(f)]
    corrupted = pair.fabric.stats()["a->b"]["corrupted"]
    assert abs(corrupted - n * p) < 5 * math.sqrt(n * p * (1 - p))
    # each corrupted frame differs from some sent frame in exactly one bit; the CRC catches
    # every flip except one that clears the F_CRC flag (1 bit in 960): allow a handful
    assert corrupted - 5 <= len(bad) <= corrupted
    originals = set(sent.values())
    for f in got:
        if f in originals:
            continue
        nearest = min((bin(int.from_bytes(f, "big") ^ int.from_bytes(o, "big")).count("1"), o)
                      for o in [sent[s] for s in range(n)] if len(o) == len(f))[0]
        assert nearest == 1
        break  # one full scan is enough; the count check above covers the rest


# -- delay, jitter, reorder -----------------------------------------------------------------


def _latencies(pair: Pair, n: int, interval: float) -> list[float]:
    sent, arrivals = paced(pair, n, interval)
    assert len(arrivals) == n
    return [t - sent[s] for t, s in arrivals]


def test_fixed_delay(make_pair) -> None:
    pair = make_pair(LinkModel(delay=0.004))
    lat = _latencies(pair, 100, 0.001)
    assert all(x == pytest.approx(0.004) for x in lat)


def test_normal_jitter(make_pair) -> None:
    n, d, j = 5000, 0.002, 0.0002
    pair = make_pair(LinkModel(delay=d, jitter=j, jitter_dist="normal"), seed=15)
    lat = _latencies(pair, n, 0.0001)
    assert abs(statistics.mean(lat) - d) < 5 * j / math.sqrt(n)
    assert statistics.stdev(lat) == pytest.approx(j, rel=0.1)


def test_uniform_jitter(make_pair) -> None:
    n, d, j = 5000, 0.002, 0.0005
    pair = make_pair(LinkModel(delay=d, jitter=j, jitter_dist="uniform"), seed=16)
    lat = _latencies(pair, n, 0.0001)
    assert d - j - 1e-12 <= min(lat) < d - 0.95 * j
    assert d + 0.95 * j < max(lat) <= d + j + 1e-12
    assert statistics.stdev(lat) == pytest.approx(j / math.sqrt(3), rel=0.1)


def test_pareto_jitter_is_one_sided_heavy_tailed_with_mean_jitter(make_pair) -> None:
    n, d, j = 5000, 0.001, 0.0002
    pair = make_pair(LinkModel(delay=d, jitter=j, jitter_dist="pareto"), seed=17)
    lat = _latencies(pair, n, 0.0001)
    assert min(lat) >= d - 1e-12
    assert statistics.mean(lat) - d == pytest.approx(j, rel=0.15)
    assert max(lat) > d + 5 * j  # a tail a normal of this spread would not have


def test_jitter_never_makes_a_negative_delay(make_pair) -> None:
    n = 2000
    pair = make_pair(LinkModel(delay=0.0001, jitter=0.001, jitter_dist="normal"), seed=18)
    lat = _latencies(pair, n, 0.0001)
    assert min(lat) >= 0.0
    clamped = sum(1 for x in lat if x == 0.0)
    # P(N(0.1 ms, 1 ms) < 0) = 0.46
    assert abs(clamped / n - 0.46) < 0.05


def test_reorder_sends_a_share_of_frames_past_the_delay(make_pair) -> None:
    n, p, d, gap = 5000, 0.25, 0.001, 0.0001
    pair = make_pair(LinkModel(delay=d, reorder=p), seed=19)
    sent, arrivals = paced(pair, n, gap)
    lat = {s: t - sent[s] for t, s in arrivals}
    skipped = sum(1 for x in lat.values() if x == 0.0)
    assert abs(skipped - n * p) < 5 * math.sqrt(n * p * (1 - p))
    assert all(x == 0.0 or x == pytest.approx(d) for x in lat.values())
    order = [s for _, s in arrivals]
    overtakes = sum(1 for i in range(1, n) if order[i] < order[i - 1])
    assert overtakes > 0.5 * skipped  # most skips overtake frames still in flight


# -- rate, queue, MTU -----------------------------------------------------------------------


def test_rate_limit_serialises_frames_back_to_back(make_pair) -> None:
    # 8 Mb/s = 1 byte per us: a 1000-byte frame takes 1 ms
    pair = make_pair(LinkModel(rate_mbps=8.0, delay=0.0005))
    pair.send(50, size=1000)
    arrivals = pair.arrivals()
    assert [seq_of(f) for _, f in arrivals] == list(range(50))
    for k, (t, _) in enumerate(arrivals):
        assert t == pytest.approx((k + 1) * 0.001 + 0.0005)


def test_rate_limit_throughput_matches_the_rate(make_pair) -> None:
    pair = make_pair(LinkModel(rate_mbps=100.0), send_queue_depth=64)
    sent, arrivals = paced(pair, 2000, 0.0, size=1250)  # as fast as the queue allows
    duration = arrivals[-1][0]
    assert 2000 * 1250 * 8 / duration / 1e6 == pytest.approx(100.0, rel=0.001)
    assert pair.fabric.totals()["dropped"] == 0


def test_queue_limit_tail_drops(make_pair) -> None:
    pair = make_pair(LinkModel(rate_mbps=8.0, queue_limit=10_000))
    pair.send(50, size=1000)
    got = [seq_of(f) for f in pair.drain()]
    assert got == list(range(10))  # the backlog holds 10 frames of 1000 bytes
    assert pair.fabric.stats()["a->b"]["drops"] == {"queue": 40}
    # a sender that keeps under the rate never fills the queue
    sent, arrivals = paced(pair, 100, 0.0011, size=1000)
    assert len(arrivals) == 100
    assert pair.fabric.stats()["a->b"]["drops"] == {"queue": 40}


def test_link_mtu_drops_longer_frames(make_pair) -> None:
    pair = make_pair(LinkModel(mtu=500))
    pair.send(1, size=500)
    pair.send(1, size=501, start=1)
    pair.send(1, size=9000, start=2)
    assert [seq_of(f) for f in pair.drain()] == [0]
    stats = pair.fabric.stats()["a->b"]
    assert stats["drops"] == {"mtu": 2}
    assert stats["bytes_offered"] == 500 + 501 + 9000 and stats["bytes_delivered"] == 500


# -- per-direction models -------------------------------------------------------------------


def test_set_link_is_per_direction(make_pair) -> None:
    pair = make_pair()
    pair.fabric.set_link("a", "b", LinkModel(loss=1.0))
    assert pair.fabric.link_model("a", "b").loss == 1.0
    assert pair.fabric.link_model("b", "a") == LinkModel()
    pair.send(10)
    for s in range(10):
        pair.b.post_send(Channel.DATA, pair.ba, tiny(s))
    assert pair.drain() == []
    assert len(pair.a.poll_recv(100)) == 10
    pair.fabric.set_link(pair.b, pair.a.local_address(), LinkModel(delay=0.5), both_ways=True)
    assert pair.fabric.link_model("a", "b").delay == 0.5
    pair.fabric.set_link("a", "b", None)  # back to the default
    assert pair.fabric.link_model("a", "b") == LinkModel()
    assert pair.fabric.link_model("b", "a").delay == 0.5


def test_default_model_change_applies_to_existing_links(make_pair) -> None:
    pair = make_pair()
    pair.fabric.default_model = LinkModel(delay=0.25)
    pair.send(1)
    (t, _), = pair.arrivals()
    assert t == pytest.approx(0.25)


def test_links_made_before_and_after_set_link_behave_alike() -> None:
    early = Fabric(seed=4)
    e = Pair(early)
    early.set_link("a", "b", LinkModel(loss=0.3))
    late = Fabric(seed=4)
    late_a = late.open_device(name="a")
    late_b = late.open_device(name="b")
    late.set_link("a", "b", LinkModel(loss=0.3))
    lp = Pair.__new__(Pair)
    lp.fabric, lp.a, lp.b = late, late_a, late_b
    lp.ab = late_a.resolve(late_b.local_address())
    lp.ba = late_b.resolve(late_a.local_address())
    assert _blast(e, 2000) == _blast(lp, 2000)


def test_frames_sent_after_the_delay_shrank_overtake_those_in_flight(make_pair) -> None:
    # A plain link's frames wait behind its first one (the per-link FIFO); a frame that
    # would arrive before the FIFO's tail must still land in time order.
    p = make_pair(LinkModel(delay=0.010, rate_mbps=1000.0))
    items = [(Channel.DATA, p.ab, frame(seq, 200)) for seq in range(5)]
    assert p.a.post_send_many(items) == 5
    p.fabric.set_link("a", "b", LinkModel(delay=0.001, rate_mbps=1000.0))
    p.send(5, size=200, start=5)
    assert p.fabric.pending() == 10 and p.fabric.totals()["in_flight"] == 10
    got = p.arrivals()
    assert [seq_of(f) for _, f in got] == [5, 6, 7, 8, 9, 0, 1, 2, 3, 4]
    assert [t for t, _ in got] == sorted(t for t, _ in got)
    assert p.fabric.pending() == 0
