"""Options, addresses and the probe: these run anywhere (no RDMA needed)."""

from __future__ import annotations

import pytest

from btlcore.errors import ConfigError
from btlcore_verbs import _address, _options, plugin


def test_defaults():
    o = _options.parse({}, environ={})
    assert o.device is None and o.port is None and o.gid_index is None
    assert o.qkey == _options.DEFAULT_QKEY and o.inline == "auto"
    assert o.send_queue_depth == 256 and o.recv_queue_depth == 1024


def test_strings_and_auto():
    o = _options.parse({"device": "rxe0", "port": "1", "gid_index": "3", "qkey": "0x1234",
                        "send_queue_depth": "16", "recv_queue_depth": "64", "inline": "off",
                        "seed": 7}, environ={})
    assert _options.parse({"seed": None}, environ={}).device is None
    assert (o.device, o.port, o.gid_index, o.qkey) == ("rxe0", 1, 3, 0x1234)
    assert (o.send_queue_depth, o.recv_queue_depth, o.inline) == (16, 64, "off")
    o = _options.parse({"device": "auto", "port": "auto", "gid_index": "auto", "inline": True},
                       environ={})
    assert (o.device, o.port, o.gid_index, o.inline) == (None, None, None, "on")


@pytest.mark.parametrize("name,value", [
    ("port", 0), ("port", 256), ("port", "x"), ("gid_index", -1), ("qkey", 0x80000000),
    ("qkey", True), ("send_queue_depth", 0), ("recv_queue_depth", 1), ("inline", "maybe"),
    ("device", ""), ("device", 3), ("seed", "abc"), ("mtu", 1000), ("mtu", 8192), ("mtu", "big"),
])
def test_bad_values_name_the_option(name, value):
    with pytest.raises(ConfigError, match=f"verbs option '{name}'"):
        _options.parse({name: value}, environ={})


def test_unknown_option_lists_known():
    with pytest.raises(ConfigError, match="unknown verbs option 'gid'.*gid_index"):
        _options.parse({"gid": 1}, environ={})


def test_environment():
    o = _options.parse({"qkey": 5}, environ={"BTL_VERBS_GID_INDEX": "1", "BTL_VERBS_QKEY": "9"})
    assert o.gid_index == 1 and o.qkey == 5  # explicit options win
    with pytest.raises(ConfigError, match="BTL_VERBS_GIDX"):
        _options.parse({}, environ={"BTL_VERBS_GIDX": "1"})


def test_address_roundtrip():
    a = _address.VerbsAddress(lid=0, gid=bytes(10) + b"\xff\xff\x7f\x00\x00\x01", qkey=0x11,
                              priority_qpn=17, data_qpn=18, max_datagram=4096)
    blob = a.encode()
    assert len(blob) == _address.LENGTH == 36
    assert _address.decode(blob) == a
    assert a.gid_text == "::ffff:127.0.0.1"


@pytest.mark.parametrize("blob,match", [
    (b"", "not a verbs address"),
    (b"\x55\x01" + bytes(10), "not a verbs address"),
    (b"\x56\x02" + bytes(34), "version 2"),
    (b"\x56\x01" + bytes(10), "expected 36"),
    (b"\x56\x01" + bytes(34), "QP number"),
])
def test_malformed_addresses(blob, match):
    with pytest.raises(ValueError, match=match):
        _address.decode(blob)


def test_probe_never_raises_and_explains(verbs_probe):
    assert isinstance(verbs_probe.reason, str) and verbs_probe.reason
    bad = plugin.probe({"inline": "maybe"})
    assert not bad.usable and "inline" in bad.reason


def test_registered_backend_probe():
    from btlcore import registry

    status = registry.probe("verbs")
    assert status.name == "verbs" and status.reason


def test_selftest_says_why_when_unavailable(verbs_probe, capsys):
    from btlcore_verbs import selftest

    if verbs_probe.usable:
        pytest.skip("verbs is usable here: the device tests cover the selftest's paths")
    assert selftest.main([]) == 1
    assert verbs_probe.reason in capsys.readouterr().out


def test_mtu_option():
    assert _options.parse({"mtu": "1024"}, environ={}).mtu == 1024
    assert _options.parse({"mtu": "auto"}, environ={}).mtu == 0


def test_peer_text_for_the_cli():
    a = _address.VerbsAddress(lid=0, gid=bytes(10) + b"\xff\xff\x7f\x00\x00\x01", qkey=0x11,
                              priority_qpn=17, data_qpn=18, max_datagram=4096)
    assert plugin.parse_peer(a.encode().hex()) == a.encode()
    assert "::ffff:127.0.0.1" in plugin.describe_address(a.encode())
    with pytest.raises(ValueError, match="as hex"):
        plugin.parse_peer("127.0.0.1:7000")
    with pytest.raises(ValueError, match="not a verbs address"):
        plugin.parse_peer("5501" + "00" * 10)
