"""The verbs Device on a real RDMA port (Soft-RoCE in the VM).  Skips without one."""

from __future__ import annotations

import time

import pytest

from btlcore.device import Channel
from btlcore.errors import ConfigError

P, D = Channel.PRIORITY, Channel.DATA


def reap(dev, want, timeout=5.0):
    """Reap send completions until ``want`` were reaped (or timeout); return how many."""
    n = 0
    deadline = time.monotonic() + timeout
    while n < want and time.monotonic() < deadline:
        n += dev.poll_completions()
        if n < want:
            time.sleep(0.001)
    return n


def drain(dev, want, timeout=5.0, budget=64):
    """Copies of datagrams received by ``dev`` until ``want`` arrived or timeout."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        views = dev.poll_recv(budget)
        got += [bytes(v) for v in views]
        if not views:
            dev.poll_completions()
            dev.wait(min(deadline, time.monotonic() + 0.05))
    return got


@pytest.fixture
def pair(open_verbs):
    a, b = open_verbs(), open_verbs()
    for dev in (a, b):
        dev.create_channel(P, 768)
        dev.create_channel(D, 0)
    return a, b


def test_opens_rxe_with_routable_gid(open_verbs):
    dev = open_verbs()
    caps = dev.capabilities()
    assert caps.integrity is True and caps.virtual_time is False
    assert caps.mtu == dev.active_mtu and caps.mtu in (256, 512, 1024, 2048, 4096)
    assert dev.gid.gid != bytes(16)
    print(dev.describe())
    if dev.name.startswith("rxe"):
        assert dev.gid.text == "::ffff:127.0.0.1" and dev.gid.why == "IPv4-mapped RoCE v2"
    assert dev.clock()() == pytest.approx(time.monotonic(), abs=1.0)


def test_both_directions_both_channels(pair):
    a, b = pair
    to_b, to_a = a.resolve(b.local_address()), b.resolve(a.local_address())
    msgs = []
    for src, dst, dest in ((a, b, to_b), (b, a, to_a)):
        for ch in (P, D):
            m = f"{src.name}:{src.local_address()[24:28].hex()} ch{int(ch)}".encode() * 3
            assert src.post_send(ch, dest, m)
            msgs.append((dst, m))
    for dst in (a, b):
        want = sorted(m for d, m in msgs if d is dst)
        assert sorted(drain(dst, len(want))) == want
    for dev in (a, b):
        assert dev.rx_priority == 1 and dev.rx_datagrams == 2


def test_priority_channel_is_drained_first(pair):
    a, b = pair
    dest = a.resolve(b.local_address())
    for i in range(5):
        assert a.post_send(D, dest, b"data%d" % i)
    assert a.post_send(P, dest, b"ack")
    time.sleep(0.2)
    got = [bytes(v) for v in b.poll_recv(64)]
    assert got[0] == b"ack" and sorted(got[1:]) == [b"data%d" % i for i in range(5)]


def test_mtu_respected(pair):
    a, b = pair
    dest = a.resolve(b.local_address())
    mtu = a.capabilities().mtu
    big = bytes(range(256)) * (mtu // 256) + bytes(mtu % 256)
    assert len(big) == mtu
    assert a.post_send(D, dest, big)
    assert drain(b, 1) == [big]
    with pytest.raises(ValueError, match="MTU"):
        a.post_send(D, dest, big + b"x")
    # the priority channel was granted 768 bytes
    assert a.post_send(P, dest, big[:768])
    with pytest.raises(ValueError, match="PRIORITY channel MTU of 768"):
        a.post_send(P, dest, big[:769])
    assert drain(b, 1) == [big[:768]]


def test_inline_small_sends(open_verbs):
    a, b = open_verbs(inline="auto"), open_verbs(inline="off")
    dest = a.resolve(b.local_address())
    if a.max_inline == 0:
        pytest.skip(f"{a.name} grants no inline data")
    small = [b"i%03d" % i + bytes(a.max_inline - 4) for i in range(10)]
    for m in small:
        assert a.post_send(P, dest, m)
    assert a.tx_inline == 10
    assert sorted(drain(b, 10)) == sorted(small)
    # one byte more than max_inline goes through a registered buffer
    assert a.post_send(P, dest, bytes(a.max_inline + 1))
    assert a.tx_inline == 10
    assert drain(b, 1) == [bytes(a.max_inline + 1)]
    c = b
    assert c.max_inline == 0
    assert c.post_send(P, c.resolve(a.local_address()), b"x") and c.tx_inline == 0
    assert drain(a, 1) == [b"x"]


def test_burst_with_send_queue_pushback(open_verbs):
    a = open_verbs(send_queue_depth=16, inline="off")
    b = open_verbs(recv_queue_depth=1024)
    dest = a.resolve(b.local_address())
    # exact accounting: 16 posts fit, the 17th is refused until completions are reaped
    for i in range(16):
        assert a.post_send(D, dest, b"q%d" % i)
    assert not a.post_send(D, dest, b"refused")
    assert a.tx_pushbacks == 1
    assert a.post_send(P, dest, b"other channel")  # each channel has its own queue
    assert reap(a, 17) == 17
    assert sorted(drain(b, 17)) == sorted([b"q%d" % i for i in range(16)] + [b"other channel"])
    b.poll_recv(0)
    # a burst of 600 x 1 KiB through a 16-deep send queue, as the core drives it
    total, sent, pushbacks = 600, 0, 0
    payload = [i.to_bytes(4, "big") * 256 for i in range(total)]
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while (sent < total or len(got) < total) and time.monotonic() < deadline:
        while sent < total:
            if not a.post_send(D, dest, payload[sent]):
                pushbacks += 1
                break
            sent += 1
        assert max(ch.outstanding for ch in a._chans) <= 16
        a.poll_completions()
        got += [bytes(v) for v in b.poll_recv(256)]
    got += drain(b, total - len(got))
    assert sent == total and pushbacks > 0
    assert len(got) == total and sorted(got) == sorted(payload)
    reap(a, sum(ch.outstanding for ch in a._chans))
    assert [ch.outstanding for ch in a._chans] == [0, 0]
    assert sorted(a._chans[D].free) == list(range(16))
    assert a.tx_errors == 0 and b.rx_errors == 0


def test_views_valid_until_next_poll_then_reposted(open_verbs):
    a, b = open_verbs(), open_verbs(recv_queue_depth=8)
    dest = a.resolve(b.local_address())
    # 24 datagrams through an 8-deep receive queue: the buffers must come back
    for rnd in range(4):
        msgs = [b"r%d-%d" % (rnd, i) for i in range(6)]
        for m in msgs:
            assert a.post_send(D, dest, m)
        assert sorted(drain(b, 6, budget=8)) == msgs
        b.poll_recv(0)  # give the lent buffers back before the next round
        a.poll_completions()
    # views stay intact while more traffic lands in the other buffers
    assert a.post_send(D, dest, b"keep me")
    b.wait(time.monotonic() + 5)
    views = b.poll_recv(8)
    assert [bytes(v) for v in views] == [b"keep me"]
    for i in range(5):
        assert a.post_send(D, dest, b"other %d" % i)
    time.sleep(0.2)
    assert bytes(views[0]) == b"keep me"
    assert sorted(drain(b, 5)) == [b"other %d" % i for i in range(5)]
    assert b.rx_errors == 0


def test_wait_honours_deadline_and_wakes(pair):
    a, b = pair
    t0 = time.monotonic()
    b.wait(t0 + 0.05)
    assert 0.04 <= time.monotonic() - t0 < 0.5
    a.post_send(P, a.resolve(b.local_address()), b"wake")
    t0 = time.monotonic()
    b.wait(t0 + 5)
    assert time.monotonic() - t0 < 1
    assert [bytes(v) for v in b.poll_recv(8)] == [b"wake"]


def test_address_handles_cached(pair):
    a, b = pair
    d1 = a.resolve(b.local_address())
    assert a.resolve(bytes(b.local_address())) is d1
    assert a.stats()["address_handles"] == 1
    with pytest.raises(ValueError):
        a.resolve(b"\x55" * 12)


def test_explicit_gid_index_and_bad_device(open_verbs):
    dev = open_verbs()
    again = open_verbs(device=dev.name, port=dev.port, gid_index=dev.gid.index)
    assert again.gid.index == dev.gid.index
    with pytest.raises(ConfigError, match="verbs option 'device'.*devices here"):
        open_verbs(device="nosuchdev0")
    with pytest.raises(ConfigError, match="verbs option 'gid_index'"):
        open_verbs(gid_index=4000)


def test_wrong_qkey_is_dropped(open_verbs):
    from btlcore_verbs import _address

    a, b = open_verbs(), open_verbs(qkey=0x1234)
    good = _address.decode(b.local_address())
    assert good.qkey == 0x1234
    bad = _address.VerbsAddress(good.lid, good.gid, 0x4321, good.priority_qpn, good.data_qpn,
                                good.max_datagram)
    a.post_send(P, a.resolve(bad.encode()), b"wrong key")
    assert drain(b, 1, timeout=0.3) == []  # UD drops it silently
    a.post_send(P, a.resolve(b.local_address()), b"right key")
    assert drain(b, 1) == [b"right key"]


def test_close_is_idempotent(open_verbs):
    dev = open_verbs()
    dev.close()
    dev.close()
    assert dev.poll_recv(8) == [] and dev.poll_completions() == 0


def test_qp_error_state_is_recovered(open_verbs):
    """A receive that finds a buffer too small for it puts a UD QP in the error state; the
    device must notice, bring the QP back to RTS, and go on delivering."""
    from btlcore_verbs import _pyverbs

    pv = _pyverbs.load()
    a, b = open_verbs(), open_verbs(recv_queue_depth=4)
    dest = a.resolve(b.local_address())
    ch = b._chans[D]
    # a fifth receive, behind the four good ones: no room even for the GRH
    tiny = pv["RecvWR"](wr_id=0xFFFFFF, num_sge=1, sg=[pv["SGE"](ch.send_sges[0].addr, 8, b._mr.lkey)])
    ch.qp.post_recv(tiny)
    for i in range(5):
        assert a.post_send(D, dest, b"m%d" % i)
    got = drain(b, 4, timeout=2)
    assert sorted(got) == [b"m%d" % i for i in range(4)]
    # the fifth datagram hit the tiny buffer: error completion, QP down, recovered
    deadline = time.monotonic() + 5
    while b.qp_recoveries == 0 and time.monotonic() < deadline:
        b.poll_recv(8)
        time.sleep(0.01)
    assert b.qp_recoveries == 1 and b.rx_errors >= 1, b.stats()
    b.poll_recv(0)
    for round_ in range(3):  # all four buffers are back in the queue, round after round
        msgs = [b"after %d-%d" % (round_, i) for i in range(4)]
        for m in msgs:
            assert a.post_send(D, dest, m)
        assert sorted(drain(b, 4)) == msgs
        b.poll_recv(0)
        reap(a, 4)
    assert b.qp_recoveries == 1


def test_mtu_option_caps_datagrams(open_verbs):
    a, b = open_verbs(mtu=1024), open_verbs()
    assert a.capabilities().mtu == 1024 and a.port_mtu >= 1024
    assert a.create_channel(D, 0).mtu == 1024
    dest = a.resolve(b.local_address())
    assert a.post_send(D, dest, bytes(1024))
    with pytest.raises(ValueError, match="MTU of 1024"):
        a.post_send(D, dest, bytes(1025))
    assert drain(b, 1) == [bytes(1024)]
    # b (4096) must not send more than a (1024) accepts: the address says so
    with pytest.raises(ValueError, match="MTU of 1024"):
        b.post_send(D, b.resolve(a.local_address()), bytes(2048))
