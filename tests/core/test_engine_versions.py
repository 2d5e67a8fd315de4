"""Version negotiation and where handshake replies go: a datagram of another version gets a
VERSION reply at its observed source (rate-limited, never to a VERSION reply); a VERSION
reply to our HELLO that does not list our version fails that peer at once (VersionMismatch);
a HELLO_ACK goes to the HELLO's observed source, never to the address written inside it."""

from __future__ import annotations

from btlcore import Config, VersionMismatch
from btlcore.errors import PeerUnreachable
from btlcore.protocol.events import PeerFailed
from btlcore.protocol.peers import PeerState
from btlcore.protocol.wire import (
    T_HELLO,
    T_HELLO_ACK,
    T_VERSION,
    VERSION_NEGOTIATION,
    WIRE_VERSION,
    decode,
    parse_version_reply,
    seal,
    version_reply,
)
from btlcore.testing.enginepair import EngineNet, EnginePair


def _first_hello(p: EngineNet, src: int) -> bytes:
    return [d for _t, s, _d, d in p.log if s == src and d[1] == T_HELLO][0]


def test_a_version_reply_without_our_version_fails_the_peer_at_once() -> None:
    p = EnginePair(Config(handshake_timeout=30.0))
    p.faults.drop(type=T_HELLO, src=0)  # b never hears us: it "speaks 3"
    p.send(0, 1, 1, b"first", key="m1")
    p.send(0, 1, 2, b"second", key="m2")
    p.run(lambda: bool(p.sent(src=0, type=T_HELLO)), max_time=1)
    hello = decode(_first_hello(p, 0))
    assert hello.dst_conn == p.pa.local_conn  # a first HELLO names our own connection
    p.a.receive_datagram(version_reply(hello.dst_conn, hello.src_incarnation, (3, 4)), b"B", p.now)
    p.run(lambda: bool(p.completions["m2"]), max_time=p.now + 0.01)  # at once, not at a timeout
    err = p.completions["m1"][0]
    assert isinstance(err, VersionMismatch) and isinstance(err, PeerUnreachable)
    assert "version 3, 4" in str(err) and f"version {WIRE_VERSION}" in str(err)
    assert (err.ours, err.theirs) == (WIRE_VERSION, (3, 4))
    assert isinstance(p.completions["m2"][0], VersionMismatch)
    assert p.pa.state is PeerState.FAILED
    assert [type(e.error) for e in p.other_events[0] if isinstance(e, PeerFailed)] == [VersionMismatch]


def test_a_version_reply_that_echoes_wrong_ids_or_lists_our_version_is_ignored() -> None:
    p = EnginePair()
    p.faults.drop(type=T_HELLO, src=0)
    p.connect(0, 1)
    p.run(lambda: bool(p.sent(src=0, type=T_HELLO)), max_time=1)
    hello = decode(_first_hello(p, 0))
    for forged in (version_reply(hello.dst_conn, hello.src_incarnation ^ 1, (3,)),  # not our incarnation
                   version_reply(hello.dst_conn ^ 1, hello.src_incarnation, (3,)),  # not our handshake
                   version_reply(hello.dst_conn, hello.src_incarnation, (3, WIRE_VERSION))):
        p.a.receive_datagram(forged, b"B", p.now)
    assert p.pa.state is PeerState.CONNECTING
    assert p.a.stats()["num_unk_recvs"] == 3


def _foreign(p: EngineNet, version: int = 3) -> bytes:
    """A HELLO of ``version`` (as a later release would send one)."""
    p.connect(0, 1)
    raw = bytearray(p.engines[0].datagrams_to_send(p.now)[0][2])
    raw[0] = version
    seal(raw)
    return bytes(raw)


def test_another_version_gets_a_version_reply_at_its_source_rate_limited() -> None:
    p = EngineNet(3)
    raw = _foreign(p)
    b = p.engines[1]
    for _ in range(5):  # a burst from one source: one reply
        b.receive_datagram(raw, b"A", p.now)
    out = b.datagrams_to_send(p.now)
    assert len(out) == 1
    _ch, dest, reply = out[0]
    assert dest == b"A" and reply[0] == VERSION_NEGOTIATION and reply[1] == T_VERSION
    assert len(reply) <= len(raw)
    dst, inc, listed = parse_version_reply(reply)
    assert (dst, inc, listed) == (int.from_bytes(raw[4:8], "big"), int.from_bytes(raw[8:12], "big"),
                                  (WIRE_VERSION,))
    b.receive_datagram(raw, b"C", p.now)  # another source is answered
    assert [d for _c, d, _r in b.datagrams_to_send(p.now)] == [b"C"]
    b.receive_datagram(raw, b"A", p.now + 0.05)
    assert b.datagrams_to_send(p.now + 0.05) == []  # within 100 ms of the last
    b.receive_datagram(raw, b"A", p.now + 0.1)
    assert len(b.datagrams_to_send(p.now + 0.1)) == 1
    assert b.stats()["num_malformed_recvs"] == 8  # every one counted
    assert b.peers_by_addr == {}  # and none made a peer


def test_no_version_reply_to_a_version_reply_nor_without_a_source_nor_to_tiny_datagrams() -> None:
    p = EngineNet(2)
    b = p.engines[1]
    b.receive_datagram(version_reply(1, 2, (3,)), b"A", p.now)  # answers nothing of b's
    b.receive_datagram(_foreign(p), None, p.now)  # no source: nowhere to answer
    b.receive_datagram(bytes([3]) + bytes(11), b"A", p.now)  # as small as a reply would be
    assert b.datagrams_to_send(p.now) == []
    assert b.stats()["num_unk_recvs"] == 1 and b.stats()["num_malformed_recvs"] == 2


def test_two_ends_negotiate_through_a_version_reply_on_the_link() -> None:
    """a's HELLOs leave a as version 3 (rewritten on the link, CRC32C resealed: an intact
    datagram of another version): b answers with a VERSION reply listing 2, which a
    (speaking 2) ignores; its handshake times out as before."""
    p = EnginePair(Config(handshake_timeout=1.0))

    def as_v3(s: int, d: int, data: bytes, k: int) -> object:
        if s == 0 and data[0] == WIRE_VERSION and data[1] == T_HELLO:
            v3 = bytearray(data)
            v3[0] = 3
            seal(v3)
            return ("replace", bytes(v3))
        return None
    p.add_hook(as_v3)
    p.send(0, 1, 1, b"x", key="m")
    p.run(lambda: bool(p.completions["m"]), max_time=5)
    replies = [d for _t, s, _d, d in p.log if s == 1]
    assert replies and all(d[0] == VERSION_NEGOTIATION for d in replies)
    assert p.b.peers_by_addr == {}
    assert type(p.completions["m"][0]) is PeerUnreachable  # its own version listed: no mismatch


def test_the_hello_ack_goes_to_the_observed_source_not_the_address_inside() -> None:
    """c's HELLO (address C inside) arrives at b from A's source: b answers A; nothing b
    sends ever reaches C."""
    p = EngineNet(3)
    p.faults.partition(p.now, None, [2])  # c's own datagrams go nowhere; we carry its HELLO by hand
    p.connect(2, 1)
    p.run(lambda: bool(p.sent(src=2, type=T_HELLO)), max_time=1)
    p.engines[1].receive_datagram(_first_hello(p, 2), b"A", p.now)
    p.run_idle(3)
    from_b = [(d, decode(x).type) for _t, s, d, x in p.log if s == 1]
    assert from_b and all(d == 0 for d, _ in from_b), from_b
    assert (0, T_HELLO_ACK) in from_b
    assert not [x for _t, s, d, x in p.log if s == 1 and d == 2]


def test_a_version_reply_damaged_on_the_way_fails_nothing() -> None:
    """A VERSION reply whose version list was damaged (2 -> 3) would fail the handshake at
    once: its own CRC32C catches it (the reply has no header, so no F_CRC)."""
    p = EnginePair()
    p.faults.drop(type=T_HELLO, count=1, src=0)
    p.send(0, 1, 1, b"x", key="m")
    p.run(lambda: bool(p.sent(src=0, type=T_HELLO)), max_time=1)
    hello = decode(_first_hello(p, 0))
    damaged = bytearray(version_reply(hello.dst_conn, hello.src_incarnation, (WIRE_VERSION,)))
    damaged[12] ^= 1  # the listed version: 2 -> 3
    p.a.receive_datagram(bytes(damaged), b"B", p.now)
    assert p.a.stats()["num_malformed_recvs"] == 1 and p.pa.state is PeerState.CONNECTING
    p.run(lambda: bool(p.completions["m"]), max_time=2)  # the handshake goes on
    assert p.completions["m"] == [None] and p.delivered[1] == [(b"A", 1, b"x")]


def test_a_damaged_datagram_gets_no_version_reply_and_the_handshake_survives() -> None:
    """A bit flipped in a HELLO's version byte is damage, not another version: its CRC32C
    (read with the header layout every version shares) fails, so it is counted as a CRC
    error and answered with nothing -- a VERSION reply would fail the initiator at once.
    (Found by the exactly-once property test: corrupt the first datagram each way.)"""
    cfg = Config(rto_max=0.05, retrans_timeout=0.004, handshake_timeout=1000, peer_timeout=1000)
    p = EnginePair(cfg)
    fates = ([("corrupt", 0)], [("corrupt", 512)])  # bit 0: the top bit of the version byte
    p.add_hook(lambda s, d, raw, k: fates[s][k] if k < len(fates[s]) else None)
    p.send(0, 1, 0, b"payload", key=0)
    p.run(lambda: p.completions.get(0), max_time=5)
    assert p.completions[0] == [None]
    assert p.delivered[1] == [(b"A", 0, b"payload")]
    assert not [t for t, s, d, raw in p.log if raw[0] == 0], "no VERSION reply was sent"
    assert p.b.stats()["num_crc_errors"] >= 1
