"""Addresses people can type (#13 item 2): each backend's text form round-trips through its
hooks, hex is taken everywhere, bad text is refused naming the forms, and Transport.connect
takes the text."""

from __future__ import annotations

import socket

import pytest

import btlcore
from btlcore_sim import plugin as sim
from btlcore_udp import _address as udp_address
from btlcore_udp import plugin as udp
from btlcore_verbs import _address as verbs_address
from btlcore_verbs import plugin as verbs


@pytest.mark.parametrize("family, ip, pport, dport, text", [
    (socket.AF_INET, "10.1.2.3", 7000, 7001, "10.1.2.3:7000"),
    (socket.AF_INET6, "fd00::5", 7000, 7001, "[fd00::5]:7000"),
    (socket.AF_INET, "10.1.2.3", 7000, 9000, "udp://10.1.2.3:7000+9000"),  # the data port set apart
])
def test_udp_text_round_trips(family: int, ip: str, pport: int, dport: int, text: str) -> None:
    raw = udp_address.encode(family, ip, pport, dport)
    assert udp.btl_address_text(raw) == text
    assert udp.btl_address_parse(text) == raw
    assert udp.btl_address_parse(raw.hex()) == raw


def test_sim_and_verbs_text_round_trip() -> None:
    raw = sim.node_address(5)
    assert sim.btl_address_text(raw) == "sim:5"
    assert sim.btl_address_parse("sim:5") == sim.btl_address_parse("02:00:00:00:00:05") == raw
    assert sim.btl_address_parse(raw.hex()) == raw
    gid = bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1])
    blob = verbs_address.VerbsAddress(0, gid, 0x1111, 17, 18, 4096).encode()
    assert verbs.btl_address_text(blob) == "verbs:[::ffff:10.0.0.1]:17+18:0x1111:0:4096"
    assert verbs.btl_address_parse(verbs.btl_address_text(blob)) == blob
    assert verbs.btl_address_parse(blob.hex()) == blob


@pytest.mark.parametrize("parse, text", [
    (udp.btl_address_parse, "10.1.2.3"), (udp.btl_address_parse, "udp://10.1.2.3:7000+x"),
    (sim.btl_address_parse, "sim:0"), (sim.btl_address_parse, "sim:x"),
    (verbs.btl_address_parse, "verbs:[::1]:1+2"),
])
def test_bad_text_is_refused_naming_the_forms(parse: object, text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse(text)  # type: ignore[operator]
    assert any(form in str(info.value) for form in ("HOST:PORT", "sim:N", "verbs:[GID]")), info.value


@pytest.mark.parametrize("backend", ["udp", "sim"])
def test_transport_address_text_connects(backend: str) -> None:
    with btlcore.open(backend) as a, btlcore.open(backend) as b:
        peer = a.connect(b.address_text)
        assert peer.address == b.address and a.connect(b.address) is peer
        got: list[bytes] = []
        b.on(1, lambda p, tag, data: got.append(bytes(data)))
        a.send(peer, 1, b"typed")
        btlcore.run_until([a, b], lambda: got == [b"typed"], timeout=10)
