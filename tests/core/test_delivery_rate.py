"""Delivery-rate samples (delivery.py) and pacing (pacing.py), on virtual time: what the engine
hands an algorithm that takes samples, and how it spaces the sends of a paced peer."""

from __future__ import annotations

from typing import Any

import pytest

from btlcore import Config
from btlcore.protocol import congestion
from btlcore.protocol.congestion.aimd import Aimd
from btlcore.protocol.congestion.rate import RateSample
from btlcore.protocol.pacing import BURST_GATHER, BURST_MAX, QUANTUM
from btlcore.protocol.peers import Peer
from btlcore.protocol.wire import T_DATA
from btlcore.testing.enginepair import DROP, EnginePair


class Sampling(Aimd):
    """AIMD that records its rate samples and timeouts and paces at a fixed rate (0.0: unpaced)."""

    __slots__ = ("samples", "rate", "timeouts")

    def __init__(self, config: Config, rate: float = 0.0) -> None:
        super().__init__(config)
        self.samples: list[tuple[Peer, RateSample]] = []
        self.rate = rate
        self.timeouts: list[tuple[Peer, int]] = []  # (the peer, its timeouts in a row before)

    def on_new_peer(self, peer: Peer) -> None:
        super().on_new_peer(peer)
        peer.pacing_rate = self.rate

    def on_rate_sample(self, peer: Peer, sample: RateSample) -> None:
        self.samples.append((peer, sample))

    def on_timeout(self, peer: Peer) -> None:
        self.timeouts.append((peer, peer.timeouts))


@pytest.fixture
def algorithm(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """``Config(cc="sampling")`` builds :class:`Sampling` at ``settings["rate"]``."""
    settings = {"rate": 0.0}
    load = congestion.load

    def patched(name: str) -> Any:
        if name == "sampling":
            return lambda config: Sampling(config, settings["rate"])
        return load(name)

    monkeypatch.setattr(congestion, "load", patched)
    return settings


def data_sends(p: EnginePair, src: int = 0) -> list[tuple[float, bytes]]:
    return [(t, d) for t, s, _dst, d in p.log if s == src and d[1] == T_DATA]


def transfer(p: EnginePair, n: int, size: int, max_time: float = 60.0) -> None:
    for i in range(n):
        p.send(0, 1, 1, bytes(size), key=("m", i))
    p.run(lambda: all(p.completions.get(("m", i)) for i in range(n)), max_time=p.now + max_time)


def test_aimd_takes_no_samples_and_pays_for_none() -> None:
    p = EnginePair(Config(cc="aimd"))
    p.handshake()
    assert p.a.state.sampler is None
    p.send(0, 1, 1, bytes(5000))
    p.a.datagrams_to_send(p.now)
    seg = next(iter(p.pa.unacked.values()))
    assert not hasattr(seg, "rs")  # no stamp when nobody reads one
    transfer(p, 3, 20000)
    assert p.pa.delivered == 0 and p.pa.inflight_bytes == 0


def test_one_sample_per_ack_with_news_accounting_every_byte(algorithm: dict[str, float]) -> None:
    p = EnginePair(Config(cc="sampling"), delay=0.005)
    p.handshake()
    cc = p.a.state.cc
    assert isinstance(cc, Sampling)
    transfer(p, 20, 30000)
    samples = [s for peer, s in cc.samples if peer is p.pa]
    assert samples and all(s.newly_acked > 0 for s in samples)
    wire = sum(len(d) for _t, d in data_sends(p))
    assert sum(s.newly_acked for s in samples) == p.pa.delivered == wire  # lossless: each byte once
    assert [s.delivered for s in samples] == sorted(s.delivered for s in samples)
    assert samples[-1].delivered == wire and samples[-1].in_flight == 0 == p.pa.inflight_bytes
    assert all(s.newly_lost == 0 for s in samples)
    # the RTT of the newest segment acknowledged: the link's round trip, plus at most the ACK delay
    rtts = [s.rtt for s in samples if s.rtt]
    assert rtts and all(0.010 - 1e-9 <= r <= 0.010 + p.a.config.ack_delay + 1e-9 for r in rtts)
    assert all(s.delivery_rate > 0 for s in samples[1:])
    assert p.pa.delivery_rate == samples[-1].delivery_rate or samples[-1].delivery_rate == 0


def test_a_lost_segment_is_counted_lost_and_out_of_flight(algorithm: dict[str, float]) -> None:
    p = EnginePair(Config(cc="sampling"), delay=0.002)
    p.handshake()
    cc = p.a.state.cc
    assert isinstance(cc, Sampling)
    dropped: list[int] = []

    def drop_fifth(src: int, dst: int, data: bytes, k: int) -> Any:
        if src == 0 and data[1] == T_DATA and not dropped and k >= 5:
            dropped.append(len(data))
            return DROP
        return None

    p.add_hook(drop_fifth)
    transfer(p, 4, 40000)
    samples = [s for _peer, s in cc.samples]
    assert dropped and sum(s.newly_lost for s in samples) == dropped[0]
    wire = sum(len(d) for _t, d in data_sends(p))
    assert p.pa.delivered == wire - dropped[0]  # the lost copy was never delivered; its resend was
    assert p.pa.inflight_bytes == 0


def test_an_application_limited_send_is_marked(algorithm: dict[str, float]) -> None:
    p = EnginePair(Config(cc="sampling"), delay=0.002)
    p.handshake()
    cc = p.a.state.cc
    assert isinstance(cc, Sampling)
    p.send(0, 1, 1, b"ping", key="m")
    p.run(lambda: bool(p.completions.get("m")), max_time=p.now + 1)
    assert [s.app_limited for _peer, s in cc.samples] == [True]
    assert p.pa.app_limited_at == 0  # its bubble acknowledged


@pytest.mark.parametrize("rate", [2e6, 20e6])
def test_pacing_spaces_sends_at_the_rate(algorithm: dict[str, float], rate: float) -> None:
    algorithm["rate"] = rate
    p = EnginePair(Config(cc="sampling", cwnd_initial=1024), delay=0.005)  # (the pacer limits, not the window)
    p.handshake()
    transfer(p, 10, 100000)
    sends = data_sends(p)
    # never ahead of the rate: each datagram at or after its slot, the slots a datagram's
    # time at the rate apart (a release is jittered within its own slot: pacing.py)
    t0, sent = sends[0][0], 0
    for k, (t, d) in enumerate(sends):
        if k:
            assert t - t0 >= (sent - len(sends[0][1])) / rate - 1e-9
        sent += len(d)
    span = sends[-1][0] - sends[0][0]
    assert sum(len(d) for _t, d in sends[:-1]) / span == pytest.approx(rate, rel=0.05)
    # the samples see the rate the pacer let out
    cc = p.a.state.cc
    assert isinstance(cc, Sampling)
    late = [s.delivery_rate for _peer, s in cc.samples[len(cc.samples) // 2:] if s.delivery_rate]
    # (a sample spans a round trip's datagrams, n of them; a jittered release can shorten its
    # interval by up to one datagram's time: n / (n - 1) of the rate at most)
    n = rate * 0.01 / 1500
    assert late and 0.95 * rate <= max(late) <= rate * n / (n - 1)


def test_a_paced_peer_waits_on_the_timer_heap(algorithm: dict[str, float]) -> None:
    algorithm["rate"] = 1e6
    p = EnginePair(Config(cc="sampling"))
    p.handshake()
    a, peer = p.a, p.pa
    now = p.now
    p.send(0, 1, 1, bytes(20000))
    first = a.datagrams_to_send(now)
    assert len([d for _c, _dest, d in first if d[1] == T_DATA]) == 1
    # the next release is the deadline, not "now" (no busy loop); nothing goes before it
    assert peer.pace_wait and a.next_deadline() == pytest.approx(peer.pace_next)
    gap = len(first[0][2]) / 1e6
    assert now + gap - 1e-9 <= peer.pace_next < now + 2 * gap  # the next slot, jittered within it
    assert a.datagrams_to_send((now + peer.pace_next) / 2) == []
    a.handle_timer(peer.pace_next)
    assert not peer.pace_wait
    assert len(a.datagrams_to_send(peer.pace_next)) == 1


def test_a_batching_device_gets_small_bursts(algorithm: dict[str, float]) -> None:
    algorithm["rate"] = 1e6
    p = EnginePair(Config(cc="sampling"), mtu=9000)
    p.handshake()
    a, peer = p.a, p.pa
    a.enable_gather()
    p.send(0, 1, 1, bytes(200000))
    now = p.now
    assert len(a.datagrams_to_send(now)) == 1  # the credit since time 0 is less than a datagram ...
    later = peer.pace_next + 1.0  # ... and credit accrued while idle is capped at a burst
    a.handle_timer(later)
    out = a.datagrams_to_send(later)  # (new segments, and the retransmit timeout's probe: all paced)
    assert len([d for _c, _dest, d in out if (d[0] if type(d) is list else d)[1] == T_DATA]) == BURST_GATHER


@pytest.mark.parametrize("rate", [2e8, 1e9])
def test_a_batching_device_at_a_high_rate_gets_a_quantum(algorithm: dict[str, float], rate: float) -> None:
    """At 200 MB/s a datagram of 9000 B leaves every 45 us, below a wake-up's cost: the burst
    is a millisecond of the rate (22 datagrams), and never more than BURST_MAX (1 GB/s)."""
    algorithm["rate"] = rate
    p = EnginePair(Config(cc="sampling", cwnd_initial=1000, cwnd_max=1000), mtu=9000)
    p.handshake()
    a, peer = p.a, p.pa
    a.enable_gather()
    p.send(0, 1, 1, bytes(2_000_000))
    later = p.now + 1.0  # credit accrued while idle: capped at the quantum
    a.datagrams_to_send(p.now)
    a.handle_timer(later)
    out = a.datagrams_to_send(later)
    want = min(1 + int(rate * QUANTUM / a.data_mtu), BURST_MAX)
    assert want > BURST_GATHER
    assert len([d for _c, _dest, d in out if (d[0] if type(d) is list else d)[1] == T_DATA]) == want
    # and the next release waits for the rate again: nothing more at the same instant
    assert a.datagrams_to_send(later) == [] and peer.pace_wait


def test_unpaced_sends_are_not_spaced(algorithm: dict[str, float]) -> None:
    p = EnginePair(Config(cc="sampling"))
    p.handshake()
    p.send(0, 1, 1, bytes(20000))
    out = p.a.datagrams_to_send(p.now)
    assert len(out) > 1 and not p.pa.pace_wait


def test_an_algorithms_on_timeout_hook_is_called_at_each_retransmit_timeout(algorithm: dict[str, float]) -> None:
    """The optional hook (congestion/__init__.py), found by name on any algorithm: called
    once per timeout, before its probes are queued, and never without one."""
    p = EnginePair(Config(cc="sampling", tlp=False))
    p.handshake()
    cc = p.a.state.cc
    transfer(p, 3, 1000)
    assert cc.timeouts == []  # nothing lost: no timeout
    p.faults.drop(where=lambda d: d.type == T_DATA, src=0, count=6)  # the messages, and the probes of two timeouts
    for i in range(3):
        p.send(0, 1, 1, bytes(1000), key=("lost", i))
    p.run(lambda: all(p.completions.get(("lost", i)) for i in range(3)), max_time=p.now + 60)
    assert [peer for peer, _ in cc.timeouts] == [p.pa] * len(cc.timeouts)
    assert len(cc.timeouts) >= 2 and [n for _, n in cc.timeouts[:2]] == [0, 1]  # (before each one fired)
