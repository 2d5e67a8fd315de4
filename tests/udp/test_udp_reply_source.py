"""On udp, a HELLO_ACK goes to the socket the HELLO came from (its observed source), never to
the address written inside the HELLO: a stranger cannot aim our replies at another host."""

from __future__ import annotations

import socket
import time

import btlcore
from btlcore.protocol.wire import (
    T_HELLO,
    T_HELLO_ACK,
    Datagram,
    Hello,
    TransportParameters,
    decode,
    padding_param,
)
from btlcore_udp import _address


def _socket() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.05)
    return s


def test_hello_ack_goes_to_the_source_not_to_the_address_inside() -> None:
    server = btlcore.open("udp", bind="127.0.0.1:0")
    sender, victim_prio, victim_data = _socket(), _socket(), _socket()
    try:
        inside = _address.encode(socket.AF_INET, "127.0.0.1", victim_prio.getsockname()[1],
                                 victim_data.getsockname()[1])
        body = Hello(0x1234_5678, 0x0BAD_CAFE, 1 << 40, 0, 64, inside, 1000,
                     TransportParameters()).encode()
        body += padding_param(200)  # no smaller than the HELLO_ACK it provokes
        hello = Datagram(T_HELLO, dst_conn=0x0BAD_CAFE, src_incarnation=0x1234_5678,
                         payload=body).encode()
        prio = server.device.device.local_sockaddrs[0]
        sender.sendto(hello, prio)
        got: list[bytes] = []
        deadline = time.monotonic() + 5.0
        while not got and time.monotonic() < deadline:
            server.progress(timeout=0.05)
            try:
                got.append(sender.recv(65536))
            except TimeoutError:
                pass
        assert got, "no HELLO_ACK came back to the HELLO's source"
        reply = decode(got[0])
        assert reply.type == T_HELLO_ACK and reply.dst_conn == 0x0BAD_CAFE
        assert len(got[0]) <= len(hello)
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            server.progress(timeout=0.02)
        for victim in (victim_prio, victim_data):
            try:
                data = victim.recv(65536)
            except TimeoutError:
                continue
            raise AssertionError(f"the address inside the HELLO got a datagram: {data[:8].hex()}")
    finally:
        server.close()
        for s in (sender, victim_prio, victim_data):
            s.close()
