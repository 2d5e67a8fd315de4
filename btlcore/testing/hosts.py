"""What the machine running the tests offers: for skips that name what is missing."""

from __future__ import annotations

import socket


def has_ipv6_loopback() -> bool:
    """True where a UDP socket can bind ``::1`` (containers often have IPv6 off)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False
