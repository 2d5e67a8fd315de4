"""Opening the device's two sockets: binding PORT and PORT + 1, and the socket options
(buffer sizes, IP_RECVERR, the GSO check, UDP_GRO) that the options ask for."""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import TYPE_CHECKING, Any

from btlcore.errors import ConfigError

if TYPE_CHECKING:  # (not imported: _options -> _route -> _mtu -> _options is a cycle)
    from ._options import UdpOptions

UDP_SEGMENT = getattr(socket, "UDP_SEGMENT", 103)  # Python 3.11 has no name for it
UDP_GRO = getattr(socket, "UDP_GRO", 104)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)
IP_RECVERR = getattr(socket, "IP_RECVERR", 11)
IPV6_RECVERR = getattr(socket, "IPV6_RECVERR", 25)
PAIR_ATTEMPTS = 256  # ephemeral PORT whose PORT + 1 is taken: pick again, at most this often


def _set_buffer(sock: socket.socket, opt: int, force_opt: int, want: int) -> int:
    """Ask for ``want`` bytes of socket buffer; force it past net.core.[rw]mem_max when we
    may (CAP_NET_ADMIN).  Returns what was granted, in the request's terms (Linux reports
    twice the usable size to account for its bookkeeping)."""
    sock.setsockopt(socket.SOL_SOCKET, opt, want)
    granted = sock.getsockopt(socket.SOL_SOCKET, opt) // 2
    if granted < want:
        try:
            sock.setsockopt(socket.SOL_SOCKET, force_opt, want)
            granted = sock.getsockopt(socket.SOL_SOCKET, opt) // 2
        except OSError:
            pass
    return granted


def gso_supported(sock: socket.socket) -> bool:
    try:
        sock.getsockopt(socket.IPPROTO_UDP, UDP_SEGMENT)
        return True
    except OSError:
        return False


def bind_sockaddr(family: int, host: str, port: int) -> Any:
    return socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM, 0, socket.AI_NUMERICHOST)[0][4]



def is_wildcard(host: str) -> bool:
    return ipaddress.ip_address(host.split("%")[0]).is_unspecified


def is_loopback(host: str) -> bool:
    """A loopback address (127.0.0.0/8, ::1; an IPv4-mapped one too)."""
    ip = ipaddress.ip_address(host.split("%")[0])
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback


def _open_socket(opts: UdpOptions, port: int) -> socket.socket:
    sock = socket.socket(opts.family, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        if opts.family == socket.AF_INET6 and is_wildcard(opts.host):
            # dual stack: [::] takes IPv4 peers too (as ::ffff:a.b.c.d), whatever the
            # system's net.ipv6.bindv6only says
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(bind_sockaddr(opts.family, opts.host, port))
    except BaseException:
        sock.close()
        raise
    return sock



def bind_sockets(opts: UdpOptions) -> list[socket.socket]:
    """The priority and the data socket, bound as the options say: with ``paired`` (the
    default) on PORT and PORT + 1, also when PORT is ephemeral: the kernel picks the first,
    and if PORT + 1 is taken (or PORT is 65535) both are given back and it picks again."""
    host = opts.host
    attempts = PAIR_ATTEMPTS if opts.paired and opts.port == 0 else 1
    for _ in range(attempts):
        port = opts.port
        try:
            first = _open_socket(opts, port)
        except OSError as exc:
            raise OSError(exc.errno, f"udp: cannot bind {host} port {port}: {exc.strerror}") from exc
        data_port = opts.data_port
        if opts.paired:
            data_port = first.getsockname()[1] + 1
        try:
            if data_port > 65535:
                raise OSError(errno.EADDRINUSE, "no port + 1 above 65535")
            return [first, _open_socket(opts, data_port)]
        except OSError as exc:
            first.close()
            if exc.errno != errno.EADDRINUSE or attempts == 1:
                raise OSError(exc.errno, f"udp: cannot bind {host} port {data_port} (the data "
                              f"socket's): {exc.strerror}") from exc
    raise OSError(errno.EADDRINUSE, f"udp: no two free consecutive ports PORT, PORT + 1 on {host} "
                  f"in {PAIR_ATTEMPTS} tries (give 'data_port' to let the data socket take any port)")



def configure(socks: list[socket.socket], opts: UdpOptions) -> tuple[list[int], list[int], bool]:
    """Set the options' socket options on both sockets (closing them if one is refused):
    returns the receive and send buffer sizes granted, per socket, and whether the kernel
    has UDP GSO."""
    family = opts.family
    try:
        if opts.recverr:  # ENOBUFS from a full qdisc becomes back-pressure, not silent loss
            level, opt = ((socket.IPPROTO_IPV6, IPV6_RECVERR) if family == socket.AF_INET6
                          else (socket.IPPROTO_IP, IP_RECVERR))
            for s in socks:
                s.setsockopt(level, opt, 1)
        rcvbuf = [_set_buffer(s, socket.SO_RCVBUF, SO_RCVBUFFORCE, opts.rcvbuf) for s in socks]
        sndbuf = [_set_buffer(s, socket.SO_SNDBUF, SO_SNDBUFFORCE, opts.sndbuf) for s in socks]
        has_gso = gso_supported(socks[1])
        if opts.gso == "on" and not has_gso:
            raise ConfigError("udp option 'gso' is 'on' but this kernel has no UDP_SEGMENT "
                              "(Linux >= 4.18 needed); allowed is one of auto, on, off")
        if opts.gro:
            try:
                socks[1].setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
            except OSError as exc:
                raise ConfigError(f"udp option 'gro' is on but this kernel refuses UDP_GRO "
                                  f"({exc.strerror}; Linux >= 5.0 needed); allowed is true "
                                  "or false") from None
    except BaseException:
        for s in socks:
            s.close()
        raise
    return rcvbuf, sndbuf, has_gso
