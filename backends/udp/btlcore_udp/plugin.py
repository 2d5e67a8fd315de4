"""The UDP backend's hook implementations (see :class:`btlcore.device.DeviceSpec`).

Each per-device hook takes the :class:`~btlcore_udp.UdpDevice` first.  The
per-packet hooks name the device's own functions with :func:`btlcore.device.direct` (no
wrapper: the core calls them directly through :class:`~btlcore.device.DeviceOps`).
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from btlcore.device import Capabilities, Channel, ChannelInfo, Probe, direct, hookimpl
from btlcore.errors import ConfigError

from . import _address, _options, _receive, _route, _send, _sockets, _wait
from ._device import UdpDevice

# The send, receive and wait paths may be compiled (mypyc: builtins, which pluggy cannot mark):
# pluggy registers these wrappers, DeviceOps calls the functions themselves (direct()).


@hookimpl
@direct(_send.post_send)
def btl_device_post_send(device: UdpDevice, channel: Channel, dest: Any, data: Any) -> bool:
    return _send.post_send(device, channel, dest, data)


@hookimpl
@direct(_send.post_send_many)
def btl_device_post_send_many(device: UdpDevice, items: Sequence[tuple[Any, Any, Any]]) -> int:
    return _send.post_send_many(device, items)


@hookimpl
@direct(_receive.poll_recv)
def btl_device_poll_recv(device: UdpDevice, budget: int) -> list[Any]:
    return _receive.poll_recv(device, budget)


@hookimpl
@direct(_receive.poll_recv_from)
def btl_device_poll_recv_from(device: UdpDevice, budget: int) -> tuple[list[Any], list[Any]]:
    return _receive.poll_recv_from(device, budget)


@hookimpl
@direct(_wait.wait)
def btl_device_wait(device: UdpDevice, deadline: float | None) -> None:
    _wait.wait(device, deadline)


@hookimpl
def btl_backend_probe(options: Mapping[str, Any]) -> Probe:
    """Usable if both sockets can be bound where the options say."""
    try:
        opts = _options.parse(options)
    except ConfigError as exc:
        return Probe(False, str(exc))
    except Exception as exc:  # a probe must not raise
        return Probe(False, f"bad udp options: {type(exc).__name__}: {exc}")
    try:
        socks = _sockets.bind_sockets(opts)
    except OSError as exc:
        return Probe(False, f"cannot bind UDP sockets on {opts.host}: {exc.strerror or exc}")
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
def btl_device_reply_dest(device: UdpDevice, source: Any) -> Any:
    return device.reply_dest(source)


@hookimpl
def btl_device_peer_sources(device: UdpDevice, dest: Any) -> tuple[Any, ...]:
    """The peer's two sockets, as the kernel names senders: its handle's two sockaddrs."""
    return tuple(dest)


@hookimpl
def btl_device_check_connect(device: UdpDevice, address: bytes) -> None:
    """An IPv4 peer cannot answer a dual-stack device that advertises IPv6: say so now."""
    device.check_connect(address)


@hookimpl
@direct(_receive.path_errors)
def btl_device_path_errors(device: UdpDevice) -> list[Any]:
    """The peers' sockets ICMP said closed since the last call (read with ``IP_RECVERR``)."""
    return _receive.path_errors(device)


@hookimpl
def btl_device_clock(device: UdpDevice) -> Callable[[], float]:
    clock: Callable[[], float] = device.clock()
    return clock


@hookimpl
def btl_device_fds(device: UdpDevice) -> Sequence[int]:
    return device.fds()


@hookimpl
def btl_device_readable(device: UdpDevice, fd: int) -> None:
    """An event loop saw ``fd`` readable: the next poll reads that socket without asking epoll."""
    device.readable(fd)


@hookimpl
def btl_device_wake(device: UdpDevice) -> None:
    device.wake()


@hookimpl
def btl_device_wake_fd(device: UdpDevice) -> int | None:
    """The wake eventfd (``wake`` writes it; ``wait`` drains it)."""
    return None if device.closed else device._wake_r


@hookimpl
def btl_device_close(device: UdpDevice) -> None:
    device.close()


def parse_peer(text: str) -> bytes:
    """``HOST:PORT`` (``[HOST]:PORT`` for IPv6): the address of a peer whose priority socket
    is on PORT and data socket on PORT + 1 (what ``--bind HOST:PORT`` gives), as
    ``Transport.address_text`` writes it; ``udp://HOST:PORT+DATA_PORT`` for one whose data
    port was set apart; or the hex blob (the ``btl_address_parse`` hook, and ``--peer``)."""
    text = text.strip()
    if text.startswith("udp://"):
        text = text[len("udp://"):]
        head, plus, data = text.rpartition("+")
        if plus:
            return _apart(head, data, text)
    if ":" not in text or all(c in "0123456789abcdefABCDEF" for c in text):
        try:
            raw = bytes.fromhex(text)
            _address.decode(raw)
            return raw
        except ValueError:
            raise ValueError(f"expected HOST:PORT or the hex address 'btl serve' printed, got {text!r}") from None
    opts = _options.parse({"bind": text})
    infos = socket.getaddrinfo(opts.host, opts.port, opts.family, socket.SOCK_DGRAM)
    ip = str(infos[0][4][0])
    if opts.port == 0:
        raise ValueError(f"--peer needs a port, got {text!r}")
    return _address.encode(opts.family, ip, opts.port, opts.port + 1)


def _apart(head: str, data: str, text: str) -> bytes:
    """``HOST:PORT+DATA_PORT``: an address whose data port is not PORT + 1."""
    paired = _address.decode(parse_peer(head))
    if not data.isdigit() or not 0 < int(data) < 65536:
        raise ValueError(f"expected udp://HOST:PORT+DATA_PORT with ports from 1 to 65535, got {text!r}")
    family, ip, pport, _dport, scope = paired
    return _address.encode(family, ip, pport, int(data), scope)


@hookimpl
def btl_address_text(address: bytes) -> str:
    """``HOST:PORT``, or ``udp://HOST:PORT+DATA_PORT`` when the data port is not PORT + 1."""
    return _address.to_text(address)


@hookimpl
def btl_address_parse(text: str) -> bytes:
    return parse_peer(text)


# ---------------------------------------------------------------------------------- the btl command
#
# Between hosts with no --bind: ``btl serve`` binds the wildcard ([::], dual stack, so IPv4
# and IPv6 clients both reach it) and ``btl transfer`` binds the wildcard of the peer's family
# and advertises the address its route to the peer leaves from, which is the one the peer can
# answer.  The library's own default stays 127.0.0.1 (option ``bind`` opens it).

_BIND_NAMES = ("bind", "host", "port")


def _user_chose_bind(args: argparse.Namespace) -> bool:
    """``--option bind=...`` (or host/port) or ``BTL_UDP_BIND``: the user's, not ours."""
    given = [item.partition("=")[0].strip().lower() for item in getattr(args, "option", None) or []]
    env = _options.env_options()
    return any(name in given or name in env for name in _BIND_NAMES)


def _wildcard_bind(family: int, port: int) -> str:
    return f"[::]:{port}" if family == socket.AF_INET6 else f"0.0.0.0:{port}"


def _has_ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as probe:
            probe.bind(("::", 0))
        return True
    except OSError:
        return False


def transfer_options(peer_text: str | None) -> dict[str, Any]:
    """``btl transfer`` without ``--bind``: the wildcard of the peer's family, advertising the
    source address of the route toward the peer.  With no route, the wildcard alone:
    ``connect`` then fails at once, naming both addresses."""
    if not peer_text:
        return {}
    try:
        family, ip, _pport, _dport, scope = _address.decode(parse_peer(peer_text))
    except (ValueError, OSError):
        return {}  # --peer's own error comes from parse_address, with the usage line
    options: dict[str, Any] = {"bind": _wildcard_bind(family, 0)}
    try:
        options["advertise"] = _route.source_toward(family, ip, scope)
    except OSError:
        pass
    return options


@hookimpl
def btl_cli_add_options(command: str, group: argparse._ArgumentGroup) -> None:
    if command == "transfer":
        group.add_argument("--bind", help="local HOST:PORT (udp; default: the wildcard, advertising "
                           "the address the route to --peer leaves from)")
    elif command == "serve":
        group.add_argument("--bind", help="local HOST:PORT (udp; default [::] (IPv4 and IPv6; "
                           "0.0.0.0 without IPv6) on --port)")
        group.add_argument("--port", type=int, default=0, help="the port clients give as "
                           "--peer HOST:PORT (udp; the data socket takes PORT + 1; default ephemeral)")


@hookimpl
def btl_cli_device_options(command: str, args: argparse.Namespace) -> dict[str, Any]:
    bind = getattr(args, "bind", None)
    port = getattr(args, "port", 0) or 0
    if bind:
        if port:
            raise ValueError("udp: give --bind HOST:PORT or --port PORT, not both")
        return {"bind": bind}
    if _user_chose_bind(args):
        return {}
    if command == "transfer":
        return transfer_options(getattr(args, "peer", None))
    if command == "serve":
        return {"bind": _wildcard_bind(socket.AF_INET6 if _has_ipv6() else socket.AF_INET, port)}
    return {}


@hookimpl
def btl_cli_parse_address(text: str) -> bytes:
    return parse_peer(text)


@hookimpl
def btl_cli_format_address(address: bytes) -> str:
    return _address.to_text(address)
