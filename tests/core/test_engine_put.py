"""Emulated RDMA put: data lands in the exposed region; completion after the last ACK."""

from __future__ import annotations

import pytest

from btlcore import BtlError, Config, PutError
from btlcore.protocol.events import PutLanded, PutRefused
from btlcore.protocol.wire import F_ACK, F_PUT, T_ACK, T_DATA
from btlcore.testing.enginepair import EnginePair, safe_decode


def pair(**cfg: object) -> EnginePair:
    p = EnginePair(Config(**cfg))  # type: ignore[arg-type]
    p.handshake()
    return p


def data(n: int, salt: int = 1) -> bytes:
    return bytes((i * 13 + salt) & 0xFF for i in range(n))


def puts(p: EnginePair, side: int = 1, kind: type = PutLanded) -> list[tuple]:
    return [(e.key, e.offset, e.length) for e in p.other_events[side] if type(e) is kind]


@pytest.mark.parametrize("size,offset", [(0, 0), (1, 0), (100, 50), (1452, 0), (1453, 7), (10000, 123)])
def test_put_lands_at_offset(size: int, offset: int) -> None:
    p = pair()
    region = bytearray(b"\xee" * 11000)
    key = p.b.expose(region)
    payload = data(size)
    p.send(0, 1, 4, payload, key="put", put_key=key, put_offset=offset)
    p.run(lambda: p.completions["put"])
    assert p.completions["put"] == [None]
    assert region[offset:offset + size] == payload
    assert region[:offset] == b"\xee" * offset and region[offset + size:] == b"\xee" * (11000 - offset - size)
    assert puts(p) == [(key, offset, size)]
    assert p.delivered[1] == []  # a put is not a message
    assert p.pb.counters.num_puts_delivered == 1
    assert all(dg.flags & F_PUT for _t, dg in p.sent(0, T_DATA))
    assert max(len(raw) for _t, _s, _d, raw in p.log) <= 1500
    n_segments = len(p.sent(0, T_DATA))
    assert n_segments == (1 if size <= 1500 - 36 - 12 else -(-size // (1500 - 36 - 12 - 12)))


def test_put_completes_only_after_last_byte_acked() -> None:
    p = pair()
    region = bytearray(20000)
    key = p.b.expose(region)
    payload = data(15000)
    # lose the last chunk of the put (the one carrying its last byte) twice
    dropped = p.faults.drop(where=lambda d: d.type == T_DATA and d.offset is not None
                           and d.offset + len(d.payload) == d.msg_len, count=2)
    p.send(0, 1, 4, payload, key="put", put_key=key, put_offset=0)
    seen_incomplete_done = []

    def check() -> bool:
        if p.completions["put"] and region[:15000] != payload:
            seen_incomplete_done.append(p.now)
        return bool(p.completions["put"])
    p.run(check)
    assert dropped.matched == 2 and not seen_incomplete_done
    assert p.completions["put"] == [None]
    # the completion came after b's ACK covering the last segment (it rides on b's put
    # status, which b sends as soon as the put is whole)
    last_seq = max(dg.seq for _t, dg in p.sent(0, T_DATA))
    acks = [(t, dg) for t, dg in p.sent(1) if dg.type in (T_ACK, T_DATA) and dg.flags & F_ACK
            and dg.ack >= last_seq]
    assert acks and acks[0][0] + p.delay <= p.now


def test_put_bad_key_reported_at_receiver() -> None:
    p = pair()
    region = bytearray(100)
    key = p.b.expose(region)
    p.send(0, 1, 4, b"x" * 10, key="bad", put_key=key + 99, put_offset=0)
    p.send(0, 1, 4, b"y" * 5000, key="badchunked", put_key=key + 99, put_offset=0)
    p.run(lambda: p.completions["bad"] and p.completions["badchunked"])
    p.run_idle()
    assert puts(p, kind=PutRefused) == [(key + 99, 0, 10), (key + 99, 0, 5000)]  # once per put
    assert p.pb.counters.num_put_errors == 2  # once per put that could not be placed
    assert region == bytearray(100)
    assert puts(p) == []
    # accepted (ACKed), and the receiver's put status tells the sender it was refused
    for name, length in (("bad", 10), ("badchunked", 5000)):
        [exc] = p.completions[name]
        assert isinstance(exc, PutError) and isinstance(exc, BtlError)
        assert (exc.key, exc.offset, exc.length, exc.reason) == (key + 99, 0, length, "unknown key")
        assert f"key {key + 99}" in str(exc) and "offset 0" in str(exc) and f"{length} bytes" in str(exc)


@pytest.mark.parametrize("size,offset", [(101, 0), (1, 100), (50, 60), (5000, 0), (3000, 90)])
def test_put_out_of_bounds(size: int, offset: int) -> None:
    p = pair()
    region = bytearray(100)
    key = p.b.expose(region)
    p.send(0, 1, 4, data(size), key="oob", put_key=key, put_offset=offset)
    p.run(lambda: p.completions["oob"])
    p.run_idle()
    assert puts(p, kind=PutRefused) == [(key, offset, size)]
    assert region == bytearray(100)  # not a byte written, not even the chunks that fit
    assert p.pb.counters.num_put_errors >= 1 and puts(p) == []


def test_put_exactly_fills_region() -> None:
    p = pair()
    region = bytearray(3000)
    key = p.b.expose(region)
    p.send(0, 1, 4, data(1000), key="a", put_key=key, put_offset=2000)
    p.send(0, 1, 4, data(2000, 9), key="b", put_key=key, put_offset=0)
    p.run(lambda: p.completions["a"] and p.completions["b"])
    assert region == bytearray(data(2000, 9) + data(1000))
    assert puts(p, kind=PutRefused) == []


def test_unexpose_then_put_errors() -> None:
    p = pair()
    region = bytearray(10)
    key = p.b.expose(region)
    p.b.unexpose(key)
    p.send(0, 1, 4, b"abc", key="k", put_key=key, put_offset=0)
    p.run(lambda: p.completions["k"])
    p.run_idle()
    assert puts(p, kind=PutRefused) == [(key, 0, 3)] and region == bytearray(10)


def test_expose_requires_writable() -> None:
    p = pair()
    with pytest.raises(ValueError, match="writable"):
        p.b.expose(b"readonly")
    k1, k2 = p.b.expose(bytearray(1)), p.b.expose(memoryview(bytearray(8)))
    assert k1 != k2


def test_put_under_loss_and_reorder_lands_intact() -> None:
    p = pair()
    region = bytearray(60000)
    key = p.b.expose(region)
    p.add_hook(lambda s, d, raw, k: "drop" if k % 5 == 2 else (("delay", 0.0004) if k % 3 == 0 else None))
    blobs = [data(12000, i) for i in range(5)]
    for i, b in enumerate(blobs):
        p.send(0, 1, 4, b, key=i, put_key=key, put_offset=i * 12000)
    p.run(lambda: all(p.completions[i] for i in range(5)))
    p.run_idle()
    assert bytes(region) == b"".join(blobs)
    assert sorted(puts(p)) == [(key, i * 12000, 12000) for i in range(5)]
    assert all(p.completions[i] == [None] for i in range(5))


def test_unexpose_mid_put_reported_and_no_leak() -> None:
    p = pair()
    region = bytearray(20000)
    key = p.b.expose(region)
    isn = p.pa.isn

    def hold_rest(s: int, d: int, raw: bytes, k: int) -> object:
        dg = safe_decode(raw)
        return ("delay", 0.01) if s == 0 and dg is not None and dg.type == T_DATA and dg.seq > isn + 1 else None
    p.add_hook(hold_rest)
    p.send(0, 1, 1, data(10240), key="put", put_key=key, put_offset=0)
    p.run(lambda: bool(p.pb.reassembly))  # the first chunk landed
    p.b.unexpose(key)
    p.run(lambda: p.completions["put"])
    p.run_idle()
    assert puts(p, kind=PutRefused) == [(key, 0, 10240)]
    assert p.pb.reassembly == {}
    # and the sender hears why (its put status)
    [exc] = p.completions["put"]
    assert isinstance(exc, PutError) and (exc.key, exc.offset, exc.length) == (key, 0, 10240)
    assert exc.reason == "region unexposed while the put was arriving" and "unexposed" in str(exc)
    assert not p.pa.puts and not p.a.has_outstanding()
