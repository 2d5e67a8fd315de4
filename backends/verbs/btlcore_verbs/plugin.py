"""The verbs backend's hook implementations (see :class:`btlcore.device.DeviceSpec`).

Each per-device hook takes the :class:`~btlcore_verbs.VerbsDevice` first.  The
per-packet hooks are the device's own functions, so the core's direct calls through
:class:`~btlcore.device.DeviceOps` go straight into them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from btlcore.device import Capabilities, Channel, ChannelInfo, Probe, hookimpl
from btlcore.errors import ConfigError

from . import _address, _options, _port, _pyverbs, _receive, _send
from ._device import VerbsDevice

btl_device_post_send = hookimpl(_send.post_send)
btl_device_poll_recv = hookimpl(_receive.poll_recv)


def probe(options: Mapping[str, Any]) -> Probe:
    """Usable if pyverbs imports, the options are valid, and the device has an active port
    with a routable GID.  Never raises."""
    try:
        opts = _options.parse(options)
    except ConfigError as exc:
        return Probe(False, str(exc))
    try:
        pv = _pyverbs.load()
    except ImportError as exc:
        return Probe(False, str(exc))
    try:
        ctx, name, port, attr = _port.find_port(pv, opts)
        try:
            gid = _port.choose_gid(pv, ctx, name, port, attr.gid_tbl_len, opts.gid_index)
        finally:
            ctx.close()
    except (_port.Unavailable, ConfigError) as exc:
        return Probe(False, str(exc))
    except Exception as exc:  # a probe must not raise
        return Probe(False, f"verbs probe failed: {type(exc).__name__}: {exc}")
    return Probe(True, f"{name} port {port}, gid[{gid.index}] {gid.text} ({gid.why}), "
                       f"mtu {_port.mtu_bytes(attr.active_mtu)}")


def describe_address(address: bytes) -> str:
    """A verbs address in words (``btl serve`` prints it next to the hex; the
    ``btl_cli_format_address`` hook)."""
    return str(_address.decode(address))


def parse_peer(text: str) -> bytes:
    """``btl transfer --peer`` and ``connect(text)``: ``verbs:[GID]:PQPN+DQPN:QKEY:LID:MTU``
    (``address_text``'s form) or the hex; ValueError says what is wrong (the
    ``btl_address_parse`` and ``btl_cli_parse_address`` hooks)."""
    if text.strip().startswith("verbs:"):
        return _address.from_text(text)
    try:
        blob = bytes.fromhex(text.strip().removeprefix("hex:").replace(":", ""))
    except ValueError:
        raise ValueError(f"expected a verbs address as {_address.TEXT_FORM} or as hex (the "
                         f"{_address.LENGTH} bytes), got {text!r}") from None
    _address.decode(blob)
    return blob


@hookimpl
def btl_backend_probe(options: Mapping[str, Any]) -> Probe:
    return probe(options)


@hookimpl
def btl_address_text(address: bytes) -> str:
    return _address.to_text(address)


@hookimpl
def btl_address_parse(text: str) -> bytes:
    return parse_peer(text)


@hookimpl
def btl_device_open(options: Mapping[str, Any]) -> VerbsDevice:
    return VerbsDevice(_options.parse(options))


@hookimpl
def btl_device_capabilities(device: VerbsDevice) -> Capabilities:
    return device.capabilities()


@hookimpl
def btl_device_create_channel(device: VerbsDevice, channel: Channel, mtu: int) -> ChannelInfo:
    return device.create_channel(channel, mtu)


@hookimpl
def btl_device_poll_completions(device: VerbsDevice) -> int:
    return device.poll_completions()


@hookimpl
def btl_device_local_address(device: VerbsDevice) -> bytes:
    return device.local_address()


@hookimpl
def btl_device_resolve(device: VerbsDevice, address: bytes) -> Any:
    return device.resolve(address)


@hookimpl
def btl_device_clock(device: VerbsDevice) -> Callable[[], float]:
    return device.clock()


@hookimpl
def btl_device_wait(device: VerbsDevice, deadline: float | None) -> None:
    device.wait(deadline)


@hookimpl
def btl_device_fds(device: VerbsDevice) -> Sequence[int]:
    return device.fds()


@hookimpl
def btl_device_close(device: VerbsDevice) -> None:
    device.close()


# ---------------------------------------------------------------------------------- the btl command


@hookimpl
def btl_cli_parse_address(text: str) -> bytes:
    return parse_peer(text)


@hookimpl
def btl_cli_format_address(address: bytes) -> str:
    return describe_address(address)
