"""The UDP device on loopback: datagrams both ways on both channels, MTU, options, waiting."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from btlcore.device import Capabilities, Channel, DeviceOps
from btlcore.errors import ConfigError
from btlcore.registry import open_device, probe
from btlcore_udp import _address, _mmsg, _mtu, _options
from btlcore_udp._device import UdpDevice

pytestmark = pytest.mark.timeout(60)


def recv_n(ops: DeviceOps, n: int, timeout: float = 5.0) -> list[bytes]:
    """Collect ``n`` datagrams (copied), waiting at most ``timeout`` seconds."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        ops.wait(min(deadline, time.monotonic() + 0.5))
        got.extend(bytes(m) for m in ops.poll_recv(n - len(got)))
    return got


def swap_sockets(device, socks):
    """Put stand-in sockets (or the real ones back) under a device; returns the old ones."""
    old = device._socks
    device._socks = tuple(socks)
    device._sendto = tuple(sock.sendto for sock in socks)
    return old


def pair(open_udp, **options):
    a, b = open_udp(**options), open_udp(**options)
    return a, b, a.resolve(b.local_address()), b.resolve(a.local_address())


# -- opening, capabilities ---------------------------------------------------------------


def test_recvmmsg_option(open_udp, recv_mode):
    a = open_udp()
    assert a.device.stats()["recvmmsg"] is (recv_mode == "auto" and _mmsg.available())


def test_registry_opens_udp_by_name():
    ops = open_device("udp", {})
    try:
        assert ops.backend == "udp"
        assert isinstance(ops.device, UdpDevice)
        caps = ops.capabilities()
        assert isinstance(caps, Capabilities)
        assert caps.integrity is True and caps.virtual_time is False  # loopback: no wire
        assert caps.mtu == 65507  # loopback: 65536 - 20 - 8, capped at the UDP maximum
        assert ops.poll_completions() == 0
        assert ops.clock() is time.monotonic
        assert len(ops.fds()) == 2
        assert ops.device.options.host == "127.0.0.1"
    finally:
        ops.close()


def test_probe_usable_and_unusable():
    assert probe("udp").usable
    bad = probe("udp", {"gso": "maybe"})
    assert not bad.usable and "gso" in bad.reason
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        taken = s.getsockname()[1]
        busy = probe("udp", {"port": taken})
    assert not busy.usable and str(taken) in busy.reason
    assert not probe("udp", {"host": "192.0.2.1"}).usable  # not an address of this machine


# -- datagrams -----------------------------------------------------------------------------


def test_exchange_both_directions_both_channels(open_udp, host):
    a, b, to_b, to_a = pair(open_udp, host=host)
    for ch in Channel:
        assert a.create_channel(ch, 0).mtu == a.capabilities().mtu
        b.create_channel(ch, 0)
    sent_ab = [(ch, f"a->b {ch.name} {i}".encode() * (i + 1)) for i in range(20) for ch in Channel]
    sent_ba = [(ch, f"b->a {ch.name} {i}".encode() * (i + 1)) for i in range(20) for ch in Channel]
    for ch, data in sent_ab:
        assert a.post_send(ch, to_b, data)
    for ch, data in sent_ba:
        assert b.post_send(ch, to_a, memoryview(data))
    got_b = recv_n(b, len(sent_ab))
    got_a = recv_n(a, len(sent_ba))
    # priority first within one poll, and each channel in order
    assert sorted(got_b) == sorted(d for _, d in sent_ab)
    assert sorted(got_a) == sorted(d for _, d in sent_ba)
    for got, sent in ((got_b, sent_ab), (got_a, sent_ba)):
        for ch in Channel:
            mine = [d for c, d in sent if c == ch]
            assert [d for d in got if d in mine] == mine
    stats = a.device.stats()
    assert stats["tx_datagrams"] == len(sent_ab) and stats["rx_datagrams"] == len(sent_ba)
    assert stats["rx_priority"] == 20
    assert stats["tx_bytes"] == sum(len(d) for _, d in sent_ab)


def test_priority_socket_drained_first(open_udp):
    a, b, to_b, _ = pair(open_udp)
    for i in range(5):
        a.post_send(Channel.DATA, to_b, b"data%d" % i)
    for i in range(5):
        a.post_send(Channel.PRIORITY, to_b, b"prio%d" % i)
    time.sleep(0.05)
    got = [bytes(m) for m in b.poll_recv(100)]
    assert got == [b"prio%d" % i for i in range(5)] + [b"data%d" % i for i in range(5)]


def test_poll_recv_budget_and_views(open_udp):
    a, b, to_b, _ = pair(open_udp)
    for i in range(10):
        a.post_send(Channel.DATA, to_b, bytes([i]) * 100)
    time.sleep(0.05)
    assert b.poll_recv(0) == []
    first = b.poll_recv(3)
    assert [bytes(m) for m in first] == [bytes([i]) * 100 for i in range(3)]
    assert all(isinstance(m, memoryview) for m in first)
    rest = recv_n(b, 7)
    assert rest == [bytes([i]) * 100 for i in range(3, 10)]
    assert b.poll_recv(10) == []


def test_large_datagrams_fill_the_receive_buffers_without_loss(open_udp):
    a, b, to_b, _ = pair(open_udp, rcvbuf="512M")
    n = 300  # 19.5 MB: more than the arena (4 MiB) or the recvmmsg slots (256 of 64 KiB)
    payloads = [bytes([i % 256]) * 65000 for i in range(n)]
    for p in payloads:
        assert a.post_send(Channel.DATA, to_b, p)
    first = b.poll_recv(1000)
    assert 0 < len(first) < n  # stopped when the buffers were full
    got = [bytes(m) for m in first] + recv_n(b, n - len(first))
    assert got == payloads


# -- MTU ---------------------------------------------------------------------------------


def test_mtu_detected_from_interface(host):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    mtu, source = _mtu.detect(family, host)
    lo = int(open("/sys/class/net/lo/mtu").read())
    assert mtu == min(lo - _mtu.HEADERS[family], _options.MAX_PAYLOAD[family])
    assert "lo" in source


def test_mtu_of_other_interfaces_from_sysfs():
    checked = 0
    for _, name in socket.if_nameindex():
        ip = _mtu._ipv4_of(name)
        if name == "lo" or ip is None:
            continue
        assert _mtu.interface_of(socket.AF_INET, ip) == name
        want = int(open(f"/sys/class/net/{name}/mtu").read()) - 28
        assert _mtu.detect(socket.AF_INET, ip)[0] == want
        checked += 1
    if not checked:
        pytest.skip("no non-loopback interface with an IPv4 address here")


def test_mtu_sysfs_and_ioctl_agree():
    assert _mtu.interface_mtu("lo") == int(open("/sys/class/net/lo/mtu").read())
    assert _mtu.interface_mtu("no-such-if0") is None


def test_mtu_override_and_oversize(open_udp):
    a, b, to_b, _ = pair(open_udp, mtu=1400)
    assert a.capabilities().mtu == 1400
    assert a.device.stats()["mtu_source"] == "option mtu"
    assert a.post_send(Channel.DATA, to_b, b"x" * 1400)
    with pytest.raises(ValueError, match="1401 bytes exceeds the DATA channel MTU of 1400"):
        a.post_send(Channel.DATA, to_b, b"x" * 1401)
    info = a.create_channel(Channel.PRIORITY, 512)
    assert info.mtu == 512 and a.create_channel(Channel.DATA, 9000).mtu == 1400
    with pytest.raises(ValueError, match="PRIORITY channel MTU of 512"):
        a.post_send(Channel.PRIORITY, to_b, b"x" * 513)
    with pytest.raises(ValueError, match="MTU"):
        a.device.post_send_batch(Channel.DATA, to_b, [b"x" * 1401])
    assert recv_n(b, 1) == [b"x" * 1400]


def test_oversize_arrival_is_dropped_and_counted(open_udp):
    (b,) = [open_udp(mtu=1000)]
    to_b = b.resolve(b.local_address())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
        raw.sendto(b"y" * 1001, to_b[Channel.DATA])
        raw.sendto(b"z" * 1000, to_b[Channel.DATA])
    assert recv_n(b, 1) == [b"z" * 1000]
    assert b.device.stats()["rx_oversize"] == 1


# -- addresses ---------------------------------------------------------------------------


def test_address_roundtrip_v4_and_v6():
    blob4 = _address.encode(socket.AF_INET, "10.1.2.3", 4000, 4001)
    assert len(blob4) == 12 and blob4[:4] == b"\x55\x01\x04\x00"
    assert _address.decode(blob4) == (socket.AF_INET, "10.1.2.3", 4000, 4001, 0)
    blob6 = _address.encode(socket.AF_INET6, "fe80::1", 5, 6, scope_id=3)
    assert len(blob6) == 28
    assert _address.decode(blob6) == (socket.AF_INET6, "fe80::1", 5, 6, 3)
    assert _address.describe(blob6) == "udp://[fe80::1%3]:5+6"


def test_resolve_gives_sockaddrs_per_channel(open_udp, host):
    a = open_udp(host=host)
    handle = a.resolve(a.local_address())
    names = a.device.local_sockaddrs
    assert handle[Channel.PRIORITY][:2] == names[0][:2]
    assert handle[Channel.DATA][:2] == names[1][:2]


@pytest.mark.parametrize("blob, message", [
    (b"", "too short"),
    (b"\x55\x01\x04", "too short"),
    (b"\x00\x01\x04\x00\x00\x01\x00\x02\x7f\x00\x00\x01", "not a udp address"),
    (b"\x55\x02\x04\x00\x00\x01\x00\x02\x7f\x00\x00\x01", "version 2"),
    (b"\x55\x01\x05\x00\x00\x01\x00\x02\x7f\x00\x00\x01", "family 5"),
    (b"\x55\x01\x04\x00\x00\x01\x00\x02\x7f\x00\x00", "must be 12 bytes"),
    (b"\x55\x01\x04\x00\x00\x00\x00\x02\x7f\x00\x00\x01", "port 0"),
    ("not bytes", "must be bytes"),
])
def test_malformed_address(open_udp, blob, message):
    a = open_udp()
    with pytest.raises(ValueError, match=message):
        a.resolve(blob)


def test_address_of_other_family_refused(open_udp):
    a = open_udp()
    v6 = _address.encode(socket.AF_INET6, "::1", 1000, 1001)
    with pytest.raises(ValueError, match="is IPv6 but this device is bound to IPv4"):
        a.resolve(v6)


# -- options -----------------------------------------------------------------------------


@pytest.mark.parametrize("options, words", [
    ({"colour": "red"}, ["unknown udp option 'colour'", "known options: bind"]),
    ({"mtu": 50}, ["'mtu'", "from 128 to 65507"]),
    ({"mtu": 70000}, ["'mtu'"]),
    ({"mtu": "big"}, ["'mtu'"]),
    ({"mtu": True}, ["'mtu'"]),
    ({"gso": "maybe"}, ["'gso'", "one of auto, on, off"]),
    ({"recvmmsg": "sometimes"}, ["'recvmmsg'", "one of auto, on, off"]),
    ({"recverr": "x"}, ["'recverr'", "true or false"]),
    ({"gro": 2}, ["'gro'", "true or false"]),
    ({"keep_heap": "x"}, ["'keep_heap'", "true or false"]),
    ({"busy_poll": "perhaps"}, ["'busy_poll'", "true or false"]),
    ({"rcvbuf": 10}, ["'rcvbuf'", "byte count"]),
    ({"sndbuf": "lots"}, ["'sndbuf'"]),
    ({"port": 70000}, ["'port'", "0 to 65535"]),
    ({"bind": "::1:5000"}, ["'bind'", "[HOST]:PORT"]),
    ({"bind": "127.0.0.1"}, ["'bind'"]),
    ({"bind": "127.0.0.1:x"}, ["'bind'"]),
    ({"bind": "127.0.0.1:0", "host": "::1"}, ["'bind' and 'host'/'port' conflict"]),
    ({"port": 65535}, ["'port'", "port + 1"]),
    ({"host": "127.0.0.1", "advertise": "::1"}, ["'advertise'", "family"]),
    ({"port": 7000, "data_port": 7000}, ["both 7000"]),
])
def test_option_errors(options, words):
    with pytest.raises(ConfigError) as info:
        _options.parse(options, environ={})
    for word in words:
        assert word in str(info.value)


def test_unresolvable_host_name(monkeypatch):
    def no_dns(*_a, **_k):  # never ask a real resolver from a test
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_dns)
    with pytest.raises(ConfigError, match="cannot resolve host 'nowhere'"):
        _options.parse({"host": "nowhere"}, environ={})


def test_option_error_through_registry():
    from btlcore.errors import BackendUnavailable

    with pytest.raises(BackendUnavailable, match="gso"):
        open_device("udp", {"gso": "maybe"})
    plugin = __import__("btlcore_udp.plugin", fromlist=["x"])
    with pytest.raises(ConfigError, match="'mtu'"):
        plugin.btl_device_open(options={"mtu": 5})


def test_option_values_as_strings():
    o = _options.parse({"bind": "[::1]:0", "mtu": "9000", "rcvbuf": "8M", "sndbuf": "512KiB",
                        "busy_poll": "yes", "gso": "OFF", "seed": 7}, environ={})
    assert (o.host, o.port, o.data_port, o.mtu) == ("::1", 0, 0, 9000)
    assert (o.rcvbuf, o.sndbuf, o.busy_poll, o.gso) == (8 << 20, 512 << 10, True, "off")
    o = _options.parse({"port": 7000, "mtu": "auto"}, environ={})
    assert (o.port, o.data_port, o.mtu) == (7000, 7001, 0)
    o = _options.parse({"host": "0.0.0.0", "advertise": "127.0.0.1"}, environ={})
    assert o.advertise == "127.0.0.1"


def test_wildcard_advertises_an_address_of_this_host():
    # a wildcard is no address to send to: without 'advertise' the device advertises one of
    # its own (the default route's source, else an interface's, else loopback)
    from btlcore_udp import _route

    for bind, family in (("0.0.0.0:0", socket.AF_INET), ("[::]:0", socket.AF_INET6)):
        o = _options.parse({"bind": bind}, environ={})
        assert not ipaddress.ip_address(o.advertise).is_unspecified
        mapped = ipaddress.ip_address(o.advertise)
        plain = mapped.ipv4_mapped if isinstance(mapped, ipaddress.IPv6Address) and mapped.ipv4_mapped else mapped
        assert plain.is_loopback or _route.is_local(socket.AF_INET if plain.version == 4 else family, str(plain))


def test_options_from_environment():
    o = _options.parse({}, environ={"BTL_UDP_MTU": "2000", "BTL_UDP_BIND": "127.0.0.1:0"})
    assert o.mtu == 2000
    o = _options.parse({"mtu": 3000, "host": "::1"}, environ={"BTL_UDP_MTU": "2000",
                                                               "BTL_UDP_BIND": "127.0.0.1:0"})
    assert (o.mtu, o.host) == (3000, "::1")  # explicit options win
    with pytest.raises(ConfigError, match="BTL_UDP_COLOUR"):
        _options.parse({}, environ={"BTL_UDP_COLOUR": "red"})


def test_explicit_ports(open_udp):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # ports + 1 may be taken by someone else; then the test tells, rather than flakes
    try:
        a = open_udp(bind=f"127.0.0.1:{port}", data_port=0)
    except OSError as exc:
        pytest.skip(f"port {port} taken meanwhile: {exc}")
    assert a.device.local_sockaddrs[0][1] == port
    assert _address.decode(a.local_address())[2] == port


def test_socket_buffers_granted_are_reported(open_udp):
    a = open_udp(rcvbuf="1M", sndbuf="256K")
    st = a.device.stats()
    assert st["rcvbuf_requested"] == 1 << 20 and 0 < st["rcvbuf_granted"] <= 1 << 20
    assert st["sndbuf_requested"] == 256 << 10 and 0 < st["sndbuf_granted"] <= 256 << 10


# -- send-queue pushback, errors ---------------------------------------------------------


class _FullSocket:
    """A socket whose send queue is always full."""

    def __init__(self, err: int) -> None:
        self.err = err

    def sendto(self, *_a):
        raise OSError(self.err, os.strerror(self.err))

    def sendmsg(self, *_a):
        raise OSError(self.err, os.strerror(self.err))


@pytest.mark.parametrize("err", [errno.EAGAIN, errno.ENOBUFS])
def test_full_send_queue_returns_false(open_udp, err):
    a = open_udp()
    dest = a.resolve(a.local_address())
    real = a.device._socks
    swap_sockets(a.device, (_FullSocket(err), _FullSocket(err)))
    try:
        assert a.post_send(Channel.DATA, dest, b"x") is False
        assert a.device.post_send_batch(Channel.DATA, dest, [b"x" * 100] * 5) == 0
        assert a.device.post_send_batch(Channel.DATA, dest, [b"x" * 100]) == 0
    finally:
        swap_sockets(a.device, real)
    assert a.device.stats()["tx_pushbacks"] == 3
    assert a.device.stats()["tx_datagrams"] == 0


def test_unreachable_counts_as_loss(open_udp):
    a = open_udp()
    dest = a.resolve(a.local_address())
    real = a.device._socks
    swap_sockets(a.device, (_FullSocket(errno.EPERM), _FullSocket(errno.EPERM)))
    try:
        assert a.post_send(Channel.DATA, dest, b"x") is True  # lost, as on a wire
    finally:
        swap_sockets(a.device, real)
    assert a.device.stats()["tx_errors"] == 1


# -- batch send (GSO) --------------------------------------------------------------------


@pytest.mark.parametrize("gso", ["auto", "off"])
def test_post_send_batch(open_udp, host, gso):
    a, b, to_b, _ = pair(open_udp, host=host, gso=gso)
    batch = [bytes([i % 256]) * 1472 for i in range(100)] + [b"tail" * 10]
    batch += [b"m" * 9000, b"n" * 9000, b"o" * 200, b"p" * 8000]  # sizes vary: several runs
    assert a.device.post_send_batch(Channel.DATA, to_b, batch) == len(batch)
    assert recv_n(b, len(batch)) == batch
    st = a.device.stats()
    assert st["tx_datagrams"] == len(batch)
    assert st["tx_bytes"] == sum(map(len, batch))
    if gso == "off":
        assert st["tx_gso_sends"] == 0
    elif st["gso"]:
        assert 0 < st["tx_gso_sends"] < 10


@pytest.mark.parametrize("gso", ["auto", "off"])
def test_gathered_datagrams(open_udp, gso):
    # a datagram may be a list of buffers (the engine's [header, payload]): each is sent as
    # one datagram, the bytes joined in order, in GSO runs and singly
    a, b, to_b, _ = pair(open_udp, gso=gso)
    payload = memoryview(bytes(range(256)) * 40)
    items = [(Channel.DATA, to_b, [bytearray(b"H%03d" % i), payload[i:i + 8000]]) for i in range(20)]
    items.insert(7, (Channel.DATA, to_b, b"plain"))
    items.insert(3, (Channel.DATA, to_b, bytes(8004)))  # same size, not gathered, mid-run
    items.append((Channel.DATA, to_b, [bytearray(b"tail"), payload[:100]]))  # a shorter last
    items.append((Channel.PRIORITY, to_b, [b"pri", b"ority"]))
    assert a.device.post_send_many(items) == len(items)
    want = [b"".join(d) if isinstance(d, list) else d for _c, _d, d in items]
    got = recv_n(b, len(items))
    assert sorted(got) == sorted(want)  # the priority socket is read first
    assert [g for g in got if g != b"priority"] == [w for w in want if w != b"priority"]
    assert a.post_send(Channel.DATA, to_b, [b"one ", memoryview(b"datagram")])
    assert recv_n(b, 1) == [b"one datagram"]
    st = a.device.stats()
    assert st["tx_datagrams"] == len(items) + 1
    assert st["tx_bytes"] == sum(map(len, want)) + 12
    if gso == "auto" and st["gso"]:
        assert st["tx_gso_sends"] >= 1
    with pytest.raises(ValueError, match="exceeds"):
        a.post_send(Channel.DATA, to_b, [bytes(a.device.mtu), b"x"])


class _NoGso:
    """A socket whose sendmsg fails as a NIC without checksum offload makes GSO fail."""

    def __init__(self, sock):
        self.sock = sock

    def sendmsg(self, *_a):
        raise OSError(errno.EIO, "no checksum offload")

    def sendto(self, *a_):
        return self.sock.sendto(*a_)


def test_gso_fallback_in_auto_mode(open_udp):
    a, b, to_b, _ = pair(open_udp)
    if not a.device.stats()["gso"]:
        pytest.skip("this kernel has no UDP GSO")
    real = a.device._socks

    swap_sockets(a.device, (_NoGso(real[0]), _NoGso(real[1])))
    try:
        for _ in range(3):
            assert a.device.post_send_batch(Channel.DATA, to_b, [b"q" * 100] * 4) == 4
    finally:
        swap_sockets(a.device, real)
    assert recv_n(b, 12) == [b"q" * 100] * 12
    st = a.device.stats()
    assert st["gso_fallbacks"] == 3 and st["gso"] is False


def test_gso_turned_off_mid_batch_sends_the_rest_plainly(open_udp):
    # the batch notices GSO going off (third failure) and sends its later runs one by one,
    # without trying GSO again: exactly three fallbacks, every datagram delivered in order
    a, b, to_b, _ = pair(open_udp)
    if not a.device.stats()["gso"]:
        pytest.skip("this kernel has no UDP GSO")
    real = a.device._socks

    batch = [bytes([k]) * (100 * k) for k in (1, 2, 3, 4, 5) for _ in range(3)]
    swap_sockets(a.device, (_NoGso(real[0]), _NoGso(real[1])))
    try:
        assert a.device.post_send_batch(Channel.DATA, to_b, batch) == len(batch)
    finally:
        swap_sockets(a.device, real)
    assert recv_n(b, len(batch)) == batch
    st = a.device.stats()
    assert st["gso_fallbacks"] == 3 and st["gso"] is False


def test_datagrams_too_large_for_a_gso_run_go_one_by_one(open_udp):
    # two of them would not fit in one send: no GSO attempt, each one sendmsg'd whole
    a, b, to_b, _ = pair(open_udp, rcvbuf=4 << 20)
    size = a.device._max_payload // 2 + 1
    if size > a.device.mtu:
        pytest.skip(f"device MTU {a.device.mtu} below half the largest UDP payload")
    body = memoryview(bytes(range(256)) * (size // 256 + 1))
    batch = [[b"%04d" % i, body[:size - 4]] for i in range(3)] + [bytes(size)]
    assert a.device.post_send_batch(Channel.DATA, to_b, batch) == len(batch)
    assert recv_n(b, len(batch)) == [b"".join(d) if isinstance(d, list) else d for d in batch]
    st = a.device.stats()
    assert st["tx_gso_sends"] == 0 and st["tx_datagrams"] == 4 and st["tx_bytes"] == 4 * size


# -- waiting -----------------------------------------------------------------------------


def _send_later(ops: DeviceOps, dest, delay: float) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        ops.post_send(Channel.DATA, dest, b"wake up")

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize("busy_poll", [False, True])
@pytest.mark.parametrize("deadline_kind", ["far", "none"])
def test_wait_blocks_until_data(open_udp, busy_poll, deadline_kind):
    a, b, to_b, _ = pair(open_udp, busy_poll=busy_poll)
    t = _send_later(a, to_b, 0.2)
    start = time.monotonic()
    b.wait(None if deadline_kind == "none" else start + 5.0)
    elapsed = time.monotonic() - start
    t.join(5)
    assert 0.15 <= elapsed < 3.0
    assert [bytes(m) for m in b.poll_recv(10)] == [b"wake up"]


@pytest.mark.parametrize("busy_poll", [False, True])
def test_wait_returns_at_deadline(open_udp, busy_poll):
    b = open_udp(busy_poll=busy_poll)
    start = time.monotonic()
    b.wait(start + 0.1)
    elapsed = time.monotonic() - start
    assert 0.099 <= elapsed < 1.0
    start = time.monotonic()
    b.wait(start - 1.0)  # a past deadline returns at once
    assert time.monotonic() - start < 0.05


def test_wait_returns_at_once_if_data_is_queued(open_udp):
    a, b, to_b, _ = pair(open_udp)
    a.post_send(Channel.PRIORITY, to_b, b"ready")
    time.sleep(0.02)
    start = time.monotonic()
    b.wait(None)
    assert time.monotonic() - start < 0.5
    assert [bytes(m) for m in b.poll_recv(1)] == [b"ready"]


@pytest.mark.parametrize("channel", [Channel.PRIORITY, Channel.DATA])
def test_short_wait_says_which_socket_is_readable(open_udp, channel):
    # a wait under FINE_WAIT blocks in select, whose answer alone tells poll_recv what to read
    a, b, to_b, _ = pair(open_udp)
    a.post_send(channel, to_b, b"one")
    time.sleep(0.02)
    b.wait(time.monotonic() + 0.01)
    assert b.device._ready == (channel == Channel.PRIORITY, channel == Channel.DATA)
    assert [bytes(m) for m in b.poll_recv(4)] == [b"one"]
    b.wait(time.monotonic() + 0.001)
    assert b.device._ready == (False, False)


def test_poll_without_wait_reads_only_readable_sockets():
    # no wait since the last poll: one epoll_wait(0) says what to read, so an empty socket
    # costs no recvmmsg (a progress(0) loop would otherwise pay two per pass)
    if not _mmsg.available():
        pytest.skip("libc has no recvmmsg")
    a, b = open_device("udp", {"recvmmsg": "on"}), open_device("udp", {"recvmmsg": "on"})
    try:
        to_b = a.resolve(b.local_address())
        dev = b.device
        calls: list[int] = []
        real = dev._mmsg_parts[0]

        def recv(fd: int, first: int, count: int) -> int:
            calls.append(fd)
            return real(fd, first, count)

        dev._mmsg_parts = (recv, *dev._mmsg_parts[1:])
        assert b.poll_recv(16) == [] and calls == []
        a.post_send(Channel.DATA, to_b, b"data")
        time.sleep(0.02)
        assert [bytes(m) for m in b.poll_recv(16)] == [b"data"]
        assert calls == [dev._data_fd]
        a.post_send(Channel.PRIORITY, to_b, b"prio")
        a.post_send(Channel.DATA, to_b, b"data 2")
        time.sleep(0.02)
        assert [bytes(m) for m in b.poll_recv(16)] == [b"prio", b"data 2"]
        assert calls == [dev._data_fd, dev._prio_fd, dev._data_fd]
    finally:
        a.close()
        b.close()


def test_busy_poll_exchange(open_udp):
    a, b, to_b, to_a = pair(open_udp, busy_poll=True)
    assert a.device.stats()["busy_poll"] is True
    for i in range(200):  # ping-pong
        a.post_send(Channel.PRIORITY, to_b, b"ping%d" % i)
        assert recv_n(b, 1, timeout=2) == [b"ping%d" % i]
        b.post_send(Channel.PRIORITY, to_a, b"pong%d" % i)
        assert recv_n(a, 1, timeout=2) == [b"pong%d" % i]


def _count_reads(ops: DeviceOps) -> dict[str, int]:
    """Wrap the device's reads: recvmmsg calls, and the recvfrom of a lone datagram (which a
    busy wait's spin makes on every turn) that found one (``one``) or found nothing (``empty``)."""
    dev = ops.device
    counts = {"mmsg": 0, "one": 0, "empty": 0}
    if dev._batch is not None:
        real = dev._mmsg_parts[0]

        def recv(fd: int, first: int, count: int) -> int:
            counts["mmsg"] += 1
            return real(fd, first, count)

        dev._mmsg_parts = (recv, *dev._mmsg_parts[1:])

    def one(real_one):
        def recv_one(*args):
            try:
                got = real_one(*args)
            except BlockingIOError:
                counts["empty"] += 1
                raise
            counts["one"] += 1
            return got
        return recv_one

    dev._recv_from = tuple(one(r) for r in dev._recv_from)
    return counts


@pytest.mark.parametrize("channel", [Channel.PRIORITY, Channel.DATA])
def test_busy_wait_reads_a_datagram_that_arrived_while_it_spun_with_one_call(open_udp, channel):
    # a round trip's request or reply arrives alone while the busy wait spins reading the
    # sockets: the spin's read that finds it is the only read of it (no recvmmsg through
    # ctypes, no second read to learn the socket is empty), whichever socket it came by
    a, b, to_b, _ = pair(open_udp, busy_poll=True)
    reads = _count_reads(b)
    for i in range(3):
        def later(i=i):
            time.sleep(0.05)
            a.post_send(channel, to_b, b"lone %d" % i)

        t = threading.Thread(target=later, daemon=True)
        t.start()
        b.wait(time.monotonic() + 5.0)
        t.join(5)
        assert [bytes(m) for m in b.poll_recv(16)] == [b"lone %d" % i]
    assert reads["mmsg"] == 0 and reads["one"] == 3 and reads["empty"] > 0, reads
    st = b.device.stats()
    assert st["rx_datagrams"] == 3 and st["rx_bytes"] == 3 * len(b"lone 0")
    assert st["rx_priority"] == (3 if channel == Channel.PRIORITY else 0)


def test_busy_wait_reads_a_backlog_in_a_batch(open_udp, recv_mode):
    # datagrams already queued when the wait looks first are read the batched way, all at once
    a, b, to_b, _ = pair(open_udp, busy_poll=True)
    reads = _count_reads(b)
    for i in range(5):
        a.post_send(Channel.DATA, to_b, b"queued %d" % i)
    time.sleep(0.02)
    b.wait(time.monotonic() + 5.0)
    assert [bytes(m) for m in b.poll_recv(16)] == [b"queued %d" % i for i in range(5)]
    # the spin's first read finds one, and a second read of that socket another: a backlog,
    # whose rest is read batched (recvmmsg: the priority socket's empty read and the data
    # socket's three; the recv_into loop has its own reads, which the lone read is not)
    batched = recv_mode == "auto" and _mmsg.available()
    assert reads["one"] == 2 and reads["mmsg"] == (2 if batched else 0), reads


@pytest.mark.parametrize("flooded", [Channel.PRIORITY, Channel.DATA])
def test_busy_wait_reads_the_other_socket_while_the_hot_one_is_flooded(open_udp, flooded):
    # the spin reads first the socket its last datagram came by; a flood there must not hide
    # the other socket: a backlog is read batched from both, in the first poll after the wait
    a, b, to_b, _ = pair(open_udp, busy_poll=True)
    other = Channel.DATA if flooded == Channel.PRIORITY else Channel.PRIORITY
    a.post_send(flooded, to_b, b"first")
    b.wait(time.monotonic() + 5.0)
    assert [bytes(m) for m in b.poll_recv(16)] == [b"first"]  # (the flooded socket is hot now)
    for i in range(200):
        a.post_send(flooded, to_b, b"flood %d" % i)
    a.post_send(other, to_b, b"other")
    time.sleep(0.02)
    b.wait(time.monotonic() + 5.0)
    got = [bytes(m) for m in b.poll_recv(16)]
    assert b"other" in got, got
    assert [g for g in got if g != b"other"] == [b"flood %d" % i for i in range(len(got) - 1)]


def test_a_second_datagram_behind_a_lone_one_is_read_next(open_udp):
    # two datagrams arriving back to back during the spin: the lone read takes the first,
    # and the next wait finds the second at its first look (nothing is lost or reordered)
    a, b, to_b, _ = pair(open_udp, busy_poll=True)

    def later():
        time.sleep(0.05)
        a.post_send(Channel.DATA, to_b, b"first")
        a.post_send(Channel.DATA, to_b, b"second")

    t = threading.Thread(target=later, daemon=True)
    t.start()
    got: list[bytes] = []
    deadline = time.monotonic() + 5.0
    while len(got) < 2 and time.monotonic() < deadline:
        b.wait(deadline)
        got += [bytes(m) for m in b.poll_recv(16)]
    t.join(5)
    assert got == [b"first", b"second"]


def test_fds_are_the_sockets_and_become_readable(open_udp):
    import select

    a, b, to_b, _ = pair(open_udp)
    fds = b.fds()
    assert len(fds) == 2 and len(set(fds)) == 2
    a.post_send(Channel.DATA, to_b, b"x")
    readable, _, _ = select.select(fds, [], [], 2.0)
    assert readable == [fds[Channel.DATA]]


# -- close -------------------------------------------------------------------------------


def test_close_is_idempotent(open_udp):
    a, b, to_b, _ = pair(open_udp)
    b.close()
    b.close()
    assert b.fds() == []
    assert b.poll_recv(10) == []
    b.wait(time.monotonic() + 0.01)
    with pytest.raises(OSError, match="closed"):
        b.post_send(Channel.DATA, to_b, b"x")
    assert "closed" in repr(b.device)


# -- two processes -----------------------------------------------------------------------

ECHO_CHILD = r"""
import sys
from btlcore.registry import open_device
from btlcore.device import Channel
import time
ops = open_device("udp", {"host": sys.argv[1]})
print(ops.local_address().hex(), flush=True)
peer = ops.resolve(bytes.fromhex(sys.stdin.readline().strip()))
want = int(sys.argv[2])
echoed = 0
deadline = time.monotonic() + 20
while echoed < want and time.monotonic() < deadline:
    ops.wait(deadline)
    for m in ops.poll_recv(64):
        ch = Channel.PRIORITY if len(m) < 768 else Channel.DATA
        while not ops.post_send(ch, peer, bytes(m)[::-1]):
            ops.wait(time.monotonic() + 0.001)
        echoed += 1
print("echoed", echoed, flush=True)
ops.close()
"""


def test_two_process_exchange(open_udp, host):
    n = 300
    child = subprocess.Popen([sys.executable, "-c", ECHO_CHILD, host, str(n)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        a = open_udp(host=host)
        peer = a.resolve(bytes.fromhex(child.stdout.readline().strip()))
        child.stdin.write(a.local_address().hex() + "\n")
        child.stdin.flush()
        sent = []
        got: list[bytes] = []
        for i in range(n):  # one at a time: loopback UDP loses nothing at this pace
            data = (b"%05d" % i) * (1 + (i * 37) % 2000)
            ch = Channel.PRIORITY if len(data) < 768 else Channel.DATA
            assert a.post_send(ch, peer, data)
            sent.append(data)
            reply = recv_n(a, 1, timeout=5)
            assert len(reply) == 1, f"no echo of datagram {i} within 5 s"
            got.extend(reply)
        assert got == [d[::-1] for d in sent]
        out, _ = child.communicate(timeout=20)
        assert f"echoed {n}" in out
        assert child.returncode == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)


# -- receive with GRO --------------------------------------------------------------------


def _gro_pair(open_udp, host="127.0.0.1", **rx_options):
    a = open_udp(host=host, gso="auto")
    try:
        b = open_udp(host=host, gro=True, **rx_options)
    except ConfigError as exc:
        pytest.skip(f"no UDP GRO here: {exc}")
    if not a.device.stats()["gso"]:
        pytest.skip("no UDP GSO here")
    return a, b, a.resolve(b.local_address()), b.resolve(a.local_address())


def test_gro_receives_gso_runs_intact(open_udp, host):
    a, b, to_b, _ = _gro_pair(open_udp, host)
    batch = [bytes([i]) * 1472 for i in range(130)] + [b"short"] + [b"k" * 9000] * 3
    assert a.device.post_send_batch(Channel.DATA, to_b, batch) == len(batch)
    a.post_send(Channel.DATA, to_b, b"plain")  # not glued: one datagram per read
    a.post_send(Channel.PRIORITY, to_b, b"ack")
    got = recv_n(b, len(batch) + 2)
    assert got[0] == b"ack" and got[1:] == batch + [b"plain"]
    st = b.device.stats()
    assert st["rx_gro_reads"] > 0 and st["rx_datagrams"] == len(batch) + 2
    assert st["rx_bytes"] == sum(map(len, batch)) + len(b"plain") + len(b"ack")


def test_gro_respects_the_budget(open_udp):
    a, b, to_b, _ = _gro_pair(open_udp)
    batch = [b"%04d" % i * 100 for i in range(40)]  # one glued read of 40
    assert a.device.post_send_batch(Channel.DATA, to_b, batch) == 40
    time.sleep(0.05)
    got: list[bytes] = []
    for _ in range(20):
        part = b.poll_recv(7)
        assert len(part) <= 7
        got.extend(bytes(m) for m in part)
        if len(got) == 40:
            break
    assert got == batch
    assert b.device.stats()["rx_bytes"] == sum(map(len, batch))


def test_gro_drops_glued_datagrams_over_the_mtu(open_udp):
    a, b, to_b, _ = _gro_pair(open_udp, mtu=1000)
    a.device.post_send_batch(Channel.DATA, to_b, [b"o" * 1200] * 4)
    a.post_send(Channel.DATA, to_b, b"fine")
    assert recv_n(b, 1) == [b"fine"]
    assert b.device.stats()["rx_oversize"] == 4


# -- ICMP errors (IP_RECVERR) ------------------------------------------------------------


def _dead_handle(host: str):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:  # a port nobody listens on
        s.bind((host, 0))
        port = s.getsockname()[1]
    return _address.to_handle(family, host, port, port)


def test_icmp_errors_neither_break_sends_nor_spin_wait(open_udp, host):
    a, b, to_b, _ = pair(open_udp, host=host)
    dead = _dead_handle(host)
    for i in range(5):
        assert a.post_send(Channel.DATA, dead, b"into the void")
        assert a.post_send(Channel.DATA, to_b, b"live %d" % i)  # a pending error is retried past
        assert a.post_send(Channel.PRIORITY, dead, b"into the void")
    assert recv_n(b, 5) == [b"live %d" % i for i in range(5)]
    time.sleep(0.02)
    assert a.poll_recv(16) == []
    start = time.monotonic()
    a.wait(start + 0.2)  # the first wait may be woken by a queued error and drain it
    a.wait(start + 0.2)
    assert time.monotonic() - start >= 0.19, "wait() kept waking on queued ICMP errors"
    st = a.device.stats()
    assert st["icmp_errors"] >= 1 and st["tx_datagrams"] == 15
    assert st["recverr"] is True


def test_keep_heap(open_udp):
    from btlcore_udp import _heap

    assert _options.parse({}, environ={}).keep_heap is True
    assert _options.parse({"keep_heap": "off"}, environ={}).keep_heap is False
    glibc = _heap.keep_heap()  # applied once per process; True wherever libc has mallopt
    assert open_udp().device.stats()["keep_heap"] is glibc
    assert open_udp(keep_heap=False).device.stats()["keep_heap"] is False


def test_recverr_off(open_udp):
    a = open_udp(recverr=False)
    assert a.device.stats()["recverr"] is False
    assert a.post_send(Channel.DATA, _dead_handle("127.0.0.1"), b"x")
    a.wait(time.monotonic() + 0.05)
    assert a.device.stats()["icmp_errors"] == 0


def test_batch_with_empty_and_tiny_datagrams(open_udp):
    a, b, to_b, _ = pair(open_udp)
    batch = [b"", b"", b"a", b"a", b"", b"bb" * 700, b"bb" * 700, b"c"]
    assert a.device.post_send_batch(Channel.DATA, to_b, batch) == len(batch)
    assert recv_n(b, len(batch)) == batch


def test_gso_run_retried_after_a_pending_icmp_error(open_udp):
    a, b, to_b, _ = pair(open_udp)
    if not a.device.stats()["gso"]:
        pytest.skip("this kernel has no UDP GSO")
    real = a.device._socks

    class OnceRefused:
        def __init__(self, sock):
            self.sock, self.failed = sock, False

        def sendmsg(self, *args):
            if not self.failed:
                self.failed = True
                raise ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
            return self.sock.sendmsg(*args)

        def recvmsg(self, *args):
            return self.sock.recvmsg(*args)

        def sendto(self, *args):
            return self.sock.sendto(*args)

    swap_sockets(a.device, (real[0], OnceRefused(real[1])))
    try:
        assert a.device.post_send_batch(Channel.DATA, to_b, [b"g" * 500] * 10) == 10
    finally:
        swap_sockets(a.device, real)
    assert recv_n(b, 10) == [b"g" * 500] * 10
    assert a.device.stats()["tx_errors"] == 0


# -- parse_peer (the CLI's --peer HOST:PORT) -----------------------------------------------


def test_parse_peer():
    from btlcore_udp import plugin

    blob = plugin.parse_peer("127.0.0.1:7000")
    assert _address.decode(blob) == (socket.AF_INET, "127.0.0.1", 7000, 7001, 0)
    assert _address.decode(plugin.parse_peer("[::1]:7000"))[:4] == (socket.AF_INET6, "::1", 7000, 7001)
    assert plugin.parse_peer(blob.hex()) == blob
    for bad in ("127.0.0.1:0", "zz", "55010400", "127.0.0.1:65535"):
        with pytest.raises(ValueError):
            plugin.parse_peer(bad)


def test_a_scoped_ipv6_sender_has_one_name_whichever_read_got_it():
    # recvfrom gives "fe80::1" where the batched reads' sender cache gives "fe80::1%lo": the
    # lone read of a busy wait names a scoped sender as the batch does (one peer, one source)
    scope = socket.if_nametoindex("lo")
    raw = (socket.AF_INET6.to_bytes(2, sys.byteorder) + (4242).to_bytes(2, "big") + (7).to_bytes(4, "big")
           + socket.inet_pton(socket.AF_INET6, "fe80::1") + scope.to_bytes(4, sys.byteorder))
    raw = raw.ljust(_mmsg.NAME_SIZE, b"\0")
    batched = _mmsg._Senders(socket.AF_INET6)[raw]
    assert batched == ("fe80::1%lo", 4242, 7, scope)
    assert _mmsg.scoped(("fe80::1", 4242, 7, scope)) == batched
    assert _mmsg.scoped(("::1", 4242, 0, 0)) == ("::1", 4242, 0, 0)  # unscoped: as recvfrom gives it


@pytest.mark.skipif(not _mmsg.available(), reason="libc has no recvmmsg")
def test_recvmmsg_arrays_are_laid_out_as_ctypes_sees_them():
    import ctypes

    batch = _mmsg.RecvBatch(1473)
    assert batch.slot_size % 64 == 0 and batch.slot_size >= 1473
    for i in (0, 1, batch.slots - 1):
        hdr = batch._msgs[i].hdr
        assert ctypes.addressof(hdr.iov.contents) == ctypes.addressof(batch._iovs[i])
        assert hdr.iovlen == 1
        assert batch._iovs[i].len == batch.slot_size
        assert batch._iovs[i].base == ctypes.addressof(batch._arena) + i * batch.slot_size


def test_post_send_many_groups_runs(open_udp):
    a, b, to_b, _ = pair(open_udp)
    c = open_udp()
    to_c = a.resolve(c.local_address())
    items = [(Channel.DATA, to_b, b"b%03d" % i * 300) for i in range(30)]
    items += [(Channel.PRIORITY, to_b, b"ack")] + [(Channel.DATA, to_c, b"c%03d" % i * 300) for i in range(5)]
    items += [(Channel.DATA, to_b, b"tail")]
    assert a.device.post_send_many(items) == len(items)
    want_b = [d for ch, dest, d in items if dest is to_b]
    got_b = recv_n(b, len(want_b))
    assert got_b[0] == b"ack" and got_b[1:] == [d for ch, dest, d in items if dest is to_b and ch == Channel.DATA]
    assert recv_n(c, 5) == [d for _, dest, d in items if dest is to_c]
    if a.device.stats()["gso"]:
        assert a.device.stats()["tx_gso_sends"] == 2


def test_post_send_many_stops_at_a_full_queue(open_udp):
    a, b, to_b, _ = pair(open_udp)
    real = a.device._socks

    class FullAfter:
        def __init__(self, sock, n):
            self.sock, self.left = sock, n

        def sendto(self, *args):
            if self.left <= 0:
                raise BlockingIOError(errno.EAGAIN, "full")
            self.left -= 1
            return self.sock.sendto(*args)

        def sendmsg(self, *args):
            raise BlockingIOError(errno.EAGAIN, "full")

    swap_sockets(a.device, (FullAfter(real[0], 1), FullAfter(real[1], 0)))
    try:
        items = [(Channel.PRIORITY, to_b, b"p1"), (Channel.DATA, to_b, b"d1"), (Channel.DATA, to_b, b"d2")]
        assert a.device.post_send_many(items) == 1
    finally:
        swap_sockets(a.device, real)
    assert recv_n(b, 1) == [b"p1"]


def test_a_deadline_that_passed_does_not_end_later_waits(open_udp):
    # the deadline rides in a timerfd (kept armed between waits); once it fired, the next
    # waits sleep to their own deadline, and one with none blocks until data
    b = open_udp()
    for gap in (0.01, 0.05, 0.01):
        start = time.monotonic()
        b.wait(start + gap)
        assert gap * 0.99 <= time.monotonic() - start < gap + 1.0
    a, c, to_c, _ = pair(open_udp)
    c.wait(time.monotonic() + 0.01)  # fires
    t = _send_later(a, to_c, 0.2)
    start = time.monotonic()
    c.wait(None)
    assert 0.15 <= time.monotonic() - start < 3.0
    t.join(5)
    assert [bytes(m) for m in c.poll_recv(4)] == [b"wake up"]


def test_a_moved_deadline_is_the_one_kept(open_udp):
    # data ends a wait before its deadline, leaving the timer armed for it; the next wait's
    # later deadline replaces it (the old one must not end that wait early)
    a, b, to_b, _ = pair(open_udp)
    t = _send_later(a, to_b, 0.01)
    start = time.monotonic()
    b.wait(start + 0.1)
    assert time.monotonic() - start < 0.09
    t.join(5)
    assert [bytes(m) for m in b.poll_recv(4)] == [b"wake up"]
    start = time.monotonic()
    b.wait(start + 0.3)
    assert time.monotonic() - start >= 0.299


def test_short_waits_are_not_rounded_up_to_a_millisecond(open_udp):
    """epoll would sleep 1.07 ms for a 200 us deadline; the device must not."""
    import statistics

    b = open_udp()
    took = []
    for _ in range(20):
        start = time.monotonic()
        b.wait(start + 0.0002)
        took.append(time.monotonic() - start)
    assert min(took) >= 0.00019
    assert statistics.median(took) < 0.0009, f"median {statistics.median(took) * 1e6:.0f} us"


def test_send_unreachable_from_bound_address_is_said_once(caplog):
    # a route lost after connect(): sendto from 127.0.0.1 toward another host fails with
    # EINVAL in the kernel (nothing leaves the machine); lost as on a wire, counted, logged once
    import logging

    a = open_device("udp", {"bind": "127.0.0.1:0"})
    try:
        dest = (("192.0.2.1", 9), ("192.0.2.1", 10))  # a handle, past resolve's check
        with caplog.at_level(logging.WARNING, logger="btlcore.udp"):
            assert a.post_send(Channel.DATA, dest, b"x") is True
            assert a.post_send(Channel.DATA, dest, b"y") is True
        stats = a.device.stats()
        assert stats["tx_unreachable"] == 2
        warned = [r.getMessage() for r in caplog.records if r.name == "btlcore.udp"]
        assert len(warned) == 1 and "127.0.0.1" in warned[0] and "192.0.2.1" in warned[0]
    finally:
        a.close()


def test_connect_refuses_an_address_the_bound_one_cannot_reach():
    from btlcore import Transport
    from btlcore.errors import AddressUnreachable

    t = Transport(open_device("udp", {"bind": "127.0.0.1:0"}))
    try:
        with pytest.raises(AddressUnreachable, match=r"192\.0\.2\.1.*127\.0\.0\.1"):
            t.connect(_address.encode(socket.AF_INET, "192.0.2.1", 7000, 7001))
    finally:
        t.close(flush=False)
