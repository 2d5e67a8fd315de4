"""GID selection and the no-device reasons, against fake pyverbs objects (runs anywhere)."""

from __future__ import annotations

import types

import pytest

from btlcore.errors import ConfigError
from btlcore_verbs import _port

E = types.SimpleNamespace(IBV_GID_TYPE_ROCE_V2=2, IBV_PORT_ACTIVE=4)


def gid(text):
    import ipaddress

    return ":".join(ipaddress.IPv6Address(text).exploded.split(":"))


class Entry:
    def __init__(self, index, text, gtype, port=1):
        self.gid_index, self.port_num, self.gid_type = index, port, gtype
        self._text = gid(text)

    def gid_str(self):
        return self._text


class Ctx:
    def __init__(self, entries):
        self.entries = entries

    def query_gid_table(self, n):
        return self.entries


PV = {"e": E}


def test_prefers_ipv4_mapped_roce_v2_and_skips_zero():
    ctx = Ctx([Entry(0, "fe80::200:ff:fe00:0", 2), Entry(1, "::", 2),
               Entry(2, "2001:db8::1", 2), Entry(3, "::ffff:10.0.0.7", 2), Entry(4, "::ffff:10.0.0.8", 1)])
    c = _port.choose_gid(PV, ctx, "rxe0", 1, 16, None)
    assert (c.index, c.text, c.why) == (3, "::ffff:10.0.0.7", "IPv4-mapped RoCE v2")


def test_falls_back_to_non_link_local_then_first():
    ctx = Ctx([Entry(0, "fe80::1", 2), Entry(1, "2001:db8::1", 2)])
    assert _port.choose_gid(PV, ctx, "d", 1, 4, None).index == 1
    ctx = Ctx([Entry(0, "fe80::1", 0)])  # InfiniBand: GID 0 is all there is
    assert _port.choose_gid(PV, ctx, "d", 1, 4, None).index == 0


def test_other_ports_entries_are_ignored():
    ctx = Ctx([Entry(0, "::ffff:10.0.0.1", 2, port=2), Entry(0, "fe80::1", 2, port=1)])
    assert _port.choose_gid(PV, ctx, "d", 1, 4, None).text == "fe80::1"


def test_explicit_index():
    ctx = Ctx([Entry(0, "fe80::1", 2), Entry(1, "::ffff:127.0.0.1", 2)])
    assert _port.choose_gid(PV, ctx, "rxe0", 1, 4, 0).index == 0
    with pytest.raises(ConfigError, match=r"'gid_index'.*usable: 0 \(fe80::1\), 1 \(::ffff:127.0.0.1\)"):
        _port.choose_gid(PV, ctx, "rxe0", 1, 4, 5)


def test_no_gid_is_unavailable():
    with pytest.raises(_port.Unavailable, match="no non-zero GID"):
        _port.choose_gid(PV, Ctx([Entry(0, "::", 2)]), "rxe0", 1, 4, None)


def test_no_devices_reasons():
    def boom():
        raise RuntimeError("Failed to get devices list")

    with pytest.raises(_port.Unavailable, match="no RDMA devices: .*Failed to get devices list"):
        _port.list_devices({"get_device_list": boom})
    with pytest.raises(_port.Unavailable, match="no RDMA devices"):
        _port.list_devices({"get_device_list": lambda: []})


def test_no_active_port_reason(monkeypatch):
    from btlcore_verbs._options import parse

    class Port:
        state, gid_tbl_len = 1, 4

    class Dev:
        phys_port_cnt = 2

    class Context:
        def __init__(self, name):
            self.name = name

        def query_device(self):
            return Dev()

        def query_port(self, port):
            return Port()

        def close(self):
            pass

    pv = {"e": E, "Context": Context,
          "get_device_list": lambda: [types.SimpleNamespace(name=b"rxe0")]}
    with pytest.raises(_port.Unavailable, match="rxe0 port 1 is DOWN; rxe0 port 2 is DOWN"):
        _port.find_port(pv, parse({}, environ={}))
    with pytest.raises(ConfigError, match="'port'.*rxe0 has 2 port"):
        _port.find_port(pv, parse({"port": 3}, environ={}))
    with pytest.raises(ConfigError, match="'device'.*devices here: rxe0"):
        _port.find_port(pv, parse({"device": "mlx5_0"}, environ={}))
