"""The fault vocabulary (btlcore.faults) on real sockets: ``btlcore.open("udp", faults=plan)``
puts the interposer on the device's send and receive paths.  The same words as on the
simulator; the protocol recovers from each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import btlcore
from btlcore.faults import Faults
from btlcore.interpose import Interposer

PAYLOAD = bytes(range(256)) * 400  # ~100 KB: ~70 DATA segments of 1500-byte datagrams
CONFIG = btlcore.Config(mtu=1500)  # (loopback's own MTU is 64 KiB: two segments would do)


@pytest.fixture
def opened() -> Iterator[list[btlcore.Transport]]:
    made: list[btlcore.Transport] = []
    yield made
    for t in made:
        t.close(flush=False)


def _open(made: list[btlcore.Transport], faults: Faults | None = None) -> btlcore.Transport:
    t = btlcore.open("udp", bind="127.0.0.1:0", config=CONFIG, faults=faults)
    made.append(t)
    return t


def _transfer(made: list[btlcore.Transport], on_a: Faults | None, on_b: Faults | None,
              payload: bytes = PAYLOAD) -> tuple[btlcore.Transport, btlcore.Transport]:
    a, b = _open(made, on_a), _open(made, on_b)
    got: list[bytes] = []
    b.on(7, lambda peer, tag, data: got.append(bytes(data)))
    a.send(a.connect(b.address), 7, payload)
    btlcore.run_until([a, b], lambda: got, timeout=30)
    assert got == [payload]
    return a, b


def test_drop_on_send_by_type_and_nth(opened) -> None:
    plan = Faults(seed=1)
    rule = plan.drop(direction="send", type="DATA", nth=(1, 5, 6))
    a, _b = _transfer(opened, plan, None)
    assert rule.matched == 3 and rule.seen > 6
    assert a.stats()["num_resends"] >= 3


def test_drop_on_receive_of_acks(opened) -> None:
    plan = Faults(seed=1)
    rule = plan.drop(direction="recv", type="ACK", count=3)
    _transfer(opened, plan, None)
    assert rule.matched == 3 and rule not in plan.rules  # (count reached: gone)


def test_duplicate_and_corrupt_on_receive(opened) -> None:
    plan = Faults(seed=1)
    dup = plan.duplicate(copies=2, direction="recv", type="DATA", nth=3)
    bad = plan.corrupt(direction="recv", type="DATA", nth=7)
    _a, b = _transfer(opened, None, plan)
    assert (dup.matched, bad.matched) == (1, 1)
    st = b.stats()
    assert st["num_dup_recvs"] >= 2
    assert st["num_crc_errors"] == 1  # the flipped bit was caught, the segment resent


def test_delay_and_reorder_on_send(opened) -> None:
    plan = Faults(seed=1)
    # (a quarter second: the 3rd segment must leave before the 2nd is let go, and on a loaded
    # CI machine a sender can stall 50 ms between two sends; that once made this fail)
    late = plan.delay(0.25, direction="send", type="DATA", nth=2)
    held = plan.reorder(after=3, direction="send", type="DATA", nth=4)
    order: list[int] = []  # the receiver's view: a rule that only watches (its predicate says no)
    watch = Faults()
    watch.drop(direction="recv", type="DATA", where=lambda dg: order.append(dg.seq) is not None)
    _transfer(opened, plan, watch)
    assert (late.matched, held.matched) == (1, 1)
    s0 = min(order)  # the 1st DATA segment; the 2nd was delayed, the 4th held behind 3 more
    assert order.index(s0 + 1) > order.index(s0 + 2)
    assert order.index(s0 + 3) > order.index(s0 + 4)  # (3 more datagrams: of any type)


def test_delay_on_receive_is_released_by_the_wait(opened) -> None:
    plan = Faults(seed=1)
    rule = plan.delay(0.05, direction="recv", type="DATA", nth=1)
    a, b = _open(opened), _open(opened, plan)
    got: list[bytes] = []
    b.on(7, lambda peer, tag, data: got.append(bytes(data)))
    a.send(a.connect(b.address), 7, b"late")
    btlcore.run_until([a, b], lambda: got, timeout=10)
    assert got == [b"late"] and rule.matched == 1


def test_a_partition_in_time_and_by_peer(opened) -> None:
    plan = Faults(seed=1)
    a = _open(opened, plan)
    b, c = _open(opened), _open(opened)
    now = a.now()
    cut = plan.partition(now, now + 0.3, [b.address])  # a cut from b for 0.3 s; c untouched
    got: dict[bytes, float] = {}
    b.on(1, lambda peer, tag, data: got.setdefault(bytes(data), a.now()))
    c.on(1, lambda peer, tag, data: got.setdefault(bytes(data), a.now()))
    a.send(a.connect(b.address), 1, b"to b")
    a.send(a.connect(c.address), 1, b"to c")
    btlcore.run_until([a, b, c], lambda: len(got) == 2, timeout=20)
    assert got[b"to b"] >= now + 0.3  # b's got through only once the cut healed
    assert cut.matched >= 1 and cut.seen == cut.matched  # (the rule took only b's datagrams)


def test_no_faults_no_interposer(opened) -> None:
    plain = _open(opened)
    assert not isinstance(getattr(plain.device.post_send, "__self__", None), Interposer)
    with pytest.raises(TypeError, match="faults must be a btlcore.faults.Faults"):
        btlcore.open("udp", bind="127.0.0.1:0", faults="drop 5%")  # type: ignore[arg-type]


def test_an_endpoint_names_peers_by_address(opened) -> None:
    plan = Faults()
    plan.drop(peer="b")  # a NIC name means nothing to a real endpoint
    a, b = _open(opened, plan), _open(opened)
    a.send(a.connect(b.address), 1, b"x")
    with pytest.raises(ValueError, match="btlcore address"):
        a.progress()


def test_a_delayed_datagram_is_in_next_deadline_and_run_until_wakes_for_it(opened) -> None:
    """Drivers other than the device's own wait (run_until over several transports, the asyncio
    driver) sleep until ``Transport.next_deadline()``: a datagram a delay fault holds must be
    due there, or it would wait for whatever else wakes the driver (here: a 5 s timeout)."""
    plan = Faults(seed=1)
    plan.delay(0.3, direction="send", type="DATA", nth=1)
    cfg = btlcore.Config(mtu=1500, rto_min=5.0, rto_max=5.0, rto_initial=5.0, tlp=False)  # (no timer but the delay's)
    a = btlcore.open("udp", bind="127.0.0.1:0", config=cfg, faults=plan)
    b = btlcore.open("udp", bind="127.0.0.1:0", config=cfg)
    c = btlcore.open("udp", bind="127.0.0.1:0", config=cfg)  # idle: run_until selects over three
    opened.extend([a, b, c])
    peer = a.connect(b.address)
    assert btlcore.run_until([a, b, c], lambda: peer.state.value == "established", timeout=10)
    got: list[bytes] = []
    b.on(7, lambda p, tag, data: got.append(bytes(data)))
    a.send(peer, 7, b"held back")
    a.progress()  # the DATA segment goes to the interposer, which holds it for 0.3 s
    due = a.next_deadline()
    assert due is not None and due <= a.now() + 0.3 + 1e-3
    import time
    start = time.monotonic()
    assert btlcore.run_until([a, b, c], lambda: bool(got), timeout=20)
    assert time.monotonic() - start < 2.5  # released at 0.3 s, not at the keepalive (3.3 s) or the RTO (5 s)
    assert got == [b"held back"] and a.stats()["num_timeout_retrans"] == 0
