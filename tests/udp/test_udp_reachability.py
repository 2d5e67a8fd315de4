"""A peer this device can never exchange with fails ``connect()`` at once with
AddressUnreachable naming both addresses, never a silent handshake timeout (issue #11,
item 9), IPv4 and IPv6 both -- in particular a transport bound to ``[::]``:

* toward an IPv4 peer (its address is IPv4, so it is bound to IPv4) while advertising an
  IPv6 address: the peer cannot reach that address and drops our HELLO (it once waited the
  whole ``handshake_timeout``); advertising an IPv4-mapped address makes it work;
* toward an IPv4 peer with no IPv4 route (the kernel's answer, in a namespace: the
  reachability check also holds for the mapped ``::ffff:a.b.c.d`` a dual-stack device sends
  to), and toward an IPv6 peer with no IPv6 route.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import time

import pytest

import btlcore
from btlcore.errors import AddressUnreachable
from btlcore.testing.hosts import has_ipv6_loopback
from btlcore_udp import _address

import netns

pytestmark = pytest.mark.timeout(60)




needs_ipv6 = pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 here (::1 cannot be bound)")


def _refused_at_once(t: btlcore.Transport, address: bytes, *names: str) -> str:
    t0 = time.monotonic()
    with pytest.raises(AddressUnreachable) as info:
        t.connect(address)
    assert time.monotonic() - t0 < 1.0
    text = str(info.value)
    assert isinstance(info.value, ValueError)
    for name in names:
        assert name in text, (name, text)
    assert not t.engine.peers_by_addr  # nothing half-made is left behind
    return text


def _exchange(a: btlcore.Transport, b: btlcore.Transport) -> None:
    got: list[bytes] = []
    b.on(3, lambda peer, tag, data: got.append(bytes(data)))
    done: list[BaseException | None] = []
    a.send(a.connect(b.address), 3, b"over" * 3000, done.append)
    btlcore.run_until([a, b], lambda: bool(got and done), timeout=20)
    assert got == [b"over" * 3000] and done == [None]


@needs_ipv6
def test_dual_stack_transport_advertising_ipv6_refuses_an_ipv4_peer_at_once() -> None:
    a = btlcore.open("udp", bind="[::]:0", config=btlcore.Config(handshake_timeout=30.0))
    b = btlcore.open("udp", bind="127.0.0.1:0")
    try:
        advertised = _address.decode(a.address)[1]
        if ipaddress.ip_address(advertised).ipv4_mapped is not None:
            pytest.skip(f"this host advertises {advertised} (no IPv6 address of its own)")
        text = _refused_at_once(a, b.address, "127.0.0.1", advertised, "advertise=::ffff:127.0.0.1")
        print(text)
    finally:
        a.close(flush=False)
        b.close(flush=False)


@needs_ipv6
def test_dual_stack_transport_advertising_mapped_ipv4_reaches_an_ipv4_peer() -> None:
    a = btlcore.open("udp", bind="[::]:0", advertise="::ffff:127.0.0.1")
    b = btlcore.open("udp", bind="127.0.0.1:0")
    try:
        _exchange(a, b)  # started from the [::] side: b answers the mapped address
        _exchange(b, a)
    finally:
        a.close(flush=False)
        b.close(flush=False)


@needs_ipv6
@pytest.mark.parametrize("bind, family, ip, names", [
    ("127.0.0.1:0", socket.AF_INET6, "::1", ("[::1]", "127.0.0.1", "is IPv6 but", "bound to IPv4")),
    ("[::1]:0", socket.AF_INET, "127.0.0.1", ("127.0.0.1", "[::1]", "is IPv4 but", "bound to IPv6")),
    ("0.0.0.0:0", socket.AF_INET6, "::1", ("[::1]", "0.0.0.0", "IPv6")),
])
def test_a_peer_of_the_other_family_is_refused_naming_both(bind: str, family: int, ip: str,
                                                           names: tuple[str, ...]) -> None:
    t = btlcore.open("udp", bind=bind)
    try:
        _refused_at_once(t, _address.encode(family, ip, 7000, 7001), *names)
    finally:
        t.close(flush=False)


# ------------------------------------------------------------------ no route (namespaces)

_REASON = netns.unavailable(need_nft=False)


@pytest.fixture(scope="module")
def link():
    if _REASON:
        pytest.skip(f"network namespaces unavailable: {_REASON}")
    with netns.NetnsPair(tag=f"r{os.getpid() % 100000}") as pair:
        yield pair


def _flush(link: netns.NetnsPair, side: str, family: str) -> None:
    subprocess.run(["ip", "-n", link.ns[side], family, "addr", "flush", "dev", link.dev[side]],
                   check=True, capture_output=True, timeout=20)


@pytest.mark.netns
def test_dual_stack_transport_without_ipv4_route_refuses_an_ipv4_peer(link) -> None:
    """Host a keeps IPv6 only: a [::]-bound transport there (advertising a mapped address, so
    that the family check passes) cannot send to b's IPv4 address: the route check refuses."""
    if not link.has_ipv6:
        pytest.skip("no IPv6 in these namespaces")
    _flush(link, "a", "-4")
    with link.inside("a"):
        t = btlcore.open("udp", bind="[::]:0", advertise=f"::ffff:{link.ip4['a']}")
    try:
        _refused_at_once(t, _address.encode(socket.AF_INET, link.ip4["b"], 7000, 7001), link.ip4["b"], "[::]")
    finally:
        t.close(flush=False)


@pytest.mark.netns
def test_dual_stack_transport_without_ipv6_route_refuses_an_ipv6_peer(link) -> None:
    if not link.has_ipv6:
        pytest.skip("no IPv6 in these namespaces")
    _flush(link, "b", "-6")
    with link.inside("b"):
        t = btlcore.open("udp", bind="[::]:0")
    try:
        _refused_at_once(t, _address.encode(socket.AF_INET6, link.ip6["a"], 7000, 7001), link.ip6["a"], "[::]")
    finally:
        t.close(flush=False)
