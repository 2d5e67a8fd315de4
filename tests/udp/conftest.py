"""Fixtures for the UDP backend's tests: devices opened through the registry, closed after."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from btlcore.device import DeviceOps
from btlcore.registry import open_device


def ipv6_loopback_available() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


HOSTS = [
    pytest.param("127.0.0.1", id="ipv4"),
    pytest.param("::1", id="ipv6", marks=pytest.mark.skipif(
        not ipv6_loopback_available(), reason="::1 cannot be bound here (no IPv6 loopback)")),
]


@pytest.fixture(params=["auto", "off"], ids=["recvmmsg", "recv_into"])
def recv_mode(request: pytest.FixtureRequest) -> str:
    """Both receive paths: recvmmsg through ctypes (the default), and a recv_into loop."""
    return request.param


@pytest.fixture
def open_udp(recv_mode: str) -> Iterator[Callable[..., DeviceOps]]:
    """``open_udp(**options)`` opens a UDP device; all are closed at teardown.  Tests using
    it run once per receive path (``recv_mode``)."""
    opened: list[DeviceOps] = []

    def _open(**options: Any) -> DeviceOps:
        options.setdefault("recvmmsg", recv_mode)
        ops = open_device("udp", options)
        opened.append(ops)
        return ops

    yield _open
    for ops in opened:
        ops.close()


@pytest.fixture(params=HOSTS)
def host(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(autouse=True)
def _no_udp_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """BTL_UDP_* variables of the caller's shell must not leak into these tests."""
    import os

    for key in list(os.environ):
        if key.startswith("BTL_UDP_"):
            monkeypatch.delenv(key)
