"""A real lossy, rate-limited link between two network namespaces (see ``netns.py``).

Traffic goes only to the 10.231.0.x / fd00:231:: addresses that exist inside the two
namespaces this test creates; every loop is bounded in count and time.
"""

from __future__ import annotations

import socket
import time

import pytest

from btlcore.device import Channel

import netns

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]

_REASON = netns.unavailable(need_nft=True, need_tc=True)
if _REASON:
    pytestmark.append(pytest.mark.skip(reason=f"network namespaces unavailable: {_REASON}"))


@pytest.fixture
def link():
    with netns.NetnsPair() as pair:
        yield pair


def _udp_socket(pair: netns.NetnsPair, side: str, family: int = socket.AF_INET) -> socket.socket:
    ip = pair.ip4[side] if family == socket.AF_INET else pair.ip6[side]
    with pair.inside(side):
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.bind((ip, 0))
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    return sock


def _blast(tx: socket.socket, rx: socket.socket, count: int, size: int, timeout: float = 10.0) -> int:
    """Send ``count`` datagrams tx -> rx, draining rx as we go; return how many arrived."""
    dest = rx.getsockname()
    buf = bytearray(65536)
    payload = b"\x5a" * size
    got = 0
    deadline = time.monotonic() + timeout
    sent = 0
    while sent < count and time.monotonic() < deadline:
        try:
            tx.sendto(payload, dest)
            sent += 1
        except BlockingIOError:
            pass
        while True:
            try:
                rx.recv_into(buf)
                got += 1
            except BlockingIOError:
                break
    assert sent == count, f"sent only {sent} of {count} within {timeout} s"
    quiet_until = time.monotonic() + 0.3  # stragglers still in flight
    while time.monotonic() < quiet_until:
        try:
            rx.recv_into(buf)
            got += 1
        except BlockingIOError:
            time.sleep(0.001)
    return got


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def test_veth_carries_udp_without_loss(link, family):
    if family == socket.AF_INET6 and not link.has_ipv6:
        pytest.skip("IPv6 addresses cannot be added here (kernel without IPv6?)")
    tx, rx = _udp_socket(link, "a", family), _udp_socket(link, "b", family)
    with tx, rx:
        assert _blast(tx, rx, 500, 1000) == 500


def test_loss_rate_applied_and_measured(link):
    link.set_loss(30, side="b")
    tx, rx = _udp_socket(link, "a"), _udp_socket(link, "b")
    n = 3000
    with tx, rx:
        got = _blast(tx, rx, n, 200)
    loss = 1 - got / n
    dropped = link.loss_counter("b")
    print(f"loss applied 30%, measured {loss:.1%} ({n - got} of {n}); nft counted {dropped}")
    assert 0.24 <= loss <= 0.36  # binomial sd is 0.8%: this is over 7 sd either way
    assert dropped == n - got
    link.set_loss(0, side="b")
    tx, rx = _udp_socket(link, "a"), _udp_socket(link, "b")
    with tx, rx:
        assert _blast(tx, rx, 300, 200) == 300


def test_rate_limit_applied_and_measured(link):
    rate_bps = 20e6
    link.set_rate("20mbit", side="a", burst="32kb", latency="20ms")
    tx, rx = _udp_socket(link, "a"), _udp_socket(link, "b")
    buf = bytearray(65536)
    payload = b"r" * 1000
    dest = rx.getsockname()
    arrivals: list[float] = []
    with tx, rx:
        end = time.monotonic() + 1.0
        while time.monotonic() < end:  # offer far more than 20 Mbit/s for one second
            for _ in range(20):
                try:
                    tx.sendto(payload, dest)
                except OSError:
                    pass
            while True:
                try:
                    rx.recv_into(buf)
                    arrivals.append(time.monotonic())
                except BlockingIOError:
                    break
        quiet_until = time.monotonic() + 0.2
        while time.monotonic() < quiet_until:
            try:
                rx.recv_into(buf)
                arrivals.append(time.monotonic())
            except BlockingIOError:
                time.sleep(0.001)
    skip = 64  # the initial burst goes through at line rate
    assert len(arrivals) > skip + 100
    span = arrivals[-1] - arrivals[skip]
    measured = (len(arrivals) - skip - 1) * (1000 + 28 + 14) * 8 / span  # bits on the wire
    print(f"tbf 20 Mbit/s: measured {measured / 1e6:.1f} Mbit/s over {span:.2f} s")
    assert measured <= 1.3 * rate_bps  # the limit holds
    assert measured >= 0.5 * rate_bps  # and was reached (loosely: a loaded CI machine may
    #                                    leave the link idle while this process waits for a CPU)


def test_udp_devices_across_the_veth(link, open_udp):
    """The UDP device on each "host": MTU from the veth, datagrams both ways, and the loss
    of the link seen in the device's counters."""
    with link.inside("a"):
        a = open_udp(host=link.ip4["a"])
    with link.inside("b"):
        b = open_udp(host=link.ip4["b"])
    assert a.capabilities().mtu == 1500 - 28
    assert "interface " + link.dev["a"] in a.device.stats()["mtu_source"]
    to_b, to_a = a.resolve(b.local_address()), b.resolve(a.local_address())
    for ch in Channel:
        assert a.post_send(ch, to_b, b"hello %d" % ch)
        assert b.post_send(ch, to_a, b"olleh %d" % ch)
    for dev, want in ((b, {b"hello 0", b"hello 1"}), (a, {b"olleh 0", b"olleh 1"})):
        got: set[bytes] = set()
        deadline = time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            dev.wait(deadline)
            got.update(bytes(m) for m in dev.poll_recv(8))
        assert got == want
    link.set_loss(20, side="b")
    n = 2000
    received = 0
    deadline = time.monotonic() + 20
    for i in range(n):
        while not a.post_send(Channel.DATA, to_b, b"%06d" % i * 100) and time.monotonic() < deadline:
            a.wait(time.monotonic() + 0.001)
        received += len(b.poll_recv(256))
    quiet_until = time.monotonic() + 0.3
    while time.monotonic() < quiet_until:
        b.wait(quiet_until)
        received += len(b.poll_recv(256))
    loss = 1 - received / n
    print(f"device across veth, 20% loss applied: measured {loss:.1%}")
    assert 0.14 <= loss <= 0.26
    assert a.device.stats()["tx_datagrams"] == n + 2


@pytest.mark.parametrize("recverr", [True, False])
def test_rate_limited_link_pushes_back(link, open_udp, recverr):
    """Over a tbf-limited veth, IP_RECVERR turns the qdisc's drops into post_send() returning
    False: whatever the device accepted arrives.  Without it, the excess vanishes silently."""
    link.set_rate("20mbit", side="a", burst="32kb", latency="20ms")
    with link.inside("a"):
        a = open_udp(host=link.ip4["a"], recverr=recverr)
    with link.inside("b"):
        b = open_udp(host=link.ip4["b"])
    to_b = a.resolve(b.local_address())
    payload = b"p" * 1000
    received = 0
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        for _ in range(20):
            a.post_send(Channel.DATA, to_b, payload)
        received += len(b.poll_recv(256))
    quiet_until = time.monotonic() + 0.2
    while time.monotonic() < quiet_until:
        b.wait(quiet_until)
        received += len(b.poll_recv(256))
    st = a.device.stats()
    print(f"recverr={recverr}: accepted {st['tx_datagrams']}, pushed back {st['tx_pushbacks']}, "
          f"received {received}")
    if recverr:
        assert st["tx_pushbacks"] > 0
        assert received == st["tx_datagrams"]
    else:
        assert st["tx_pushbacks"] == 0
        assert received < st["tx_datagrams"] / 2
