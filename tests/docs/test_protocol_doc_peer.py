"""A peer written from docs/protocol.md alone (struct and the crc32c package; nothing of
btlcore.protocol.wire) interoperates with btlcore's engine, in memory and over real UDP: the page
says enough to build a compatible peer."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

import btlcore
from btlcore.config import Config


class DocPeer:
    """A peer written from docs/protocol.md alone (struct and the crc32c package; nothing of
    btlcore.protocol.wire): it answers the handshake, reassembles chunks, acknowledges with SACK
    ranges, and sends a message of its own.  If btlcore's engine talks to it, the page says
    enough to build a compatible peer."""

    HDR = "!BBBBIIIQQHH"

    def __init__(self, address: bytes, drop_seqs: set[int]) -> None:
        self.address = address
        self.inc = 0x0BADCAFE
        self.conn = 0x00C0FFEE
        self.isn = 5_000
        self.next_seq = self.isn + 1
        self.drop = set(drop_seqs)  # arrival order indexes to lose ("the network")
        self.arrivals = 0
        self.remote: dict[str, int] = {}
        self.cum = 0
        self.received: set[int] = set()
        self.chunks: dict[int, dict[int, bytes]] = {}
        self.messages: list[tuple[int, bytes]] = []
        self.data_acked = False
        self.max_ack_delay = 0  # µs: this peer ACKs every segment at once

    @staticmethod
    def seal(buf: bytearray) -> bytes:
        import crc32c as c32

        buf[2] |= 0x08
        crc = c32.crc32c(bytes(buf[16:]), c32.crc32c(bytes(buf[:12])))
        struct.pack_into("!I", buf, 12, crc)
        return bytes(buf)

    def header(self, typ: int, flags: int, seq: int, ack: int, tag: int, plen: int) -> bytearray:
        return bytearray(struct.pack(self.HDR, 2, typ, flags, 0, self.remote["conn"], self.inc, 0,
                                     seq, ack, tag, plen))

    def ack(self) -> bytes:
        above = sorted(s for s in self.received if s > self.cum)
        ranges: list[list[int]] = []
        for s in above:
            if ranges and s == ranges[-1][1] + 1:
                ranges[-1][1] = s
            else:
                ranges.append([s, s])
        body = struct.pack("!IBB2xI", 64, len(ranges), 0, 0)
        body += b"".join(struct.pack("!II", lo - self.cum, hi - lo + 1) for lo, hi in ranges)
        return self.seal(self.header(2, 0x01, 0, self.cum, 0, len(body)) + body)

    def receive(self, dg: bytes) -> list[bytes]:
        import crc32c as c32

        version, typ, flags, _r, dst, inc, crc, seq, ack, tag, plen = struct.unpack_from(self.HDR, dg)
        assert version == 2 and flags & 0x08
        assert crc == c32.crc32c(dg[16:], c32.crc32c(dg[:12])), "CRC rule of protocol.md §2"
        if typ == 3:  # HELLO: record the remote, answer with HELLO_ACK
            r_inc, r_conn, r_isn, echo, window, r_delay, alen = struct.unpack_from("!IIQIIIH", dg, 36)
            assert r_inc == inc and len(dg) >= 66 + alen
            params, pos = {}, 66 + alen  # the transport parameter block (§1.7): type, length, value
            while pos < len(dg):
                ptype, plen_ = struct.unpack_from("!HH", dg, pos)
                params[ptype] = int.from_bytes(dg[pos + 4:pos + 4 + plen_], "big")
                pos += 4 + plen_
            self.remote = {"inc": r_inc, "conn": r_conn, "isn": r_isn, "addr": alen, "max_ack_delay": r_delay,
                           "max_datagram": params[1], "max_message": params[2]}
            self.cum = r_isn
            body = struct.pack("!IIQIIIH", self.inc, self.conn, self.isn, r_inc, 64, self.max_ack_delay,
                               len(self.address))
            body += self.address
            reply = self.header(4, 0, 0, 0, 0, len(body))
            reply[3] = 0x01  # hello_flags HF_CRC_REQUIRED (§2): it checks a CRC on everything
            return [self.seal(reply + body)]
        assert dst == self.conn and inc == self.remote["inc"]
        if typ == 2:  # ACK
            if ack == self.next_seq - 1 and self.next_seq > self.isn + 1:
                self.data_acked = True
            return []
        assert typ == 1
        if flags & 0x01 and ack == self.next_seq - 1 and self.next_seq > self.isn + 1:
            self.data_acked = True
        self.arrivals += 1
        if self.arrivals in self.drop:
            return []  # lost on the way
        if seq in self.received or seq <= self.cum:
            return [self.ack()]
        self.received.add(seq)
        while self.cum + 1 in self.received:
            self.cum += 1
        pos = 36
        if flags & 0x02:
            msg_id, msg_len, off = struct.unpack_from("!III", dg, 36)
            pos += 12
            parts = self.chunks.setdefault(msg_id, {})
            parts[off] = dg[pos:]
            if sum(len(p) for p in parts.values()) == msg_len:
                self.messages.append((tag, b"".join(parts[o] for o in sorted(parts))))
        else:
            self.messages.append((tag, dg[pos:]))
        return [self.ack()]

    def data(self, tag: int, payload: bytes) -> bytes:
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        return self.seal(self.header(1, 0x01, seq, self.cum, tag, len(payload)) + payload)


def test_a_peer_written_from_protocol_md_interoperates() -> None:
    from btlcore.protocol.engine import Engine
    from btlcore.protocol.events import MessageReceived, SendCompleted

    e = Engine(Config(), address=b"E", resolve=lambda a: bytes(a), data_mtu=1500, priority_mtu=768,
               crc=True, rng=random.Random(9), now=0.0)
    doc = DocPeer(b"D", drop_seqs={2})  # loses the second DATA segment: SACK + retransmission
    peer = e.connect(b"D", 0.0)
    big = bytes(range(256)) * 20  # 5120 bytes: four chunks at this MTU
    done: list[Any] = []
    e.send(peer, 9, big, done.append, 0.0)
    e.send(peer, 10, b"small", done.append, 0.0)
    got: list[tuple[int, bytes]] = []
    now = 0.0
    sent_own = False
    for _ in range(2000):
        replies = []
        for _, dest, buf in e.datagrams_to_send(now):
            assert dest == b"D"
            replies += doc.receive(bytes(buf))
        if peer.state.value == "established" and not sent_own:
            replies.append(doc.data(11, b"from the doc peer"))
            sent_own = True
        now += 0.0005
        for r in replies:
            e.receive_datagram(r, None, now)
        t = e.next_deadline()
        if t is not None and t <= now:
            e.handle_timer(now)
        for ev in e.take_events():
            if type(ev) is SendCompleted:
                ev.callback(ev.error)
            elif type(ev) is MessageReceived:
                got.append((ev.tag, bytes(ev.data)))
        if len(done) == 2 and got and doc.data_acked:
            break
    assert done == [None, None]
    assert sorted(doc.messages) == [(9, big), (10, b"small")]  # the doc peer delivers unordered
    assert got == [(11, b"from the doc peer")]
    assert doc.data_acked  # the engine acknowledged the doc peer's segment
    # each side's HELLO advertised its ACK delay (µs); the engine's RTO adds the doc peer's
    assert doc.remote["max_ack_delay"] == round(Config().ack_delay * 1e6)
    # and its limits (transport parameters): its largest datagram and message
    assert (doc.remote["max_datagram"], doc.remote["max_message"]) == (1500, Config().max_message_size)
    assert peer.timer.max_ack_delay == doc.max_ack_delay == 0
    assert e.stats()["num_resends"] >= 1


def test_a_peer_written_from_protocol_md_interoperates_over_udp(clean_env: Any) -> None:
    """The same doc-written peer on a real UDP socket (its address in the udp backend's
    documented format, backends/udp/btlcore_udp/_address.py), against a btlcore transport on `udp`."""
    import socket
    import time

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.bind(("127.0.0.1", 0))
    except OSError as exc:  # pragma: no cover - no loopback here
        pytest.skip(f"no UDP loopback: {exc}")
    sock.setblocking(False)
    port = sock.getsockname()[1]
    # magic 'U', version 1, family 4, reserved, priority port, data port, IPv4
    address = struct.pack("!BBBBHH", 0x55, 1, 4, 0, port, port) + socket.inet_aton("127.0.0.1")
    doc = DocPeer(address, drop_seqs={3})
    t = btlcore.open("udp")
    try:
        peer = t.connect(address)
        big = bytes(range(256)) * 300  # 76800 bytes: chunked at any UDP MTU
        done: list[Any] = []
        got: list[bytes] = []
        t.on(11, lambda p, tag, data: got.append(bytes(data)))
        t.send(peer, 9, big, done.append)
        sent_own = False
        deadline = time.monotonic() + 20
        while not (done and got and doc.data_acked) and time.monotonic() < deadline:
            t.progress(timeout=0.001)
            while True:
                try:
                    dg, src = sock.recvfrom(65536)
                except BlockingIOError:
                    break
                for reply in doc.receive(dg):
                    sock.sendto(reply, src)
            if doc.remote and peer.state.value == "established" and not sent_own:
                hello_addr = t.address
                ip = socket.inet_ntoa(hello_addr[8:12])
                data_port = struct.unpack_from("!H", hello_addr, 6)[0]
                sock.sendto(doc.data(11, b"over udp"), (ip, data_port))
                sent_own = True
        assert done == [None]
        assert doc.messages == [(9, big)]
        assert got == [b"over udp"] and doc.data_acked
        assert doc.remote["max_ack_delay"] == round(t.config.ack_delay * 1e6)
    finally:
        t.close(flush=False)
        sock.close()
