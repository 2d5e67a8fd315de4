"""The UDP device's options: parsed, checked and defaulted in one place.

Options come from code (``open_device("udp", {"bind": "[::1]:0"})``), and from the
environment as ``BTL_UDP_<NAME>`` (``BTL_UDP_BIND=127.0.0.1:7000``); explicit options win.
Values may be typed (``mtu=9000``) or strings (``"9000"``, ``"32M"``, ``"on"``), so the CLI
and the environment need no parsing of their own.  Anything unknown or out of range raises
:class:`~btlcore.errors.ConfigError` naming the option and what it allows: a typo must never
pass silently.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from typing import Any

import attrs

from btlcore import options as _shared
from btlcore.errors import ConfigError

from . import _route

ENV_PREFIX = "BTL_UDP_"
DEFAULT_HOST = "127.0.0.1"
MIN_MTU = 128  # the same floor as btlcore.Config.mtu: a header plus a useful payload
MAX_PAYLOAD: dict[int, int] = {socket.AF_INET: 65507, socket.AF_INET6: 65527}  # 65535 - IP (v4 only) - UDP
MIN_BUF = 4096
MAX_BUF = 1 << 30
DEFAULT_RCVBUF = 32 << 20
DEFAULT_SNDBUF = 16 << 20
TRISTATE = ("auto", "on", "off")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}

#: name -> what it allows, for error messages and ``describe()``.
ALLOWED = {
    "bind": "HOST:PORT (IPv6 as [HOST]:PORT; PORT 0 = ephemeral); shorthand for host and port",
    "host": "an IPv4 or IPv6 address or a host name (default 127.0.0.1)",
    "port": "an integer from 0 to 65535: the priority socket's port (0 = ephemeral)",
    "data_port": "an integer from 0 to 65535: the data socket's port (default: port + 1, "
    "also for an ephemeral port; 0 = an ephemeral port of its own)",
    "advertise": "an IP address peers should send to (default: the bound address; for a "
    "wildcard, this host's address on its default route, else on its first interface that is up)",
    "mtu": f"0 or 'auto' (from the interface), or an integer from {MIN_MTU} to 65507 "
    "(IPv4) / 65527 (IPv6)",
    "rcvbuf": f"a byte count from {MIN_BUF} to {MAX_BUF} (suffixes K, M, G allowed)",
    "sndbuf": f"a byte count from {MIN_BUF} to {MAX_BUF} (suffixes K, M, G allowed)",
    "busy_poll": "true or false",
    "gso": "one of " + ", ".join(TRISTATE),
    "gro": "true or false (receive GSO-sent runs glued, in one read, on the data socket)",
    "recverr": "true or false (default true): IP_RECVERR, so that a full queue on the way "
    "out (a rate-limited link) returns ENOBUFS, i.e. back-pressure, instead of dropping",
    "recvmmsg": "one of auto, on, off: receive with libc's recvmmsg through ctypes (many "
    "datagrams per system call); auto uses it where libc has it",
    "keep_heap": "true or false (default true): keep freed heap memory in the process "
    "(glibc mallopt, process-wide), so that large message buffers do not page-fault anew",
    "seed": "an integer (ignored: the UDP device needs no randomness)",
}


@attrs.define(slots=True, frozen=True)
class UdpOptions:
    """The settled options of one device."""

    family: int
    host: str  # numeric IP, as bound
    port: int
    data_port: int
    advertise: str  # numeric IP, as put in the address blob
    mtu: int  # 0 = detect
    rcvbuf: int
    sndbuf: int
    busy_poll: bool
    gso: str
    gro: bool = False
    recverr: bool = True
    recvmmsg: str = "auto"
    keep_heap: bool = True
    #: the data socket takes the priority socket's port + 1, also when that one is
    #: ephemeral (the device retries until both are free): one port names the device
    paired: bool = True


def _fail(name: str, value: Any) -> ConfigError:
    return ConfigError(f"bad value {value!r} for udp option {name!r} ({ENV_PREFIX}{name.upper()}): "
                       f"allowed is {ALLOWED[name]}")


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool):
        raise _fail(name, value)
    if isinstance(value, str):
        text = value.strip().lower().removesuffix("ib").removesuffix("b")
        mult = 1
        if name in ("rcvbuf", "sndbuf") and text[-1:] in _SUFFIX:
            mult, text = _SUFFIX[text[-1]], text[:-1]
        try:
            value = int(text, 0) * mult
        except ValueError:
            raise _fail(name, value) from None
    if not isinstance(value, int) or not lo <= value <= hi:
        raise _fail(name, value)
    return value


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise _fail(name, value)


def _tristate(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if not isinstance(value, str) or value.strip().lower() not in TRISTATE:
        raise _fail(name, value)
    return value.strip().lower()


def split_hostport(text: str) -> tuple[str, int]:
    """``"127.0.0.1:7000"`` or ``"[::1]:7000"`` -> (host, port).  Raises ConfigError."""
    if not isinstance(text, str):
        raise _fail("bind", text)
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise _fail("bind", text)
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or ":" in host:  # a bare IPv6 address needs brackets
            raise _fail("bind", text)
    if not host:
        raise _fail("bind", text)
    try:
        port = int(port_text)
    except ValueError:
        raise _fail("bind", text) from None
    if not 0 <= port <= 65535:
        raise _fail("bind", text)
    return host, port


def _resolve_host(name: str, host: Any) -> tuple[int, str]:
    """A host option -> (family, numeric IP).  Names go through getaddrinfo (first answer)."""
    if not isinstance(host, str) or not host.strip():
        raise _fail(name, host)
    host = host.strip().strip("[]")
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
        return (socket.AF_INET6 if ip.version == 6 else socket.AF_INET), host
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except OSError as exc:
        raise ConfigError(f"udp option {name!r}: cannot resolve host {host!r} ({exc}); "
                          f"allowed is {ALLOWED[name]}") from None
    fam, _, _, _, sockaddr = next(i for i in infos if i[0] in (socket.AF_INET, socket.AF_INET6))
    return fam, str(sockaddr[0])  # an AF_INET/AF_INET6 sockaddr: (ip, port, ...)


def env_options(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``BTL_UDP_*`` variables as options.  An unknown one is an error."""
    return _shared.env_options(ENV_PREFIX, ALLOWED, environ)


def parse(options: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> UdpOptions:
    """Validate ``options`` (over ``BTL_UDP_*`` defaults) into :class:`UdpOptions`."""
    _shared.check_known("udp", options, ALLOWED)
    opts: dict[str, Any] = env_options(environ)
    if "bind" in options:  # an explicit bind overrides host/port from the environment
        opts.pop("host", None)
        opts.pop("port", None)
    if "host" in options or "port" in options:
        opts.pop("bind", None)
    opts.update(options)
    if "bind" in opts:
        if "host" in opts or "port" in opts:
            raise ConfigError("udp options 'bind' and 'host'/'port' conflict: give bind=HOST:PORT, "
                              "or host and port, not both")
        host, port = split_hostport(opts["bind"])
        opts["host"], opts["port"] = host, port
    family, host = _resolve_host("host", opts.get("host", DEFAULT_HOST))
    port = _int("port", opts.get("port", 0), 0, 65535)
    paired = "data_port" not in opts
    if paired and port == 65535:
        raise ConfigError("udp option 'port' is 65535, which leaves no port + 1 for the data "
                          "socket; allowed is 0 to 65534 (or give 'data_port' as well)")
    data_port = port + 1 if paired and port else _int("data_port", opts.get("data_port", 0), 0, 65535)
    if port and port == data_port:
        raise ConfigError(f"udp options 'port' and 'data_port' are both {port}: the priority and "
                          "data sockets need different ports")
    if "advertise" in opts:
        adv_family, advertise = _resolve_host("advertise", opts["advertise"])
        if adv_family != family:
            raise ConfigError(f"udp option 'advertise' ({advertise}) is not of the bound address's "
                              f"family ({host})")
    elif ipaddress.ip_address(host.split("%")[0]).is_unspecified:
        advertise = _route.primary_address(family)  # a wildcard: peers need an address of ours
    else:
        advertise = host
    mtu_value = opts.get("mtu", 0)
    if isinstance(mtu_value, str) and mtu_value.strip().lower() == "auto":
        mtu_value = 0
    mtu = _int("mtu", mtu_value, 0, MAX_PAYLOAD[family])
    if 0 < mtu < MIN_MTU:
        raise _fail("mtu", mtu_value)
    gso = _tristate("gso", opts.get("gso", "auto"))
    if "seed" in opts:
        _int("seed", opts["seed"], -(1 << 63), (1 << 64) - 1)
    return UdpOptions(
        family=family,
        host=host,
        port=port,
        data_port=data_port,
        advertise=advertise,
        mtu=mtu,
        rcvbuf=_int("rcvbuf", opts.get("rcvbuf", DEFAULT_RCVBUF), MIN_BUF, MAX_BUF),
        sndbuf=_int("sndbuf", opts.get("sndbuf", DEFAULT_SNDBUF), MIN_BUF, MAX_BUF),
        busy_poll=_bool("busy_poll", opts.get("busy_poll", False)),
        gso=gso,
        gro=_bool("gro", opts.get("gro", False)),
        recverr=_bool("recverr", opts.get("recverr", True)),
        recvmmsg=_tristate("recvmmsg", opts.get("recvmmsg", "auto")),
        keep_heap=_bool("keep_heap", opts.get("keep_heap", True)),
        paired=paired,
    )
