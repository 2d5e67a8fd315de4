"""Which interface an address lives on, and the largest UDP payload it carries unfragmented.

The payload MTU is the interface MTU less the IP and UDP headers (28 bytes for IPv4, 48 for
IPv6), capped by the largest UDP payload there is (65507 / 65527): so 65507 on loopback
(MTU 65536) and 1472 on a 1500-byte Ethernet.  A wildcard address takes the smallest MTU of
the interfaces that are up, loopback excepted, since a peer may be behind any of them.
The interface MTU comes from the SIOCGIFMTU ioctl, or ``/sys/class/net/<if>/mtu``.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct

from ._options import MAX_PAYLOAD

SIOCGIFADDR = 0x8915
SIOCGIFMTU = 0x8921
HEADERS: dict[int, int] = {socket.AF_INET: 20 + 8, socket.AF_INET6: 40 + 8}
FALLBACK_MTU = 1500


def interface_mtu(ifname: str) -> int | None:
    """The ioctl first: it asks the network namespace of the calling thread, where sysfs
    shows the namespace it was mounted in (they differ after ``setns``)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = struct.pack("16si", ifname.encode()[:15], 0)
            return int(struct.unpack("16si", fcntl.ioctl(s, SIOCGIFMTU, req))[1])
    except OSError:
        pass
    try:
        with open(f"/sys/class/net/{ifname}/mtu") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _ipv4_of(ifname: str) -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = struct.pack("256s", ifname.encode()[:15])
            return socket.inet_ntoa(fcntl.ioctl(s, SIOCGIFADDR, req)[20:24])
    except OSError:
        return None


def _ipv6_interfaces() -> list[tuple[str, str]]:
    """(address, interface) for every IPv6 address, from /proc/net/if_inet6."""
    out = []
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6:
                    out.append((str(ipaddress.IPv6Address(bytes.fromhex(parts[0]))), parts[5]))
    except (OSError, ValueError):
        pass
    return out


def _is_up(ifname: str) -> bool:
    try:
        with open(f"/sys/class/net/{ifname}/operstate") as f:
            state = f.read().strip()
        return state in ("up", "unknown")  # loopback and some virtual links say "unknown"
    except OSError:
        return True


def interface_of(family: int, ip: str) -> str | None:
    """The name of the interface holding ``ip`` (None if not found or a wildcard)."""
    addr = ipaddress.ip_address(ip.split("%")[0])
    if addr.is_loopback:
        return "lo"
    if addr.is_unspecified:
        return None
    names = [name for _, name in socket.if_nameindex()]
    if family == socket.AF_INET:
        for name in names:
            if _ipv4_of(name) == str(addr):
                return name
        return None
    for a, name in _ipv6_interfaces():
        if a == str(addr):
            return name
    return None


def detect(family: int, ip: str) -> tuple[int, str]:
    """(payload MTU, where it came from) for a socket bound to ``ip``."""
    ifname = interface_of(family, ip)
    if ifname is not None:
        mtu = interface_mtu(ifname)
        source = f"interface {ifname}"
    else:
        candidates = [(interface_mtu(n), n) for _, n in socket.if_nameindex() if n != "lo" and _is_up(n)]
        candidates = [(m, n) for m, n in candidates if m]
        if candidates:
            mtu, name = min(candidates)
            source = f"smallest up interface ({name}) for {ip}"
        else:
            mtu, source = None, "no interface found"
    if not mtu:
        mtu, source = FALLBACK_MTU, f"{source}; assumed {FALLBACK_MTU}"
    return min(mtu - HEADERS[family], MAX_PAYLOAD[family]), source
