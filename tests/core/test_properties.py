"""Property tests: whatever the network does (loss, duplication, reordering, corruption, in
both directions) and whatever the application sends (sizes, interleavings, both sides), every
message arrives exactly once and intact (in send order in ordered mode) and every completion
callback fires exactly once; with a peer gone silent forever, every callback still fires
exactly once (PeerUnreachable for what was not acknowledged) and nothing hangs."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from btlcore import Config
from btlcore.errors import PeerUnreachable
from enginepair import DELIVER, DROP, EnginePair

MTU = 160  # small, so that 5 MTUs are cheap and chunking is everywhere
CHUNK_PAYLOAD = MTU - 36 - 12

fate = st.one_of(
    st.just(DELIVER), st.just(DELIVER), st.just(DROP),
    st.tuples(st.just("dup"), st.integers(1, 2)),
    st.tuples(st.just("delay"), st.integers(1, 12).map(lambda k: k * 0.0004)),
    st.tuples(st.just("corrupt"), st.integers(0, 8 * MTU)),
)
fates = st.lists(fate, max_size=150)
send = st.tuples(st.integers(0, 1), st.integers(0, 5 * MTU), st.sampled_from([0.0, 0.0, 0.0003, 0.002, 0.01]))
sends = st.lists(send, min_size=1, max_size=20)
configs = st.fixed_dictionaries({
    "ordered": st.booleans(),
    "window": st.sampled_from([8, 16, 4096]),
    "ack_frequency": st.sampled_from([1, 2, 8]),
    "ack_delay": st.sampled_from([0.0, 0.0002, 0.001]),
    "fast_retransmit_threshold": st.sampled_from([1, 3]),
    "rto_mode": st.sampled_from(["adaptive", "adaptive", "fixed"]),
    "max_reassemblies": st.sampled_from([1, 2048]),
    "cwnd_max": st.sampled_from([0, 1024]),
})


def body(i: int, n: int) -> bytes:
    head = i.to_bytes(2, "big")
    return (head * (n // 2 + 1))[:n]


def build(cfg: dict[str, Any], fa: list[Any], fb: list[Any], timeout: float = 1000.0) -> EnginePair:
    config = Config(rto_max=0.05, retrans_timeout=0.004, max_retries=10_000, peer_timeout=timeout,
                    handshake_timeout=timeout, **cfg)
    p = EnginePair(config, mtu=MTU, max_steps=400_000)
    script = (fa, fb)
    p.add_hook(lambda s, d, raw, k: script[s][k] if k < len(script[s]) else None)
    return p


def do_sends(p: EnginePair, plan: list[tuple[int, int, float]]) -> list[list[tuple[int, bytes]]]:
    """Send per the plan; returns what each side sent, as (tag, data), in order."""
    sent: list[list[tuple[int, bytes]]] = [[], []]
    for i, (side, size, gap) in enumerate(plan):
        if gap:
            p.advance(p.now + gap)
        data = body(i, size)
        p.send(side, 1 - side, i, data, key=i)
        sent[side].append((i, data))
    return sent


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, fates, fates, sends)
def test_exactly_once_intact_in_order(cfg: dict[str, Any], fa: list[Any], fb: list[Any],
                                      plan: list[tuple[int, int, float]]) -> None:
    p = build(cfg, fa, fb)
    sent = do_sends(p, plan)
    n = len(plan)
    p.run(lambda: all(p.completions[i] for i in range(n))
          and sum(len(d) for d in p.delivered) == n, max_time=p.now + 600)
    p.run_idle(p.now + 1.0)  # late duplicates and retransmissions land: still exactly once
    for side in (0, 1):
        got = [(tag, data) for _a, tag, data in p.delivered[1 - side]]
        if cfg["ordered"]:
            assert got == sent[side]
        else:
            assert sorted(got) == sorted(sent[side]) and len(set(got)) == len(got)
    for i in range(n):
        assert p.completions[i] == [None], (i, p.completions[i])
    st_a, st_b = p.a.stats(), p.b.stats()
    assert st_a["num_send_errors"] == st_b["num_send_errors"] == 0
    assert st_a["num_msgs_completed"] + st_b["num_msgs_completed"] == n
    assert st_a["num_msgs_delivered"] + st_b["num_msgs_delivered"] == n
    assert not p.a.has_outstanding() and not p.b.has_outstanding()
    event(f"resends>0: {st_a['num_resends'] + st_b['num_resends'] > 0}")
    event(f"dups>0: {st_a['num_dup_recvs'] + st_b['num_dup_recvs'] > 0}")
    event(f"crc errors>0: {st_a['num_crc_errors'] + st_b['num_crc_errors'] > 0}")
    event(f"chunked: {st_a['num_chunk_recvs'] + st_b['num_chunk_recvs'] > 0}")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, fates, fates, sends, st.integers(0, 40), st.integers(0, 1))
def test_silent_peer_every_callback_once(cfg: dict[str, Any], fa: list[Any], fb: list[Any],
                                         plan: list[tuple[int, int, float]], cut_after: int,
                                         silent: int) -> None:
    p = build(cfg, fa, fb, timeout=2.0)
    # after the cut_after-th datagram (either way), `silent` never speaks nor hears again
    count = {"n": 0}

    def cut(s: int, d: int, raw: bytes, k: int) -> Any:
        count["n"] += 1
        return DROP if count["n"] > cut_after else None
    p.hooks.insert(0, cut)
    sent = do_sends(p, plan)
    n = len(plan)
    p.run_idle(p.now + 30.0)
    assert p.a.get_timer() is None and p.b.get_timer() is None  # nothing left pending
    for i in range(n):
        got = p.completions[i]
        assert len(got) == 1, (i, got)
        assert got[0] is None or isinstance(got[0], PeerUnreachable), got
    for side in (0, 1):
        got = [(tag, data) for _a, tag, data in p.delivered[1 - side]]
        assert len(set(got)) == len(got)  # never twice
        assert set(got) <= set(sent[side])  # never anything not sent (or corrupted)
        if cfg["ordered"]:
            assert got == sent[side][:len(got)]  # a prefix
        else:
            ok = {(i, d) for i, d in sent[side] if p.completions[i] == [None]}
            assert ok <= set(got)  # acknowledged implies delivered
    del silent
    event(f"failures: {p.a.stats()['num_peer_failures'] + p.b.stats()['num_peer_failures']}")
