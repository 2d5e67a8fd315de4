"""Scripted faults: partitions in virtual time, the Nth frame of a link, header rules."""

from __future__ import annotations

import pytest

from btlcore.device import Channel
from btlcore.errors import BtlDeprecationWarning
from btlcore.protocol import wire
from btlcore_sim import Fabric, LinkModel

from simkit import Pair, frame, paced, seq_of, tiny  # type: ignore[import-not-found]


def test_partition_drops_both_ways_only_while_in_force(make_pair) -> None:
    pair = make_pair()
    pair.fabric.partition(0.010, 0.020, ["a"], ["b"])
    sent, arrivals = paced(pair, 30, 0.001)  # frame k sent at k ms
    assert sorted(s for _, s in arrivals) == [s for s in range(30) if not 10 <= s < 20]
    assert pair.fabric.stats()["a->b"]["drops"] == {"partition": 10}
    # the other direction, and the bounds: [start, end)
    pair.fabric.partition(0.050, 0.060, ["b"], ["a"])
    for t, expect in ((0.0499, 1), (0.050, 0), (0.0599, 0), (0.060, 1)):
        pair.fabric.run(t)
        assert pair.b.post_send(Channel.DATA, pair.ba, tiny(1))
        assert len(pair.a.poll_recv(10)) == expect, t
    assert pair.fabric.stats()["b->a"]["drops"] == {"partition": 2}


def test_partition_against_the_rest_covers_nics_opened_later() -> None:
    fabric = Fabric(seed=1)
    pair = Pair(fabric)
    part = fabric.partition(0.0, None, pair.a)  # a against everyone else, forever
    c = fabric.open_device(name="c")
    to_c = pair.a.resolve(c.local_address())
    from_c = c.resolve(pair.a.local_address())
    b_to_c = pair.b.resolve(c.local_address())
    for dev, dest in ((pair.a, to_c), (c, from_c), (pair.a, pair.ab), (pair.b, pair.ba),
                      (pair.b, b_to_c)):
        assert dev.post_send(Channel.DATA, dest, tiny(1))
    fabric.run(1.0)
    assert len(c.poll_recv(10)) == 1  # only b -> c got through
    assert not pair.a.poll_recv(10) and not pair.b.poll_recv(10)
    assert fabric.totals()["drops"] == {"partition": 4}
    fabric.heal(part)
    assert pair.a.post_send(Channel.DATA, pair.ab, tiny(2))
    assert len(pair.b.poll_recv(10)) == 1


def test_partition_leaves_traffic_inside_a_group_alone() -> None:
    fabric = Fabric(seed=1)
    devs = {name: fabric.open_device(name=name) for name in "abcd"}
    fabric.partition(0.0, 1.0, ["a", "b"], ["c", "d"])
    delivered = {}
    for s in "abcd":
        for d in "abcd":
            if s != d:
                devs[s].post_send(Channel.DATA, devs[s].resolve(devs[d].local_address()), tiny(1))
    for name, dev in devs.items():
        delivered[name] = len(dev.poll_recv(10))
    assert delivered == {"a": 1, "b": 1, "c": 1, "d": 1}
    with pytest.raises(ValueError):
        fabric.partition(0.0, 1.0, ["a"], ["a", "b"])
    with pytest.raises(ValueError):
        fabric.partition(2.0, 1.0, ["a"])


def test_partition_judges_a_frame_when_it_leaves_the_rate_limiter(make_pair) -> None:
    # 8 Mb/s, 1000 B: frame k's last bit leaves at (k+1) ms; cut from 2.5 ms to 4.5 ms
    pair = make_pair(LinkModel(rate_mbps=8.0))
    pair.fabric.partition(0.0025, 0.0045, ["a"], ["b"])
    pair.send(6, size=1000)
    assert [seq_of(f) for f in pair.drain()] == [0, 1, 4, 5]


def test_drop_nth_frames_of_a_link(make_pair) -> None:
    pair = make_pair()
    pair.send(2)  # frames 1 and 2 of a->b already went (on the direct path)
    with pytest.warns(BtlDeprecationWarning):  # (the old word, kept working: faults.drop(nth=...) is the new)
        pair.fabric.drop_nth("a", "b", 3, 5, 6)
        pair.fabric.drop_nth(pair.b, pair.a, 1)
    pair.send(6, start=2)  # frames 3..8: seqs 2..7
    assert [seq_of(f) for f in pair.drain()] == [0, 1, 3, 6, 7]
    assert pair.fabric.stats()["a->b"]["drops"] == {"nth": 3}
    pair.b.post_send(Channel.DATA, pair.ba, tiny(10))
    pair.b.post_send(Channel.DATA, pair.ba, tiny(11))
    assert [seq_of(f) for f in pair.a.poll_recv(10)] == [11]
    with pytest.raises(ValueError), pytest.warns(BtlDeprecationWarning):
        pair.fabric.drop_nth("a", "b", 0)


def test_drop_matching_ack_with_a_given_ack_number(make_pair) -> None:
    pair = make_pair(LinkModel(delay=1e-4))
    with pytest.warns(BtlDeprecationWarning):
        rule = pair.fabric.drop_matching("b", "a", type="ACK", ack=7)
    for ack in (5, 6, 7, 8, 7):
        body = wire.ack_payload(64, [])
        assert pair.b.post_send(Channel.PRIORITY, pair.ba,
                                wire.Datagram(wire.T_ACK, ack=ack, payload=body).encode())
    pair.b.post_send(Channel.DATA, pair.ba, frame(7, ack=7))  # a DATA frame with ack 7: kept
    pair.fabric.run(1.0)
    got = [wire.decode(f) for f in pair.a.poll_recv(10)]
    assert [(d.type, d.ack) for d in got] == [(wire.T_ACK, 5), (wire.T_ACK, 6), (wire.T_ACK, 8),
                                              (wire.T_DATA, 7)]
    assert rule.matched == 2
    assert pair.fabric.stats()["b->a"]["drops"] == {"rule": 2}


def test_drop_matching_with_count_predicate_and_wildcards(make_pair) -> None:
    pair = make_pair()
    with pytest.warns(BtlDeprecationWarning):
        rule = pair.fabric.drop_matching(where=lambda d: d.seq % 2 == 0, count=3)
    pair.send(10)
    assert [seq_of(f) for f in pair.b.poll_recv(100)] == [1, 3, 5, 6, 7, 8, 9]
    assert rule.matched == 3 and rule.exhausted
    # an exhausted rule is removed, so the link is back on its direct path
    assert pair.ab.ideal
    for s in range(4):
        pair.b.post_send(Channel.DATA, pair.ba, tiny(s))
    assert len(pair.a.poll_recv(100)) == 4


def test_drop_matching_ignores_frames_that_do_not_decode(make_pair) -> None:
    pair = make_pair()
    with pytest.warns(BtlDeprecationWarning):
        pair.fabric.drop_matching(seq=0)
    assert pair.a.post_send(Channel.DATA, pair.ab, b"\x00" * 40)  # not btlcore
    assert pair.a.post_send(Channel.DATA, pair.ab, tiny(0))
    assert pair.b.poll_recv(10) == [b"\x00" * 40]


def test_drop_matching_validates_its_arguments(make_pair) -> None:
    pair = make_pair()
    with pytest.raises(ValueError, match="sequence"), pytest.warns(BtlDeprecationWarning):
        pair.fabric.drop_matching(sequence=3)
    with pytest.raises(ValueError, match="type"), pytest.warns(BtlDeprecationWarning):
        pair.fabric.drop_matching(type="NACK")
    with pytest.raises(ValueError), pytest.warns(BtlDeprecationWarning):
        pair.fabric.drop_matching("a", "b")
    with pytest.raises(ValueError), pytest.warns(BtlDeprecationWarning):
        pair.fabric.drop_matching(seq=1, count=0)
    with pytest.raises(ValueError), pytest.warns(BtlDeprecationWarning):
        pair.fabric.drop_matching("nobody", seq=1)
