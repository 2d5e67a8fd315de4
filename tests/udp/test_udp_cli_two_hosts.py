"""``btl serve`` and ``btl transfer --peer HOST:PORT`` between two hosts (network namespaces
joined by a veth, ``netns.py``) with the CLI's defaults: no ``--bind`` on either side, IPv4
and IPv6; and a peer that cannot be reached from the bound address refused at once, naming
both addresses (issue #11, item 9).

Traffic goes only to the 10.231.0.x / fd00:231:: addresses inside the two namespaces this
test creates; every process has a timeout.
"""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import time

import pytest

import btlcore
from btlcore.errors import AddressUnreachable
from btlcore.registry import open_device
from btlcore_udp import _address

import netns

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]

_REASON = netns.unavailable(need_nft=False)
if _REASON:
    pytestmark.append(pytest.mark.skip(reason=f"network namespaces unavailable: {_REASON}"))

BTL = [sys.executable, "-m", "btlcore.cli"]


@pytest.fixture(scope="module")
def link():
    with netns.NetnsPair(tag=f"c{__import__('os').getpid() % 100000}") as pair:
        yield pair


def _serve(link: netns.NetnsPair) -> tuple[subprocess.Popen[str], bytes]:
    proc = subprocess.Popen(link.exec_argv("b", *BTL, "serve", "--backend", "udp", "--json"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    assert ready, "btl serve printed nothing within 30 s"
    line = json.loads(proc.stdout.readline())
    assert line["event"] == "listening", line
    return proc, bytes.fromhex(line["address"])


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_serve_and_transfer_between_hosts_without_bind(link, family):
    if family == "ipv6" and not link.has_ipv6:
        pytest.skip("no IPv6 in these namespaces")
    server, address = _serve(link)
    try:
        _fam, ip, pport, dport, _scope = _address.decode(address)
        assert dport == pport + 1  # one port names the server
        # the wildcard-bound server advertises an address of its own host, not a wildcard
        assert ip in (link.ip6["b"], link.ip4["b"], f"::ffff:{link.ip4['b']}"), ip
        host = link.ip4["b"] if family == "ipv4" else f"[{link.ip6['b']}]"
        client = subprocess.run(
            link.exec_argv("a", *BTL, "transfer", "--backend", "udp", "--peer", f"{host}:{pport}",
                           "--messages", "40", "--size", "8-30000", "--seed", "3", "--timeout", "60",
                           "--json"),
            capture_output=True, text=True, timeout=90)
        assert client.returncode == 0, client.stdout[-2000:] + client.stderr[-2000:]
        result = json.loads(client.stdout.strip().splitlines()[-1])
        assert result["verified"] is True, result
        assert result["messages_delivered"] == 40
    finally:
        server.terminate()
        try:
            server.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


@pytest.mark.parametrize("bind, peer_ip", [("127.0.0.1:0", "ip4"), ("[::1]:0", "ip6")])
def test_loopback_bound_transport_refuses_another_host_at_once(link, bind, peer_ip):
    if peer_ip == "ip6" and not link.has_ipv6:
        pytest.skip("no IPv6 in these namespaces")
    ip = getattr(link, peer_ip)["b"]
    family = socket.AF_INET6 if peer_ip == "ip6" else socket.AF_INET
    with link.inside("a"):
        t = btlcore.Transport(open_device("udp", {"bind": bind}))
    try:
        t0 = time.monotonic()
        with pytest.raises(AddressUnreachable) as info:
            t.connect(_address.encode(family, ip, 7000, 7001))
        assert time.monotonic() - t0 < 1.0
        text = str(info.value)
        assert ip in text and ("127.0.0.1" in text or "::1" in text), text
        assert isinstance(info.value, ValueError)  # the engine drops such a HELLO as malformed
        assert not t.engine.peers_by_addr  # nothing half-made is left behind
    finally:
        t.close(flush=False)


def test_transfer_bound_to_loopback_fails_at_once_with_one_line(link):
    t0 = time.monotonic()
    proc = subprocess.run(
        link.exec_argv("a", *BTL, "transfer", "--backend", "udp", "--bind", "127.0.0.1:0",
                       "--peer", f"{link.ip4['b']}:7000", "--messages", "1", "--timeout", "60"),
        capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert time.monotonic() - t0 < 30  # far less than --timeout: no handshake to wait for
    errors = [line for line in proc.stderr.splitlines() if "127.0.0.1" in line]
    assert errors and link.ip4["b"] in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
