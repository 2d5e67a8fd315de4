"""The UDP backend's hook implementations (see :class:`btlcore.device.DeviceSpec`).

Each per-device hook takes the :class:`~btlcore_udp.UdpDevice` first.  The
per-packet hooks are the device's own functions (no wrapper: the core calls them directly
through :class:`~btlcore.device.DeviceOps`).
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from btlcore.device import Capabilities, Channel, ChannelInfo, Probe, hookimpl
from btlcore.errors import ConfigError

from . import _address, _device, _options
from ._device import UdpDevice

btl_device_post_send = hookimpl(_device.post_send)
btl_device_post_send_many = hookimpl(_device.post_send_many)
btl_device_poll_recv = hookimpl(_device.poll_recv)
btl_device_poll_recv_from = hookimpl(_device.poll_recv_from)
btl_device_wait = hookimpl(_device.wait)


@hookimpl
def btl_backend_probe(options: Mapping[str, Any]) -> Probe:
    """Usable if both sockets can be bound where the options say."""
    try:
        opts = _options.parse(options)
    except ConfigError as exc:
        return Probe(False, str(exc))
    except Exception as exc:  # a probe must not raise
        return Probe(False, f"bad udp options: {type(exc).__name__}: {exc}")
    socks = []
    try:
        for port in (opts.port, opts.data_port):
            sock = socket.socket(opts.family, socket.SOCK_DGRAM)
            socks.append(sock)
            sock.bind(_device.bind_sockaddr(opts.family, opts.host, port))
    except OSError as exc:
        return Probe(False, f"cannot bind a UDP socket on {opts.host} port {port}: {exc.strerror or exc}")
    finally:
        for s in socks:
            s.close()
    return Probe(True, "")


@hookimpl
def btl_device_open(options: Mapping[str, Any]) -> UdpDevice:
    return UdpDevice(_options.parse(options))


@hookimpl
def btl_device_capabilities(device: UdpDevice) -> Capabilities:
    return device.capabilities()


@hookimpl
def btl_device_create_channel(device: UdpDevice, channel: Channel, mtu: int) -> ChannelInfo:
    return device.create_channel(channel, mtu)


@hookimpl
def btl_device_poll_completions(device: UdpDevice) -> int:
    return 0


@hookimpl
def btl_device_local_address(device: UdpDevice) -> bytes:
    return device.local_address()


@hookimpl
def btl_device_resolve(device: UdpDevice, address: bytes) -> Any:
    return device.resolve(address)


@hookimpl
def btl_device_clock(device: UdpDevice) -> Callable[[], float]:
    return device.clock()


@hookimpl
def btl_device_fds(device: UdpDevice) -> Sequence[int]:
    return device.fds()


@hookimpl
def btl_device_wake(device: UdpDevice) -> None:
    device.wake()


@hookimpl
def btl_device_close(device: UdpDevice) -> None:
    device.close()


def parse_peer(text: str) -> bytes:
    """``btl transfer --peer HOST:PORT``: the address of a peer whose priority socket is on
    PORT and data socket on PORT + 1 (what ``--bind HOST:PORT`` gives), or the hex blob
    ``btl serve`` prints (the ``btl_cli_parse_address`` hook)."""
    text = text.strip()
    if ":" not in text or all(c in "0123456789abcdefABCDEF" for c in text):
        try:
            raw = bytes.fromhex(text)
            _address.decode(raw)
            return raw
        except ValueError:
            raise ValueError(f"expected HOST:PORT or the hex address 'btl serve' printed, got {text!r}") from None
    opts = _options.parse({"bind": text})
    infos = socket.getaddrinfo(opts.host, opts.port, opts.family, socket.SOCK_DGRAM)
    ip = infos[0][4][0]
    if opts.port == 0:
        raise ValueError(f"--peer needs a port, got {text!r}")
    return _address.encode(opts.family, ip, opts.port, opts.port + 1)


# ---------------------------------------------------------------------------------- the btl command


@hookimpl
def btl_cli_add_options(command: str, group: argparse._ArgumentGroup) -> None:
    if command == "transfer":
        group.add_argument("--bind", help="local HOST:PORT (udp)")
    elif command == "serve":
        group.add_argument("--bind", help="local HOST:PORT (udp; default 127.0.0.1, ephemeral port)")


@hookimpl
def btl_cli_device_options(command: str, args: argparse.Namespace) -> dict[str, Any]:
    bind = getattr(args, "bind", None)
    return {"bind": bind} if bind else {}


@hookimpl
def btl_cli_parse_address(text: str) -> bytes:
    return parse_peer(text)
