"""The sim backend as a Device: registry, options, addresses, channels, queues, close."""

from __future__ import annotations

import pytest
import scapy.all as scapy_all

from btlcore import registry
from btlcore.device import REQUIRED_HOOKS, Channel, DeviceSpec
from btlcore.errors import ConfigError
from btlcore.protocol import wire
from btlcore_sim import Fabric, LinkModel, default_fabric, layers
from btlcore_sim import plugin as sim_plugin

from simkit import frame, seq_of  # type: ignore[import-not-found]


def test_registry_lists_sim_as_usable() -> None:
    status = {s.name: s for s in registry.list_backends()}
    assert status["sim"].usable, status["sim"].reason


def test_plugin_implements_every_hook_as_a_module_function() -> None:
    for hook in REQUIRED_HOOKS + ("btl_device_fds",):
        fn = getattr(sim_plugin, hook)
        assert hasattr(fn, "btlcore_impl"), f"{hook} is not marked with hookimpl"
        assert hasattr(DeviceSpec, hook)


def test_open_device_through_registry_binds_the_hooks() -> None:
    fabric = Fabric(seed=1)
    ops = registry.open_device("sim", {"fabric": fabric, "name": "x", "mtu": 1500})
    assert ops.backend == "sim"
    caps = ops.capabilities()
    assert caps.mtu == 1500
    assert caps.integrity is False
    assert caps.virtual_time is True
    assert ops.fds() == []
    assert ops.clock()() == 0.0
    assert fabric.node("x") is ops.device


def test_options_without_fabric_join_the_default_fabric() -> None:
    a = registry.open_device("sim", {"seed": 5})
    b = registry.open_device("sim", {})
    assert a.device.fabric is b.device.fabric is default_fabric()
    assert default_fabric().seed == 5
    dest = a.resolve(b.local_address())
    assert a.post_send(Channel.DATA, dest, frame(1))
    a.wait(None)
    assert [seq_of(f) for f in b.poll_recv(10)] == [1]


def test_unknown_option_names_it_and_the_allowed_ones() -> None:
    with pytest.raises(ConfigError) as err:
        registry.open_device("sim", {"fabric": Fabric(), "mtuu": 1500})
    text = str(err.value)
    assert "'mtuu'" in text
    for allowed in ("fabric", "mtu", "send_queue_depth", "recv_queue_depth", "name"):
        assert allowed in text


@pytest.mark.parametrize("option, value", [
    ("mtu", 10), ("mtu", 70000), ("mtu", "9000"), ("send_queue_depth", 0),
    ("recv_queue_depth", -1), ("recv_queue_depth", True), ("name", ""), ("name", 3),
    ("fabric", "default"), ("seed", 1.5),
])
def test_bad_option_values_raise_config_error_naming_the_option(option: str, value: object) -> None:
    options = {"fabric": Fabric(), option: value} if option != "fabric" else {option: value}
    with pytest.raises(ConfigError, match=repr(option)):
        registry.open_device("sim", options)


def test_duplicate_name_is_refused() -> None:
    fabric = Fabric()
    fabric.open_device(name="a")
    with pytest.raises(ConfigError, match="'a'"):
        fabric.open_device(name="a")


def test_addresses_are_distinct_and_resolve_rejects_bad_ones(make_pair) -> None:
    pair = make_pair()
    addr_a, addr_b = pair.a.local_address(), pair.b.local_address()
    assert isinstance(addr_a, bytes) and addr_a != addr_b
    assert pair.fabric.node(addr_b) is pair.b.device
    for bad in (b"", b"\x02\x00\x00\x00\x00", addr_b + b"\x00", b"\x03" + addr_b[1:],
                b"\x02\x00\x00\x00\x00\x00", "not bytes"):
        with pytest.raises(ValueError):
            pair.a.resolve(bad)
    unknown = addr_b[:4] + (999).to_bytes(2, "big")
    with pytest.raises(ValueError, match="unknown"):
        pair.a.resolve(unknown)
    # an address is resolved to the same handle every time
    assert pair.a.resolve(addr_b) is pair.ab


def test_handle_from_another_device_is_refused(make_pair) -> None:
    pair = make_pair()
    with pytest.raises(ValueError):
        pair.a.post_send(Channel.DATA, pair.ba, frame(1))


def test_create_channel_grants_at_most_the_device_mtu(make_pair) -> None:
    pair = make_pair(mtu=4000)
    prio = pair.a.create_channel(Channel.PRIORITY, 768)
    data = pair.a.create_channel(Channel.DATA, 9000)
    assert (prio.channel, prio.mtu) == (Channel.PRIORITY, 768)
    assert (data.channel, data.mtu) == (Channel.DATA, 4000)
    assert data.send_queue_depth == 1024 and data.recv_queue_depth == 4096
    with pytest.raises(ValueError):
        pair.a.post_send(Channel.PRIORITY, pair.ab, frame(1, 769))
    assert pair.a.post_send(Channel.PRIORITY, pair.ab, frame(1, 768))


def test_frames_longer_than_the_receiving_channel_are_dropped_and_counted(make_pair) -> None:
    pair = make_pair()
    pair.b.create_channel(Channel.PRIORITY, 200)
    assert pair.a.post_send(Channel.PRIORITY, pair.ab, frame(1, 201))
    assert pair.a.post_send(Channel.PRIORITY, pair.ab, frame(2, 200))
    assert [seq_of(f) for f in pair.drain()] == [2]
    assert pair.fabric.stats()["a->b"]["drops"] == {"rx_mtu": 1}


def test_poll_recv_returns_priority_frames_first_and_respects_budget(make_pair) -> None:
    pair = make_pair(LinkModel(delay=1e-6))
    for seq in range(5):
        pair.a.post_send(Channel.DATA, pair.ab, frame(seq))
    for seq in range(10, 13):
        pair.a.post_send(Channel.PRIORITY, pair.ab, frame(seq))
    pair.a.wait(None)
    assert pair.fabric.now == pytest.approx(1e-6)
    assert [seq_of(f) for f in pair.b.poll_recv(2)] == [10, 11]
    assert [seq_of(f) for f in pair.b.poll_recv(3)] == [12, 0, 1]
    assert [seq_of(f) for f in pair.b.poll_recv(100)] == [2, 3, 4]
    assert list(pair.b.poll_recv(100)) == []


def test_poll_recv_accepts_bytearray_and_memoryview_and_copies_them(make_pair) -> None:
    pair = make_pair()
    buf = bytearray(frame(7))
    pair.a.post_send(Channel.DATA, pair.ab, buf)
    pair.a.post_send(Channel.DATA, pair.ab, memoryview(buf))
    buf[16:24] = b"\xff" * 8  # the device must have copied: the core reuses its buffers
    got = pair.drain()
    assert [seq_of(f) for f in got] == [7, 7]


def test_full_send_queue_pushes_back_and_never_loses_a_datagram(make_pair) -> None:
    # 8 Mb/s: a 1000-byte frame takes 1 ms on the wire; 4 slots per channel
    pair = make_pair(LinkModel(rate_mbps=8.0), send_queue_depth=4)
    accepted = [pair.a.post_send(Channel.DATA, pair.ab, frame(s, 1000)) for s in range(6)]
    assert accepted == [True] * 4 + [False] * 2
    assert pair.a.poll_completions() == 0
    # the fabric wakes wait() when the first slot frees (frame 0's last bit left at 1 ms)
    pair.a.wait(None)
    assert pair.fabric.now == pytest.approx(1e-3)
    assert pair.a.post_send(Channel.DATA, pair.ab, frame(4, 1000))
    assert not pair.a.post_send(Channel.DATA, pair.ab, frame(5, 1000))
    # the priority channel has its own queue
    assert pair.a.post_send(Channel.PRIORITY, pair.ab, frame(99, 100))
    got: list[int] = []
    next_seq = 5
    while len(got) < 7:
        if next_seq < 6 and pair.a.post_send(Channel.DATA, pair.ab, frame(next_seq, 1000)):
            next_seq += 1
        pair.a.wait(None)
        got.extend(seq_of(f) for f in pair.b.poll_recv(100))
    assert sorted(got) == [0, 1, 2, 3, 4, 5, 99]
    assert [s for s in got if s != 99] == [0, 1, 2, 3, 4, 5]
    pair.a.wait(None)
    assert pair.a.poll_completions() == 7
    assert pair.fabric.totals()["dropped"] == 0


def test_full_receive_queue_drops_and_counts(make_pair) -> None:
    pair = make_pair(recv_queue_depth=3)
    pair.send(5)
    assert [seq_of(f) for f in pair.b.poll_recv(100)] == [0, 1, 2]
    stats = pair.fabric.stats()["a->b"]
    assert stats["offered"] == 5 and stats["delivered"] == 3
    assert stats["drops"] == {"rx_queue": 2}
    pair.send(1, start=5)  # room again once polled
    assert [seq_of(f) for f in pair.b.poll_recv(100)] == [5]


def test_completions_are_reaped_once(make_pair) -> None:
    pair = make_pair()
    pair.send(3)
    assert pair.a.poll_completions() == 3
    assert pair.a.poll_completions() == 0


def test_close_is_idempotent_and_frames_to_a_closed_nic_are_dropped(make_pair) -> None:
    pair = make_pair(LinkModel(delay=1e-3))
    pair.send(2)
    pair.b.close()
    pair.b.close()
    pair.send(1, start=2)
    pair.fabric.run(1.0)
    assert pair.fabric.stats()["a->b"]["drops"] == {"closed": 3}
    with pytest.raises(RuntimeError):
        pair.b.post_send(Channel.DATA, pair.ba, frame(1))
    with pytest.raises(RuntimeError):
        pair.b.resolve(pair.a.local_address())


def test_loopback_to_self_works(make_pair) -> None:
    pair = make_pair()
    me = pair.a.resolve(pair.a.local_address())
    assert pair.a.post_send(Channel.DATA, me, frame(3))
    assert [seq_of(f) for f in pair.a.poll_recv(10)] == [3]


def test_wire_header_survives_the_fabric_untouched(make_pair) -> None:
    pair = make_pair(LinkModel(delay=5e-6, jitter=1e-6))
    sent = wire.Datagram(wire.T_DATA, flags=wire.F_ACK, dst_conn=3, src_incarnation=9, seq=2**64 - 1,
                         ack=12, tag=4, msg_id=1, msg_len=9, offset=0, payload=b"abc").encode()
    pair.a.post_send(Channel.DATA, pair.ab, sent)
    (got,) = pair.drain()
    assert got == sent and wire.crc_ok(got)


def test_device_seed_follows_the_fabric_seed_and_differs_per_opening() -> None:
    """The core seeds its generator from device.seed: same fabric seed, same seeds; every
    NIC opening (a reopen at an old address included) gets its own, so a restarted node
    draws a new incarnation."""
    seeds = []
    for _ in range(2):
        fabric = Fabric(seed=1234)
        a = fabric.open_device()
        b = fabric.open_device()
        address = b.local_address()
        b.close()
        b2 = fabric.reopen(address)
        assert b2.local_address() == address
        seeds.append((a.device.seed, b.device.seed, b2.device.seed))
    assert seeds[0] == seeds[1]
    assert len(set(seeds[0])) == 3
    assert Fabric(seed=1235).open_device().device.seed != seeds[0][0]


def test_integrity_is_promised_only_by_a_fabric_that_refuses_corruption() -> None:
    import btlcore

    plain = Fabric(seed=1)
    assert registry.open_device("sim", {"fabric": plain}).capabilities().integrity is False
    plain.default_model = LinkModel(corrupt=0.5)  # allowed: nothing was promised

    fabric = Fabric(seed=1, integrity=True)
    a = btlcore.open("sim", fabric=fabric, name="a")
    b = btlcore.open("sim", fabric=fabric, name="b", config=btlcore.Config(crc="on"))
    assert a.capabilities.integrity is True
    assert a.engine.crc is False  # crc="auto": the device's promise stands in for the CRC
    assert b.engine.crc is True  # crc="on" still forces it
    with pytest.raises(ConfigError, match="corrupt"):
        fabric.default_model = LinkModel(corrupt=0.01)
    with pytest.raises(ConfigError, match="corrupt"):
        fabric.set_link("a", "b", LinkModel(corrupt=0.01))
    with pytest.raises(ConfigError, match="corrupt"):
        Fabric(seed=1, default=LinkModel(corrupt=0.01), integrity=True)
    fabric.set_link("a", "b", LinkModel(loss=0.1, duplicate=0.1))  # losing and copying are fine
    assert fabric.link_model("a", "b").corrupt == 0.0
    c = btlcore.open("sim", fabric=fabric, name="c")
    got: list[bytes] = []
    c.on(1, lambda peer, tag, data: got.append(bytes(data)))
    a.send(a.connect(c.address), 1, bytes(range(256)) * 100)  # chunked: no CRC on either end
    btlcore.run_until([a, c], lambda: bool(got), timeout=5)
    assert got == [bytes(range(256)) * 100]
    assert c.stats()["num_crc_errors"] == 0


@pytest.mark.parametrize("opener", ["on", "auto"])
def test_crc_on_at_one_end_and_not_the_other_still_talk(opener: str, tmp_path) -> None:
    """On a fabric with integrity, crc='auto' sends no CRC32C; a peer with crc='on' drops
    every frame without one.  The handshake tells each side what the other requires, so the
    'auto' end puts a CRC on what it sends to the 'on' end (and only there), whichever opens."""
    import btlcore
    from btlcore.protocol.wire import F_CRC, T_DATA

    fabric = Fabric(seed=3, integrity=True, pcap=tmp_path / "crc.pcapng")
    strict = btlcore.open("sim", fabric=fabric, name="strict", config=btlcore.Config(crc="on"))
    lax = btlcore.open("sim", fabric=fabric, name="lax")
    other = btlcore.open("sim", fabric=fabric, name="other")
    got: dict[int, list[bytes]] = {id(t): [] for t in (strict, lax, other)}
    for t in (strict, lax, other):
        inbox = got[id(t)]
        t.on(1, lambda peer, tag, data, inbox=inbox: inbox.append(bytes(data)))
    big = bytes(range(256)) * 100
    first, second = (strict, lax) if opener == "on" else (lax, strict)
    first.send(first.connect(second.address), 1, big)
    btlcore.run_until([strict, lax], lambda: bool(got[id(second)]), timeout=5)
    second.send(second.connect(first.address), 1, big)
    lax.send(lax.connect(other.address), 1, big)
    btlcore.run_until([strict, lax, other], lambda: bool(got[id(other)] and got[id(first)]), timeout=5)
    assert got[id(first)] == got[id(second)] == got[id(other)] == [big]
    assert sum(t.stats()["num_crc_errors"] for t in (strict, lax, other)) == 0
    # lax puts a CRC on what it sends to strict only; other, like lax, uses none
    assert lax.engine.peers_by_addr[strict.address].crc is True
    assert lax.engine.peers_by_addr[other.address].crc is False
    assert other.engine.peers_by_addr[lax.address].crc is False
    fabric.close()
    data = [p[layers.BTL] for p in scapy_all.rdpcap(str(tmp_path / "crc.pcapng"))
            if p.haslayer(layers.BTL) and p[layers.BTL].type == T_DATA]
    with_crc = sum(1 for d in data if int(d.flags) & F_CRC)
    assert 0 < with_crc < len(data)  # both kinds on the wire
