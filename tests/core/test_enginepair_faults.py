"""The fault vocabulary (btlcore.faults) in the engine harness: ``net.faults``, the same words
as on the simulator and on a real backend; the old fate helpers still work, deprecated."""

from __future__ import annotations

import pytest

from btlcore import Config
from btlcore.errors import BtlDeprecationWarning
from btlcore.protocol import wire
from btlcore.testing.enginepair import EnginePair


def _data_seqs_arriving(p: EnginePair) -> list[int]:
    out = []
    for _t, src, _dst, data in p.arrivals:
        dg = wire.decode(data) if src == 0 else None
        if dg is not None and dg.type == wire.T_DATA:
            out.append(dg.seq)
    return out


def _message(p: EnginePair, size: int = 20_000) -> bytes:
    payload = bytes(range(256)) * (size // 256)
    p.send(0, 1, 7, payload, key="m")
    p.run(lambda: p.completions.get("m"))
    assert p.delivered[1] == [(b"A", 7, payload)] and p.completions["m"] == [None]
    return payload


def test_every_word_in_the_harness() -> None:
    p = EnginePair(Config(), seed=1)
    p.handshake()
    f = p.faults
    rules = [f.drop(src=0, type="DATA", nth=2), f.duplicate(src=b"A", type="DATA", nth=3),
             f.delay(0.01, src=0, dst=1, type="DATA", nth=5), f.reorder(after=2, src=0, type="DATA", nth=7),
             f.corrupt(src=0, type="DATA", nth=9), f.drop(dst=0, type="ACK", nth=1)]
    _message(p)
    assert [r.matched for r in rules] == [1, 1, 1, 1, 1, 1]
    assert p.b.stats()["num_crc_errors"] == 1


def test_reorder_lands_behind_the_datagrams_it_waited_for() -> None:
    p = EnginePair(Config(), seed=1)
    p.handshake()
    p.faults.reorder(after=2, src=0, type="DATA", nth=1)
    _message(p)
    seqs = _data_seqs_arriving(p)
    s0 = min(seqs)
    assert seqs[:4] == [s0 + 1, s0 + 2, s0, s0 + 3]


def test_a_partition_in_the_harness_by_engine_index() -> None:
    p = EnginePair(Config(), seed=1)
    p.handshake()
    cut = p.faults.partition(p.now, p.now + 0.5, [1])
    t0 = p.now
    _message(p, 2000)
    assert cut.matched >= 1 and p.now >= t0 + 0.5


def test_the_old_helpers_still_work_deprecated() -> None:
    p = EnginePair(Config(), seed=1)
    p.handshake()
    with pytest.warns(BtlDeprecationWarning, match="faults.drop"):
        dropped = p.drop_where(lambda dg: dg.type == wire.T_DATA, count=2)
    _message(p, 4000)
    assert len(dropped) == 2
