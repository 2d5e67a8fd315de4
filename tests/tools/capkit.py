"""Captures for the dissector, scapy and plot tests: a lossy simulated transfer's pcapng,
every kind of btlcore datagram of both wire versions, and classic pcaps of UDP on any port."""

from __future__ import annotations

import struct
from pathlib import Path

import btlcore
from btlcore.device import hookimpl
from btlcore.protocol import wire
from btlcore_sim import Fabric, LinkModel

#: ports no dissector of tshark's or binding of scapy's claims (checked by the tests)
PORT_A, PORT_B = 47011, 47012


def lossy_transfer(pcap: Path, seed: int = 5, messages: int = 40, trace: Path | None = None,
                   corrupt: float = 0.0, cc: str | None = None) -> Fabric:
    """Messages of 1 to 30 kB from a to b over a 8%-lossy simulated link with a short queue
    (and ``corrupt``), the whole run captured in ``pcap`` (and traced to ``trace`` when given;
    ``cc``: the congestion control, if not the default)."""
    fabric = Fabric(seed=seed, pcap=pcap,
                    default=LinkModel(delay=200e-6, jitter=20e-6, loss=0.08, rate_mbps=1000, queue_limit=100_000,
                                      corrupt=corrupt))
    extra: dict[str, str] = {"trace": str(trace)} if trace is not None else {}
    config = btlcore.Config(cc=cc) if cc is not None else None
    a = btlcore.open("sim", fabric=fabric, name="a", config=config, **extra)
    b = btlcore.open("sim", fabric=fabric, name="b", config=config, **extra)
    got: list[bytes] = []
    b.on(3, lambda peer, tag, data: got.append(bytes(data)))
    peer = a.connect(b.address)
    for i in range(messages):
        a.send(peer, 3, bytes([i % 251]) * (1000 + 700 * i))
    btlcore.run_until([a, b], lambda: len(got) == messages, timeout=60)
    a.close()
    b.close()
    fabric.close()
    return fabric


Frame = tuple[float, str, int, str, int, bytes]  # (time, src ip, sport, dst ip, dport, payload)


def udp_transfer(messages: int = 5, size: int = 4000) -> list[Frame]:
    """What two udp transports on 127.0.0.1 really sent (seen by a frame hook, in order), with
    the ports they sent from and to: each end's priority and data sockets (ACKs and data
    travel between different ports)."""
    sent: list[tuple[object, int, bytes]] = []

    class Tap:
        @hookimpl
        def btl_frame_sent(self, transport: object, channel: int, data: bytes) -> None:
            sent.append((transport, int(channel), bytes(data)))

    a = btlcore.open("udp", bind="127.0.0.1:0", plugins=[Tap()])
    b = btlcore.open("udp", bind="127.0.0.1:0", plugins=[Tap()])
    try:
        got: list[bytes] = []
        b.on(5, lambda p, t, d: got.append(bytes(d)))
        peer = a.connect(b.address)
        for i in range(messages):
            a.send(peer, 5, bytes([i]) * size)
        btlcore.run_until([a, b], lambda: len(got) == messages, timeout=30)
    finally:
        a.close()
        b.close()

    def port(t: object, channel: int) -> int:  # udp address bytes 4:6: priority port, 6:8: data port
        address: bytes = t.address  # type: ignore[attr-defined]
        return int.from_bytes(address[4 + 2 * channel:6 + 2 * channel], "big")

    other = {a: b, b: a}
    return [(i * 1e-4, "127.0.0.1", port(t, ch), "127.0.0.1", port(other[t], ch), raw)
            for i, (t, ch, raw) in enumerate(sent)]


def samples() -> list[tuple[str, bytes]]:
    """One datagram of every type and shape, versions 2 and 1, CRC-sealed."""
    params = wire.TransportParameters(max_datagram_size=1472, max_message_size=1 << 20,
                                      peer_timeout_ms=3000, window_bytes=1 << 33)
    hello = wire.Hello(0xABCD, 17, 1000, 0, 512, b"\x7f\x00\x00\x01\x1b\x58", 200, params)
    hello1 = wire.Hello(0xABCD, 17, 1000, 0, 512, b"\x01\x02", 200)
    ack = wire.ack_payload(300, [(2, 3), (9, 1)], 125, wire.AF_DUPLICATE)
    close = wire.Close(41, 0x5151, wire.CR_DISCONNECT).encode()
    notice = wire.Notice(0x6161, 0xDEADBEEF, wire.T_DATA).encode()
    D = wire.Datagram
    out = [
        ("data", D(wire.T_DATA, wire.F_ACK, 7, 0x11, seq=5000, ack=77, tag=9, payload=b"x" * 100)),
        ("chunk+put", D(wire.T_DATA, 0, 7, 0x11, seq=5001, tag=2, msg_id=3, msg_len=9000, offset=1400,
                        put_key=4, put_offset=1 << 40, payload=b"y" * 64)),
        ("put status", D(wire.T_DATA, wire.F_STATUS, 7, 0x11, seq=5002, payload=wire.put_status_payload(5001, 2))),
        ("ack", D(wire.T_ACK, wire.F_ACK, 7, 0x22, ack=4990, payload=ack)),
        ("hello", D(wire.T_HELLO, 0, 0, 0x33, payload=hello.encode())),
        ("hello_ack", D(wire.T_HELLO_ACK, 0, 17, 0x44, payload=hello.encode())),
        ("close", D(wire.T_CLOSE, 0, 17, 0x44, payload=close)),
        ("close_ack", D(wire.T_CLOSE_ACK, 0, 41, 0x55, payload=close)),
        ("notice", D(wire.T_UNKNOWN_CONN, 0, 17, 0x44, seq=12, payload=notice)),
        ("challenge", D(wire.T_CHALLENGE, 0, 17, 0x44, payload=wire.challenge_payload(0x0102030405060708))),
        ("response", D(wire.T_RESPONSE, 0, 17, 0x44, payload=wire.challenge_payload(0x0102030405060708))),
        ("ping", D(wire.T_PING, wire.F_ACK, 17, 0x44, ack=99, payload=wire.ping_payload())),
        ("v1 data", D(wire.T_DATA, wire.F_ACK, 7, 0x11, seq=6000, ack=1, tag=4, payload=b"z" * 10, version=1)),
        ("v1 ack", D(wire.T_ACK, wire.F_ACK, 7, 0x22, ack=5990, payload=wire.ack_payload(8, [(1, 2)]), version=1)),
        ("v1 hello", D(wire.T_HELLO, 0, 0, 0x33, payload=hello1.encode(), version=1)),
    ]
    items = [(name, dg.encode()) for name, dg in out]
    items.append(("version", wire.version_reply(17, 0x44, (2, 1))))
    return items


def not_btl() -> list[bytes]:
    """UDP payloads the heuristic must leave alone."""
    good = wire.Datagram(wire.T_DATA, 0, 7, 0x11, seq=1, payload=b"abc").encode()
    return [b"hello world, this is not a btlcore datagram at all!!",
            bytes(64), good[:-1], b"\x03" + good[1:], bytes([2, 12]) + good[2:],
            good + b"\x00"]


def write_pcap(path: Path, datagrams: list[tuple[float, str, int, str, int, bytes]], snaplen: int = 262144) -> None:
    """A classic pcap (Ethernet/IPv4/UDP) of (time, src ip, sport, dst ip, dport, payload),
    each frame cut to ``snaplen`` bytes as tcpdump -s does."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1))
        for n, (t, sip, sport, dip, dport, payload) in enumerate(datagrams):
            ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + len(payload), n & 0xFFFF, 0x4000,
                                       64, 17, 0, bytes(map(int, sip.split("."))), bytes(map(int, dip.split(".")))))
            total = sum(struct.unpack("!10H", bytes(ip)))
            while total >> 16:
                total = (total & 0xFFFF) + (total >> 16)
            struct.pack_into("!H", ip, 10, ~total & 0xFFFF)
            frame = (b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + b"\x08\x00" + bytes(ip)
                     + struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload)
            sec = int(t)
            f.write(struct.pack("<IIII", sec, int(round((t - sec) * 1e6)), min(len(frame), snaplen), len(frame)))
            f.write(frame[:snaplen])
