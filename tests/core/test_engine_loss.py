"""Loss recovery: fast retransmit, timeout retransmit with backoff and the probe rule, the
per-pass resend cap, the send window and the congestion window."""

from __future__ import annotations

import itertools

import pytest

from btlcore import Config
from btlcore.protocol.wire import T_ACK, T_DATA, Datagram, decode
from btlcore.testing.enginepair import EnginePair, safe_decode


def pair(**cfg: object) -> EnginePair:
    # aimd: these tests follow its window (slow start, its cuts) and an unpaced send pass
    p = EnginePair(Config(**{"cc": "aimd", **cfg}))  # type: ignore[arg-type]
    p.handshake()
    return p


def data_log(p: EnginePair, src: int = 0, since: int = 0) -> list[tuple[float, int]]:
    """(time, seq relative to the sender's ISN) of every DATA datagram sent by src."""
    isn = (p.pa if src == 0 else p.pb).isn
    out = []
    for t, s, _d, raw in p.log[since:]:
        dg = safe_decode(raw)
        if s == src and dg is not None and dg.type == T_DATA:
            out.append((t, dg.seq - isn))
    return out


def test_fast_retransmit_one_lost_segment_resent_once_before_rto() -> None:
    p = pair()
    mark = len(p.log)
    p.faults.drop(type=T_DATA, count=1)
    for i in range(10):
        p.send(0, 1, 1, bytes([i]), key=i)
    t0 = p.now
    srtt, rto = p.pa.timer.srtt, p.pa.timer.rto
    p.run(lambda: all(p.completions[i] for i in range(10)))
    sent = data_log(p, 0, mark)
    assert [s for _t, s in sent] == list(range(1, 11)) + [1]  # seq 1 resent, once
    t_resend = sent[-1][0]
    # lost once a later send was ACKed and an RTT plus a quarter-RTT allowance passed
    assert t_resend == pytest.approx(t0 + srtt * 1.25 + Config().ack_delay, abs=1e-12)
    assert t_resend < t0 + rto
    st = p.a.stats()
    assert (st["num_fast_retrans"], st["num_timeout_retrans"], st["num_resends"]) == (1, 0, 1)
    assert p.delivered[1] == [(b"A", 1, bytes([i])) for i in range(10)]
    assert all(p.completions[i] == [None] for i in range(10))


def test_fast_retransmit_threshold_respected() -> None:
    # with only threshold-1 segments after the hole, loss is found by the timeout
    p = pair(fast_retransmit_threshold=3)
    p.faults.drop(type=T_DATA, count=1)
    for i in range(3):  # hole + 2 later segments: 2 < 3
        p.send(0, 1, 1, b"x", key=i)
    p.run(lambda: all(p.completions[i] for i in range(3)))
    st = p.a.stats()
    assert (st["num_fast_retrans"], st["num_timeout_retrans"]) == (0, 1)
    q = pair(fast_retransmit_threshold=3)
    q.faults.drop(type=T_DATA, count=1)
    for i in range(4):  # hole + 3 later segments
        q.send(0, 1, 1, b"x", key=i)
    q.run(lambda: all(q.completions[i] for i in range(4)))
    st = q.a.stats()
    assert (st["num_fast_retrans"], st["num_timeout_retrans"]) == (1, 0)


def test_timeout_retransmit_backoff_and_two_probes() -> None:
    p = pair(tlp=False)  # (the retransmit timeout alone: test_tlp.py has the tail-loss probe)
    mark = len(p.log)
    p.faults.drop(type=T_DATA, count=6)
    for i in range(3):
        p.send(0, 1, 1, b"x", key=i)
    t0 = p.now
    rto = p.pa.timer.rto
    p.run(lambda: all(p.completions[i] for i in range(3)))
    sent = data_log(p, 0, mark)
    assert [s for _t, s in sent[:3]] == [1, 2, 3]
    # each timeout resends the two oldest outstanding transmissions (probes), the timeout
    # doubling each time: [1, 2] at t0 + rto (lost), [3, 1] at t0 + 3 rto (3 lost, 1 gets
    # through); 1's ACK ends the backoff and the last timeout resends [2, 3]
    timeouts = sent[3:]
    assert [s for _t, s in timeouts] == [1, 2, 3, 1, 2, 3]
    assert [t for t, _s in timeouts[:4]] == pytest.approx(
        [t0 + rto, t0 + rto, t0 + 3 * rto, t0 + 3 * rto], abs=1e-12)
    assert timeouts[4][0] == timeouts[5][0] and timeouts[4][0] - timeouts[3][0] < 2 * rto
    st = p.a.stats()
    assert st["num_timeout_retrans"] == st["num_resends"] == 6 and st["num_fast_retrans"] == 0
    assert p.pa.timer.backoff == 1  # progress ended the backoff
    assert len(p.delivered[1]) == 3


def test_backoff_capped_at_rto_max() -> None:
    p = pair(rto_max=0.05, peer_timeout=100.0, tlp=False)
    mark = len(p.log)
    p.faults.drop(type=T_DATA, count=8)
    p.send(0, 1, 1, b"x", key=0)
    # handshake RTT 2 ms: srtt 2 ms + 4 * rttvar 1 ms + the peer's 0.2 ms ACK delay
    assert p.pa.timer.rto == pytest.approx(0.0062, abs=1e-12)
    p.run(lambda: p.completions[0])
    times = [t for t, _s in data_log(p, 0, mark)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[:4] == pytest.approx([0.0062, 0.0124, 0.0248, 0.0496], abs=1e-9)
    assert gaps[4:8] == pytest.approx([0.05] * 4, abs=1e-9)


def test_fixed_timeout_mode_no_backoff() -> None:
    p = pair(rto_mode="fixed", retrans_timeout=0.004)
    mark = len(p.log)
    p.faults.drop(type=T_DATA, count=4)
    p.send(0, 1, 1, b"x", key=0)
    p.run(lambda: p.completions[0])
    times = [t for t, _s in data_log(p, 0, mark)]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps == pytest.approx([0.004] * 4, abs=1e-9)


def test_no_spurious_timeout_for_isolated_messages() -> None:
    p = pair()  # defaults: ack_delay 200 us, link RTT 2 ms
    for i in range(30):
        p.send(0, 1, 1, b"x", key=i)
        p.run(lambda i=i: p.completions[i])
        p.run_idle()
    assert p.a.stats()["num_timeout_retrans"] == 0
    assert p.b.stats()["num_dup_recvs"] == 0


@pytest.mark.parametrize("mine,theirs", [(0.0002, 0.02), (0.0, 0.005)])
def test_no_spurious_timeout_when_peer_acks_slower(mine: float, theirs: float) -> None:
    p = EnginePair(Config(ack_delay=mine), config_b=Config(ack_delay=theirs))
    p.handshake()
    for i in range(30):
        p.send(0, 1, 1, b"x", key=i)
        p.run(lambda i=i: p.completions[i])
        p.run_idle()
    assert p.a.stats()["num_timeout_retrans"] == 0
    assert p.b.stats()["num_dup_recvs"] == 0


def test_max_resends_per_pass() -> None:
    p = pair(max_resends_per_pass=5)
    # lose the first 19 of 20 segments: the ACK of the 20th reveals 17 losses at once
    p.faults.drop(type=T_DATA, count=19)
    for i in range(20):
        p.send(0, 1, 1, b"x", key=i)
    mark_batches = len(p.batches)
    p.run(lambda: p.a.stats()["num_fast_retrans"] >= 17)
    isn = p.pa.isn
    seen: set[int] = set()
    per_batch = []
    for _t, src, batch in p.batches[mark_batches:]:
        if src != 0:
            continue
        n = 0
        for raw in batch:
            dg = decode(raw)
            if dg.type == T_DATA:
                if dg.seq in seen:
                    n += 1
                seen.add(dg.seq)
        if n:
            per_batch.append(n)
    assert per_batch[:4] == [5, 5, 5, 2]
    assert max(per_batch) <= 5
    p.run(lambda: all(p.completions[i] for i in range(20)))
    assert [d for _a, _t, d in p.delivered[1]] == [b"x"] * 20
    del isn


@pytest.mark.parametrize("window,loss", [(8, False), (16, True), (64, True)])
def test_in_flight_never_exceeds_window(window: int, loss: bool) -> None:
    p = pair(window=window, cc="none")
    if loss:
        p.add_hook(lambda s, d, raw, k: "drop" if s == 0 and k % 7 == 3 else None)
    n = 200
    for i in range(n):
        p.send(0, 1, 1, i.to_bytes(2, "big"), key=i)
    worst = 0

    def check() -> bool:
        nonlocal worst
        worst = max(worst, p.pa.in_flight)
        assert p.pa.in_flight <= window
        return all(p.completions[i] for i in range(n))
    p.run(check)
    assert worst == window  # the window was used in full
    assert p.pa.counters.max_send_window == window
    assert [d for _a, _t, d in p.delivered[1]] == [i.to_bytes(2, "big") for i in range(n)]


def test_receiver_window_smaller_than_sender_is_honoured() -> None:
    p = EnginePair(Config(window=64, cc="none"), config_b=Config(window=8))
    p.handshake()
    assert p.pa.remote_window == 8
    for i in range(50):
        p.send(0, 1, 1, b"x", key=i)

    def check() -> bool:
        assert p.pa.in_flight <= 8
        assert p.pb.counters.num_oow_high_recvs == 0
        return all(p.completions[i] for i in range(50))
    p.run(check)


def test_initial_congestion_window_limits_first_flight() -> None:
    p = pair(cwnd_initial=4, cwnd_max=1024)
    for i in range(40):
        p.send(0, 1, 1, b"x", key=i)
    out = p.a.datagrams_to_send(p.now)
    assert len(out) == 4


def cwnd_trace(p: EnginePair, done) -> list[float]:
    """Distinct ssthresh values seen, in order (each new one is a decrease)."""
    trace: list[float] = []

    def check() -> bool:
        s = p.pa.ssthresh
        if not trace or trace[-1] != s:
            trace.append(s)
        return done()
    p.run(check)
    return trace


def test_cwnd_decreases_once_per_loss_episode() -> None:
    p = pair(cwnd_initial=32)
    lost = {3, 7, 11, 15}
    p.add_hook(lambda s, d, raw, k: "drop" if s == 0 and k in lost else None)
    for i in range(32):
        p.send(0, 1, 1, b"x", key=i)
    trace = cwnd_trace(p, lambda: all(p.completions[i] for i in range(32)))
    assert trace[0] == float("inf")
    assert len(trace) == 2  # four losses in one flight: one decrease
    assert p.a.stats()["num_fast_retrans"] == 4


def test_loss_without_a_queue_cuts_gently() -> None:
    # cwnd pinned at 40 (cwnd_initial = cwnd_max); the round trip never grows, so the loss
    # looks random (Veno): 0.8 * 40
    p = pair(cwnd_initial=40, cwnd_max=40)
    p.faults.drop(type=T_DATA, count=1)
    for i in range(20):
        p.send(0, 1, 1, b"x", key=i)
    p.run(lambda: all(p.completions[i] for i in range(20)))
    assert p.a.stats()["num_fast_retrans"] == 1
    assert p.pa.ssthresh == pytest.approx(32.0)


def test_loss_with_a_queue_cuts_by_cubic_beta() -> None:
    # the data's round trip grows by a millisecond (a queue) over the 2 ms the first
    # exchange measured: the loss is congestion, 0.7 * 40
    p = pair(cwnd_initial=40, cwnd_max=40)
    phase = [0]
    dropped: list[int] = []

    def hook(s: int, d: int, raw: bytes, k: int) -> object:
        dg = safe_decode(raw)
        if s != 0 or phase[0] == 0 or dg is None or dg.type != T_DATA:
            return None
        if phase[0] == 2 and not dropped:
            dropped.append(k)
            return "drop"
        return ("delay", 0.001)
    p.add_hook(hook)
    for r, ph in enumerate([0] + [1] * 10 + [2]):  # a few exchanges, then the queue, then the loss
        phase[0] = ph
        for i in range(20):
            p.send(0, 1, 1, b"x", key=(r, i))
        p.run(lambda r=r: all(p.completions[(r, i)] for i in range(20)))
    assert p.pa.timer.min_rtt == pytest.approx(0.002)
    assert p.pa.timer.srtt > 1.2 * p.pa.timer.min_rtt
    assert dropped and p.a.stats()["num_fast_retrans"] == 1
    assert p.pa.ssthresh == pytest.approx(28.0)


def test_cwnd_decreases_again_in_a_later_episode() -> None:
    p = pair(cwnd_initial=32)
    for i in range(32):
        p.send(0, 1, 1, b"x", key=("a", i))
    p.faults.drop(type=T_DATA, count=1)
    trace1 = cwnd_trace(p, lambda: all(p.completions[("a", i)] for i in range(32)))
    first = p.pa.ssthresh
    p.faults.drop(type=T_DATA, count=1)
    for i in range(32):
        p.send(0, 1, 1, b"x", key=("b", i))
    trace2 = cwnd_trace(p, lambda: all(p.completions[("b", i)] for i in range(32)))
    assert len(trace1) == 2 and len(trace2) == 2 and p.pa.ssthresh != first


def test_timeout_over_real_loss_is_one_loss_episode() -> None:
    # the three segments are lost; the timeout's probes come back acknowledged without a
    # duplicate report, so the originals were lost: one decrease, no slow start (the
    # retransmit timeout alone: test_tlp.py has the tail-loss probe)
    p = pair(cwnd_initial=32, tlp=False)
    p.faults.drop(type=T_DATA, count=3)
    for i in range(3):
        p.send(0, 1, 1, b"x", key=i)
    trace = cwnd_trace(p, lambda: all(p.completions[i] for i in range(3)))
    assert p.a.stats()["num_timeout_retrans"] >= 2
    assert len(trace) == 2 and trace[0] == float("inf")
    assert 0.8 * 32 <= trace[1] <= 0.8 * 35  # no queue: the gentle cut (cwnd grew by the probes first)


def test_timeout_from_lost_acks_keeps_the_window() -> None:
    # every segment arrives but the ACKs are lost: the timeout's probes reach the receiver as
    # duplicates, it says so, and the congestion window is left alone
    p = pair(cwnd_initial=32)
    p.faults.drop(type=T_ACK, src=1, count=2)
    for i in range(3):
        p.send(0, 1, 1, b"x", key=i)
    trace = cwnd_trace(p, lambda: all(p.completions[i] for i in range(3)))
    assert p.a.stats()["num_timeout_retrans"] >= 1
    assert p.b.stats()["num_dup_recvs"] >= 1
    assert trace == [float("inf")]
    assert p.pa.cwnd >= 32


def test_persistent_timeouts_restart_slow_start() -> None:
    # the originals and the probes of two timeouts lost: the third timeout in a row, with
    # nothing acknowledged, is persistent congestion (no tail-loss probe: timeouts only)
    p = pair(cwnd_initial=32, tlp=False)
    p.faults.drop(type=T_DATA, count=3 + 2 + 2)
    for i in range(3):
        p.send(0, 1, 1, b"x", key=i)
    p.run(lambda: p.a.stats()["num_timeout_retrans"] >= 6)
    assert p.pa.ssthresh == 16.0 and p.pa.cwnd == 16.0  # halved; restart from min(initial, it)
    p.run(lambda: all(p.completions[i] for i in range(3)))
    assert p.pa.ssthresh == 16.0  # the probes' episode is not counted twice


def test_ack_loss_recovered_by_later_ack() -> None:
    p = pair()
    p.faults.drop(type=T_ACK, count=3, src=1)
    for i in range(20):
        p.send(0, 1, 1, b"x", key=i)
    p.run(lambda: all(p.completions[i] for i in range(20)))
    assert len(p.delivered[1]) == 20 and all(p.completions[i] == [None] for i in range(20))


def test_early_timer_calls_do_nothing() -> None:
    p = pair()
    p.send(0, 1, 1, b"x", key=0)
    sent_at = p.now
    assert len(p.a.datagrams_to_send(sent_at)) == 1  # (and lost: nobody delivers it)
    deadline = p.a.next_deadline()
    assert deadline is not None and deadline > sent_at
    for frac in (0.0, 0.25, 0.5, 0.999):
        t = sent_at + (deadline - sent_at) * frac
        p.a.handle_timer(t)
        assert p.a.datagrams_to_send(t) == []
        assert p.a.next_deadline() == deadline
    p.a.handle_timer(deadline)
    out = p.a.datagrams_to_send(deadline)
    assert len(out) == 1 and p.a.stats()["num_timeout_retrans"] == 1


def test_send_pass_is_not_repeated() -> None:
    p = pair(ack_delay=0.0)
    for i in range(5):
        p.send(0, 1, 1, b"x", key=i)
    first = p.a.datagrams_to_send(p.now)
    assert len(first) == 5
    assert p.a.datagrams_to_send(p.now) == []
    for _ch, _dest, buf in first:
        p.b.receive_datagram(bytes(buf), None, p.now + 0.001)
    acks = p.b.datagrams_to_send(p.now + 0.001)
    assert len(acks) == 1 and p.b.datagrams_to_send(p.now + 0.001) == []


def test_persistent_reordering_adapts() -> None:
    """Every fifth segment arrives a full RTT late: a few spurious fast retransmits at first,
    then the reordering allowance widens (DSACK-style) and they stop."""
    p = pair()
    p.add_hook(lambda s, d, raw, k: ("delay", 0.002) if s == 0 and k % 5 == 2 else None)
    n = 2000
    for i in range(n):
        p.send(0, 1, 1, b"x" * 100, key=i)
    p.run(lambda: all(p.completions[i] for i in range(n)))
    st = p.a.stats()
    assert st["num_timeout_retrans"] == 0
    assert 0 < st["num_fast_retrans"] <= 40  # of 400 late segments
    assert p.pa.reo_mult > 1
    assert [d for _a, _t, d in p.delivered[1]] == [b"x" * 100] * n


def test_widened_reordering_allowance_wears_off() -> None:
    """After the reordering stops, 16 loss episodes without a spurious resend bring the
    allowance back to a quarter RTT (RACK's reo_wnd_persist)."""
    p = pair()
    reorder = [True]
    p.add_hook(lambda s, d, raw, k: ("delay", 0.002) if reorder[0] and s == 0 and k % 5 == 2 else None)
    for i in range(500):
        p.send(0, 1, 1, b"x" * 100, key=i)
    p.run(lambda: all(p.completions[i] for i in range(500)))
    assert p.pa.reo_mult > 1
    reorder[0] = False
    widened = p.pa.reo_mult
    for r in range(17):  # one loss per flight: one loss episode each
        p.faults.drop(type=T_DATA, count=1)
        for i in range(20):
            p.send(0, 1, 1, b"y", key=(r, i))
        p.run(lambda r=r: all(p.completions[(r, i)] for i in range(20)))
        if r < 14:
            assert p.pa.reo_mult == widened  # not before its time
    assert p.pa.reo_mult == 1


def test_holes_past_the_sack_limit_are_repaired_within_a_round_trip() -> None:
    """A flight with far more holes than one ACK lists (every fifth of 1000 segments lost on
    its first send): each hole's first repair leaves an RTT and a quarter after its send, as
    the first hole's does.  The receiver's truncated SACK lists the ranges of its latest
    arrivals too (protocol.md 6.2), so the sender hears of every range; listing only the
    lowest 63, the holes past them waited for those to fill, 63 a round trip.  The 1000
    arrive at once: the receiver's ACK pass sends as many ACKs as list every range that
    changed, so none is left out unheard (which would make the sender resend it)."""
    p = EnginePair(Config(cc="aimd", cwnd_initial=1000, send_buffer=1 << 26, recv_buffer=1 << 26,
                          max_resends_per_pass=1000), delay=0.01)
    p.handshake()
    isn = p.pa.isn
    seen: set[int] = set()

    def first_send_of_every_fifth(d: Datagram) -> bool:
        rel: int = d.seq - isn
        if rel in seen:
            return False
        seen.add(rel)
        return rel % 5 == 0

    p.faults.drop(type="DATA", src=0, where=first_send_of_every_fifth)
    mark = len(p.log)
    for i in range(1000):
        p.send(0, 1, 1, bytes(1000), key=i)
    p.run(lambda: all(p.completions[i] for i in range(1000)))
    first: dict[int, float] = {}
    repair: dict[int, float] = {}
    for t, s in data_log(p, 0, mark):
        if s in first:
            repair.setdefault(s, t)
        else:
            first[s] = t
    holes = [s for s in first if s % 5 == 0]
    assert len(holes) == 200 and sorted(repair) == holes  # each hole resent, nothing else
    # RACK's time (an RTT and a quarter) after its send, but for the last hole or two (too
    # few later segments: the next round finds them); 63 a round trip before
    rack = 1.25 * p.pa.timer.srtt + Config().ack_delay
    late = sorted(repair[s] - first[s] for s in holes)
    assert late[-3] == pytest.approx(rack, abs=1e-3) and late[-1] < rack + 2 * p.delay
    st = p.a.stats()
    assert st["num_timeout_retrans"] == 0 and st["num_spurious_retrans"] == 0
    assert p.b.stats()["num_dup_recvs"] == 0  # no range went unheard: nothing resent needlessly
    assert p.delivered[1] == [(b"A", 1, bytes(1000))] * 1000
