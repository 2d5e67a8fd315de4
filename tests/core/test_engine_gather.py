"""Engine.enable_gather: bulk chunks leave as [header, view of the message], uncopied.  The
bytes on the wire must be exactly those of the ordinary copying path, retransmissions
included (their ACK point and CRC are re-stamped over both parts)."""

from __future__ import annotations

import random

import pytest

from btlcore.protocol.engine import Engine
from btlcore.protocol.wire import F_CHUNK, decode
from btlcore.testing.enginepair import EngineNet


def _run(gather: bool, drops: list[int]) -> tuple[list[bytes], list[bool], bytes]:
    net = EngineNet(mtu=9000, seed=5)
    eng = net.engines[0]
    kinds: list[bool] = []
    if gather:
        eng.enable_gather()
    real = Engine.datagrams_to_send  # (the engine is slotted: wrapped on the class for the while)

    def recording(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = real(self, *args, **kwargs)
        if self is eng:
            kinds.extend(type(buf) is list for _c, _d, buf in out)
        return out

    Engine.datagrams_to_send = recording  # type: ignore[method-assign]
    try:
        for n in drops:
            net.faults.drop(src=0, dst=1, nth=n + 1)
        net.handshake()
        msg = random.Random(9).randbytes(200_003)
        net.send(0, 1, 7, msg, key="m")
        net.send(0, 1, 8, b"small", key="s")
        net.run(lambda: len(net.completions.get("m", [])) + len(net.completions.get("s", [])) == 2)
    finally:
        Engine.datagrams_to_send = real  # type: ignore[method-assign]
    assert net.completions == {"m": [None], "s": [None]}
    got = [d for _a, tag, d in net.delivered[1] if tag == 7]
    assert got == [msg]
    return [d for _t, src, _dst, d in net.log if src == 0], kinds, msg


@pytest.mark.parametrize("drops", [[], [3, 4, 10]], ids=["lossless", "with-retransmissions"])
def test_gathered_datagrams_are_byte_identical(drops: list[int]) -> None:
    copied, kinds_copied, _ = _run(False, drops)
    gathered, kinds, _ = _run(True, drops)
    assert not any(kinds_copied)
    assert sum(kinds) >= 22  # every full chunk of the 200 kB message went out gathered
    assert gathered == copied
    chunks = [decode(d) for d in gathered if decode(d).flags & F_CHUNK]
    assert len(chunks) > 22 if drops else len(chunks) == 23
