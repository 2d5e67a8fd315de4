"""A put's outcome reaches the side that made it: the receiver answers every put with a put
status (F_STATUS), and the sender's callback waits for it, getting None if the put landed
and a PutError if the receiver refused it (RDMA's remote access error at the initiator)."""

from __future__ import annotations

import pytest

from btlcore import Config, PeerRestarted, PeerUnreachable, PutError, TransportClosed
from btlcore.protocol.events import PutLanded, PutRefused
from btlcore.protocol.wire import (
    F_ACK,
    F_PUT,
    F_STATUS,
    PS_LANDED,
    PS_OUT_OF_BOUNDS,
    PS_UNKNOWN_KEY,
    T_DATA,
    Datagram,
    parse_put_status,
    put_status_payload,
)
from btlcore.testing.enginepair import EnginePair, safe_decode


def pair(batch_receive: bool = False, **cfg: object) -> EnginePair:
    p = EnginePair(Config(**cfg), batch_receive=batch_receive)  # type: ignore[arg-type]
    p.handshake()
    return p


def data(n: int, salt: int = 1) -> bytes:
    return bytes((i * 7 + salt) & 0xFF for i in range(n))


def statuses(p: EnginePair, src: int = 1) -> list[tuple[int, int]]:
    """(put_seq, status) of every put status ``src`` sent (first transmissions and resends)."""
    return [parse_put_status(dg.payload) for _t, dg in p.sent(src, T_DATA) if dg.flags & F_STATUS]


def put_error(exc: object, key: int, offset: int, length: int, reason: str) -> bool:
    return (isinstance(exc, PutError) and (exc.key, exc.offset, exc.length, exc.reason)
            == (key, offset, length, reason) and f"key {key}" in str(exc)
            and f"offset {offset}" in str(exc) and f"{length} bytes" in str(exc)
            and reason in str(exc))


@pytest.mark.parametrize("size", [10, 5000])  # one datagram, chunked
@pytest.mark.parametrize("case", ["unknown key", "out of bounds"])
def test_refused_put_fails_at_the_sender_with_put_error(case: str, size: int) -> None:
    p = pair()
    region = bytearray(1000)
    key = p.b.expose(region)
    put_key, offset = (key + 5, 0) if case == "unknown key" else (key, 995)
    p.send(0, 1, 4, data(size), key="put", put_key=put_key, put_offset=offset)
    p.run(lambda: p.completions["put"])
    p.run_idle()
    [exc] = p.completions["put"]  # exactly once
    assert put_error(exc, put_key, offset, size, case)
    assert region == bytearray(1000)
    code = PS_UNKNOWN_KEY if case == "unknown key" else PS_OUT_OF_BOUNDS
    last_seq = max(dg.seq for _t, dg in p.sent(0, T_DATA) if dg.flags & F_PUT)
    assert statuses(p) == [(last_seq, code)]
    assert p.pa.counters.num_puts_refused == 1 and p.pa.counters.num_msgs_completed == 0
    assert p.pb.counters.num_put_status_sends == 1 and p.pa.counters.num_put_status_recvs == 1
    assert p.delivered[0] == [] and p.delivered[1] == []  # statuses are no messages
    assert not p.pa.puts and not p.a.has_outstanding()


# (a region unexposed while a put arrives: tests/core/test_engine_put.py,
# test_unexpose_mid_put_reported_and_no_leak, checks the sender's PutError too)


@pytest.mark.parametrize("size", [0, 10, 5000])
def test_good_put_completes_with_none_once_after_landing_and_status(size: int) -> None:
    """Every byte acknowledged is not enough: the callback waits for the put status (here
    lost twice), and fires once, after the bytes are in the region."""
    p = pair()
    region = bytearray(6000)
    key = p.b.expose(region)
    payload = data(size)
    dropped = p.faults.drop(where=lambda d: bool(d.flags & F_STATUS), count=2)
    p.send(0, 1, 4, payload, key="put", put_key=key, put_offset=100)
    p.run(lambda: dropped.matched == 2 and p.pa.snd_una == p.pa.next_seq - 1)
    assert p.completions["put"] == []  # all acknowledged, no status yet
    assert p.a.has_outstanding()  # (flush waits for it)
    p.run(lambda: p.completions["put"])
    p.run_idle()
    assert p.completions["put"] == [None]
    assert region[100:100 + size] == payload
    arrived = [t for t, s, d, raw in p.arrivals if s == 1 and (dg := safe_decode(raw)) is not None
               and dg.flags & F_STATUS]
    assert arrived and arrived[0] <= p.timeline[-1][0]
    assert [s for _q, s in statuses(p)] == [PS_LANDED] * 3  # two lost, the third arrived
    assert p.pb.counters.num_put_status_sends == 1 and p.pa.counters.num_put_status_recvs == 1
    assert p.pa.counters.num_msgs_completed == 1 and p.pa.counters.num_puts_refused == 0
    assert p.delivered[0] == []


def test_status_before_the_last_ack_completes_on_the_ack() -> None:
    """The put status can overtake the ACK of the put's segments (here: every standalone
    ACK of b is lost for a while, and the status carries an older ACK point): the put
    completes when the last segment is acknowledged, not before."""
    p = pair()
    region = bytearray(20000)
    key = p.b.expose(region)
    p.send(0, 1, 1, b"m" * 10, key="msg")
    # the message's only segment is lost at first; the put after it arrives whole, so b's
    # cumulative ACK stays below the put until the message is resent
    first = p.pa.next_seq
    p.faults.drop(where=lambda d: d.type == T_DATA and d.seq == first, count=1, src=0)
    p.send(0, 1, 4, data(3000), key="put", put_key=key, put_offset=0)
    p.run(lambda: p.pa.counters.num_put_status_recvs == 1)
    p.run(lambda: p.completions["put"] and p.completions["msg"])
    p.run_idle()
    assert p.completions["put"] == [None] and p.completions["msg"] == [None]
    assert region[:3000] == data(3000)


@pytest.mark.parametrize("batch_receive", [False, True])
@pytest.mark.parametrize("ordered", [True, False])
def test_puts_under_loss_and_duplication_complete_once_with_the_right_outcome(
        batch_receive: bool, ordered: bool) -> None:
    p = pair(batch_receive=batch_receive, ordered=ordered)
    region = bytearray(40000)
    key = p.b.expose(region)
    p.add_hook(lambda s, d, raw, k: "drop" if k % 7 == 3 else
               (("dup", 2) if k % 5 == 1 else (("delay", 0.0007) if k % 4 == 0 else None)))
    expect: dict[int, object] = {}
    for i in range(24):
        size = (10, 2000, 7000)[i % 3]
        kind = i % 4  # 0, 1: good; 2: unknown key; 3: out of bounds
        if kind < 2:
            p.send(0, 1, 4, data(size, i), key=i, put_key=key, put_offset=(i % 5) * 8000)
            expect[i] = None
        elif kind == 2:
            p.send(0, 1, 4, data(size, i), key=i, put_key=key + 1, put_offset=0)
            expect[i] = "unknown key"
        else:
            p.send(0, 1, 4, data(size, i), key=i, put_key=key, put_offset=39995)
            expect[i] = "out of bounds"
        p.send(0, 1, 9, b"between %d" % i, key=("msg", i))  # messages among the puts
    p.send(1, 0, 9, b"from b", key="b")  # and one the other way
    p.run(lambda: all(p.completions[k] for k in p.completions))
    p.run_idle()
    assert p.pa.counters.num_dup_recvs + p.pb.counters.num_dup_recvs > 0  # duplicates happened
    for i, want in expect.items():
        got = p.completions[i]
        assert len(got) == 1, (i, got)
        if want is None:
            assert got == [None], i
        else:
            assert isinstance(got[0], PutError) and got[0].reason == want, (i, got)
    assert all(p.completions[("msg", i)] == [None] for i in range(24))
    # statuses never reach the message handlers, on either path
    assert p.delivered[0] == [(b"B", 9, b"from b")]
    assert sorted(m for _a, _t, m in p.delivered[1]) == sorted(b"between %d" % i for i in range(24))
    assert p.pb.counters.num_put_status_sends == 24 == p.pa.counters.num_put_status_recvs
    assert p.pa.counters.num_puts_refused == 12 and p.pb.counters.num_put_errors == 12
    assert len([e for e in p.other_events[1] if type(e) in (PutLanded, PutRefused)]) == 24
    assert not p.pa.puts and not p.a.has_outstanding()


def test_peer_death_fails_a_put_waiting_for_its_status_once() -> None:
    p = pair(peer_timeout=0.5)
    key = p.b.expose(bytearray(100))
    p.faults.drop(where=lambda d: bool(d.flags & F_STATUS))  # b's statuses never arrive
    p.send(0, 1, 4, b"x" * 10, key="put", put_key=key, put_offset=0)
    p.run(lambda: p.pa.snd_una == p.pa.next_seq - 1 and p.pb.counters.num_put_status_sends == 1)
    assert p.completions["put"] == [] and len(p.pa.puts) == 1
    p.faults.partition(p.now, None, [1])
    p.send(0, 1, 1, b"later", key="later")  # something unacknowledged: the death clock runs
    p.run(lambda: p.completions["put"] and p.completions["later"])
    p.run_idle(p.now + 2.0)
    [exc] = p.completions["put"]
    assert isinstance(exc, PeerUnreachable)
    assert p.completions["later"] == [exc]
    assert not p.pa.puts and p.pa.counters.num_puts_refused == 0


def test_a_put_whose_status_never_comes_fails_after_peer_timeout() -> None:
    # its data acknowledged, nothing else outstanding, and the receiver dies before its status
    # arrives: the put fails with PeerUnreachable once peer_timeout passes, never hangs
    p = pair(peer_timeout=0.5)
    key = p.b.expose(bytearray(100))
    p.faults.drop(where=lambda d: bool(d.flags & F_STATUS))
    p.send(0, 1, 4, b"x" * 10, key="put", put_key=key, put_offset=0)
    p.run(lambda: p.pa.snd_una == p.pa.next_seq - 1 and p.pb.counters.num_put_status_sends == 1)
    p.faults.partition(p.now, None, [1])
    acked_at = p.now
    p.run(lambda: bool(p.completions["put"]))
    [exc] = p.completions["put"]
    assert isinstance(exc, PeerUnreachable) and "nothing heard from it" in str(exc)
    assert 0.5 <= p.now - acked_at <= 0.6 and not p.pa.puts


def test_restart_fails_a_put_waiting_for_its_status_with_peer_restarted() -> None:
    p = pair()
    key = p.b.expose(bytearray(100))
    p.faults.drop(where=lambda d: bool(d.flags & F_STATUS))
    p.send(0, 1, 4, b"x" * 10, key="put", put_key=key, put_offset=0)
    p.run(lambda: p.pa.snd_una == p.pa.next_seq - 1 and p.pb.counters.num_put_status_sends == 1)
    p.restart(1)
    p.connect(1, 0)
    p.run(lambda: p.completions["put"])
    p.run_idle()
    [exc] = p.completions["put"]
    assert isinstance(exc, PeerRestarted) and not p.pa.puts


def test_close_fails_a_put_waiting_for_its_status_with_transport_closed() -> None:
    p = pair()
    key = p.b.expose(bytearray(100))
    p.faults.drop(where=lambda d: bool(d.flags & F_STATUS))
    p.send(0, 1, 4, b"x" * 10, key="put", put_key=key, put_offset=0)
    p.run(lambda: p.pa.snd_una == p.pa.next_seq - 1 and p.pb.counters.num_put_status_sends == 1)
    p.a.close()
    p._collect()
    [exc] = p.completions["put"]
    assert isinstance(exc, TransportClosed)
    assert p.pa.counters.num_send_errors == 1


def test_a_status_naming_no_put_is_ignored_but_acknowledged() -> None:
    """A put status for no put waiting (a confused or old peer) completes nothing and is
    never delivered; it is acknowledged like any segment."""
    p = pair()
    seq = p.pb.next_seq
    p.pb.next_seq += 1  # b's sequence space: take one number by hand
    dg = Datagram(T_DATA, F_ACK | F_STATUS, p.pa.local_conn, p.b.incarnation, seq, p.pb.window.cum,
                  0, payload=put_status_payload(12345, PS_OUT_OF_BOUNDS))
    p.a.receive_datagram(dg.encode(), None, p.now)
    p._collect()
    assert p.delivered[0] == [] and p.pa.counters.num_put_status_recvs == 1
    assert p.pa.window.cum == seq


def test_status_goes_ahead_of_queued_bulk_but_not_inside_a_message() -> None:
    """b has a backlog for a when a's put arrives: the status is cut next (not behind the
    backlog), yet never between two chunks of one message."""
    p = pair()
    key = p.b.expose(bytearray(100))
    for i in range(6):
        p.send(1, 0, 2, data(20000, i), key=("bulk", i))
    p.send(0, 1, 4, b"x" * 10, key="put", put_key=key, put_offset=0)
    p.run(lambda: p.completions["put"])
    sent = [dg for _t, dg in p.sent(1, T_DATA)]
    at = next(i for i, dg in enumerate(sent) if dg.flags & F_STATUS)
    assert at < len(sent) - 1  # bulk was still being sent after it
    before, after = sent[at - 1], sent[at + 1]
    # the status sits between two messages, not between two chunks of one
    assert before.offset + len(before.payload) == before.msg_len and after.offset == 0
    assert p.completions["put"] == [None]
    p.run(lambda: all(p.completions[("bulk", i)] for i in range(6)))
    assert [m for _a, _t, m in p.delivered[0]] == [data(20000, i) for i in range(6)]
