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
from btlcore.testing.enginepair import DELIVER, DROP, EnginePair

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
    "cc": st.sampled_from(["aimd", "none", "cubic", "bbr"]),  # every built-in algorithm
})


def body(i: int, n: int) -> bytes:
    head = i.to_bytes(2, "big")
    return (head * (n // 2 + 1))[:n]


def build(cfg: dict[str, Any], fa: list[Any], fb: list[Any], timeout: float = 1000.0) -> EnginePair:
    config = Config(rto_max=0.05, retrans_timeout=0.004, peer_timeout=timeout,
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


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
    assert p.a.next_deadline() is None and p.b.next_deadline() is None  # nothing left pending
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


# ---------------------------------------------------------------------------------------
# Long runs under random fates (rates rather than a finite script), three engines, puts,
# different configurations on each side, the real MTU.

import random as _random  # noqa: E402

from btlcore.protocol.events import PutLanded  # noqa: E402
from btlcore.testing.enginepair import EngineNet  # noqa: E402

side_configs = st.fixed_dictionaries({
    "ordered": st.booleans(),
    "window": st.sampled_from([8, 32, 4096]),
    "ack_frequency": st.sampled_from([1, 8]),
    "ack_delay": st.sampled_from([0.0, 0.0002]),
    "max_reassemblies": st.sampled_from([1, 4, 2048]),
    "cwnd_initial": st.sampled_from([2, 32]),
    "send_credits": st.sampled_from([1, 64]),
    "max_resends_per_pass": st.sampled_from([1, 16]),
    "priority_limit": st.sampled_from([0, 768]),
})
rates = st.tuples(st.sampled_from([0.0, 0.05, 0.25]), st.sampled_from([0.0, 0.05]),
                  st.sampled_from([0.0, 0.2]), st.sampled_from([0.0, 0.05]))
ops = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 7500), st.booleans(),
                         st.sampled_from([0.0, 0.0, 0.001, 0.02])), min_size=1, max_size=12)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(side_configs, min_size=3, max_size=3), rates, st.integers(0, 2**32), ops)
def test_three_engines_random_fates_puts_and_messages(cfgs: list[dict[str, Any]], rate: tuple[float, ...],
                                                      seed: int, plan: list[tuple[int, int, int, bool, float]]) -> None:
    drop, dup, delay, corrupt = rate
    rng = _random.Random(seed)

    def fates(s: int, d: int, raw: bytes, k: int) -> Any:
        x = rng.random()
        if x < drop:
            return DROP
        x -= drop
        if x < dup:
            return ("dup", 1)
        x -= dup
        if x < delay:
            return ("delay", rng.random() * 0.004)
        x -= delay
        if x < corrupt:
            return ("corrupt", rng.randrange(len(raw) * 8))
        return None
    configs = [Config(rto_max=0.05, peer_timeout=1000.0, handshake_timeout=1000.0, **c)
               for c in cfgs]
    net = EngineNet(3, configs=configs, max_steps=400_000)
    net.add_hook(fates)
    regions = [bytearray(len(plan) * 7501) for _ in range(3)]
    keys = [net.engines[i].expose(regions[i]) for i in range(3)]
    sent: dict[tuple[int, int], list[tuple[int, bytes]]] = {}
    puts: dict[int, list[tuple[int, int, bytes]]] = {0: [], 1: [], 2: []}
    n = 0
    for i, (src, dst, size, is_put, gap) in enumerate(plan):
        if src == dst:
            continue
        if gap:
            net.advance(net.now + gap)
        data = body(i, size)
        if is_put:
            net.send(src, dst, i, data, key=i, put_key=keys[dst], put_offset=i * 7501)
            puts[dst].append((i * 7501, size, data))
        else:
            net.send(src, dst, i, data, key=i)
            sent.setdefault((src, dst), []).append((i, data))
        n += 1
    keys_used = [i for i, (s, d, *_r) in enumerate(plan) if s != d]
    want_msgs = sum(len(v) for v in sent.values())
    net.run(lambda: all(net.completions[i] for i in keys_used)
            and sum(len(d) for d in net.delivered) == want_msgs
            and all(len([e for e in net.other_events[j] if type(e) is PutLanded]) == len(puts[j]) for j in range(3)),
            max_time=net.now + 600)
    net.run_idle(net.now + 0.5)
    for i in keys_used:
        assert net.completions[i] == [None], (i, net.completions[i])
    for (src, dst), msgs in sent.items():
        got = [(t, d) for a, t, d in net.delivered[dst] if a == net.addresses[src]]
        if cfgs[dst]["ordered"]:
            assert got == msgs
        else:
            assert sorted(got) == sorted(msgs)
    for dst in range(3):
        total = sum(len(v) for (s, d), v in sent.items() if d == dst)
        assert len(net.delivered[dst]) == total
        for off, size, data in puts[dst]:
            assert regions[dst][off:off + size] == data
        assert len([e for e in net.other_events[dst] if type(e) is PutLanded]) == len(puts[dst])
    event(f"resends: {sum(e.stats()['num_resends'] for e in net.engines) > 0}")


@settings(max_examples=700, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**64))
def test_soak_seeded(seed: int) -> None:
    """Bigger workloads than shrinking-friendly strategies reach: everything drawn from one
    seed (sizes to 5 MTUs, 150 operations, rates up to 30% loss), two engines, both ways."""
    rng = _random.Random(seed)
    cfg = {"ordered": rng.random() < 0.5, "window": rng.choice([8, 64, 4096]),
           "ack_frequency": rng.choice([1, 4, 8]), "ack_delay": rng.choice([0.0, 0.0002, 0.001]),
           "max_reassemblies": rng.choice([1, 3, 2048]), "fast_retransmit_threshold": rng.choice([1, 3, 6]),
           "rto_mode": rng.choice(["adaptive", "fixed"])}
    drop, dup = rng.choice([0, 0.1, 0.3]), rng.choice([0, 0.1])
    delay, corrupt = rng.choice([0, 0.3]), rng.choice([0, 0.05])
    frng = _random.Random(seed + 1)

    def fates(s: int, d: int, raw: bytes, k: int) -> Any:
        x = frng.random()
        if x < drop:
            return DROP
        if x < drop + dup:
            return ("dup", 1)
        if x < drop + dup + delay:
            return ("delay", frng.random() * 0.005)
        if x < drop + dup + delay + corrupt:
            return ("corrupt", frng.randrange(len(raw) * 8))
        return None
    p = EnginePair(Config(rto_max=0.05, retrans_timeout=0.004, peer_timeout=1000.0,
                          handshake_timeout=1000.0, **cfg), max_steps=1_000_000,
                   budget=rng.choice([1, 3, 1 << 30]))  # device back-pressure: few datagrams per pass
    p.add_hook(fates)
    sent: list[list[tuple[int, bytes]]] = [[], []]
    n = 150
    for i in range(n):
        side = rng.randrange(2)
        data = body(i, rng.choice([0, 1, rng.randrange(7500), rng.randrange(1500), 1464, 1465]))
        if rng.random() < 0.3:
            p.advance(p.now + rng.choice([0.0005, 0.003, 0.02]))
        p.send(side, 1 - side, i, data, key=i)
        sent[side].append((i, data))
    window = cfg["window"]

    def invariants() -> bool:
        for me, other in ((0, 1), (1, 0)):
            peer = p.peer(me, other)
            if peer is None:
                continue
            assert peer.in_flight <= min(window, peer.remote_window)  # never beyond the window
            assert peer.window.high - peer.window.cum <= window  # nothing accepted beyond it
            assert peer.cwnd >= 2 or peer.cwnd == float("inf")
            assert peer.snd_una < peer.next_seq
        return all(p.completions[i] for i in range(n)) and sum(len(d) for d in p.delivered) == n
    p.run(invariants, max_time=p.now + 600)
    p.run_idle(p.now + 0.5)
    for side in (0, 1):
        got = [(t, d) for _a, t, d in p.delivered[1 - side]]
        assert (got if cfg["ordered"] else sorted(got)) == (sent[side] if cfg["ordered"] else sorted(sent[side]))
    assert all(p.completions[i] == [None] for i in range(n))


# ---------------------------------------------------------------------------------------
# A peer restarts mid-conversation (a new Engine at the same address)

from btlcore.errors import PeerRestarted  # noqa: E402
from btlcore.protocol.events import MessageReceived  # noqa: E402
from btlcore.protocol.events import PeerRestarted as PeerRestartedEvent  # noqa: E402

restart_plan = st.tuples(
    configs, fates, fates, st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3 * MTU)), max_size=8),
    st.integers(0, 60), st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3 * MTU)), min_size=1, max_size=6))


def run_restart(plan: Any) -> tuple[EnginePair, int, dict[Any, tuple[int, int, bytes]]]:
    """Traffic both ways, then b restarts after ``steps`` steps and the new b speaks first.
    Returns the pair, the timeline index of the restart, and key -> (src, tag, data)."""
    cfg, fa, fb, before, steps, after = plan
    p = build(cfg, fa, fb)
    msgs: dict[Any, tuple[int, int, bytes]] = {}
    for i, (side, size) in enumerate(before):
        p.send(side, 1 - side, i, body(i, size), key=("old", i))
        msgs[("old", i)] = (side, i, body(i, size))
    for _ in range(steps):
        p.step()
    p.restart(1)
    mark = len(p.timeline)
    for j, (side, size) in enumerate(after):
        tag = 1000 + j
        side = 1 if j == 0 else side
        p.send(side, 1 - side, tag, body(tag, size), key=("new", j))
        msgs[("new", j)] = (side, tag, body(tag, size))
    p.run_idle(p.now + 5.0)
    return p, mark, msgs


# derandomized: longer runs also find test_engine_failure.py::
# test_delayed_hello_of_never_seen_older_incarnation (a known bug), which must not make this flaky
@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(restart_plan)
def test_restart_mid_conversation_safety(plan: Any) -> None:
    """Whatever the race between the restart and the handshakes: every callback of a live
    engine fires at most once (exactly once for a), nothing is delivered twice, nothing a
    saw fail is delivered, and once a knows of the restart nothing of the old b is delivered."""
    p, mark, msgs = run_restart(plan)
    new_b = [ev for (_t, i, ev) in p.timeline[mark:] if i == 1 and type(ev) is MessageReceived]
    at_a = [ev for (_t, i, ev) in p.timeline if i == 0 and type(ev) is MessageReceived]
    for key, (src, tag, data) in msgs.items():
        got = p.completions[key]
        if src == 0 or key[0] == "new":  # (the old b's callbacks died with it)
            assert len(got) <= 1, (key, got)
        if src == 0:
            assert len(got) == 1 and (got[0] is None or isinstance(got[0], (PeerRestarted, PeerUnreachable))), got
            n = sum(1 for ev in new_b if (ev.tag, bytes(ev.data)) == (tag, data))
            assert n <= 1
            if got[0] is not None:
                assert n == 0, "a failed send must not be delivered"
        else:
            n = sum(1 for ev in at_a if (ev.tag, bytes(ev.data)) == (tag, data))
            assert n <= 1
            if key[0] == "new" and got == [None]:
                assert n == 1, "acknowledged by a but not delivered"
    restarts = [k for k, (_t, i, ev) in enumerate(p.timeline) if i == 0 and type(ev) is PeerRestartedEvent]
    assert len(restarts) <= 1
    if restarts:
        late_old = [ev for (_t, i, ev) in p.timeline[restarts[0]:] if i == 0 and type(ev) is MessageReceived
                    and ev.tag < 1000]
        assert late_old == []


@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(restart_plan)
def test_restart_mid_conversation_liveness(plan: Any) -> None:
    """What the new b sends is delivered and acknowledged, and afterwards the pair talks
    both ways as if nothing had happened."""
    p, mark, msgs = run_restart(plan)
    for key, (src, _tag, _data) in msgs.items():
        if key[0] == "new" and src == 1:
            assert p.completions[key] == [None], (key, p.completions[key])
    p.send(0, 1, 2000, b"after a", key="check-a")
    p.send(1, 0, 2001, b"after b", key="check-b")
    p.run(lambda: p.completions["check-a"] and p.completions["check-b"], max_time=p.now + 60)
    assert p.completions["check-a"] == [None] and p.completions["check-b"] == [None]


def _restart_anytime(seed: int) -> str | None:
    """One side (sometimes both, one after the other) restarts at a random moment of a lossy
    conversation; then the network heals.  Returns None if both sides can talk again."""
    rng = _random.Random(seed)
    cfg = Config(peer_timeout=1000.0, handshake_timeout=1000.0, rto_max=0.05,
                 ordered=rng.random() < 0.5)
    p = EnginePair(cfg, max_steps=300_000)
    healed = [False]
    frng = _random.Random(seed + 99)
    p.add_hook(lambda s, d, raw, k: None if healed[0] else (
        DROP if frng.random() < 0.2 else (("delay", frng.random() * 0.005) if frng.random() < 0.2 else None)))
    for i in range(rng.randrange(6)):
        side = rng.randrange(2)
        p.send(side, 1 - side, i, bytes([i]) * rng.randrange(3000), key=("old", i))
    for _ in range(rng.randrange(40)):
        p.step()
    who = rng.randrange(2)
    p.restart(who)
    if rng.random() < 0.3:
        for _ in range(rng.randrange(10)):
            p.step()
        p.restart(1 - who)
    p.advance(p.now + 0.02)
    healed[0] = True
    for attempt in range(2):  # a send racing the restart may fail once; a second must not
        keys = []
        for side in (0, 1):
            key = ("check", attempt, side)
            try:
                p.send(side, 1 - side, 500 + side, b"still there?", key=key)
            except Exception as e:  # noqa: BLE001
                return f"send raised {e!r}"
            keys.append(key)
        try:
            p.run(lambda keys=keys: all(p.completions[k] for k in keys), max_time=p.now + 20)
        except AssertionError:
            return f"stuck: {[p.completions[k] for k in keys]}"
        if all(p.completions[k] == [None] for k in keys):
            return None
    return f"failed twice: {[p.completions[k] for k in keys]}"


def test_restart_at_any_moment_recovers() -> None:
    bad = {seed: why for seed in range(2000) if (why := _restart_anytime(seed)) is not None}
    assert bad == {}
