"""Altered copies of a live connection's own datagrams, sent from a third source (what an
on-path fuzzer does: tests/hostile/test_fuzz.py on real udp), on virtual time with fixed
seeds: every send completes, delivered and verified, never stalls.

The stall these pin down (issue #11's fuzz test, about 4 sends of 161 that never completed):
a copy of the sender's HELLO with only its ISN changed, sent by the fuzzer, was challenged;
the live peer answered the challenge (it checked only the conn id the challenge named), so
the copy was believed, and the receiver -- which had sent nothing on the connection --
"followed" the peer's "new connection" and restarted its receive window at the forged ISN:
every real segment after it fell above the window until ``peer_timeout``.  Now (a) a HELLO
that keeps a connection's conn id and incarnation but not its ISN is an altered copy,
dropped (``num_forged_drops``): both are drawn together, never one alone; (b) a challenge
carries the ISN it asks about, and the peer answers only for its own conn id *and* ISN; (c)
where the device names a peer's sources (udp, sim), a HELLO or HELLO_ACK for a known peer
from any other source changes nothing (``num_source_drops``).
"""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from btlcore import Config
from btlcore.protocol import wire
from btlcore.protocol.peers import PeerState
from btlcore.testing.enginepair import DROP, EngineNet, EnginePair

FUZZER = b"C"  # the third engine's address: the fuzzer's source


def _exact_sources(net: EngineNet) -> None:
    """As udp and sim do: each peer sends from the one source its address names."""
    for eng in net.engines:
        eng.guard.peer_sources = lambda dest: (bytes(dest),)


def _mutate(rng: random.Random, datagram: bytes) -> bytes:
    """A captured datagram changed as a fuzzer does (tests/hostile/attacker.py's ``mutate``):
    a bit flipped, cut short, its type, flags, payload length or chunk claims set at random;
    re-sealed with a correct CRC nine times in ten."""
    buf = bytearray(datagram)
    for _ in range(rng.randrange(1, 4)):
        what = rng.randrange(6)
        if what == 0 and buf:
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        elif what == 1 and buf:
            del buf[rng.randrange(len(buf)):]
        elif what == 2 and len(buf) > 2:
            buf[1] = rng.randrange(256) if rng.random() < 0.2 else rng.randrange(1, 8)
        elif what == 3 and len(buf) > 2:
            buf[2] = rng.randrange(0x20)
        elif what == 4 and len(buf) >= wire.HEADER_LEN:
            struct.pack_into("!H", buf, wire.HEADER_LEN - 2, rng.getrandbits(16))
        elif len(buf) >= wire.HEADER_LEN + wire.CHUNK_LEN:
            struct.pack_into("!I", buf, wire.HEADER_LEN + 4 * rng.randrange(3), rng.getrandbits(32))
    if len(buf) >= wire.HEADER_LEN and rng.random() < 0.9:
        wire.seal(buf)
    return bytes(buf)


def _fuzzed_transfer(seed: int, messages: int = 120, per_step: int = 6) -> tuple[EngineNet, list[Any]]:
    """A sends ``messages`` messages (1 B to 20 KB, 4 in flight) to B while, at every step,
    ``per_step`` altered copies of what A sent B arrive at B from the fuzzer's source; then
    the transfer is let finish.  Returns the net and the completions, in order."""
    net = EngineNet(3, Config(peer_timeout=30.0), seed=seed)
    _exact_sources(net)
    captured: list[bytes] = []

    def hook(s: int, d: int, data: bytes, k: int) -> Any:
        if d == 2:
            return DROP  # (the fuzzer reads nothing)
        if s == 0 and d == 1:
            captured.append(data)
        return None
    net.add_hook(hook)
    rng, fuzz = random.Random(seed), random.Random(seed + 1000)
    sent: list[bytes] = []
    net.connect(0, 1)
    net.run(lambda: net.peer(1, 0) is not None, max_time=5)  # B has answered A's HELLO
    while len(sent) < messages and net.now < 60:
        while len(sent) < messages and sum(not net.completions.get(k) for k in range(len(sent))) < 4:
            sent.append(rng.randbytes(rng.randrange(1, 20_000)))
            net.send(0, 1, 1, sent[-1], key=len(sent) - 1)
        for _ in range(per_step):
            net.engines[1].receive_datagram(_mutate(fuzz, fuzz.choice(captured)), FUZZER, net.now)
        net.step()
    net.run(lambda: all(net.completions.get(k) for k in range(len(sent))), max_time=net.now + 60)
    assert net.delivered[1] == [(b"A", 1, m) for m in sent]
    return net, [net.completions[k] for k in range(len(sent))]


@pytest.mark.parametrize("seed", [2, 4, 9, 11, 17])
def test_altered_copies_from_a_third_source_never_stall_a_transfer(seed: int) -> None:
    # (seeds 2, 4 and 9 stalled or failed a send before the fix: a forged ISN followed)
    net, done = _fuzzed_transfer(seed)
    assert done == [[None]] * len(done)
    pa, pb = net.peer(0, 1), net.peer(1, 0)
    assert pa.state is pb.state is PeerState.ESTABLISHED
    assert pb.remote_isn == pa.isn and pb.remote_conn == pa.local_conn
    assert net.engines[0].counters.num_peer_restarts == net.engines[1].counters.num_peer_restarts == 0


def _hello_copy(p: EnginePair, **changes: int) -> bytes:
    """A's HELLO to B as B first saw it, with fields changed and sealed again."""
    sent = next(data for _t, s, _d, data in p.log if s == 0 and wire.decode(data).type == wire.T_HELLO)
    d = wire.decode(sent)
    h = wire.Hello.decode(d.payload)
    fields = {"incarnation": h.incarnation, "conn_id": h.conn_id, "isn": h.isn, **changes}
    body = wire.Hello(fields["incarnation"], fields["conn_id"], fields["isn"], h.echo_incarnation, h.window,
                      h.address, h.max_ack_delay_us, h.params).encode() + wire.padding_param(200)
    return wire.Datagram(wire.T_HELLO, d.flags, d.dst_conn, fields["incarnation"], payload=body).encode()


@pytest.mark.parametrize("source", [b"A", FUZZER])
@pytest.mark.parametrize("exact", [False, True])
def test_a_hello_with_the_connections_conn_id_and_another_isn_is_dropped(source: bytes, exact: bool) -> None:
    p = EnginePair(Config(peer_timeout=30.0))
    if exact:
        _exact_sources(p)
    p.handshake()
    pa, pb = p.pa, p.pb
    isn = pb.remote_isn
    p.b.receive_datagram(_hello_copy(p, isn=pa.isn ^ 0x5555), source, p.now)
    assert pb.remote_isn == isn and pb.window.cum >= isn
    assert p.b.counters.num_forged_drops + pb.counters.num_source_drops == 1
    assert p.b.counters.num_challenge_sends == 0
    p.send(0, 1, 1, b"after", key=1)
    p.run(lambda: p.completions.get(1) == [None], max_time=5)


def test_a_challenge_is_answered_only_for_the_connections_own_conn_id_and_isn() -> None:
    p = EnginePair(Config(peer_timeout=30.0))
    p.handshake()
    pa = p.pa  # a answers challenges for its connection with b

    def challenge(isn: int) -> bytes:
        return wire.Datagram(wire.T_CHALLENGE, 0, pa.local_conn, p.b.incarnation, isn,
                             payload=struct.pack("!Q", 0x1234)).encode()
    before = len(p.sent(0, wire.T_RESPONSE))
    p.a.receive_datagram(challenge(pa.isn ^ 1), b"B", p.now)
    p.step()
    assert len(p.sent(0, wire.T_RESPONSE)) == before  # another ISN: not its connection
    p.a.receive_datagram(challenge(pa.isn), b"B", p.now)
    p.step()
    assert len(p.sent(0, wire.T_RESPONSE)) == before + 1


def test_a_hello_from_a_source_the_device_does_not_name_changes_nothing() -> None:
    p = EnginePair(Config(peer_timeout=30.0))
    _exact_sources(p)
    p.connect(0, 1)
    p.run(lambda: p.peer(1, 0) is not None, max_time=5)
    pb = p.pb  # b answered a's HELLO and waits for a's confirmation: not yet ESTABLISHED
    conn, heard, crc = pb.remote_conn, pb.last_heard, pb.crc
    p.b.receive_datagram(_hello_copy(p, conn_id=pb.remote_conn ^ 0x77), FUZZER, p.now + 0.0001)
    assert (pb.remote_conn, pb.last_heard, pb.crc) == (conn, heard, crc)
    assert pb.counters.num_source_drops == 1
    p.run(lambda: p.established(0, 1), max_time=5)
    p.send(0, 1, 1, b"x", key=1)
    p.run(lambda: p.completions.get(1) == [None], max_time=5)
