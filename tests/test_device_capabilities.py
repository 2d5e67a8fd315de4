"""What a device can do reaches the transport through its declared Capabilities; a backend
written before they existed, telling it by attributes of its device object, keeps working
(read once, with a DeprecationWarning)."""

from __future__ import annotations

import time
import types
import warnings
from typing import Any

import attrs
import pytest

import btlcore
from btlcore.device import REQUIRED_HOOKS, Capabilities, DeviceOps, legacy_capabilities
from btlcore.errors import BtlDeprecationWarning
from btlcore.transport import Transport
from btlcore_sim import Fabric
from btlcore_sim import plugin as sim_plugin
from btlcore_udp import plugin as udp_plugin

_NEW_FIELDS = dict(gather_sends=False, sends_complete_at_once=False, wait_wakes_on_input=False,
                   reports_source=False, seed=None, instance=None)


def _legacy(plugin: Any, *, many: bool = True) -> Any:
    """``plugin`` as a backend written against the old hookspecs: no poll_recv_from, and
    capabilities that declare none of the new fields."""
    hooks = {name: getattr(plugin, name) for name in REQUIRED_HOOKS}
    if many:
        hooks["btl_device_post_send_many"] = plugin.btl_device_post_send_many
    declared = plugin.btl_device_capabilities
    hooks["btl_device_capabilities"] = lambda device: attrs.evolve(declared(device), **_NEW_FIELDS)
    return types.SimpleNamespace(**hooks)


class _LegacyUdpDevice:
    """What the old docs told a backend author to write: flags on the device object."""

    wait_wakes_on_input = True
    gather_sends = True
    sends_complete_at_once = True


def _open_legacy_udp() -> tuple[Transport, list[bool]]:
    plugin = _legacy(udp_plugin)
    gathered: list[bool] = []
    many = plugin.btl_device_post_send_many

    def post_send_many(device: Any, items: Any) -> int:
        gathered.extend(type(data) is list for _c, _d, data in items)
        return many(device, items)

    plugin.btl_device_post_send_many = post_send_many
    device = udp_plugin.btl_device_open(options={"host": "127.0.0.1"})
    for flag in ("wait_wakes_on_input", "gather_sends", "sends_complete_at_once"):
        setattr(device, flag, True)  # (UdpDevice has no slots: a legacy device could do this)
    with pytest.warns(BtlDeprecationWarning, match="gather_sends, sends_complete_at_once, wait_wakes_on_input"):
        t = Transport(DeviceOps.bind("legacy-udp", plugin, device))
    return t, gathered


def test_legacy_device_attributes_still_give_gathered_sends_and_wake_on_input() -> None:
    a, gathered = _open_legacy_udp()
    b = btlcore.open("udp", host="127.0.0.1")
    try:
        caps = a.capabilities
        assert caps.gather_sends and caps.wait_wakes_on_input and caps.sends_complete_at_once
        assert not caps.reports_source and a._poll_from is None
        assert a._wait_first and a._poll_completions is None
        done: list[BaseException | None] = []
        got: list[bytes] = []
        b.on(1, lambda peer, tag, data: got.append(data))
        message = bytes(range(256)) * 2000
        a.send(a.connect(b.address), 1, message, done.append)
        btlcore.run_until([a, b], lambda: done == [None] and len(got) == 1)
        assert got == [message]
        assert any(gathered), "bulk payloads were not posted as [header, payload]"
        # progress(timeout) takes the wait-first path: it waits, wakes on the input, reads it
        pings: list[bytes] = []
        a.on(2, lambda peer, tag, data: pings.append(data))
        b.send(b.connect(a.address), 2, b"ping")
        b.progress()
        start = time.monotonic()
        while not pings and time.monotonic() - start < 5:
            a.progress(1.0)
        assert pings == [b"ping"] and time.monotonic() - start < 1.0
    finally:
        a.close()
        b.close()


def test_legacy_attributes_are_read_once() -> None:
    plugin = _legacy(udp_plugin)
    device = udp_plugin.btl_device_open(options={"host": "127.0.0.1"})
    device.gather_sends = True
    ops = DeviceOps.bind("legacy-udp", plugin, device)
    try:
        with pytest.warns(BtlDeprecationWarning, match="gather_sends"):
            assert ops.capabilities().gather_sends
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            device.gather_sends = False  # read once: the first answer stands
            assert ops.capabilities().gather_sends
    finally:
        ops.close()


def test_legacy_virtual_time_device_seed_and_instance() -> None:
    # the simulator's NIC still has seed and instance attributes; a backend declaring
    # neither gets them read from the device, with the warning, and replays as before
    fabric = Fabric(seed=9)
    modern = btlcore.open("sim", fabric=fabric)
    plugin = _legacy(sim_plugin)
    device = sim_plugin.btl_device_open(options={"fabric": fabric})
    with pytest.warns(BtlDeprecationWarning, match=r"\(instance, seed\)"):
        old = Transport(DeviceOps.bind("legacy-sim", plugin, device))
    try:
        assert old.capabilities.seed == device.seed and old.capabilities.instance == device.instance == 1
        assert old.engine.incarnation >> 12 == device.instance + 1
        assert modern.capabilities.instance == 0 and modern.engine.incarnation >> 12 == 1
    finally:
        old.close()
        modern.close()


def test_a_declaring_backend_gets_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for name, options in (("sim", {"fabric": Fabric(seed=1)}), ("udp", {"host": "127.0.0.1"})):
            with btlcore.open(name, **options) as t:
                assert t.capabilities.reports_source


def test_sim_and_udp_declare_what_they_do() -> None:
    fabric = Fabric(seed=3)
    with btlcore.open("sim", fabric=fabric) as s, btlcore.open("udp", host="127.0.0.1") as u:
        assert s.capabilities == attrs.evolve(
            s.capabilities, virtual_time=True, reports_source=True, gather_sends=False,
            sends_complete_at_once=False, wait_wakes_on_input=False,
            seed=fabric.seed * 1_000_003 + 0, instance=0)
        assert u.capabilities == attrs.evolve(
            u.capabilities, virtual_time=False, reports_source=True, gather_sends=True,
            sends_complete_at_once=True, wait_wakes_on_input=True, seed=None, instance=None)


def test_declaring_reports_source_without_the_hook_fails_at_open() -> None:
    plugin = _legacy(udp_plugin)
    plugin.btl_device_capabilities = lambda device: Capabilities(mtu=1500, reports_source=True)
    device = udp_plugin.btl_device_open(options={"host": "127.0.0.1"})
    ops = DeviceOps.bind("broken", plugin, device)
    try:
        with pytest.raises(TypeError, match="reports_source but does not implement btl_device_poll_recv_from"):
            Transport(ops)
    finally:
        ops.close()


def test_legacy_reader_takes_what_the_old_transport_read() -> None:
    virtual = Capabilities(mtu=1000, virtual_time=True)
    device = types.SimpleNamespace(fabric=types.SimpleNamespace(seed=7), instance=3, gather_sends=1)
    with pytest.warns(BtlDeprecationWarning, match=r"\(gather_sends, instance, seed\)"):
        assert legacy_capabilities("old", device, virtual) == {"seed": 7, "instance": 3, "gather_sends": True}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # a real-time device's instance was never read; what is declared is not read again
        assert legacy_capabilities("old", types.SimpleNamespace(instance=3), Capabilities(mtu=1000)) == {}
        declared = Capabilities(mtu=1000, virtual_time=True, seed=1, instance=0, gather_sends=True)
        assert legacy_capabilities("new", device, declared) == {}
