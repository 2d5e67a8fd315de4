"""Seeded simulator scenarios whose captures and counters pin down today's protocol.

Each scenario drives transports through the public API only (``btlcore.open("sim", ...)``,
``connect/send/on/put/expose/close``, ``btlcore.run_until``) on a sim ``Fabric`` that
writes a pcapng of every frame and every drop.  :func:`run_scenario` returns what the
application saw (deliveries, completions, put outcomes, peer events, per peer and with
their virtual times) and every counter (each transport's ``stats()``, the fabric's per-link
stats).  Virtual time and one seed per scenario make all of it replayable, so a change of
the protocol core that is meant to change nothing can be proven to change nothing (see
README.md here; ``record.py`` stores the results, ``test_golden.py`` compares).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

import attrs

import btlcore
from btlcore import Config, Peer, Transport
from btlcore_sim import Fabric, LinkModel

# the one place the codec is imported: its import name is moving
try:
    from btlcore.protocol import wire  # type: ignore[import-not-found, attr-defined]
except ImportError:
    from btlcore import wire

__all__ = ["SCENARIOS", "Fabric", "LinkModel", "Scenario", "run_scenario", "wire"]

#: a pattern for payloads: distinct per message, cheap to compress in the stored captures
_TEXT = b"btlcore golden capture: the quick brown fox jumps over the lazy dog 0123456789. "


def payload(label: str, n: int) -> bytes:
    """``n`` bytes that say which message they are, repeated text after that."""
    head = f"[{label}:{n}]".encode()
    body = head + _TEXT * (n // len(_TEXT) + 1)
    return body[:n]


def _ns(t: float) -> int:
    return int(round(t * 1e9))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _exc_name(exc: BaseException | None) -> str:
    return "ok" if exc is None else type(exc).__name__


class Node:
    """One transport (one life of a node) and what its application observed, per peer."""

    __slots__ = ("label", "name", "transport", "log")

    def __init__(self, label: str, name: str, transport: Transport) -> None:
        self.label = label
        self.name = name
        self.transport = transport
        self.log: dict[str, dict[str, list[list[Any]]]] = {}

    def peer_log(self, peer_name: str) -> dict[str, list[list[Any]]]:
        """The lists of one peer: delivered, completed, puts, events."""
        log = self.log.get(peer_name)
        if log is None:
            log = self.log[peer_name] = {"delivered": [], "completed": [], "puts": [], "events": []}
        return log


class Run:
    """A fabric, its transports, and the record of one scenario run."""

    __slots__ = ("fabric", "nodes", "names", "notes", "_lives", "_stats")

    def __init__(self, seed: int, pcap: str | os.PathLike[str], default: LinkModel) -> None:
        self.fabric = Fabric(seed=seed, default=default, pcap=pcap)
        self.nodes: list[Node] = []
        self.names: dict[bytes, str] = {}
        self.notes: dict[str, Any] = {}
        """Anything else a scenario checks at its end (say, a digest of a put region)."""
        self._lives: dict[str, int] = {}
        self._stats: dict[str, dict[str, int]] = {}

    # -- nodes -----------------------------------------------------------------------------

    def open(self, name: str, config: Config | None = None, tags: tuple[int, ...] = (1, 2, 3),
             **options: Any) -> Node:
        """A transport named ``name`` (a second life of a name is labelled ``name#2``) with
        handlers that record every delivery, put and peer event."""
        life = self._lives.get(name, 0) + 1
        self._lives[name] = life
        label = name if life == 1 else f"{name}#{life}"
        t = btlcore.open("sim", fabric=self.fabric, name=name, config=config or Config(), **options)
        node = Node(label, name, t)
        self.names[t.address] = name
        for tag in tags:
            t.on(tag, self._on_message(node))
        t.on_put(self._on_put(node, "landed"), on_error=self._on_put(node, "refused"))
        t.on_peer(self._on_peer(node))
        self.nodes.append(node)
        return node

    def reopen(self, node: Node, config: Config | None = None, **kw: Any) -> Node:
        """A new life of ``node`` at its address (a restarted process)."""
        return self.open(node.name, config, address=node.transport.address, **kw)

    def kill(self, node: Node) -> None:
        """``node`` vanishes without a word (a crashed process: not even the CLOSE of its
        ``close()`` arrives); its counters are kept."""
        node.transport.engine.close()  # (no CLOSE, and no wait for its acknowledgement)
        node.transport.close(flush=False)
        self._stats[node.label] = node.transport.stats()

    def peer_name(self, peer: Peer) -> str:
        return self.names.get(bytes(peer.address), bytes(peer.address).hex())

    def _on_message(self, node: Node) -> Callable[[Peer, int, bytes], None]:
        def handler(peer: Peer, tag: int, data: bytes) -> None:
            data = bytes(data)
            node.peer_log(self.peer_name(peer))["delivered"].append(
                [_ns(node.transport.now()), tag, len(data), _digest(data)])
        return handler

    def _on_put(self, node: Node, outcome: str) -> Callable[[Peer, int, int, int], None]:
        def handler(peer: Peer, key: int, offset: int, length: int) -> None:
            node.peer_log(self.peer_name(peer))["puts"].append(
                [_ns(node.transport.now()), outcome, key, offset, length])
        return handler

    def _on_peer(self, node: Node) -> Callable[[str, Peer, BaseException | None], None]:
        def handler(event: str, peer: Peer, exc: BaseException | None) -> None:
            node.peer_log(self.peer_name(peer))["events"].append(
                [_ns(node.transport.now()), event, _exc_name(exc)])
        return handler

    # -- traffic ---------------------------------------------------------------------------

    def completion(self, node: Node, dst: str, what: str) -> Callable[[BaseException | None], None]:
        def callback(exc: BaseException | None) -> None:
            node.peer_log(dst)["completed"].append([_ns(node.transport.now()), what, _exc_name(exc)])
        return callback

    def send(self, src: Node, dst: Node | bytes, tag: int, data: bytes, what: str) -> None:
        """``src`` sends ``data`` to ``dst``; its completion is recorded under ``what``."""
        address = dst.transport.address if isinstance(dst, Node) else dst
        peer = src.transport.connect(address)
        src.transport.send(peer, tag, data, self.completion(src, self.peer_name(peer), what))

    def put(self, src: Node, dst: Node, key: int, offset: int, data: bytes, what: str) -> None:
        peer = src.transport.connect(dst.transport.address)
        src.transport.put(peer, key, offset, data, self.completion(src, self.peer_name(peer), what))

    def completed(self, node: Node) -> int:
        return sum(len(log["completed"]) for log in node.log.values())

    def delivered(self, node: Node) -> int:
        return sum(len(log["delivered"]) for log in node.log.values())

    def run(self, until: Callable[[], bool], nodes: list[Node] | None = None,
            timeout: float = 30.0) -> None:
        """Progress the live transports (or ``nodes``) until ``until()`` holds."""
        live = [n.transport for n in (self.nodes if nodes is None else nodes) if not n.transport.closed]
        btlcore.run_until(live, until, timeout=timeout)

    # -- the record ------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """Close every live transport (flushing: the close is captured too), then the
        fabric; return the scenario's record."""
        for node in self.nodes:
            if not node.transport.closed:
                node.transport.close()
                self._stats[node.label] = node.transport.stats()
        end = _ns(self.fabric.now)
        fabric_stats = self.fabric.stats()
        self.fabric.close()
        return {
            "end_ns": end,
            "stats": {n.label: self._stats[n.label] for n in self.nodes},
            "links": fabric_stats,
            "app": {n.label: n.log for n in self.nodes},
            "notes": self.notes,
        }


@attrs.define(slots=True, frozen=True)
class Scenario:
    """A named, seeded run.  ``per_peer``: compare each (src, dst) frame sequence rather
    than the global order (many peers due at one instant may be served in any order)."""

    name: str
    seed: int
    link: LinkModel
    body: Callable[[Run], None]
    per_peer: bool = False
    doc: str = ""


SCENARIOS: dict[str, Scenario] = {}

#: environment variables that ``btlcore.open`` reads and a golden run must not see
IGNORED_ENV = ("BTL_SEED", "BTL_PLUGINS")


def scenario(name: str, seed: int, link: LinkModel, per_peer: bool = False
             ) -> Callable[[Callable[[Run], None]], Callable[[Run], None]]:
    def register(body: Callable[[Run], None]) -> Callable[[Run], None]:
        SCENARIOS[name] = Scenario(name, seed, link, body, per_peer, (body.__doc__ or "").strip())
        return body
    return register


def run_scenario(name: str, pcap: str | os.PathLike[str]) -> dict[str, Any]:
    """Run scenario ``name``, capturing into ``pcap``; return its record (JSON-able)."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; scenarios: {', '.join(SCENARIOS)}")
    sc = SCENARIOS[name]
    # BTL_SEED would replace the seeds derived from the fabric's, and BTL_PLUGINS add frame
    # hooks that change how datagrams are posted: a golden run sees neither
    saved = {k: os.environ.pop(k) for k in IGNORED_ENV if k in os.environ}
    try:
        run = Run(sc.seed, pcap, sc.link)
        try:
            sc.body(run)
            record = run.finish()
        finally:
            run.fabric.close()
    finally:
        os.environ.update(saved)
    return {"scenario": name, "seed": sc.seed, "per_peer": sc.per_peer, **record}


# -- the scenarios ---------------------------------------------------------------------------

SIZES = (10, 300, 700, 1400, 5000, 20000)


def _exchange(run: Run, a: Node, b: Node, count: int, sizes: tuple[int, ...] = SIZES,
              both_ways: bool = True) -> None:
    """``count`` messages a -> b (and b -> a) of cycling sizes and tags, run to completion."""
    pairs = [(a, b), (b, a)] if both_ways else [(a, b)]
    for i in range(count):
        for src, dst in pairs:
            size = sizes[i % len(sizes)]
            run.send(src, dst, 1 + i % 3, payload(f"{src.label}>{dst.label}#{i}", size),
                     f"send {i}")
    sent = {s.label: run.completed(s) + count for s, _ in pairs}
    got = {d.label: run.delivered(d) + count for _, d in pairs}
    run.run(lambda: all(run.completed(s) == sent[s.label] for s, _ in pairs)
            and all(run.delivered(d) == got[d.label] for _, d in pairs))


@scenario("loss_ordered", seed=101, link=LinkModel(loss=0.08, delay=50e-6))
def loss_ordered(run: Run) -> None:
    """Random loss, ordered delivery, messages from 10 B to 20 kB (chunked) both ways."""
    cfg = Config(mtu=1500)
    a, b = run.open("a", cfg), run.open("b", cfg)
    _exchange(run, a, b, 24)


@scenario("burst_unordered", seed=102, link=LinkModel(burst=(0.1, 4.0), delay=40e-6))
def burst_unordered(run: Run) -> None:
    """Gilbert-Elliott burst loss, unordered delivery, one way then the other."""
    cfg = Config(mtu=1500, ordered=False)
    a, b = run.open("a", cfg), run.open("b", cfg)
    _exchange(run, a, b, 24, both_ways=False)
    _exchange(run, b, a, 12, both_ways=False)


@scenario("reorder_duplicate", seed=103,
          link=LinkModel(delay=80e-6, jitter=20e-6, jitter_dist="uniform", reorder=0.15,
                         duplicate=0.1))
def reorder_duplicate(run: Run) -> None:
    """Reordering (netem-style and by jitter) and duplicates, ordered delivery."""
    cfg = Config(mtu=2000)
    a, b = run.open("a", cfg), run.open("b", cfg)
    _exchange(run, a, b, 24)


@scenario("corrupt_unordered", seed=104, link=LinkModel(corrupt=0.06, loss=0.02, delay=30e-6))
def corrupt_unordered(run: Run) -> None:
    """Bit flips caught by the CRC (and some loss), unordered delivery."""
    cfg = Config(mtu=1500, ordered=False)
    a, b = run.open("a", cfg), run.open("b", cfg)
    _exchange(run, a, b, 20)


@scenario("jitter_rate_limit", seed=105,
          link=LinkModel(delay=100e-6, jitter=40e-6, jitter_dist="pareto", rate_mbps=200.0,
                         queue_limit=24000))
def jitter_rate_limit(run: Run) -> None:
    """Delay with heavy-tailed jitter behind a 200 Mb/s rate limit that tail-drops:
    larger messages (up to 60 kB) in a burst, ordered, with the default MTU."""
    a, b = run.open("a"), run.open("b")
    _exchange(run, a, b, 12, sizes=(64, 9000, 30000, 60000))


@scenario("mix_unordered_echo", seed=106,
          link=LinkModel(loss=0.04, burst=(0.03, 2.0), delay=60e-6, jitter=15e-6, reorder=0.05,
                         duplicate=0.05, corrupt=0.03, rate_mbps=1000.0))
def mix_unordered_echo(run: Run) -> None:
    """Every impairment at once; b echoes each message back from its handler (replies
    carry the ACKs), unordered delivery."""
    cfg = Config(mtu=1500, ordered=False)
    a, b = run.open("a", cfg), run.open("b", cfg, tags=(1, 2, 3))
    echoed: list[int] = []

    def echo(peer: Peer, tag: int, data: bytes) -> None:
        b.peer_log(run.peer_name(peer))["delivered"].append(
            [_ns(b.transport.now()), tag, len(data), _digest(bytes(data))])
        b.transport.send(peer, 4, bytes(data)[: max(1, len(data) // 2)],
                         run.completion(b, run.peer_name(peer), f"echo {len(echoed)}"))
        echoed.append(tag)

    for tag in (1, 2, 3):
        b.transport.on(tag, echo)
    a.transport.on(4, run._on_message(a))
    for i in range(20):
        run.send(a, b, 1 + i % 3, payload(f"mix#{i}", SIZES[i % len(SIZES)]), f"send {i}")
    run.run(lambda: run.completed(a) == 20 and run.delivered(a) == 20 and run.completed(b) == 20)


@scenario("scripted_drops", seed=107, link=LinkModel(delay=50e-6))
def scripted_drops(run: Run) -> None:
    """Scripted faults only: the 3rd, 4th and 10th frames a -> b, the first three ACKs
    b -> a, four DATA frames a -> b whose seq is 5 modulo 7, and a 5 ms partition of a."""
    cfg = Config(mtu=1500)
    a, b = run.open("a", cfg), run.open("b", cfg)
    fab = run.fabric
    fab.faults.drop(src="a", dst="b", nth={3, 4, 10}, cause="nth")
    fab.faults.drop(src="b", dst="a", type="ACK", count=3, cause="rule")
    fab.faults.drop(src="a", dst="b", where=lambda dg: dg.type == wire.T_DATA and dg.seq % 7 == 5,
                    count=4, cause="rule")
    fab.partition(0.00012, 0.0052, ["a"])
    _exchange(run, a, b, 16)


@scenario("puts", seed=108, link=LinkModel(loss=0.05, duplicate=0.1, delay=50e-6))
def puts(run: Run) -> None:
    """Puts, single-datagram and chunked, landing and refused (unknown key, out of
    bounds), over loss and duplication, alongside messages."""
    cfg = Config(mtu=1500)
    a, b = run.open("a", cfg), run.open("b", cfg)
    region = bytearray(40000)
    key = b.transport.expose(region)
    cases = [(key, 0, 100), (key, 1000, 9000), (key + 7, 0, 10), (key + 7, 0, 6000),
             (key, 39990, 20), (key, 30000, 9000), (key, 20000, 3000), (key, 12000, 700)]
    for i, (k, off, n) in enumerate(cases):
        run.put(a, b, k, off, payload(f"put#{i}", n), f"put {i}")
        run.send(a, b, 1, payload(f"msg#{i}", 200 * (i + 1)), f"send {i}")
    run.run(lambda: run.completed(a) == 2 * len(cases) and run.delivered(b) == len(cases))
    run.notes["region"] = [len(region), _digest(bytes(region))]


@scenario("peer_restart", seed=109, link=LinkModel(delay=50e-6, loss=0.02))
def peer_restart(run: Run) -> None:
    """b dies with messages in flight to it, comes back at its address as a new
    incarnation; a's stale sends fail with PeerRestarted, fresh ones reach the new b."""
    cfg = Config(mtu=1500)
    a, b = run.open("a", cfg), run.open("b", cfg)
    _exchange(run, a, b, 6)
    run.kill(b)
    for i in range(5):
        run.send(a, b.transport.address, 1, payload(f"stale#{i}", 300 + 2000 * i), f"stale {i}")
    a.transport.progress()
    b2 = run.reopen(b, cfg)
    b2.transport.connect(a.transport.address)
    run.run(lambda: run.completed(a) == 6 + 5)
    _exchange(run, a, b2, 6)


@scenario("peer_death", seed=110, link=LinkModel(delay=50e-6, loss=0.01))
def peer_death(run: Run) -> None:
    """A partition that never heals cuts b off mid-transfer: with peer_timeout 0.2 s both
    sides declare the other failed and every pending send fails with PeerUnreachable."""
    cfg = Config(mtu=1500, peer_timeout=0.2)
    a, b = run.open("a", cfg), run.open("b", cfg)
    _exchange(run, a, b, 4)
    run.fabric.partition(run.fabric.now, None, ["b"])
    for i in range(8):
        run.send(a, b, 1, payload(f"doomed-a#{i}", 1000 + 3000 * i), f"doomed {i}")
        run.send(b, a, 2, payload(f"doomed-b#{i}", 500 + 1000 * i), f"doomed {i}")
    run.run(lambda: run.completed(a) == 4 + 8 and run.completed(b) == 4 + 8, timeout=5.0)


@scenario("many_peers", seed=111,
          link=LinkModel(loss=0.03, delay=30e-6, jitter=8e-6, duplicate=0.02), per_peer=True)
def many_peers(run: Run) -> None:
    """One hub and 12 spokes: each spoke sends the hub a few messages and the hub answers
    each spoke with its own; the hub accepts the spokes' handshakes."""
    cfg = Config(mtu=1500)
    hub = run.open("hub", cfg)
    spokes = [run.open(f"s{i:02d}", cfg) for i in range(12)]
    for i, s in enumerate(spokes):
        for j in range(3):
            run.send(s, hub, 1 + j, payload(f"{s.label}>hub#{j}", (100, 1400, 4000)[j] + i), f"send {j}")
    run.run(lambda: run.delivered(hub) == 36)
    for i, s in enumerate(spokes):
        for j in range(2):
            run.send(hub, s, 2, payload(f"hub>{s.label}#{j}", (700, 3000)[j] + 10 * i), f"reply {j}")
    run.run(lambda: run.completed(hub) == 24 and all(run.completed(s) == 3 for s in spokes)
            and all(run.delivered(s) == 2 for s in spokes))


BULK_SIZES = (200_000, 400_000, 300_000)


@scenario("bulk_lossless", seed=112, link=LinkModel(delay=100e-6, rate_mbps=1000.0))
def bulk_lossless(run: Run) -> None:
    """Bulk over a clean 1 Gb/s link with 100 us delay: 200-400 kB messages a -> b stream
    full segments while cwnd grows past its initial 32, and b's standalone ACKs come every
    ack_frequency segments (a segment is 12 us on the wire, well inside ack_delay)."""
    cfg = Config(mtu=1500)
    a, b = run.open("a", cfg), run.open("b", cfg)
    _exchange(run, a, b, 3, sizes=BULK_SIZES, both_ways=False)


@scenario("bulk_light_loss", seed=113,
          link=LinkModel(loss=0.005, reorder=0.002, delay=100e-6, rate_mbps=1000.0))
def bulk_light_loss(run: Run) -> None:
    """The bulk run of bulk_lossless at 0.5 % loss and a little reordering: fast
    retransmit and the congestion window's cuts in the middle of a long stream."""
    cfg = Config(mtu=1500)
    a, b = run.open("a", cfg), run.open("b", cfg)
    _exchange(run, a, b, 3, sizes=BULK_SIZES, both_ways=False)
