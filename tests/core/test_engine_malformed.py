"""Bad input: truncated, bad version, unknown flags, bad lengths, corrupted CRC, garbage.
Each is dropped and counted; nothing raises."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from btlcore import Config
from btlcore.protocol.wire import (
    ACK_BODY,
    F_ACK,
    F_STATUS,
    HEADER_LEN,
    T_ACK,
    T_DATA,
    T_HELLO,
    Datagram,
    Hello,
    ack_payload,
    put_status_payload,
    seal,
)
from btlcore.testing.enginepair import EnginePair


def drops(e) -> int:
    st_ = e.stats()
    return (st_["num_malformed_recvs"] + st_["num_crc_errors"] + st_["num_unk_recvs"]
            + st_["num_stale_recvs"])


def snapshot(p: EnginePair):
    pb = p.pb
    return (pb.window.cum, list(pb.window._starts), pb.counters.num_total_recvs, pb.counters.num_ack_recvs,
            p.pa.snd_una, len(p.delivered[1]), len(p.b.events))


_PAIRS: dict[bool, EnginePair] = {}


def fresh_pair(crc: bool = True) -> EnginePair:
    p = EnginePair(crc=crc)
    p.handshake()
    p.send(0, 1, 1, b"warm", key="w")
    p.send(1, 0, 1, b"warm", key="w2")
    p.run(lambda: p.completions["w"] and p.completions["w2"])
    p.run_idle()
    return p


def template(p: EnginePair, **kw) -> Datagram:
    """A DATA datagram b would accept as the next one from a."""
    d = Datagram(T_DATA, F_ACK, p.pb.local_conn, p.a.incarnation, p.pb.window.cum + 1, p.pa.window.cum,
                 7, payload=b"payload")
    for k, v in kw.items():
        setattr(d, k, v)
    return d


def test_template_is_accepted() -> None:
    p = fresh_pair()
    p.b.receive_datagram(template(p).encode(), None, p.now)
    p._collect()
    assert p.delivered[1][-1] == (b"A", 7, b"payload")


@pytest.mark.parametrize("crc", [True, False])
def test_truncated_every_length(crc: bool) -> None:
    p = fresh_pair(crc)
    raw = template(p, msg_id=9, msg_len=7, offset=0).encode(with_crc=crc)
    before = snapshot(p)
    for n in range(len(raw)):
        d0 = drops(p.b)
        p.b.receive_datagram(raw[:n], None, p.now)
        assert drops(p.b) == d0 + 1, n
    # (num_total_recvs may move: see test_malformed_data_changes_nothing)
    keep = (0, 1, 4, 5, 6)
    assert [snapshot(p)[i] for i in keep] == [before[i] for i in keep]
    st_ = p.b.stats()
    if crc:
        assert st_["num_malformed_recvs"] == HEADER_LEN and st_["num_crc_errors"] == len(raw) - HEADER_LEN
    else:
        assert st_["num_malformed_recvs"] == len(raw)


def test_bad_version_and_unknown_flags_and_types() -> None:
    p = fresh_pair()
    raw = bytearray(template(p).encode())
    before = snapshot(p)
    for version in (0, 1, 255):  # (0: not a well-formed VERSION reply; 1: version 1's)
        b = bytearray(raw)
        b[0] = version
        seal(b)
        p.b.receive_datagram(bytes(b), None, p.now)
    for flag in (0x20, 0x40, 0x80):  # (0x10 is F_STATUS: see test_malformed_put_status)
        b = bytearray(raw)
        b[2] |= flag
        seal(b)
        p.b.receive_datagram(bytes(b), None, p.now)
    for typ in (0, 11, 200):
        b = bytearray(raw)
        b[1] = typ
        seal(b)
        p.b.receive_datagram(bytes(b), None, p.now)
    assert p.b.stats()["num_malformed_recvs"] == 9
    assert snapshot(p) == before


def test_malformed_put_status_is_dropped_not_delivered() -> None:
    """A put status is one unchunked 12-byte body: any other shape is malformed, dropped
    before it is accepted (not ACKed), and never reaches the message handlers."""
    p = fresh_pair()
    before = snapshot(p)
    good = put_status_payload(5, 0)
    bad = [template(p, flags=F_ACK | F_STATUS, payload=b""),
           template(p, flags=F_ACK | F_STATUS, payload=good + b"x"),
           template(p, flags=F_ACK | F_STATUS, payload=good[:-1]),
           template(p, flags=F_ACK | F_STATUS, payload=good, msg_id=9, msg_len=12, offset=0),
           template(p, flags=F_ACK | F_STATUS, payload=good, put_key=1, put_offset=0)]
    for d in bad:
        p.b.receive_datagram(d.encode(), None, p.now)
    p.b.receive_datagrams([d.encode() for d in bad], p.now)
    assert p.b.stats()["num_malformed_recvs"] == 2 * len(bad)
    # (num_total_recvs may move: see test_malformed_data_changes_nothing)
    keep = (0, 1, 4, 5, 6)
    assert [snapshot(p)[i] for i in keep] == [before[i] for i in keep]
    assert p.pb.counters.num_put_status_recvs == 0


def each_bit_flipped_is_dropped(p: EnginePair, raw: bytes) -> int:
    """Hand b ``raw`` with each of its bits flipped in turn: every copy must be dropped (and
    counted); returns how many were sent."""
    for bit in range(len(raw) * 8):
        b = bytearray(raw)
        b[bit // 8] ^= 1 << (bit % 8)
        d0 = drops(p.b)
        p.b.receive_datagram(bytes(b), None, p.now)
        assert drops(p.b) == d0 + 1, bit
    return len(raw) * 8


@pytest.mark.parametrize("size", [7, 1300])  # (the receive path copies a small datagram's tail for its CRC)
def test_corrupted_crc_every_bit(size: int) -> None:
    p = fresh_pair()
    raw = template(p, payload=bytes(range(256)) * (size // 256) + b"payload"[:size % 256]).encode()
    before = snapshot(p)
    n = each_bit_flipped_is_dropped(p, raw)
    assert snapshot(p) == before
    st_ = p.b.stats()
    # a flipped version/flag bit is caught before the CRC check; everything else by the CRC
    assert st_["num_crc_errors"] + st_["num_malformed_recvs"] == n
    assert st_["num_crc_errors"] >= n - 16


def test_missing_crc_refused_when_crc_required() -> None:
    p = fresh_pair(crc=True)
    before = snapshot(p)
    p.b.receive_datagram(template(p).encode(with_crc=False), None, p.now)
    assert p.b.stats()["num_crc_errors"] == 1 and snapshot(p) == before


def test_crc_accepted_by_non_crc_engine() -> None:
    p = fresh_pair(crc=False)
    p.b.receive_datagram(template(p).encode(with_crc=True), None, p.now)
    p._collect()
    assert p.delivered[1][-1] == (b"A", 7, b"payload")


@pytest.mark.parametrize("delta", [-1, 1, 1000])
def test_bad_payload_len_data(delta: int) -> None:
    p = fresh_pair()
    b = bytearray(template(p).encode())
    struct.pack_into("!H", b, 34, len(b"payload") + delta)
    seal(b)
    d0 = p.b.stats()["num_malformed_recvs"]
    before = snapshot(p)
    p.b.receive_datagram(bytes(b), None, p.now)
    assert p.b.stats()["num_malformed_recvs"] == d0 + 1
    assert snapshot(p)[:2] == before[:2] and len(p.delivered[1]) == before[5]


def test_malformed_data_changes_nothing() -> None:
    p = fresh_pair()
    p.send(1, 0, 1, b"outstanding", key="o")  # b has something unacked
    p.step()
    una = p.pb.snd_una
    b = bytearray(template(p, ack=p.pb.next_seq - 1).encode())
    struct.pack_into("!H", b, 34, 3)  # wrong payload_len
    seal(b)
    total = p.pb.counters.num_total_recvs
    p.b.receive_datagram(bytes(b), None, p.now)
    assert p.b.stats()["num_malformed_recvs"] == 1
    assert p.pb.counters.num_total_recvs == total
    assert p.pb.snd_una == una


def test_bad_chunk_fields_counted_as_badfrag() -> None:
    p = fresh_pair()
    before = snapshot(p)
    for msg_len, off, payload in [(5, 0, b"payload"), (100, 95, b"payload"), (10, 0, b""),
                                  (Config().max_message_size + 1, 0, b"payload")]:
        d = template(p, msg_id=77, msg_len=msg_len, offset=off, payload=payload)
        p.b.receive_datagram(d.encode(), None, p.now)
    assert p.pb.counters.num_badfrag_recvs == 4
    assert snapshot(p)[:2] == before[:2] and p.pb.reassembly == {}


def test_chunk_with_conflicting_msg_len_is_badfrag() -> None:
    p = fresh_pair()
    seq = p.pb.window.cum + 1
    first = template(p, seq=seq + 1, msg_id=5, msg_len=20, offset=10, payload=b"x" * 10)
    p.b.receive_datagram(first.encode(), None, p.now)
    p.b.receive_datagram(template(p, seq=seq, msg_id=5, msg_len=30, offset=0, payload=b"y" * 10).encode(), None, p.now)
    assert p.pb.counters.num_badfrag_recvs == 1
    assert all(d != b"y" * 10 for _a, _t, d in p.delivered[1])


@pytest.mark.parametrize("put_first", [True, False])
def test_chunk_and_put_chunk_sharing_a_msg_id_is_badfrag(put_first: bool) -> None:
    # one message id, once as a chunked put and once as a chunked message: the later one is
    # refused (it used to raise TypeError, reassembling into the put's missing buffer)
    p = fresh_pair()
    region = bytearray(64)
    key = p.b.expose(region)
    seq = p.pb.window.cum + 1
    put = dict(put_key=key, put_offset=0)
    first = dict(seq=seq + 1, msg_id=5, msg_len=20, offset=10, payload=b"x" * 10, **(put if put_first else {}))
    second = dict(seq=seq + 2, msg_id=5, msg_len=20, offset=0, payload=b"y" * 10, **({} if put_first else put))
    p.b.receive_datagram(template(p, **first).encode(), None, p.now)
    p.b.receive_datagram(template(p, **second).encode(), None, p.now)
    assert p.pb.counters.num_badfrag_recvs == 1
    assert bytes(region[:10]) != b"y" * 10


def test_ack_malformed_bodies() -> None:
    p = fresh_pair()
    good = Datagram(T_ACK, F_ACK, p.pa.local_conn, p.b.incarnation, 0, p.pb.window.cum,
                    payload=ack_payload(64, []))
    p.a.receive_datagram(good.encode(), None, p.now)
    assert p.pa.counters.num_ack_recvs >= 1 and p.a.stats()["num_malformed_recvs"] == 0
    bodies = [b"", bytes(ACK_BODY.size - 1), ack_payload(64, [(2, 1)])[:-1],
              ack_payload(64, [(2, 1)]) + b"\0", ack_payload(64, [(2 * i + 2, 1) for i in range(65)])]
    for body in bodies:
        d = Datagram(T_ACK, F_ACK, p.pa.local_conn, p.b.incarnation, 0, p.pb.window.cum, payload=body)
        p.a.receive_datagram(d.encode(), None, p.now)
    assert p.a.stats()["num_malformed_recvs"] == len(bodies)


def test_ack_sack_ranges_beyond_what_was_sent_are_ignored() -> None:
    p = fresh_pair()
    p.faults.partition(p.now, None, [1])
    p.send(0, 1, 1, b"x", key="x")
    p.step()
    una = p.pa.snd_una
    d = Datagram(T_ACK, F_ACK, p.pa.local_conn, p.b.incarnation, 0, una,
                 payload=ack_payload(64, [(5, 1000), (2000, 2**32 - 1)]))
    p.a.receive_datagram(d.encode(), None, p.now)
    p._collect()
    assert p.completions["x"] == []  # seq una+1 was not covered
    d2 = Datagram(T_ACK, F_ACK, p.pa.local_conn, p.b.incarnation, 0, una + 10**6, payload=ack_payload(64, []))
    p.a.receive_datagram(d2.encode(), None, p.now)  # cum ACK beyond next_seq: clamped
    p._collect()
    assert p.completions["x"] == [None] and p.pa.snd_una == p.pa.next_seq - 1


def test_hello_bad_bodies() -> None:
    p = fresh_pair()
    h = Hello(123, 5, 9, 0, 64, b"Z").encode()
    for body in (h[:10], h[:-1], h + b"!"):
        d = Datagram(T_HELLO, 0, 0, 123, payload=body)
        p.b.receive_datagram(d.encode(), None, p.now)
    b = bytearray(Datagram(T_HELLO, 0, 0, 123, payload=h).encode())
    struct.pack_into("!H", b, 34, len(h) - 1)
    seal(b)
    p.b.receive_datagram(bytes(b), None, p.now)
    assert p.b.stats()["num_malformed_recvs"] == 4
    assert list(p.b.peers_by_addr) == [b"A"]


def test_hello_address_resolve_error_is_counted() -> None:
    p = EnginePair()

    def resolve(addr: bytes) -> bytes:
        if addr == b"bad":
            raise ValueError("no such address")
        return addr
    p.b.state.resolve = resolve
    d = Datagram(T_HELLO, 0, 0, 55, payload=Hello(55, 5, 9, 0, 64, b"bad").encode())
    p.b.receive_datagram(d.encode(), None, 0.0)
    assert p.b.stats()["num_malformed_recvs"] == 1 and p.b.peers_by_addr == {}


def test_unknown_connection_id() -> None:
    p = fresh_pair()
    p.b.receive_datagram(template(p, dst_conn=p.pb.local_conn ^ 0xFFFF).encode(), None, p.now)
    d = Datagram(T_ACK, F_ACK, 12345, p.b.incarnation, 0, 0, payload=ack_payload(8, []))
    p.b.receive_datagram(d.encode(), None, p.now)
    assert p.b.stats()["num_unk_recvs"] == 2


def test_wrong_incarnation_is_stale() -> None:
    p = fresh_pair()
    p.b.receive_datagram(template(p, src_incarnation=p.a.incarnation ^ 1).encode(), None, p.now)
    assert p.pb.counters.num_stale_recvs == 1


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_garbage_never_raises_and_is_counted_once(data: bytes) -> None:
    p = _PAIRS.get(True)
    if p is None:
        p = _PAIRS[True] = fresh_pair()
    before = snapshot(p)
    d0 = drops(p.b)
    p.b.receive_datagram(data, None, p.now)
    assert drops(p.b) == d0 + 1
    assert snapshot(p) == before


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_sealed_mutations_never_raise(data: st.DataObject) -> None:
    """Valid CRC, arbitrary fields: whatever the engine makes of it, it must not raise and
    must keep working for legitimate traffic."""
    p = _PAIRS.get(False)
    if p is None:
        p = _PAIRS[False] = fresh_pair()
    base = template(p, msg_id=data.draw(st.one_of(st.none(), st.integers(0, 2**32 - 1))),
                    put_key=data.draw(st.one_of(st.none(), st.integers(0, 3))))
    if base.msg_id is not None:
        base.msg_len = data.draw(st.integers(0, 3000))
        base.offset = data.draw(st.integers(0, 3000))
    base.type = data.draw(st.sampled_from([T_DATA, T_ACK, T_HELLO, 4]))
    base.seq = p.pb.window.cum + data.draw(st.integers(-5000, 5000))
    base.ack = p.pa.window.cum + data.draw(st.integers(-10, 10))
    base.payload = data.draw(st.binary(max_size=100))
    raw = bytearray(base.encode())
    for _ in range(data.draw(st.integers(0, 3))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    raw[2] &= 0x0F
    seal(raw)
    p.b.receive_datagram(bytes(raw), None, p.now)
    p.a.receive_datagram(bytes(raw), None, p.now)
    p.b.datagrams_to_send(p.now)
    p.a.datagrams_to_send(p.now)
    p.b.take_events()
    p.a.take_events()


def test_every_bit_flip_of_an_ack_is_refused_with_its_header_crc_cached() -> None:
    """The general path caches an ACK's header CRC on the peer (receive._head_crc, keyed by
    every field of those 12 bytes): a flipped bit anywhere, header included, is still caught,
    and the copy as sent is still taken afterwards."""
    p = fresh_pair()
    acks = [d for _t, s, dst, d in p.log if s == 0 and dst == 1 and d[1] == T_ACK]
    assert acks, "the warm-up made no standalone ACK from a to b"
    raw = bytes(acks[-1])
    recvs = p.pb.counters.num_ack_recvs
    p.b.receive_datagram(raw, None, p.now)  # taken (an old ACK by now: counted, nothing moves)
    assert p.pb.counters.num_ack_recvs == recvs + 1
    each_bit_flipped_is_dropped(p, raw)
    assert p.pb.counters.num_ack_recvs == recvs + 1
    p.b.receive_datagram(raw, None, p.now)
    assert p.pb.counters.num_ack_recvs == recvs + 2
