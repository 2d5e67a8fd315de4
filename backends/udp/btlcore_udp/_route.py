"""Which address of ours a peer can reach, and whether a peer can be reached from where we are
bound: answered by the kernel's routing table, through sockets that send nothing.

``connect()`` on a UDP socket sends no packet: it only looks the route up, fails at once when
there is none (``ENETUNREACH``) or when the bound source cannot use it (``EINVAL``: a socket
bound to 127.0.0.1 toward another host), and otherwise gives the socket the source address
the route would use (``getsockname``).  That is all three questions:

* :func:`source_toward` -- the address a peer at ``dest`` sees our datagrams come from, so the
  one a wildcard-bound device should advertise to it;
* :func:`primary_address` -- the address a wildcard-bound device advertises before it knows
  its peers: the source of the default route, else the first address of an interface that
  is up, else loopback;
* :func:`unreachable` -- why a device bound to ``bound`` cannot send to ``dest`` (None when it
  can), for an error at ``connect()`` rather than a silent timeout.  IPv6 needs one more
  question than the kernel answers at ``connect()``: it routes ``::1`` toward other hosts and
  drops the packets later, so a loopback-bound device may reach only loopback and this
  host's own addresses (an address is ours if a socket can be bound to it).

The probes must ask the device's network namespace, which may not be the calling thread's (a
socket keeps the namespace it was made in: the two-host tests open devices in two namespaces
from one thread).  :func:`namespace_of` enters the socket's namespace for the probe
(``SIOCGSKNS``, then ``setns``: root only, and only needed when they differ); where it cannot,
the check is skipped and the kernel's send errors say it later.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import ipaddress
import os
import socket
from collections.abc import Iterator

from . import _mtu

#: ``connect()`` errors that mean "no way from this source to that destination"
UNREACHABLE = (errno.EINVAL, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL)
#: documentation addresses (RFC 5737, RFC 3849): where the default route points; nothing is sent
_ELSEWHERE: dict[int, str] = {socket.AF_INET: "192.0.2.1", socket.AF_INET6: "2001:db8::1"}
_LOOPBACK: dict[int, str] = {socket.AF_INET: "127.0.0.1", socket.AF_INET6: "::1"}
_PORT = 9  # discard: any port will do, connect() sends nothing
SIOCGSKNS = 0x894C  # a socket's network namespace, as a new descriptor (Linux >= 4.9)
CLONE_NEWNET = 0x40000000
_THREAD_NS = "/proc/thread-self/ns/net"


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def namespace_of(sock: socket.socket) -> Iterator[bool]:
    """Run the block in ``sock``'s network namespace; yields False (and stays where it is)
    when that cannot be done, so the caller skips what it would have asked."""
    try:
        ns = fcntl.ioctl(sock.fileno(), SIOCGSKNS)
    except OSError:  # an old kernel, or no namespaces: there is only one
        yield True
        return
    try:
        if os.fstat(ns).st_ino == os.stat(_THREAD_NS).st_ino:
            yield True
            return
        own = os.open(_THREAD_NS, os.O_RDONLY)
        try:
            try:
                _setns(ns)
            except OSError:
                yield False
                return
            try:
                yield True
            finally:
                _setns(own)
        finally:
            os.close(own)
    finally:
        os.close(ns)


def _sockaddr(family: int, ip: str, port: int, scope: int = 0) -> tuple[str, int] | tuple[str, int, int, int]:
    return (ip, port, 0, scope) if family == socket.AF_INET6 else (ip, port)


def source_toward(family: int, dest: str, scope: int = 0, bound: str | None = None) -> str:
    """The source address of our datagrams to ``dest`` (from ``bound``, if given and not a
    wildcard).  Raises OSError when the kernel has no route."""
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        if bound is not None and not ipaddress.ip_address(bound.split("%")[0]).is_unspecified:
            probe.bind(_sockaddr(family, bound.split("%")[0], 0))
        probe.connect(_sockaddr(family, dest, _PORT, scope))
        return str(probe.getsockname()[0]).split("%")[0]


def is_local(family: int, ip: str, scope: int = 0) -> bool:
    """Whether ``ip`` is one of this host's addresses (a socket can be bound to it)."""
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind(_sockaddr(family, ip, 0, scope))
        return True
    except OSError:
        return False


def primary_address(family: int) -> str:
    """The address a wildcard-bound device advertises: this host's source on its default
    route; without one, the first global address of an interface that is up; else loopback.
    An IPv6 device with no IPv6 address of its own advertises its IPv4 one, mapped
    (``::ffff:10.0.0.1``): a dual-stack socket reaches it."""
    try:
        ip = source_toward(family, _ELSEWHERE[family])
        if not ipaddress.ip_address(ip).is_loopback:
            return ip
    except OSError:
        pass
    found = _interface_address(family)
    if found is not None:
        return found
    if family == socket.AF_INET6:
        v4 = primary_address(socket.AF_INET)
        if v4 != _LOOPBACK[socket.AF_INET]:
            return f"::ffff:{v4}"
    return _LOOPBACK[family]


def _interface_address(family: int) -> str | None:
    names = [name for _, name in socket.if_nameindex() if name != "lo" and _mtu._is_up(name)]
    if family == socket.AF_INET:
        for name in names:
            ip = _mtu._ipv4_of(name)
            if ip is not None and not ipaddress.ip_address(ip).is_loopback:
                return ip
        return None
    for ip, name in _mtu._ipv6_interfaces():
        addr = ipaddress.ip_address(ip)
        if name in names and not (addr.is_loopback or addr.is_link_local):
            return ip
    return None


def unreachable(family: int, bound: str, dest: str, scope: int = 0) -> str | None:
    """Why a device bound to ``bound`` cannot send to ``dest`` (None if it can): the kernel's
    answer to ``connect()`` from that source, and for a loopback-bound device, whether
    ``dest`` is loopback or an address of this host."""
    bound_ip = ipaddress.ip_address(bound.split("%")[0])
    dest_ip = ipaddress.ip_address(dest.split("%")[0])
    try:
        source_toward(family, dest, scope, bound)
    except OSError as exc:
        if exc.errno in UNREACHABLE:
            return f"{exc.strerror or errno.errorcode.get(exc.errno or 0, exc)}"
        raise
    if bound_ip.is_loopback and not dest_ip.is_loopback and not dest_ip.is_unspecified \
            and not is_local(family, dest, scope):
        return "a loopback address reaches only this host"
    return None
