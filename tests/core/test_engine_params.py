"""Transport parameters: the limits each end advertises in its HELLO / HELLO_ACK, obeyed by
the other (a send larger than the peer's largest message fails with MessageTooLarge, never
as a peer death; the smaller peer_timeout wins; no datagram larger than the peer's)."""

from __future__ import annotations

import attrs
import pytest

from btlcore import Config
from btlcore.errors import MessageTooLarge
from btlcore.protocol.events import PeerFailed
from btlcore.protocol.wire import HEADER, HEADER_LEN, T_HELLO, T_HELLO_ACK, Hello, decode, seal
from btlcore.testing.enginepair import EnginePair


def test_different_max_message_size_is_an_error_not_a_peer_death() -> None:
    """The receiver takes at most 3000 B messages, the sender 64 MiB: a 4000 B message fails
    with MessageTooLarge and the connection stays up (it used to end in a false peer death:
    the receiver dropped every chunk, the sender timed out)."""
    p = EnginePair(Config(peer_timeout=0.5), config_b=Config(max_message_size=3000, peer_timeout=0.5))
    p.send(0, 1, 1, bytes(4000), key="big")  # before the handshake: through the callback
    p.send(0, 1, 2, b"small", key="small")
    p.run(lambda: p.completions["big"] and p.completions["small"], max_time=5)
    assert isinstance(p.completions["big"][0], MessageTooLarge)
    assert "3000" in str(p.completions["big"][0])
    assert p.completions["small"] == [None]
    p.run_idle(3)
    assert not any(isinstance(e, PeerFailed) for e in p.other_events[0] + p.other_events[1])
    assert p.established(0, 1)
    assert p.delivered[1] == [(b"A", 2, b"small")]


def test_larger_than_the_peer_takes_fails_at_the_call_once_known() -> None:
    p = EnginePair(Config(), config_b=Config(max_message_size=3000))
    p.handshake()
    with pytest.raises(MessageTooLarge, match="4000 bytes exceeds the peer's max_message_size=3000"):
        p.send(0, 1, 1, bytes(4000), key="big")
    assert p.completions["big"] == []  # raised: no callback
    p.send(0, 1, 1, bytes(3000), key="ok")
    p.run(lambda: p.completions["ok"])
    assert p.completions["ok"] == [None] and p.delivered[1] == [(b"A", 1, bytes(3000))]
    # b's own limit still holds for b's sends (max_message_size is for send and reassembly)
    with pytest.raises(MessageTooLarge, match="exceeds max_message_size=3000"):
        p.send(1, 0, 1, bytes(3001))


def test_hello_and_hello_ack_carry_the_parameters() -> None:
    p = EnginePair(Config(peer_timeout=3.0, max_message_size=1 << 20), config_b=Config(mtu=1200))
    p.handshake()
    [(_, hello)], [(_, ack)] = p.sent(type=T_HELLO), p.sent(type=T_HELLO_ACK)
    mine, theirs = Hello.decode(hello.payload).params, Hello.decode(ack.payload).params
    assert mine is not None and theirs is not None
    assert (mine.max_datagram_size, mine.max_message_size, mine.peer_timeout_ms) == (1500, 1 << 20, 3000)
    assert (theirs.max_datagram_size, theirs.max_message_size, theirs.peer_timeout_ms) == \
        (1200, Config().max_message_size, 10_000)


def test_peer_timeout_the_smaller_of_the_two_wins() -> None:
    p = EnginePair(Config(peer_timeout=2.0), config_b=Config(peer_timeout=5.0))
    assert p.connect(0, 1).peer_timeout == 2.0  # our own until the peer's is known
    p.handshake()
    assert p.pa.peer_timeout == 2.0 and p.pb.peer_timeout == 2.0


def test_no_datagram_larger_than_the_peer_takes() -> None:
    """b's device takes 600-byte datagrams, a's 1500: a cuts its segments to b's size."""
    p = EnginePair(Config(), config_b=Config(mtu=600))
    p.send(0, 1, 1, bytes(range(256)) * 40, key="big")  # queued before the handshake
    p.send(0, 1, 2, bytes(900), key="mid")  # one datagram for a, three for b
    p.run(lambda: p.completions.get("big") and p.completions.get("mid"))
    assert p.completions["big"] == [None] and p.completions["mid"] == [None]
    assert sorted(p.delivered[1]) == [(b"A", 1, bytes(range(256)) * 40), (b"A", 2, bytes(900))]
    sizes = [len(d) for _t, s, _d, d in p.log if s == 0]
    assert max(sizes) <= 600
    p.send(0, 1, 3, bytes(5000), key="after")  # after the handshake too
    p.run(lambda: p.completions.get("after"))
    assert max(len(d) for _t, s, _d, d in p.log if s == 0) <= 600


def test_hello_is_padded_to_the_ack_it_provokes() -> None:
    p = EnginePair()
    p.handshake()
    raw_hello = [d for _t, s, _d, d in p.log if s == 0 and d[1] == T_HELLO][0]
    raw_ack = [d for _t, s, _d, d in p.log if s == 1 and d[1] == T_HELLO_ACK][0]
    assert len(raw_hello) >= len(raw_ack)
    assert decode(raw_hello).version == 2


def test_a_hello_smaller_than_the_reply_is_not_answered() -> None:
    """An unpadded HELLO (smaller than the HELLO_ACK it would get) is dropped, counted."""
    p = EnginePair()
    p.faults.drop(type=T_HELLO, src=0)
    p.connect(0, 1)
    p.run(lambda: bool(p.sent(type=T_HELLO)), max_time=1)
    raw = bytearray([d for _t, s, _d, d in p.log if s == 0 and d[1] == T_HELLO][0])
    body = Hello.decode(decode(bytes(raw)).payload)
    short = attrs.evolve(body, params=None).encode()
    small = bytearray(raw[:HEADER_LEN] + short)
    HEADER.pack_into(small, 0, *(list(HEADER.unpack_from(small))[:-1] + [len(short)]))
    seal(small)
    before = p.b.stats()["num_malformed_recvs"]
    p.b.receive_datagram(bytes(small), b"A", p.now)
    assert p.b.stats()["num_malformed_recvs"] == before + 1
    assert p.b.datagrams_to_send(p.now) == []
    assert p.pb is None


def test_the_receive_window_in_bytes_is_advertised() -> None:
    p = EnginePair(Config(recv_buffer=300_000), config_b=Config(recv_buffer=5 << 20))
    p.handshake()
    [(_, hello)], [(_, ack)] = p.sent(type=T_HELLO), p.sent(type=T_HELLO_ACK)
    mine, theirs = Hello.decode(hello.payload).params, Hello.decode(ack.payload).params
    assert mine is not None and theirs is not None
    assert (mine.window_bytes, theirs.window_bytes) == (300_000, 5 << 20)


@pytest.mark.parametrize("window_bytes", [0, 4000, 20_000])
def test_the_peers_byte_window_caps_what_is_in_flight(window_bytes: int) -> None:
    """b advertises a byte window smaller than what its segment window (4096) and its ACKs
    (recv_buffer: 16 MiB) allow: a's segments in flight stay within it (never under one), and
    a 200 kB message still goes through.  0: no byte limit."""
    p = EnginePair(Config())
    p.b.packetizer.params = attrs.evolve(p.b.packetizer.params, window_bytes=window_bytes)
    p.handshake()
    cap = window_bytes // p.pa.chunk_cap
    assert p.pa.window_cap == (max(1, cap) if window_bytes else Config().window)
    depths: list[int] = []
    p.add_hook(lambda s, d, data, k: depths.append(p.pa.next_seq - 1 - p.pa.snd_una) if s == 0 else None)
    p.send(0, 1, 1, bytes(range(256)) * 800, key="m")
    p.run(lambda: p.completions.get("m") == [None], max_time=10)
    assert p.delivered[1] == [(b"A", 1, bytes(range(256)) * 800)]
    if window_bytes:
        assert max(depths) == max(1, cap)  # (filled, never exceeded)
    else:
        assert max(depths) > 20_000 // p.pa.chunk_cap
