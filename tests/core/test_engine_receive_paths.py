"""The receive side's short paths: each must deliver the same bytes, apply the same ACK and
owe the same ACK as the general path would.  Engines are driven by hand, one datagram at a
time, so that every step can be checked."""

from __future__ import annotations

import pytest

from btlcore import Config
from btlcore.protocol.events import MessageReceived, SendCompleted
from btlcore.protocol.wire import F_ACK, T_ACK, T_DATA, decode
from btlcore.testing.enginepair import EnginePair

MTU = 1500


def pair(mtu: int = MTU, **cfg: object) -> EnginePair:
    # aimd: these tests count the datagrams of each send pass, unpaced
    p = EnginePair(Config(**{"cc": "aimd", **cfg}), mtu=mtu)  # type: ignore[arg-type]
    p.handshake()
    return p


def flat(buf: object) -> bytes:
    return b"".join(buf) if isinstance(buf, list) else bytes(buf)  # type: ignore[arg-type]


def payload(n: int, salt: int) -> bytes:
    return bytes((i * 13 + salt) & 0xFF for i in range(n))


@pytest.mark.parametrize("size", [0, 64, 1400, 5000])
def test_reply_with_new_piggybacked_ack(size: int) -> None:
    """Ping-pong by hand: every reply acknowledges the request it answers (a new ACK) and
    is the next message in order.  The request completes before the reply is delivered,
    the reply's bytes are exact, and the reply is owed an ACK like any other segment."""
    p = pair()
    engines, peers = (p.a, p.b), (p.pa, p.pb)
    now = p.now
    last: list[object] = [None, None]
    for r in range(40):
        src = r % 2
        dst = 1 - src
        tx, rx, ptx, prx = engines[src], engines[dst], peers[src], peers[dst]
        done: list[object] = []
        data = payload(size, r)
        now += 1e-4
        tx.send(ptx, 7, data, done.append, now)
        out = [flat(b) for _c, _d, b in tx.datagrams_to_send(now)]
        assert out and all(decode(d).type == T_DATA and decode(d).flags & F_ACK for d in out)
        acked_before = prx.snd_una
        owed_before = prx.ack_count
        now += 1e-4
        for d in out:
            rx.receive_datagram(d, None, now)
        events = rx.take_events()
        msgs = [e for e in events if type(e) is MessageReceived]
        assert [(e.tag, bytes(e.data)) for e in msgs] == [(7, data)]
        if r:
            # the piggy-backed ACK acknowledged everything rx had sent (the last request),
            # and completed it before the reply was delivered
            assert prx.snd_una == prx.next_seq - 1 > acked_before
            assert not prx.unacked
            kinds = [type(e) for e in events]
            assert kinds.index(SendCompleted) < kinds.index(MessageReceived)
            assert [e for e in events if type(e) is SendCompleted] == [SendCompleted(last[dst], None)]
        # the reply is owed an ACK (ack_frequency 8: by deadline, or at once at 8 owed)
        assert prx.ack_count == owed_before + len(out)
        assert prx.ack_now or prx.ack_deadline is not None
        assert prx in rx._acking and prx in rx._timed
        last[src] = done.append  # completed by the reply's piggy-backed ACK, next turn
    p.now = now
    p.run_idle()
    assert p.a.stats()["num_msgs_completed"] == p.b.stats()["num_msgs_completed"] == 20


def test_piggybacked_ack_then_out_of_order_segment() -> None:
    """A new piggy-backed ACK on a segment that is not next in order: the ACK is applied
    once, the segment is held, and a SACK is owed at once."""
    p = pair(ack_delay=0.0)
    now = p.now
    done: list[object] = []
    now += 1e-4
    p.b.send(p.pb, 1, b"request", done.append, now)
    (req,) = [flat(b) for _c, _d, b in p.b.datagrams_to_send(now)]
    p.a.receive_datagram(req, None, now)
    p.a.take_events()
    now += 1e-4
    p.a.send(p.pa, 2, b"first", None, now)
    p.a.send(p.pa, 2, b"second", None, now)
    first, second = [flat(b) for _c, _d, b in p.a.datagrams_to_send(now)]
    now += 1e-4
    p.b.receive_datagram(second, None, now)  # overtakes the first; both carry the new ACK
    assert not p.pb.unacked
    assert p.b.take_events() == [SendCompleted(done.append, None)]
    assert p.pb.sack_dirty and p.pb.ack_now
    p.b.receive_datagram(first, None, now)
    assert [bytes(e.data) for e in p.b.take_events() if type(e) is MessageReceived] == [b"first", b"second"]
    assert p.pb.counters.num_msgs_completed == 1  # the ACK was applied once


def test_standalone_ack_completes_and_samples() -> None:
    """A standalone ACK without SACK ranges: completion, window, RTT sample."""
    p = pair(ack_delay=0.0)
    now = p.now
    done: list[object] = []
    now += 1e-4
    p.a.send(p.pa, 1, payload(3000, 1), done.append, now)
    segs = [flat(b) for _c, _d, b in p.a.datagrams_to_send(now)]
    assert len(segs) == 3
    now += 1e-4
    for d in segs:
        p.b.receive_datagram(d, None, now)
    acks = [flat(b) for _c, _d, b in p.b.datagrams_to_send(now)]
    assert [decode(d).type for d in acks] == [T_ACK]
    now += 1e-4
    p.a.receive_datagram(acks[0], None, now)
    assert p.a.take_events() == [SendCompleted(done.append, None)]
    assert not p.pa.unacked and p.pa.snd_una == p.pa.next_seq - 1
    assert p.pa.timer.min_rtt == pytest.approx(2e-4)  # sent at +1e-4, acked at +3e-4, no delay


# ---------------------------------------------------------------------------------------
# Engine.receive_datagrams: the same as receive_datagram on each datagram, byte for byte

from hypothesis import HealthCheck, given, settings  # noqa: E402
from test_properties import body, configs, fates, sends  # noqa: E402


def run_scenario(batch: bool, cfg: dict, fa: list, fb: list, plan: list, **kw: object) -> EnginePair:
    config = Config(rto_max=0.05, retrans_timeout=0.004, peer_timeout=1000.0,
                    handshake_timeout=1000.0, **cfg)
    p = EnginePair(config, mtu=160, max_steps=400_000, batch_receive=batch, **kw)  # type: ignore[arg-type]
    script = (fa, fb)
    p.add_hook(lambda s, d, raw, k: script[s][k] if k < len(script[s]) else None)
    for i, (side, size, gap) in enumerate(plan):
        if gap:
            p.advance(p.now + gap)
        p.send(side, 1 - side, i, body(i, size), key=i)
    p.run(lambda: all(p.completions.get(i) for i in range(len(plan))), max_time=1000.0)
    p.run_idle()
    return p


def summary(p: EnginePair) -> tuple[object, ...]:
    events = [(t, i, type(e), e.tag if type(e) is MessageReceived else None,
               bytes(e.data) if type(e) is MessageReceived else None) for t, i, e in p.timeline]
    return (p.log, events, p.a.stats(), p.b.stats(), p.completions, p.delivered)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, fates, fates, sends)
def test_receive_datagrams_matches_receive_datagram(cfg: dict, fa: list, fb: list, plan: list) -> None:
    """Loss, duplication, reordering and corruption, every configuration: a batch receive
    sends the same datagrams at the same times, delivers the same messages and counts the
    same as one call per datagram."""
    assert summary(run_scenario(True, cfg, fa, fb, plan)) == summary(run_scenario(False, cfg, fa, fb, plan))


@pytest.mark.parametrize("mtu", [MTU, 600])
@pytest.mark.parametrize("reuse", [False, True])
def test_receive_datagrams_bulk_in_order(reuse: bool, mtu: int) -> None:
    """The short path itself: whole messages and middle chunks in order, as bytes (chunks
    kept) or as views of a buffer the device overwrites afterwards (chunks copied); with
    a 600 B MTU every datagram is small enough for its CRC to be taken over a copy of its
    tail (receive.py's _COPY_MAX), so the chunks' views are made apart from it."""
    p = pair(mtu)
    assert p.b.crc
    now = p.now + 1e-4
    sizes = [10, 1400, 9000, 0, 20000, 3] if mtu == MTU else [10, 500, 3600, 0, 8000, 3]  # (in one window)
    msgs = [payload(n, i) for i, n in enumerate(sizes)]
    for i, m in enumerate(msgs):
        p.a.send(p.pa, i, m, None, now)
    out = [flat(b) for _c, _d, b in p.a.datagrams_to_send(now)]
    assert len(out) > 20
    scratch = bytearray(MTU)
    if reuse:
        views = []
        for d in out:  # each view is scribbled over once the batch was taken (below)
            buf = bytearray(d)
            views.append(memoryview(buf))
        batch: list[object] = views
    else:
        batch = list(out)
    before = p.pb.counters.num_total_recvs
    p.b.receive_datagrams(batch, now + 1e-4)
    if reuse:
        for v in batch:
            v[:] = b"\xa5" * len(v)  # type: ignore[index]
    del scratch
    got = [(e.tag, bytes(e.data)) for e in p.b.take_events() if type(e) is MessageReceived]
    assert got == list(enumerate(msgs))
    assert p.pb.counters.num_total_recvs - before == len(out)
    assert p.pb.window.cum == p.pa.next_seq - 1
    assert p.pb.ack_count == len(out) and p.pb.ack_now  # the debt: 8 or more owed, ACK at once
    assert p.pb in p.b.state.acking


# ---------------------------------------------------------------------------------------
# Reassembly: kept views, appended copies, or a whole-message buffer; the same message

from hypothesis import strategies as st  # noqa: E402

from btlcore.protocol.peers import Reassembly  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.data())
def test_reassembly_any_order_any_buffer_kind(nchunks: int, data: st.DataObject) -> None:
    """Chunks in any order, each either an immutable datagram or a device buffer scribbled
    over right after: the message comes out whole, and no view of it is left behind."""
    sizes = data.draw(st.lists(st.integers(1, 300), min_size=nchunks, max_size=nchunks))
    message = bytes((i * 31 + 7) & 0xFF for i in range(sum(sizes)))
    cuts, off = [], 0
    for n in sizes:
        cuts.append((off, n))
        off += n
    order = data.draw(st.permutations(cuts))
    kinds = data.draw(st.lists(st.booleans(), min_size=nchunks, max_size=nchunks))
    # per chunk, the room the budgets leave: none (a chunk above a gap waits as a copy) or
    # enough to spread the message (chunks written to their places, those waiting first)
    rooms = data.draw(st.lists(st.sampled_from([0, 1 << 30]), min_size=nchunks, max_size=nchunks))
    ras = Reassembly(len(message), 1, None, 0)
    counted = 0
    for (off, n), kept, room in zip(order, kinds, rooms, strict=True):
        if kept:
            view = memoryview(b"hdr" + message[off:off + n])[3:]
            counted += ras.add(off, view, room)
        else:
            scratch = bytearray(b"hdr" + message[off:off + n])
            counted += ras.add(off, memoryview(scratch)[3:], room)
            scratch[:] = b"\xa5" * len(scratch)  # the device reuses its buffer
        ras.received += n
        assert counted == ras.held  # what add said it holds more adds up to what it holds
    out = ras.take()
    assert type(out) is bytearray and out == message
    out.extend(b"!")  # resizable: no view of it is left behind


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "array", "ctypes"])
@pytest.mark.parametrize("size", [3, 900, 1400])
def test_fast_path_any_bytes_like(kind: str, size: int) -> None:
    """A device may hand over any bytes-like datagram: whole messages and chunks, small (the
    CRC taken over a slice of the datagram) and large (over a view of it), each read right and
    the message delivered as bytes, with nothing counted as an error."""
    import array
    import ctypes

    def as_kind(d: bytes) -> object:
        if kind == "bytearray":
            return bytearray(d)
        if kind == "memoryview":
            return memoryview(bytearray(d))
        if kind == "array":
            return array.array("B", d)
        if kind == "ctypes":
            return (ctypes.c_ubyte * len(d)).from_buffer_copy(d)  # (its slices are lists)
        return d

    p = pair(600)
    now = p.now + 1e-4
    msgs = [payload(size, i) for i in range(3)]
    for i, m in enumerate(msgs):
        p.a.send(p.pa, i, m, None, now)
    out = [flat(b) for _c, _d, b in p.a.datagrams_to_send(now)]
    p.b.receive_datagrams([as_kind(d) for d in out], now + 1e-4)
    got = [(e.tag, e.data) for e in p.b.take_events() if type(e) is MessageReceived]
    assert [(t, bytes(d)) for t, d in got] == list(enumerate(msgs))
    assert all(type(d) is bytes for t, d in got if size < 600)  # (a whole message: bytes)
    stats = p.b.stats()
    assert stats["num_crc_errors"] == stats["num_malformed_recvs"] == 0
    assert p.pb.window.cum == p.pa.next_seq - 1
