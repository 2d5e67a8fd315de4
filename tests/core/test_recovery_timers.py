"""Issue #12's timer mechanisms on virtual time: the handshake's RTT sample, the 1 s initial
timeout, the tail-loss probe, undo of spurious retransmissions and timeouts, the backoff
that lets go."""

from __future__ import annotations

from typing import Any

import pytest

from btlcore import Config
from btlcore.protocol.wire import T_ACK, T_DATA
from btlcore.testing.enginepair import DROP, EnginePair, safe_decode


def pair(delay: float = 0.001, **cfg: Any) -> EnginePair:
    p = EnginePair(Config(**cfg), delay=delay)
    p.handshake()
    return p


def data_times(p: EnginePair, src: int, mark: int = 0) -> list[tuple[float, int]]:
    """(time, seq) of every DATA datagram ``src`` sent since log entry ``mark``."""
    out = []
    for t, s, _d, raw in p.log[mark:]:
        if s == src and (d := safe_decode(raw)) is not None and d.type == T_DATA:
            out.append((t, d.seq))
    return out


def test_the_handshake_gives_the_connecting_side_its_rtt() -> None:
    p = pair(delay=0.004)
    t = p.pa.timer
    assert t.srtt == pytest.approx(0.008) and t.rttvar == pytest.approx(0.004)  # one HELLO, one answer
    assert t.min_rtt == pytest.approx(0.008)
    # RTO = srtt + max(4 rttvar, G) + the peer's max ACK delay (its HELLO_ACK said 200 us)
    assert t.rto == pytest.approx(0.008 + 4 * 0.004 + 0.0002)
    assert p.pb.timer.srtt is None  # the answering side has no sample yet ...
    assert p.pb.timer.rto == Config().rto_initial == 1.0  # ... so it waits RFC 6298's 1 s


def test_a_retried_hello_bounds_the_first_timeout_but_gives_no_sample() -> None:
    # a 16 ms round trip, longer than the first HELLO retry (10 ms): the answer may be to
    # either HELLO, so no sample (Karn) -- but the round trip is at most the 16 ms since the
    # first: the first timeout is what one such sample would make it, not the initial 1 s
    p = pair(delay=0.008)
    t = p.pa.timer
    assert p.pa.hello_count == 2 and t.srtt is None and t.min_rtt is None
    assert t.rto == pytest.approx(3 * 0.016 + 0.0002)


def test_the_first_timeout_without_a_sample_is_one_second() -> None:
    p = pair(tlp=False)
    mark = len(p.log)
    p.faults.drop(type=T_DATA, count=1)
    t0 = p.now
    p.send(1, 0, 1, b"reply", key="r")  # from b, which has no RTT sample
    p.run(lambda: bool(p.completions.get("r")), max_time=t0 + 5)
    sends = data_times(p, 1, mark)
    assert len(sends) == 2 and sends[0][1] == sends[1][1]
    assert sends[1][0] - sends[0][0] == pytest.approx(1.0)  # not 20 ms: not below any path's RTT
    assert p.pb.timer.srtt is None  # the retransmission's ACK gives no sample (Karn's rule)


def test_a_lost_tail_is_probed_after_two_round_trips() -> None:
    # a 0.2 ms round trip: the timeout is rto_min, 5 ms (aimd: the episode shows in its ssthresh)
    p = pair(delay=0.0001, cwnd_initial=32, cc="aimd")
    mark = len(p.log)
    sent = {"n": 0}

    def drop_tail(src: int, dst: int, raw: bytes, k: int) -> Any:
        if src == 0 and raw[1] == T_DATA:
            sent["n"] += 1
            if sent["n"] == 5:  # the last of five, once
                return DROP
        return None

    p.add_hook(drop_tail)
    t0 = p.now
    for i in range(5):
        p.send(0, 1, 1, b"m%d" % i, key=i)
    p.run(lambda: all(p.completions[i] for i in range(5)), max_time=t0 + 1)
    sends = data_times(p, 0, mark)
    t = p.pa.timer
    assert len(sends) == 6 and sends[5][1] == sends[4][1]  # the newest segment again ...
    # ... two round trips after the latest news (the ACK of the first four), long before the
    # retransmit timeout (rto_min) would have fired
    probe = sends[5][0]
    news = max(at for at, src, _d, raw in p.arrivals if src == 1 and raw[1] == T_ACK and at < probe)
    assert news + 2 * t.min_rtt <= probe <= news + max(2 * t.srtt, t.srtt + 4 * t.rttvar) + t.max_ack_delay + 1e-9
    assert p.now - t0 < 0.002 < t.rto_min
    st = p.a.stats()
    assert st["num_tail_probes"] == 1 == st["num_timeout_retrans"] == st["num_resends"]
    assert p.delivered[1] == [(b"A", 1, b"m%d" % i) for i in range(5)]
    assert p.pa.ssthresh < float("inf")  # the tail was lost: one loss episode (RFC 8985)


def test_a_spurious_timeout_is_undone_and_teaches_the_timer() -> None:
    p = pair(tlp=False, cwnd_initial=32)
    held = {"done": False}

    def late_ack(src: int, dst: int, raw: bytes, k: int) -> Any:
        if src == 1 and raw[1] == T_ACK and not held["done"]:
            held["done"] = True
            return ("delay", 0.0048)  # arrives just after the 6.2 ms timeout fired
        return None

    p.add_hook(late_ack)
    cwnd = p.pa.cwnd
    t0 = p.now
    p.send(0, 1, 1, b"x", key="x")
    p.run(lambda: bool(p.completions.get("x")), max_time=t0 + 1)
    st = p.a.stats()
    assert st["num_timeout_retrans"] == 1 and st["num_spurious_retrans"] == 1
    t = p.pa.timer
    # the original's flight (about 7 ms) is an RTT sample: the timer now waits longer
    assert t.srtt is not None and t.srtt > 0.002 and t.rto > 0.0062
    assert t.backoff == 1 and p.pa.cwnd >= cwnd  # no decrease stands


def test_a_spurious_fast_retransmit_is_undone() -> None:
    p = pair(cwnd_initial=32)
    late: dict[str, int | None] = {"seq": None}

    def reorder_third(src: int, dst: int, raw: bytes, k: int) -> Any:
        d = safe_decode(raw)
        if src == 0 and d is not None and d.type == T_DATA and late["seq"] is None and k >= 2:
            late["seq"] = d.seq
            return ("delay", 0.0015)  # overtaken: declared lost, then arrives
        return None

    p.add_hook(reorder_third)
    for i in range(20):
        p.send(0, 1, 1, b"y%d" % i, key=i)
    before = p.pa.cwnd
    p.run(lambda: all(p.completions[i] for i in range(20)), max_time=p.now + 1)
    st = p.a.stats()
    assert st["num_fast_retrans"] >= 1 and st["num_spurious_retrans"] >= 1
    assert st["num_undos"] == 1
    assert p.pa.cwnd >= before and p.pa.ssthresh == float("inf")  # as if no loss


def test_the_backoff_lets_go_when_acks_flow_again() -> None:
    p = pair(tlp=False, rto_max=0.05, peer_timeout=100.0)
    base = p.pa.timer.rto
    p.faults.drop(type=T_DATA, count=5)
    p.send(0, 1, 1, b"x", key="x")
    seen: list[float] = []
    while not p.completions.get("x"):
        p.step()
        seen.append(p.pa.timer.rto)
    assert max(seen) == pytest.approx(0.05)  # backed off, never past rto_max
    assert p.pa.timer.backoff == 1 and p.pa.timer.rto <= base * 1.5  # progress ended the backoff
    mark = len(p.log)
    p.faults.drop(type=T_DATA, count=1)
    t0 = p.now
    p.send(0, 1, 1, b"z", key="z")
    p.run(lambda: bool(p.completions.get("z")), max_time=t0 + 1)
    sends = data_times(p, 0, mark)
    assert sends[1][0] - sends[0][0] == pytest.approx(p.pa.timer.rto, rel=0.5)  # not 50 ms
    assert sends[1][0] - sends[0][0] < 0.02


def _data_slower_than_the_handshake() -> tuple[Any, float]:
    """A pair whose handshake measured about 2 ms, and a's DATA takes 30 ms more."""
    p = pair()
    p.add_hook(lambda s, d, data, k: ("delay", 0.030)
               if s == 0 and (dg := safe_decode(data)) is not None and dg.type == T_DATA else None)
    handshake_srtt = p.pa.timer.srtt
    assert handshake_srtt is not None and handshake_srtt < 0.005
    return p, handshake_srtt


def test_a_path_slower_than_the_handshake_showed_is_learned_through_resends() -> None:
    """The handshake's small datagrams measured 2 ms; data takes 30 ms more (a large datagram
    on a slow link).  Every timeout then fires before the data's ACK, so every ACK
    acknowledges a resend and gives no RTT sample (Karn), and the backoff ends with each ACK:
    srtt stayed at 2 ms and every message was sent three times.  A resent segment's ACK still
    bounds the RTT from below (from its last sending): taken where that is above srtt, srtt
    climbs toward the path's, and fewer timeouts fire (not none: the bound is below the RTT
    by the time between the original and the last resend)."""
    p, handshake_srtt = _data_slower_than_the_handshake()
    resends = []
    for i in range(12):
        before = p.pa.counters.num_timeout_retrans
        p.send(0, 1, 1, b"m%d" % i, key=f"m{i}")
        p.run(lambda i=i: bool(p.completions.get(f"m{i}")), max_time=p.now + 5)
        resends.append(p.pa.counters.num_timeout_retrans - before)
    assert p.pa.timer.srtt is not None and p.pa.timer.srtt > 3 * handshake_srtt  # learned, partly
    assert resends[0] >= 2  # the first message timed out twice (6 and 12 ms) ...
    assert max(resends[-6:]) <= 1  # ... the later ones once at most (twice each before)


def test_a_reply_acknowledging_a_resend_teaches_the_timer_too() -> None:
    """The same slower path in a ping-pong: each request's ACK rides on its reply (a
    piggy-backed ACK, the receive path's), never a standalone ACK.  The rule of a resent
    segment's bound is the one every ACK path follows (Recovery.sample_rtt): it once held
    on standalone ACKs only, and here srtt stayed at the handshake's 2 ms, every request
    sent three times."""
    p, handshake_srtt = _data_slower_than_the_handshake()
    resends = []
    for i in range(12):
        before = p.pa.counters.num_timeout_retrans
        p.send(0, 1, 1, b"q%d" % i, key=f"q{i}")
        p.run(lambda i=i: len(p.delivered[1]) > i, max_time=p.now + 5)
        p.send(1, 0, 1, b"r%d" % i)  # the reply, at once: it carries the request's ACK
        p.run(lambda i=i: bool(p.completions.get(f"q{i}")), max_time=p.now + 5)
        came = [safe_decode(raw) for at, src, _d, raw in p.arrivals if at == p.now and src == 1]
        assert [d.type for d in came if d is not None] == [T_DATA]  # acknowledged by the reply
        resends.append(p.pa.counters.num_timeout_retrans - before)
    assert p.pa.timer.srtt is not None and p.pa.timer.srtt > 3 * handshake_srtt  # learned, partly
    assert resends[0] >= 2  # the first request timed out twice ...
    assert max(resends[-6:]) <= 1  # ... the later ones once at most


def test_a_timeout_while_only_acks_are_lost_probes_with_new_data() -> None:
    """The ACKs of a whole flight are lost (a burst on the ACK path longer than the RTO).
    A timeout cannot tell lost ACKs from lost data; resending the oldest segments sent
    again what had arrived (duplicates at the receiver: the sweep's 10 Mb/s burst cells
    lost 1-2.5% of their sends so).  The first timeout probes with new data instead
    (RFC 9002's PTO): its ACK acknowledges the whole flight, and nothing is sent twice."""
    p = pair(cc="aimd", cwnd_initial=4)
    seen = {"backoff": 1}

    def lose_acks_until_a_timeout(src: int, dst: int, raw: bytes, k: int) -> Any:
        seen["backoff"] = max(seen["backoff"], p.pa.timer.backoff)
        return DROP if src == 1 and raw[1] == T_ACK and seen["backoff"] == 1 else None

    p.add_hook(lose_acks_until_a_timeout)
    mark = len(p.log)
    for i in range(12):
        p.send(0, 1, 1, b"m%d" % i, key=i)
    p.run(lambda: all(p.completions[i] for i in range(12)), max_time=p.now + 2)
    assert seen["backoff"] == 2  # the timer fired (once) ...
    sends = [seq for _t, seq in data_times(p, 0, mark)]
    assert len(sends) == 12 == len(set(sends))  # ... and nothing went twice
    assert p.a.stats()["num_resends"] == 0 and p.b.stats()["num_dup_recvs"] == 0
    assert p.delivered[1] == [(b"A", 1, b"m%d" % i) for i in range(12)]


def test_a_flight_lost_whole_is_repaired_after_the_new_data_probe() -> None:
    """The flight itself lost: the new-data probe's ACK shows the holes, and the loss rule
    resends them within a few round trips of it, without a second timeout."""
    p = pair(cc="aimd", cwnd_initial=4)
    p.faults.drop(where=lambda d: d.type == T_DATA, count=4)
    mark = len(p.log)
    t0 = p.now
    for i in range(12):
        p.send(0, 1, 1, b"m%d" % i, key=i)
    rto, rtt = p.pa.timer.rto, p.pa.timer.srtt
    p.run(lambda: all(p.completions[i] for i in range(12)), max_time=p.now + 2)
    st = p.a.stats()
    assert st["num_timeout_retrans"] == 0 and st["num_fast_retrans"] == 4  # the loss rule, not the timer
    assert len(data_times(p, 0, mark)) == 12 + 4
    # a few round trips after the first timeout (a second would come 2 RTOs after it)
    assert p.now - t0 < rto + 4 * rtt < 3 * rto
    assert p.delivered[1] == [(b"A", 1, b"m%d" % i) for i in range(12)]
    assert p.b.stats()["num_dup_recvs"] == 0


def test_a_timeout_that_met_no_silence_resends_the_front() -> None:
    """The front segment is lost, and the peer is heard from after its ACK was due (here
    its own message; in a full queue, the ACKs of later segments): the path answers, so the
    front is lost, as in a tail drop.  The timeout resends it at once rather than probing
    with new data (which at 100 Mb/s behind a queue of three datagrams cost flows their
    share); only silence, what lost ACKs look like, gets the new-data probe."""
    p = pair(cc="aimd", cwnd_initial=2, tlp=False)
    p.faults.drop(where=lambda d: d.type == T_DATA, count=2)
    mark = len(p.log)
    for i in range(4):
        p.send(0, 1, 1, b"m%d" % i, key=i)  # m2 on: queued behind the window of two
    p.advance(p.now + 0.002)
    p.send(1, 0, 1, b"news")  # heard from: after m0's and m1's ACKs were due, without them
    p.run(lambda: all(p.completions[i] for i in range(4)), max_time=p.now + 2)
    sends = data_times(p, 0, mark)
    assert sends[2][1] == sends[0][1]  # the front again, not new data
    assert p.a.stats()["num_timeout_retrans"] == 2
    assert p.delivered[1] == [(b"A", 1, b"m%d" % i) for i in range(4)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_newest_unacked_segment_is_found_without_a_walk_and_is_the_walks(seed: int) -> None:
    """tlp.newest_unacked looks at Peer.newest (every move to unacked's end sets it) and must
    give what a walk from the end gives, through losses, SACKs, fast and timeout resends and
    tail-loss probes; an idle peer keeps no acknowledged segment."""
    import random

    from btlcore.protocol.tlp import newest_unacked

    rng = random.Random(seed)
    p = EnginePair(Config(), seed=seed)
    p.handshake()
    looked = [0]

    def check(s: int, d: int, raw: Any, k: int) -> Any:
        for peer in (p.pa, p.pb):
            if peer.unacked:
                assert newest_unacked(peer) is next(reversed(peer.unacked.values()))
                looked[0] += peer.newest is not None
        return DROP if rng.random() < 0.15 else None

    p.add_hook(check)
    for i in range(60):
        p.send(0, 1, 1, bytes(rng.choice([10, 700, 5000])), key=i)
    p.run(lambda: all(p.completions.get(i) for i in range(60)), max_time=p.now + 120)
    assert looked[0] > 100 and p.pa.counters.num_resends > 0
    assert not p.pa.unacked and p.pa.newest is None


def test_timeout_probes_before_any_rate_sample_go_one_per_srtt() -> None:
    """A first window lost whole leaves no rate sample, and the pace is still STARTUP's (the
    window over the handshake's RTT): the timeout's two probes would leave microseconds
    apart and meet a full drop-tail queue as one.  Paced at a datagram per srtt, each is
    its own trial (bbr's on_timeout)."""
    p = pair(cwnd_initial=4)
    srtt, startup_pace = p.pa.timer.srtt, p.pa.pacing_rate
    assert srtt and startup_pace > 0.0
    p.faults.drop(where=lambda d: d.type == T_DATA, count=4 + 1)  # the window, then the new-data probe
    mark = len(p.log)
    msgs = [bytes([65 + i]) * 30000 for i in range(3)]  # full-size segments
    for i, m in enumerate(msgs):
        p.send(0, 1, 1, m, key=i)
    p.run(lambda: all(p.completions[i] for i in range(3)), max_time=p.now + 2)
    sends = data_times(p, 0, mark)
    resent = [t for t, seq in sends[5:] if seq < sends[4][1]]  # the second timeout's probes of the window
    assert len(resent) >= 2
    assert resent[1] - resent[0] >= 0.9 * srtt  # not back to back at STARTUP's pace
    assert [d[2] for d in p.delivered[1]] == msgs
    assert p.pa.delivery_rate > 0.0 and p.pa.pacing_rate > 0.0  # the samples set the pace again


def test_each_timeout_in_a_row_probes_with_one_segment_more() -> None:
    """A burst on the ACK path counted in frames (the simulator's Gilbert-Elliott model, a
    flaky link) outlasts any number of timeouts that each elicit two ACKs, while the timer
    doubles: the stall grows without bound.  So each timeout in a row from the third resends
    twice the probes of the last, up to PROBES_MAX (2, 2, 4, 8, 8 ...): the timer goes on
    doubling, so the probes' rate still decays."""
    from btlcore.protocol.timeout import PROBES_MAX

    p = pair(cc="aimd", cwnd_initial=16, tlp=False, rto_max=60.0, peer_timeout=100.0)
    sent: dict[int, int] = {}

    def count_and_lose_acks(src: int, dst: int, raw: bytes, k: int) -> Any:
        d = safe_decode(raw)
        if d is not None and src == 0 and d.type == T_DATA:
            sent[p.pa.timeouts] = sent.get(p.pa.timeouts, 0) + 1
        return DROP if src == 1 and raw[1] == T_ACK and p.pa.timeouts < 9 else None

    p.add_hook(count_and_lose_acks)
    for i in range(12):
        p.send(0, 1, 1, b"m%d" % i, key=i)
    p.run(lambda: all(p.completions.get(i) for i in range(12)), max_time=p.now + 30)
    assert all(p.completions[i] == [None] for i in range(12))
    # sends made after the k-th timeout in a row (the first probes with new data: the flight
    # was sent whole, so the first timeout resends the front)
    assert [sent.get(k, 0) for k in range(2, 9)] == [2, 4, 8, 8, 8, 8, 8] and PROBES_MAX == 8


def test_duplicates_are_answered_each_when_they_come_apart() -> None:
    """A duplicate says the sender did not hear our ACK: each one spaced by more than an
    eighth of ``ack_delay`` is answered at once (a burst on the ACK path is left by frames,
    not by time), while a storm of duplicates arriving together still gets one ACK."""
    p = pair(cc="aimd")
    p.send(0, 1, 1, b"x", key="x")
    p.run(lambda: bool(p.completions.get("x")))
    raw = [raw for _t, s, _d, raw in p.log if s == 0 and raw[1] == T_DATA][-1]
    b, source, gap = p.b, p.addresses[0], Config().ack_delay / 4
    t = p.now + 1.0
    acks = []
    for i in range(6):
        b.receive_datagram(raw, source, t + i * gap)
        acks.append(sum(1 for _c, _d, d in b.datagrams_to_send(t + i * gap) if bytes(d)[1] == T_ACK))
    assert acks == [1] * 6  # (one ACK per ack_delay before: [1, 0, 0, 0, 1, 0])
    for _ in range(20):  # the same instant: one ACK, the storm answered once
        b.receive_datagram(raw, source, t + 10.0)
    assert sum(1 for _c, _d, d in b.datagrams_to_send(t + 10.0) if bytes(d)[1] == T_ACK) == 1
    assert b.stats()["num_dup_recvs"] == 26
