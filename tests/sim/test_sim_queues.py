"""Queue sizes (bytes or a multiple of the BDP) and the shared bottleneck with its AQM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from btlcore.device import Channel
from btlcore.errors import ConfigError
from btlcore_sim import Bottleneck, Fabric, LinkModel, parse_queue
from btlcore_sim.queues import MIN_QUEUE_FRAMES

from simkit import Pair, frame, seq_of, tiny  # type: ignore[import-not-found]

# 8 Mb/s is one byte per microsecond: a 1000-byte frame takes 1 ms on the wire


@pytest.mark.parametrize(("text", "expected"), [
    ("65536", (65536, 0.0)), ("64K", (65536, 0.0)), ("1M", (1 << 20, 0.0)), ("1.5m", (3 << 19, 0.0)),
    ("2bdp", (0, 2.0)), ("0.5BDP", (0, 0.5)), (" 1 bdp ", (0, 1.0)), ("100b", (100, 0.0)),
])
def test_parse_queue_takes_bytes_or_a_multiple_of_the_bdp(text: str, expected: tuple[int, float]) -> None:
    assert parse_queue(text) == expected


@pytest.mark.parametrize("text", ["", "bdp", "2x", "-1", "0bdp", "0", "1e3", "2 bdps"])
def test_parse_queue_refuses_other_text_naming_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="2bdp"):
        parse_queue(text)


def test_queue_bytes_and_bdp_cannot_both_be_given() -> None:
    with pytest.raises(ConfigError, match="queue_bdp"):
        LinkModel(rate_mbps=8.0, queue_limit=1000, queue_bdp=1.0)
    with pytest.raises(ConfigError, match="queue_bdp"):
        LinkModel(queue_bdp=-1.0)


def _accepted(pair: Pair, n: int = 50, size: int = 1000) -> list[int]:
    pair.send(n, size=size)
    return [seq_of(f) for f in pair.drain()]


def test_a_bdp_queue_holds_rate_times_the_round_trip(make_pair) -> None:
    # 5 ms each way: round trip 10 ms, BDP 10,000 bytes at 8 Mb/s
    pair = make_pair(LinkModel(rate_mbps=8.0, delay=0.005, queue_bdp=1.0, mtu=1000))
    assert pair.ab.queue_limit == 10_000
    assert _accepted(pair) == list(range(10))
    assert pair.fabric.stats()["a->b"]["drops"] == {"queue": 40}


def test_the_round_trip_counts_the_way_back_and_follows_its_changes(make_pair) -> None:
    pair = make_pair(LinkModel(rate_mbps=8.0, delay=0.005, queue_bdp=2.0, mtu=1000))
    link = pair.ab
    assert link.queue_limit == 20_000
    pair.fabric.set_link("b", "a", LinkModel(delay=0.015))  # round trip 20 ms now
    assert link.queue_limit == 40_000


def test_a_small_multiple_still_queues_a_few_datagrams(make_pair) -> None:
    pair = make_pair(LinkModel(rate_mbps=8.0, delay=1e-5, queue_bdp=0.1, mtu=1000))
    assert pair.ab.queue_limit == MIN_QUEUE_FRAMES * 1000
    assert _accepted(pair) == list(range(MIN_QUEUE_FRAMES))


def test_a_queue_in_bytes_is_taken_as_given(make_pair) -> None:
    pair = make_pair(LinkModel(rate_mbps=8.0, delay=0.005, queue_limit=3000))
    assert _accepted(pair) == [0, 1, 2]


# -- the shared bottleneck --------------------------------------------------------------------


class Quad:
    """Senders a and c, receivers b and d: a->b and c->d feed one bottleneck."""

    def __init__(self, fabric: Fabric, **bottleneck: Any) -> None:
        self.fabric = fabric
        self.dev = {n: fabric.open_device(name=n) for n in "abcd"}
        self.ab = self.dev["a"].resolve(self.dev["b"].local_address())
        self.cd = self.dev["c"].resolve(self.dev["d"].local_address())
        self.bn = fabric.bottleneck([("a", "b"), ("c", "d")], **bottleneck)

    def drain(self) -> dict[str, list[tuple[float, int]]]:
        got: dict[str, list[tuple[float, int]]] = {"b": [], "d": []}
        while True:
            self.dev["a"].wait(None)
            for n in "bd":
                got[n].extend((self.fabric.now, seq_of(f)) for f in self.dev[n].poll_recv(1 << 30))
            if not self.fabric.heap and not self.fabric.landed:
                return got


def test_two_pairs_share_one_rate_and_one_drop_tail_queue() -> None:
    with Fabric(seed=1, default=LinkModel(delay=0.001)) as fab:
        q = Quad(fab, rate_mbps=8.0, queue_limit=10_000)
        for seq in range(10):  # alternately: the queue takes the first ten of twenty
            assert q.dev["a"].post_send(Channel.DATA, q.ab, frame(seq, 1000))
            assert q.dev["c"].post_send(Channel.DATA, q.cd, frame(100 + seq, 1000))
        got = q.drain()
        assert [s for _, s in got["b"]] == [0, 1, 2, 3, 4]
        assert [s for _, s in got["d"]] == [100, 101, 102, 103, 104]
        # serialised one after another at the shared rate: 1 ms each, in arrival order
        times = sorted(t for v in got.values() for t, _ in v)
        assert times == pytest.approx([0.001 * (k + 1) + 0.001 for k in range(10)])
        st = q.bn.stats()
        assert (st["offered"], st["sent"], st["drops"]) == (20, 10, {"queue": 10})
        assert fab.stats()["a->b"]["drops"] == {"queue": 5} and fab.stats()["c->d"]["drops"] == {"queue": 5}
        assert fab.queue_stats() == {"bottleneck1": st}


def test_a_bottleneck_sized_in_bdp_uses_the_longest_round_trip() -> None:
    with Fabric(seed=1, default=LinkModel(delay=0.005)) as fab:
        q = Quad(fab, rate_mbps=80.0, queue_bdp=1.0)
        fab.set_link("c", "d", LinkModel(delay=0.010), both_ways=True)  # its round trip 20 ms
        assert q.bn.limit == 200_000 and q.bn.rtt == pytest.approx(0.02)


def test_a_direction_feeds_one_bottleneck_and_bad_parameters_are_named() -> None:
    with Fabric(seed=1) as fab:
        q = Quad(fab, rate_mbps=8.0)
        with pytest.raises(ValueError, match="already feeds bottleneck 'bottleneck1'"):
            fab.bottleneck([("c", "d")], rate_mbps=1.0)
        with pytest.raises(ConfigError, match="aqm.*droptail, codel"):
            fab.bottleneck([("b", "a")], rate_mbps=1.0, aqm="red")
        with pytest.raises(ConfigError, match="rate_mbps"):
            fab.bottleneck([("b", "a")], rate_mbps=0)
        with pytest.raises(ValueError, match="at least one"):
            fab.bottleneck([], rate_mbps=1.0)
        assert q.bn.limit == 0  # no size given: unlimited


def _overload(aqm: str, load: float = 1.2, n: int = 3000) -> tuple[Bottleneck, list[tuple[float, float]]]:
    """Both senders at ``load / 2`` of the rate each into an unlimited queue; each frame b
    receives as ``(arrival time, queueing delay)``."""
    with Fabric(seed=3, default=LinkModel()) as fab:
        q = Quad(fab, rate_mbps=8.0, aqm=aqm)
        sent: dict[int, float] = {}
        delays: list[tuple[float, float]] = []
        interval = 1000 / 1e6 / (load / 2)
        for seq in range(n):
            t = seq * interval
            fab.run(t)
            sent[seq] = t
            assert q.dev["a"].post_send(Channel.DATA, q.ab, tiny(seq, 1000))
            assert q.dev["c"].post_send(Channel.DATA, q.cd, tiny(seq, 1000))
            delays.extend((fab.now, fab.now - sent[seq_of(f)]) for f in q.dev["b"].poll_recv(1 << 30))
            q.dev["d"].poll_recv(1 << 30)
        return q.bn, delays


def test_drop_tail_lets_a_standing_queue_grow_and_codel_cuts_it() -> None:
    tail, tail_delays = _overload("droptail")
    codel, codel_delays = _overload("codel")
    assert tail.stats()["dropped"] == 0 and tail_delays[-1][1] > 0.5  # the backlog only grows
    drops = codel.stats()["drops"]
    assert drops.get("aqm", 0) > 50 and "queue" not in drops
    # CoDel waits for the delay to stay above its 5 ms target for 100 ms before the first drop
    first_above = next(t for t, d in codel_delays if d > 0.005)
    # against senders that never slow down it can only slow the growth: its drop rate grows
    # as the square root of the drop count (RFC 8289's control law)
    assert codel_delays[-1][1] < tail_delays[-1][1] / 2
    assert all(d <= 0.005 + 0.1 + 0.002 for t, d in codel_delays if t < first_above + 0.1)


def _competing_run(seed: int) -> tuple[Any, ...]:
    from btlcore import open as open_transport
    from btlcore import run_until

    with Fabric(seed=seed, default=LinkModel(delay=0.002, loss=0.01)) as fab:
        ts = {n: open_transport("sim", fabric=fab, name=n, seed=seed) for n in "abcd"}
        fab.bottleneck([("a", "b"), ("c", "d")], rate_mbps=50.0, queue_bdp=1.0, aqm="codel")
        done: list[Any] = []
        for s, r in (("a", "b"), ("c", "d")):
            peer = ts[s].connect(ts[r].address)
            for _ in range(20):
                ts[s].send(peer, 1, bytes(50_000), done.append)
        run_until(list(ts.values()), lambda: len(done) == 40, timeout=60.0)
        out = (fab.now, json.dumps(fab.stats(), sort_keys=True), json.dumps(fab.queue_stats(), sort_keys=True))
        for t in ts.values():
            t.close()
        assert done == [None] * 40
        return out


def test_flows_through_a_bottleneck_replay_exactly_with_the_same_seed() -> None:
    first = _competing_run(5)
    assert _competing_run(5) == first
    assert json.loads(first[2])["bottleneck1"]["dropped"] > 0  # the queue did act
    assert _competing_run(6) != first


# -- btl transfer --queue ------------------------------------------------------------------------


def _btl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BTL_")}
    return subprocess.run([sys.executable, "-m", "btlcore.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.mark.parametrize(("queue", "expected"), [
    ((), 100e6 / 8 * 0.02),  # the default: one BDP, 100 Mb/s x 20 ms
    (("--queue", "2bdp"), 2 * 100e6 / 8 * 0.02),
    (("--queue", "64K"), 65536),
])
def test_transfer_queue_flag_sets_the_queue_in_force(queue: tuple[str, ...], expected: float) -> None:
    r = _btl("transfer", "--rate", "100", "--delay", "10", *queue, "--messages", "5", "--seed", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["queue_bytes"] == int(expected)


def test_transfer_queue_without_rate_is_a_usage_error() -> None:
    r = _btl("transfer", "--queue", "2bdp", "--messages", "5")
    assert r.returncode == 2 and "give --rate" in r.stderr.strip().splitlines()[-1]
