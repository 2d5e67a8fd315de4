"""The fault vocabulary (btlcore.faults) on the simulator: on the fabric's links
(``fabric.faults``), on one endpoint of a sim transport (``btlcore.open(..., faults=)``),
and end to end through the protocol."""

from __future__ import annotations

import pytest

import btlcore
from btlcore.faults import Faults
from btlcore_sim import Fabric, LinkModel

from simkit import Pair, paced, seq_of  # type: ignore[import-not-found]


def _seqs(pair: Pair) -> list[int]:
    return [seq_of(f) for f in pair.drain()]


def test_drop_by_header_and_nth_among_those_matched(make_pair) -> None:
    pair = make_pair(LinkModel(delay=1e-4))
    rule = pair.fabric.faults.drop(src="a", dst="b", seq=range(10), nth=(2, 4))
    pair.send(12)
    assert _seqs(pair) == [0, 2, 4, 5, 6, 7, 8, 9, 10, 11]  # seqs 1 and 3: the 2nd and 4th of 0..9
    assert rule.matched == 2 and rule.seen == 10
    assert pair.fabric.stats()["a->b"]["drops"] == {"fault": 2}


def test_duplicate_delivers_the_extra_copies(make_pair) -> None:
    pair = make_pair(LinkModel(delay=1e-4))
    pair.fabric.faults.duplicate(copies=2, seq=3)
    pair.send(5)
    assert _seqs(pair) == [0, 1, 2, 3, 3, 3, 4]
    assert pair.fabric.stats()["a->b"]["duplicated"] == 2


def test_delay_lets_later_frames_overtake(make_pair) -> None:
    pair = make_pair(LinkModel(delay=1e-3))
    pair.fabric.faults.delay(0.010, seq=1)
    pair.send(4)
    arrivals = [(t, seq_of(f)) for t, f in pair.arrivals()]
    assert [s for _, s in arrivals] == [0, 2, 3, 1]
    assert arrivals[-1][0] == pytest.approx(0.011)


def test_reorder_holds_a_frame_behind_the_next_ones(make_pair) -> None:
    pair = make_pair(LinkModel(delay=1e-3, rate_mbps=8.0))  # 100 B: one frame leaves every 0.1 ms
    rule = pair.fabric.faults.reorder(after=2, seq=0)
    pair.send(5)
    assert _seqs(pair) == [1, 2, 0, 3, 4]
    assert rule.matched == 1
    assert not pair.ab.held


def test_corrupt_flips_the_bit_asked_for(make_pair) -> None:
    pair = make_pair()
    pair.fabric.faults.corrupt(bit=8 * 20 + 3, seq=2)
    pair.send(3)
    got = pair.drain()
    sent = [f for f in (_frame(s) for s in range(3))]
    assert got[0] == sent[0] and got[1] == sent[1]
    diff = [i for i, (x, y) in enumerate(zip(got[2], sent[2], strict=True)) if x != y]
    assert diff == [20] and got[2][20] ^ sent[2][20] == 0x80 >> 3
    assert pair.fabric.stats()["a->b"]["corrupted"] == 1


def _frame(seq: int) -> bytes:
    from simkit import frame  # type: ignore[import-not-found]

    return bytes(frame(seq, 100))


def test_count_ends_a_rule_and_the_link_returns_to_its_fast_path(make_pair) -> None:
    pair = make_pair()
    rule = pair.fabric.faults.drop(type="DATA", count=2)
    pair.send(4)
    assert _seqs(pair) == [2, 3]
    assert rule.exhausted and rule not in pair.fabric.faults.rules
    assert pair.ab.ideal


def test_peer_takes_both_directions_and_no_other_link() -> None:
    fabric = Fabric(seed=1)
    devs = {name: fabric.open_device(name=name) for name in "abc"}
    fabric.faults.drop(peer="b")
    from btlcore.device import Channel

    from simkit import tiny  # type: ignore[import-not-found]
    for s in "abc":
        for d in "abc":
            if s != d:
                devs[s].post_send(Channel.DATA, devs[s].resolve(devs[d].local_address()), tiny(1))
    got = {name: len(dev.poll_recv(10)) for name, dev in devs.items()}
    assert got == {"a": 1, "b": 0, "c": 1}  # only a<->c got through


def test_partition_and_time_windows_in_the_same_words(make_pair) -> None:
    pair = make_pair()
    pair.fabric.faults.partition(0.010, 0.020, ["a"], ["b"])
    pair.fabric.faults.drop(start=0.025, end=0.027)
    _sent, arrivals = paced(pair, 30, 0.001)
    assert sorted(s for _, s in arrivals) == [s for s in range(30) if not (10 <= s < 20 or 25 <= s < 27)]
    assert pair.fabric.stats()["a->b"]["drops"] == {"partition": 10, "fault": 2}


def test_probability_draws_from_the_links_seeded_stream() -> None:
    def run(seed: int) -> list[int]:
        fabric = Fabric(seed=seed)
        pair = Pair(fabric)
        fabric.faults.drop(probability=0.3)
        pair.send(200)
        return [seq_of(f) for f in pair.drain()]

    assert run(3) == run(3)
    assert run(3) != run(4)
    assert 100 < len(run(3)) < 180


def test_a_fabric_refuses_direction_and_bad_words() -> None:
    fabric = Fabric()
    with pytest.raises(ValueError, match="direction"):
        fabric.faults.drop(direction="send")
    assert not fabric.faults.rules
    with pytest.raises(ValueError, match="unknown fault criterion 'sequence'"):
        fabric.faults.drop(sequence=3)
    with pytest.raises(ValueError, match="unknown datagram type"):
        fabric.faults.drop(type="NOPE")
    with pytest.raises(ValueError, match="count from 1"):
        fabric.faults.drop(nth=0)
    with pytest.raises(ValueError, match="'seconds'"):
        fabric.faults.delay(-1)
    with pytest.raises(ValueError, match="'copies'"):
        fabric.faults.duplicate(copies=0)
    with pytest.raises(ValueError, match="'probability'"):
        fabric.faults.drop(probability=2)
    with pytest.raises(ValueError, match="no NIC named 'z'"):
        fabric.faults.drop(peer="z")
    assert not fabric.faults.rules  # (taken back: the fabric goes on without it)
    rule = fabric.faults.drop(msg_id=None, type=["DATA", "ACK"])  # any hashable value, or several
    assert rule.fields == {"msg_id": frozenset([None]), "type": frozenset([1, 2])}


def _transfer(fabric: Fabric, size: int = 200_000, **faults: Faults) -> tuple[btlcore.Transport, btlcore.Transport]:
    a = btlcore.open("sim", fabric=fabric, name="a", faults=faults.get("a"))
    b = btlcore.open("sim", fabric=fabric, name="b", faults=faults.get("b"))
    got: list[bytes] = []
    b.on(7, lambda peer, tag, data: got.append(bytes(data)))
    payload = bytes(range(256)) * (size // 256)
    a.send(a.connect(b.address), 7, payload)
    btlcore.run_until([a, b], lambda: got, timeout=30)
    assert got == [payload]
    return a, b


def test_the_protocol_survives_every_word_on_the_fabric() -> None:
    fabric = Fabric(seed=2, default=LinkModel(delay=1e-3))
    f = fabric.faults
    rules = [f.drop(type="DATA", nth=(3, 4, 5)), f.drop(type="ACK", nth=2),
             f.duplicate(type="DATA", nth=7), f.delay(0.005, type="DATA", nth=9),
             f.reorder(after=3, type="DATA", nth=11), f.corrupt(type="DATA", nth=13)]
    a, b = _transfer(fabric)
    assert [r.matched for r in rules] == [3, 1, 1, 1, 1, 1]
    st = b.stats()
    assert st["num_crc_errors"] == 1 and st["num_dup_recvs"] >= 1
    assert a.stats()["num_resends"] >= 3


def test_the_same_words_on_one_sim_endpoint() -> None:
    fabric = Fabric(seed=2, default=LinkModel(delay=1e-3))
    on_a = Faults(seed=1)
    sent = on_a.drop(direction="send", type="DATA", nth=(2, 3))
    heard = on_a.corrupt(direction="recv", type="ACK", nth=1)
    on_b = Faults(seed=1)
    dup = on_b.duplicate(direction="recv", type="DATA", nth=4)
    held = on_b.reorder(after=2, direction="recv", type="DATA", nth=6)
    late = on_b.delay(0.004, direction="send", type="ACK", nth=3)
    a, b = _transfer(fabric, a=on_a, b=on_b)
    assert (sent.matched, heard.matched, dup.matched, held.matched, late.matched) == (2, 1, 1, 1, 1)
    assert fabric.totals()["dropped"] == 0  # nothing was lost on the links themselves
    assert a.stats()["num_crc_errors"] == 1
    assert b.stats()["num_dup_recvs"] >= 1


def test_an_endpoint_peer_rule_takes_only_that_peer() -> None:
    fabric = Fabric(seed=3)
    plan = Faults()
    a = btlcore.open("sim", fabric=fabric, name="a", faults=plan)
    b = btlcore.open("sim", fabric=fabric, name="b")
    c = btlcore.open("sim", fabric=fabric, name="c")
    rule = plan.partition(0.0, None, [c.address])
    got: list[bytes] = []
    b.on(1, lambda peer, tag, data: got.append(data))
    c.on(1, lambda peer, tag, data: got.append(data))
    a.send(a.connect(b.address), 1, b"to b")
    a.send(a.connect(c.address), 1, b"to c")
    btlcore.run_until([a, b, c], lambda: got, timeout=5)
    a.progress(0.5)
    assert got == [b"to b"] and rule.matched >= 1


def test_no_plan_no_interposer() -> None:
    from btlcore.interpose import Interposer

    with btlcore.open("sim", fabric=Fabric()) as plain:
        assert not isinstance(getattr(plain.device.post_send, "__self__", None), Interposer)
    with btlcore.open("sim", fabric=Fabric(), faults=Faults()) as hurt:
        assert isinstance(getattr(hurt.device.post_send, "__self__", None), Interposer)


@pytest.mark.parametrize("direction", ["send", "recv"])
def test_a_plan_that_corrupts_is_caught_on_a_fabric_that_promises_integrity(direction: str) -> None:
    """The fabric's NICs promise intact frames, so crc='auto' would send no CRC32C; an
    endpoint with a faults plan reports no integrity (its plan may flip bits), so the CRC is
    back on that endpoint's connections and the flipped bit is caught, not delivered."""
    fabric = Fabric(seed=2, integrity=True)
    plan = Faults(seed=1)
    bad = plan.corrupt(direction=direction, type="DATA", nth=2)
    hurt = btlcore.open("sim", fabric=fabric, name="hurt", faults=plan)
    other = btlcore.open("sim", fabric=fabric, name="other")
    assert hurt.capabilities.integrity is False and hurt.engine.crc is True
    assert other.engine.crc is False
    big = bytes(range(256)) * 100
    got: list[bytes] = []
    sender, receiver = (hurt, other) if direction == "send" else (other, hurt)
    receiver.on(1, lambda peer, tag, data: got.append(bytes(data)))
    sender.send(sender.connect(receiver.address), 1, big)
    assert btlcore.run_until([hurt, other], lambda: bool(got), timeout=5)
    assert bad.matched == 1 and got == [big]
    assert receiver.stats()["num_crc_errors"] == 1
