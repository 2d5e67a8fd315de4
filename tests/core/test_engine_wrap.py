"""Sequence numbers crossing 2**64 on the wire (the core's are unbounded ints)."""

from __future__ import annotations

import pytest

from btlcore import Config
from btlcore.protocol.wire import T_DATA
from btlcore.testing.enginepair import EnginePair


def wrapped_pair(start: int, **cfg: object) -> EnginePair:
    p = EnginePair(Config(**cfg))  # type: ignore[arg-type]
    for i, j in ((0, 1), (1, 0)):
        peer = p.connect(i, j)
        peer.isn = start
        peer.next_seq = start + 1
        peer.snd_una = start
    p.run(lambda: p.established(0, 1))
    p.run_idle()
    assert p.pb.window.cum == start and p.pa.window.cum == start
    return p


@pytest.mark.parametrize("ordered", [True, False])
def test_delivery_across_the_wrap_with_loss(ordered: bool) -> None:
    start = 2**64 - 20
    p = wrapped_pair(start, ordered=ordered, window=16)
    p.add_hook(lambda s, d, raw, k: "drop" if k % 5 == 3 else (("delay", 0.0006) if k % 4 == 1 else None))
    msgs = [bytes([i]) * (i * 211 % 3500) for i in range(30)]
    for i, m in enumerate(msgs):
        p.send(0, 1, i, m, key=("a", i))
        p.send(1, 0, i, m, key=("b", i))
    p.run(lambda: all(v for v in p.completions.values()) and len(p.delivered[0]) == len(p.delivered[1]) == 30)
    p.run_idle()
    for side in (0, 1):
        got = [(t, d) for _a, t, d in p.delivered[side]]
        want = list(enumerate(msgs))
        assert (got if ordered else sorted(got)) == want
    assert all(v == [None] for v in p.completions.values())
    # the wire really wrapped: small sequence numbers followed huge ones
    seqs = [dg.seq for _t, dg in p.sent(0, T_DATA)]
    assert max(seqs) > 2**64 - 20 and min(seqs) < 100
    assert p.pa.next_seq > 2**64 and p.pb.window.cum > 2**64  # unbounded inside the core
    assert p.a.stats()["num_resends"] > 0


def test_duplicate_from_before_the_wrap_recognised_after_it() -> None:
    start = 2**64 - 3
    p = wrapped_pair(start, window=64)
    first = []
    p.add_hook(lambda s, d, raw, k: first.append(raw) if s == 0 and len(first) < 1 and raw[1] == T_DATA else None)
    for i in range(10):
        p.send(0, 1, 1, bytes([i]), key=i)
    p.run(lambda: all(p.completions[i] for i in range(10)))
    p.b.receive_datagram(first[0], None, p.now)  # seq 2**64 - 2 on the wire, long after the wrap
    p._collect()
    assert p.pb.counters.num_dup_recvs == 1 and len(p.delivered[1]) == 10
