"""The attacker's toolkit: datagrams a hostile sender forges, and the sockets it sends them from.

Run as a script (``python attacker.py PLAN_JSON``) it carries out one attack plan in its own
process, so that its allocations never count against the victim's memory, and prints one
JSON line: what it sent and what came back to it.  The tests in this folder start it through
``victim.run_attack``.

The codec is imported here and nowhere else in this folder (``btlcore.protocol.wire`` once the
core is split into rooms, ``btlcore.wire`` before).  CLOSE and the "unknown connection" notice
(issue #11) are built through :func:`typed`, which takes the type byte and the body, with the
codec's ``Close`` and ``Notice`` bodies where it has them: their tests need only the codec to
name the types (``T_CLOSE``, ``T_UNKNOWN_CONN``).
"""

from __future__ import annotations

import importlib
import json
import os
import random
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any


def _codec() -> ModuleType:
    for name in ("btlcore.protocol.wire", "btlcore.wire"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("no btlcore codec: neither btlcore.protocol.wire nor btlcore.wire")


wire = _codec()

#: the udp address format (backends/udp/btlcore_udp/_address.py): magic, version, family,
#: reserved, priority port, data port, IPv4 address
_UDP_ADDRESS = struct.Struct("!BBBBHH4s")
U32 = (1 << 32) - 1

# ----------------------------------------------------------------- addresses


def udp_address(ip: str, priority_port: int) -> bytes:
    """A udp device's address bytes for IPv4 ``ip`` (data channel on PORT + 1)."""
    return _UDP_ADDRESS.pack(0x55, 1, 4, 0, priority_port, priority_port + 1, socket.inet_aton(ip))


def udp_sockaddrs(address: bytes) -> tuple[tuple[str, int], tuple[str, int]]:
    """(priority, data) socket addresses of an IPv4 udp device address."""
    magic, _v, family, _r, pport, dport, ip = _UDP_ADDRESS.unpack(address[:_UDP_ADDRESS.size])
    if magic != 0x55 or family != 4:
        raise ValueError(f"not an IPv4 udp address: {address.hex()}")
    host = socket.inet_ntoa(ip)
    return (host, pport), (host, dport)


def fresh_incarnation() -> int:
    """An incarnation newer than any live transport's (they are the clock in 1/1024 s): what
    a restarted peer would send."""
    return ((int(time.time() * 1024) + 50_000) & U32) or 1


# ----------------------------------------------------------------- datagrams


def seal(buf: bytearray) -> bytes:
    """A finished datagram with a correct CRC32C (what makes a forgery pass the CRC check)."""
    wire.seal(buf)
    return bytes(buf)


def header(typ: int, *, flags: int = 0, hello_flags: int = 0, dst_conn: int = 0, incarnation: int = 0,
           seq: int = 0, ack: int = 0, tag: int = 0, payload_len: int = 0) -> bytearray:
    return bytearray(wire.HEADER.pack(wire.WIRE_VERSION, typ, flags, hello_flags, dst_conn & U32,
                                      incarnation & U32, 0, seq & wire.SEQ_MASK, ack & wire.SEQ_MASK,
                                      tag & 0xFFFF, payload_len & 0xFFFF))


def forged_chunk(*, dst_conn: int, incarnation: int, seq: int, msg_id: int, msg_len: int, offset: int,
                 payload: bytes, tag: int = 1) -> bytes:
    """A data segment of a chunked message whose header claims ``msg_len`` bytes."""
    buf = header(wire.T_DATA, flags=wire.F_CHUNK, dst_conn=dst_conn, incarnation=incarnation, seq=seq,
                 tag=tag, payload_len=len(payload))
    buf += wire.CHUNK.pack(msg_id & U32, msg_len & U32, offset & U32) + payload
    return seal(buf)


def forged_hello(*, address: bytes, incarnation: int, conn_id: int, isn: int, window: int = 4096,
                 dst_conn: int = 0, typ: int | None = None) -> bytes:
    """A HELLO (or HELLO_ACK) that says it comes from ``address`` in life ``incarnation``: a
    well-formed one of version 2 (transport parameters, padded as the protocol asks, so that
    the victim takes it and would answer it)."""
    body = wire.Hello(incarnation, conn_id, isn, 0, window, address, 0, wire.TransportParameters()).encode()
    body += wire.padding_param(200)
    buf = header(wire.T_HELLO if typ is None else typ, dst_conn=dst_conn, incarnation=incarnation,
                 payload_len=len(body))
    return seal(buf + body)


def typed(type_byte: int, body: bytes, *, dst_conn: int = 0, incarnation: int = 0, flags: int = 0) -> bytes:
    """Any datagram type with ``body`` after the header: CLOSE and the "unknown connection"
    notice are built with this until the codec gives them builders of their own."""
    return seal(header(type_byte, flags=flags, dst_conn=dst_conn, incarnation=incarnation,
                       payload_len=len(body)) + body)


def forged_close(*, dst_conn: int, incarnation: int, conn_id: int, echo_incarnation: int) -> bytes:
    """A CLOSE for the connection ``dst_conn`` of a receiver in life ``echo_incarnation``,
    from ``conn_id`` in life ``incarnation`` (needs ``wire.T_CLOSE``; the body is the codec's
    ``Close`` where it has one)."""
    if hasattr(wire, "Close"):
        body = wire.Close(conn_id & U32, echo_incarnation & U32).encode()
    else:
        body = struct.pack("!II4x", conn_id & U32, echo_incarnation & U32)
    return typed(wire.T_CLOSE, body, dst_conn=dst_conn, incarnation=incarnation)


#: the codec's name for the "unknown connection" notice type (#11 named it T_UNKNOWN_CONN)
NOTICE_TYPES = ("T_UNKNOWN_CONN", "T_NOTICE")


def notice_type() -> int | None:
    for name in NOTICE_TYPES:
        if hasattr(wire, name):
            return int(getattr(wire, name))
    return None


def forged_notice(*, dst_conn: int, incarnation: int, seq: int, echo_incarnation: int, echo_digest: int,
                  echo_type: int = 1) -> bytes:
    """An "unknown connection" notice claiming to answer a datagram that was sent to
    ``dst_conn`` by the life ``echo_incarnation``, with CRC ``echo_digest`` (needs a notice
    type in the codec; the body is its ``Notice`` where it has one)."""
    typ = notice_type()
    if typ is None:
        raise RuntimeError(f"the codec has no notice type (none of {', '.join(NOTICE_TYPES)})")
    if hasattr(wire, "Notice"):
        body = wire.Notice(echo_incarnation & U32, echo_digest & U32, echo_type).encode()
    else:
        body = struct.pack("!IIB3x", echo_incarnation & U32, echo_digest & U32, echo_type)
    buf = header(typ, dst_conn=dst_conn, incarnation=incarnation, seq=seq, payload_len=len(body))
    return seal(buf + body)


def has_types(*names: str) -> bool:
    """True when the codec defines every named type constant (``"T_CLOSE"``...)."""
    return all(hasattr(wire, name) for name in names)


def random_bytes(rng: random.Random, max_len: int = 1472) -> bytes:
    return rng.randbytes(rng.randrange(0, max_len + 1))


def random_header(rng: random.Random, max_payload: int = 1400) -> bytes:
    """A datagram that passes the first checks (version, a known type, a correct CRC) with every
    other field random: connection ids, sequence numbers, lengths, chunk extensions."""
    typ = rng.choice((wire.T_DATA, wire.T_DATA, wire.T_ACK, wire.T_HELLO, wire.T_HELLO_ACK))
    flags = rng.randrange(0, 0x20) & ~wire.F_CRC
    ext = b""
    if flags & wire.F_CHUNK:
        ext += wire.CHUNK.pack(rng.getrandbits(32), rng.getrandbits(32), rng.getrandbits(32))
    if flags & wire.F_PUT:
        ext += wire.PUT.pack(rng.getrandbits(32), rng.getrandbits(64))
    payload = rng.randbytes(rng.randrange(0, max_payload))
    plen = len(payload) if rng.random() < 0.8 else rng.getrandbits(16)
    buf = header(typ, flags=flags, hello_flags=rng.getrandbits(8) & 1, dst_conn=rng.getrandbits(32),
                 incarnation=rng.getrandbits(32), seq=rng.getrandbits(64), ack=rng.getrandbits(64),
                 tag=rng.getrandbits(16), payload_len=plen)
    return seal(buf + ext + payload)


def mutate(rng: random.Random, datagram: bytes) -> bytes:
    """A real datagram, changed as a fuzzer would: bits flipped, cut short, a field (type,
    flags, lengths, chunk claims) set at random; re-sealed most of the time, so that the
    change reaches past the CRC check."""
    buf = bytearray(datagram)
    for _ in range(rng.randrange(1, 4)):
        what = rng.randrange(6)
        if what == 0 and buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif what == 1 and buf:
            del buf[rng.randrange(len(buf)):]
        elif what == 2 and len(buf) > 2:
            buf[1] = rng.randrange(256) if rng.random() < 0.2 else rng.randrange(1, 8)
        elif what == 3 and len(buf) > 2:
            buf[2] = rng.randrange(0x20)
        elif what == 4 and len(buf) >= wire.HEADER_LEN:
            struct.pack_into("!H", buf, wire.HEADER_LEN - 2, rng.getrandbits(16))
        elif len(buf) >= wire.HEADER_LEN + wire.CHUNK_LEN:  # a chunk's claims
            struct.pack_into("!I", buf, wire.HEADER_LEN + 4 * rng.randrange(3), rng.getrandbits(32))
    if len(buf) >= wire.HEADER_LEN and rng.random() < 0.9:
        return seal(buf)
    return bytes(buf)


def parse(datagram: bytes) -> Any:
    """The decoded datagram (``wire.Datagram``), or None if it is not well formed."""
    try:
        return wire.decode(datagram)
    except wire.MalformedDatagram:
        return None


# ----------------------------------------------------------------- senders


class UdpSender:
    """Sends from the attacker's own socket(s): what any host can do."""

    __slots__ = ("socks", "sent", "bytes_sent")

    def __init__(self, count: int = 1) -> None:
        self.socks = []
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
            self.socks.append(s)
        self.sent = 0
        self.bytes_sent = 0

    def send(self, datagram: bytes, dest: tuple[str, int], index: int = 0) -> None:
        try:
            self.socks[index].sendto(datagram, dest)
        except BlockingIOError:  # our own send buffer is full: let the kernel drain it
            time.sleep(0.0005)
            self.socks[index].sendto(datagram, dest)
        except ConnectionRefusedError:  # (an ICMP from an earlier send, reported late)
            return
        self.sent += 1
        self.bytes_sent += len(datagram)

    def replies(self) -> tuple[int, int, int]:
        """(datagrams, bytes, largest) that came back to our sockets, read now."""
        n = total = largest = 0
        for s in self.socks:
            while True:
                try:
                    data = s.recv(65535)
                except (BlockingIOError, ConnectionRefusedError):
                    break
                n += 1
                total += len(data)
                largest = max(largest, len(data))
        return n, total, largest

    def close(self) -> None:
        for s in self.socks:
            s.close()


def raw_available() -> str | None:
    """None if this process may spoof source addresses (a raw IPv4 socket), else why not."""
    if os.geteuid() != 0:
        return "spoofing a source address needs root (a raw socket with IP_HDRINCL)"
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW).close()
    except OSError as exc:
        return f"no raw IPv4 socket here: {exc}"
    return None


_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")


class SpoofingSender:
    """Sends UDP datagrams over IPv4 with any source ip:port (a raw socket, IP_HDRINCL; the
    kernel fills the IP checksum and id; the UDP checksum is left 0, which IPv4 allows)."""

    __slots__ = ("sock", "sent", "bytes_sent")

    def __init__(self) -> None:
        reason = raw_available()
        if reason is not None:
            raise PermissionError(reason)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_HDRINCL, 1)
        self.sent = 0
        self.bytes_sent = 0

    def send(self, datagram: bytes, dest: tuple[str, int], source: tuple[str, int]) -> None:
        udp_len = _UDP.size + len(datagram)
        ip = _IPV4.pack(0x45, 0, _IPV4.size + udp_len, 0, 0x4000, 64, socket.IPPROTO_UDP, 0,
                        socket.inet_aton(source[0]), socket.inet_aton(dest[0]))
        self.sock.sendto(ip + _UDP.pack(source[1], dest[1], udp_len, 0) + datagram, (dest[0], 0))
        self.sent += 1
        self.bytes_sent += len(datagram)

    def close(self) -> None:
        self.sock.close()


# ----------------------------------------------------------------- attack plans

Plan = dict[str, Any]


def _flood(plan: Plan, make: Callable[[random.Random, int], bytes]) -> dict[str, Any]:
    """``count`` datagrams from ``make(rng, i)``, spread over the target's two channels, from
    ``sockets`` sockets opened ``batch`` at a time (so that a flood from 1,000 sources needs no
    more than ``batch`` descriptors), paced by ``burst`` with a pause of ``pause`` seconds."""
    rng = random.Random(plan.get("seed", 0))
    targets = udp_sockaddrs(bytes.fromhex(plan["target"]))
    count, sockets = int(plan["count"]), int(plan.get("sockets", 1))
    batch = min(sockets, int(plan.get("batch", 100)))
    burst, pause = int(plan.get("burst", 2000)), float(plan.get("pause", 0.002))
    per_socket = -(-count // sockets)
    sent = nbytes = replies = reply_bytes = largest = 0
    i = 0
    while i < count:
        sender = UdpSender(batch)
        try:
            for j in range(batch * per_socket):
                if i >= count:
                    break
                sender.send(make(rng, i), targets[i & 1], j % batch)
                i += 1
                if i % burst == 0:
                    time.sleep(pause)
            time.sleep(float(plan.get("linger", 0.0)))
            got = sender.replies()
        finally:
            sender.close()
        sent, nbytes = sent + sender.sent, nbytes + sender.bytes_sent
        replies, reply_bytes, largest = replies + got[0], reply_bytes + got[1], max(largest, got[2])
    return {"sent": sent, "bytes": nbytes, "replies": replies, "reply_bytes": reply_bytes,
            "largest_reply": largest}


def _captured(plan: Plan) -> list[bytes]:
    with open(plan["captured"], "rb") as f:
        blob = f.read()
    out, pos = [], 0
    while pos < len(blob):
        (n,) = struct.unpack_from("!I", blob, pos)
        out.append(blob[pos + 4:pos + 4 + n])
        pos += 4 + n
    return out


def attack_random(plan: Plan) -> dict[str, Any]:
    """Random bytes and random-field headers, half and half."""
    def make(rng: random.Random, i: int) -> bytes:
        return random_bytes(rng) if i & 2 else random_header(rng)
    return _flood(plan, make)


def attack_fuzz(plan: Plan) -> dict[str, Any]:
    """Mutations of real captured datagrams, with a random or random-field one now and then."""
    real = _captured(plan)

    def make(rng: random.Random, i: int) -> bytes:
        roll = rng.random()
        if roll < 0.05:
            return random_bytes(rng)
        if roll < 0.1:
            return random_header(rng)
        return mutate(rng, rng.choice(real))
    return _flood(plan, make)


def attack_unknown_sources(plan: Plan) -> dict[str, Any]:
    """Datagrams for connections the target does not have, from many sockets."""
    def make(rng: random.Random, i: int) -> bytes:
        roll = i % 4
        if roll == 0:
            return random_bytes(rng, 200)
        if roll == 1:
            return typed(wire.T_ACK, wire.ack_payload(64, []), dst_conn=rng.getrandbits(32),
                         incarnation=rng.getrandbits(32) or 1)
        if roll == 2:
            return forged_hello(address=udp_address("127.0.0.1", 9), incarnation=rng.getrandbits(32) or 1,
                                conn_id=rng.getrandbits(32) or 1, isn=rng.getrandbits(62),
                                dst_conn=rng.getrandbits(32), typ=wire.T_HELLO_ACK)
        return forged_chunk(dst_conn=rng.getrandbits(32), incarnation=rng.getrandbits(32) or 1,
                            seq=rng.getrandbits(64), msg_id=i, msg_len=64 << 20, offset=1 << 20,
                            payload=rng.randbytes(100))
    return _flood(plan, make)


def attack_hello_reflection(plan: Plan) -> dict[str, Any]:
    """HELLOs that name someone else's address (``witness``), each from its own socket."""
    witness = bytes.fromhex(plan["witness"])

    def make(rng: random.Random, i: int) -> bytes:
        return forged_hello(address=witness, incarnation=fresh_incarnation() + i, conn_id=rng.getrandbits(32) or 1,
                            isn=rng.getrandbits(62))
    return _flood(plan, make)


def _spoof_or_send(plan: Plan, datagrams: list[bytes], channel: int) -> dict[str, Any]:
    """Send ``datagrams`` to the target's ``channel``: from our own socket, or (``spoof``) with
    the live peer's address on that channel as the source."""
    dest = udp_sockaddrs(bytes.fromhex(plan["target"]))[channel]
    if plan.get("spoof"):
        source = udp_sockaddrs(bytes.fromhex(plan["peer"]))[channel]
        raw = SpoofingSender()
        try:
            for d in datagrams:
                raw.send(d, dest, source)
        finally:
            raw.close()
        return {"sent": raw.sent, "bytes": raw.bytes_sent, "replies": 0, "reply_bytes": 0, "largest_reply": 0}
    sender = UdpSender()
    try:
        for d in datagrams:
            sender.send(d, dest)
        time.sleep(float(plan.get("linger", 0.0)))
        got = sender.replies()
    finally:
        sender.close()
    return {"sent": sender.sent, "bytes": sender.bytes_sent, "replies": got[0], "reply_bytes": got[1],
            "largest_reply": got[2]}


def attack_huge_chunks(plan: Plan) -> dict[str, Any]:
    """Chunks of 1 KB, each claiming a ``claim``-byte message, in the receive window of the
    connection whose ids the plan names (learned from a captured datagram, or guessed)."""
    rng = random.Random(plan.get("seed", 0))
    claim = int(plan.get("claim", 64 << 20))
    datagrams = [forged_chunk(dst_conn=int(plan["dst_conn"]), incarnation=int(plan["incarnation"]),
                              seq=int(plan["seq"]) + i, msg_id=0x7000_0000 + i, msg_len=claim,
                              offset=claim // 2, payload=rng.randbytes(1024))
                 for i in range(int(plan["count"]))]
    return _spoof_or_send(plan, datagrams, 1)


def attack_hello(plan: Plan) -> dict[str, Any]:
    """A HELLO carrying the live peer's address and a new incarnation."""
    rng = random.Random(plan.get("seed", 0))
    hello = forged_hello(address=bytes.fromhex(plan["peer"]), incarnation=fresh_incarnation(),
                         conn_id=rng.getrandbits(32) or 1, isn=rng.getrandbits(62))
    return _spoof_or_send(plan, [hello] * int(plan.get("count", 1)), 0)


def attack_close(plan: Plan) -> dict[str, Any]:
    """CLOSEs (``kind`` "close") or notices ("notice") aimed at the target's connection with
    ``peer``: every field an off-path sender can know or predict is right (addresses, the
    incarnations: they are clocks), the random ones (connection ids, the digest) are guessed
    -- or, for CLOSE with ``dst_conn`` and ``conn_id`` in the plan, learned (all right)."""
    rng = random.Random(plan.get("seed", 0))
    count = int(plan.get("count", 3))
    if plan["kind"] == "close" and "dst_conn" in plan:
        # "learned": every id right (an observer of both directions knows them all), a
        # CLOSE and a CLOSE_ACK of each; only the source is wrong (unless spoofed)
        datagrams = [typed(typ, wire.Close(int(plan["conn_id"]), int(plan["echo_incarnation"])).encode(),
                           dst_conn=int(plan["dst_conn"]), incarnation=int(plan["incarnation"]))
                     for _ in range(count) for typ in (wire.T_CLOSE, wire.T_CLOSE_ACK)]
    elif plan["kind"] == "close":
        datagrams = [forged_close(dst_conn=rng.getrandbits(32), incarnation=int(plan["incarnation"]),
                                  conn_id=rng.getrandbits(32), echo_incarnation=int(plan["echo_incarnation"]))
                     for _ in range(count)]
    else:
        datagrams = [forged_notice(dst_conn=rng.getrandbits(32), incarnation=int(plan["incarnation"]),
                                   seq=rng.getrandbits(64), echo_incarnation=int(plan["echo_incarnation"]),
                                   echo_digest=rng.getrandbits(32), echo_type=rng.choice((1, 2)))
                     for _ in range(count)]
    return _spoof_or_send(plan, datagrams, 0)


ATTACKS: dict[str, Callable[[Plan], dict[str, Any]]] = {
    "random": attack_random, "fuzz": attack_fuzz, "unknown_sources": attack_unknown_sources,
    "hello_reflection": attack_hello_reflection, "huge_chunks": attack_huge_chunks,
    "hello": attack_hello, "close": attack_close, "notice": attack_close,
}


def frames(blob: Iterator[bytes]) -> bytes:
    """Datagrams as one blob of length-prefixed frames (what ``plan["captured"]`` names)."""
    return b"".join(struct.pack("!I", len(d)) + d for d in blob)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: attacker.py PLAN_JSON (kind one of {', '.join(sorted(ATTACKS))})", file=sys.stderr)
        return 2
    plan = json.loads(argv[0])
    if plan.get("kind") not in ATTACKS:
        print(f"unknown attack {plan.get('kind')!r}: allowed are {', '.join(sorted(ATTACKS))}", file=sys.stderr)
        return 2
    if float(plan.get("delay", 0)):
        time.sleep(float(plan["delay"]))
    result = ATTACKS[plan["kind"]](plan)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
