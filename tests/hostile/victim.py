"""The victim's side of the hostile-sender tests: a live pair of real udp transports doing a
verified transfer, the attacker's process fired at it, and the victim process's memory measured
while it lasts.

``LivePair`` opens the victim (the receiving transport, the one attacked) and its live peer (the
sender), both on loopback in this process; the peer sends framed messages (``btlcore.verify``)
a few at a time and the victim checks each one.  ``run_attack`` starts ``attacker.py`` in its own
process (its allocations are not ours), keeps the pair progressing until it has finished and the
transfer has caught up, and returns what happened: the attacker's report, the victim's memory
growth (tracemalloc's peak of traced bytes, and the RSS), the peer events, the counters.
"""

from __future__ import annotations

import gc
import json
import selectors
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import btlcore
from btlcore.verify import TAG_DATA, Verifier, make_messages

from attacker import frames, parse, wire

ATTACKER = Path(__file__).with_name("attacker.py")
MB = 1 << 20
#: A hostile sender must never make the victim's memory grow by more than this, measured both
#: ways (traced bytes and RSS).  Tighter than the budgets docs/api.md documents (reassembly:
#: ``recv_buffer``, 16 MiB, per peer beyond one message, ``reassembly_limit``, 1 GiB, per
#: transport; unknown senders O(1)): these attacks reach one live peer's budget at most.
BUDGET_MB = 64
BUDGET = BUDGET_MB * MB
#: how long any one attack may keep a test waiting (the attacker's process included)
ATTACK_TIMEOUT = 60.0
#: the pair's ``peer_timeout`` (the default is 10 s)
PEER_TIMEOUT = 30.0
#: how long the transfer may take to catch up once the attack has ended
CATCH_UP = 10.0


#: words in the names of the counters that count datagrams dropped as hostile or broken (today
#: malformed, CRC errors, unknown connections, stale; the hardened protocol may add counters for
#: unexpected sources, budgets exceeded, rate limits: their names are expected to say so)
DROP_WORDS = ("malformed", "crc", "unk", "stale", "badfrag", "drop", "source", "refused", "limit", "budget",
              "hostile")


def drop_counters(stats: dict[str, int]) -> dict[str, int]:
    """The victim's counters of dropped datagrams, by name."""
    return {k: v for k, v in stats.items() if any(w in k for w in DROP_WORDS)}


def rss() -> int:
    """This process's resident set, bytes (``VmRSS``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS line in /proc/self/status")


class Memory:
    """The growth of this process's memory from ``start()``: tracemalloc's peak of traced bytes
    (every Python allocation, bytearrays included), and the largest RSS seen by ``sample()``."""

    __slots__ = ("traced_base", "rss_base", "rss_peak", "traced_peak", "traced_end", "_next")

    def __init__(self) -> None:
        self.traced_base = self.traced_peak = self.traced_end = 0
        self.rss_base = self.rss_peak = 0
        self._next = 0.0

    def start(self) -> None:
        gc.collect()
        tracemalloc.start()
        self.traced_base = tracemalloc.get_traced_memory()[0]
        self.rss_base = self.rss_peak = rss()

    def sample(self) -> None:
        now = time.monotonic()
        if now >= self._next:  # (a read of /proc every 5 ms at most)
            self._next = now + 0.005
            self.rss_peak = max(self.rss_peak, rss())

    def stop(self) -> None:
        self.rss_peak = max(self.rss_peak, rss())
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        self.traced_peak, self.traced_end = peak, current

    @property
    def traced_growth(self) -> int:
        """Peak traced bytes during the attack, above what was traced when it began."""
        return self.traced_peak - self.traced_base

    @property
    def retained(self) -> int:
        """Traced bytes still held after the attack (and a garbage collection)."""
        return self.traced_end - self.traced_base

    @property
    def rss_growth(self) -> int:
        return self.rss_peak - self.rss_base

    def text(self) -> str:
        return (f"traced peak +{self.traced_growth / MB:.1f} MB, retained +{self.retained / MB:.2f} MB, "
                f"RSS +{self.rss_growth / MB:.1f} MB")


class LivePair:
    """The victim transport and its live peer, with a verified transfer from the peer to the
    victim that ``pump`` keeps going."""

    __slots__ = ("victim", "peer", "conn", "verifier", "events", "captured", "completed", "failures",
                 "sent", "in_flight", "_messages", "memory")

    def __init__(self, *, seed: int = 11, size_max: int = 20_000, capture: bool = True,
                 config: btlcore.Config | None = None, rcvbuf: str | None = None) -> None:
        options: dict[str, Any] = {} if rcvbuf is None else {"rcvbuf": rcvbuf}
        if config is None:  # a margin for a noisy machine: a flood paced for the victim can still
            # starve the live peer for some seconds when other work shares the two cores
            config = btlcore.Config(peer_timeout=PEER_TIMEOUT)
        self.victim = btlcore.open("udp", bind="127.0.0.1:0", config=config, **options)
        self.peer = btlcore.open("udp", bind="127.0.0.1:0", config=config)
        self.verifier = Verifier(ordered=True)
        self.events: list[tuple[str, str, bytes, str]] = []  # (event, side, peer address, error)
        self.captured: list[bytes] = []  # what the peer sent the victim, as an observer saw it
        self.completed = 0
        self.failures: list[str] = []
        self.sent = 0
        self.in_flight = 0
        self._messages: Iterator[bytes] = make_messages(seed, 1 << 30, 1, size_max)
        self.memory = Memory()
        self.victim.on(TAG_DATA, lambda peer, tag, data: self.verifier.on_data(data))
        for side, t in (("victim", self.victim), ("peer", self.peer)):
            t.on_peer(self._recorder(side))
        if capture:
            self.peer.add_send_filter(self._capture)
        self.conn = self.peer.connect(self.victim.address)
        self.pump(8, limit=20)
        self.drive(lambda: self.completed == 20, timeout=10.0, pump_limit=20)

    def _recorder(self, side: str) -> Callable[[str, Any, BaseException | None], None]:
        def record(event: str, peer: Any, exc: BaseException | None) -> None:
            self.events.append((event, side, bytes(peer.address), repr(exc)))
        return record

    def _capture(self, channel: int, data: bytes) -> bool:
        if len(self.captured) < 4096:
            self.captured.append(bytes(data))
        return True

    def _done(self, exc: BaseException | None) -> None:
        self.in_flight -= 1
        if exc is None:
            self.completed += 1
        elif len(self.failures) < 20:
            self.failures.append(repr(exc))

    def pump(self, in_flight: int = 4, limit: int | None = None) -> None:
        """Send the next messages while fewer than ``in_flight`` are outstanding (and, with
        ``limit``, fewer than ``limit`` were sent in all); nothing more once a send failed."""
        while self.in_flight < in_flight and (limit is None or self.sent < limit) and not self.failures:
            try:
                self.peer.send(self.conn, TAG_DATA, next(self._messages), callback=self._done)
            except btlcore.PeerError as exc:  # the attack killed the connection: a failure, not a crash
                self.failures.append(f"send refused: {exc!r}")
                return
            self.sent += 1
            self.in_flight += 1

    def drive(self, until: Callable[[], bool], timeout: float, pump_limit: int | None = 0) -> None:
        """Progress both transports (sampling memory) until ``until()``; ``pump_limit`` None keeps
        the transfer going, a number stops sending at that many messages."""
        deadline = time.monotonic() + timeout
        selector = selectors.DefaultSelector()
        for t in (self.victim, self.peer):
            for fd in t.device.fds():
                selector.register(fd, selectors.EVENT_READ)
        try:
            while not until():
                if time.monotonic() > deadline:
                    raise AssertionError(f"not done within {timeout:g} s: {self.summary()}")
                self.victim.progress()
                self.peer.progress()
                if pump_limit is None or self.sent < pump_limit:
                    self.pump(limit=pump_limit)
                self.memory.sample()
                selector.select(0.002)
        finally:
            selector.close()

    # -------------------------------------------------------------- what an observer learns

    def learned_ids(self) -> tuple[int, int, int]:
        """(the victim's connection id for the peer, the peer's incarnation, the highest data
        sequence number) from the last data segment the peer sent: what anyone who saw one
        datagram of the connection knows."""
        for datagram in reversed(self.captured):
            d = parse(datagram)
            if d is not None and d.type == wire.T_DATA:
                return d.dst_conn, d.src_incarnation, d.seq
        raise AssertionError("no data segment captured")

    def captured_file(self, path: Path) -> Path:
        path.write_bytes(frames(iter(self.captured)))
        return path

    # -------------------------------------------------------------- judgements

    def peer_count(self) -> int:
        """Peers in the victim's table (the engine keeps one dict of them by address)."""
        return len(self.victim.engine.peers_by_addr)

    def torn_down(self) -> list[tuple[str, str, bytes, str]]:
        """Peer events that end or reset the live connection, on either side."""
        live = {bytes(self.peer.address), bytes(self.victim.address)}
        return [e for e in self.events if e[0] in ("failed", "restarted", "closed") and e[2] in live]

    def report(self) -> dict[str, Any]:
        return self.verifier.report({"messages": self.sent}, reset=False)

    def summary(self) -> str:
        stats = self.victim.stats()
        keys = ("num_malformed_recvs", "num_crc_errors", "num_unk_recvs", "num_badfrag_recvs",
                "num_stale_recvs", "num_peer_restarts", "num_peer_failures")
        counters = ", ".join(f"{k}={stats[k]}" for k in keys if k in stats)
        return (f"sent {self.sent}, completed {self.completed}, failures {self.failures[:3]}, "
                f"delivered {self.verifier.delivered}, events {self.torn_down()[:3]}, {counters}")

    def close(self) -> None:
        for t in (self.peer, self.victim):
            if not t.closed:
                t.close(flush=False)


def run_attack(pair: LivePair, plan: dict[str, Any], *, transfer: bool = True,
               timeout: float = ATTACK_TIMEOUT) -> dict[str, Any]:
    """Fire ``plan`` (see attacker.ATTACKS) at the pair's victim from another process, with the
    transfer going on beside it; measure the victim's memory meanwhile (``pair.memory``).
    Returns the attacker's report.  After the attack, the transfer is let catch up: every
    message sent must be acknowledged (or failed) within ``CATCH_UP`` seconds."""
    plan = {"target": pair.victim.address.hex(), "peer": pair.peer.address.hex(), **plan}
    pair.memory.start()
    proc = subprocess.Popen([sys.executable, str(ATTACKER), json.dumps(plan)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        pair.drive(lambda: proc.poll() is not None, timeout, pump_limit=None if transfer else 0)
        out, err = proc.communicate(timeout=5)
        assert proc.returncode == 0, f"the attacker failed ({proc.returncode}): {err.strip()}"
        # (a torn-down connection or a failed send ends the wait: the test's assertions say
        # what went wrong)
        pair.drive(lambda: (pair.in_flight == 0 and pair.verifier.delivered >= pair.completed)
                   or bool(pair.torn_down()) or bool(pair.failures), CATCH_UP)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if tracemalloc.is_tracing():
            pair.memory.stop()
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def assert_within_budget(pair: LivePair) -> None:
    m = pair.memory
    print(f"victim memory: {m.text()}")
    assert m.traced_growth < BUDGET, f"traced memory grew {m.text()} (budget {BUDGET_MB} MB)"
    assert m.rss_growth < BUDGET, f"RSS grew {m.text()} (budget {BUDGET_MB} MB)"


def assert_connection_intact(pair: LivePair) -> None:
    """No peer event ended the live connection, every send so far succeeded, and the victim
    got each message exactly once, intact, in order (and nothing else)."""
    assert not pair.torn_down(), f"the live connection was torn down: {pair.summary()}"
    assert not pair.failures, f"the live peer's sends failed: {pair.summary()}"
    report = pair.report()
    assert report["verified"] and report["messages_delivered"] == pair.sent, (report, pair.summary())


def after_attack_sends_succeed(pair: LivePair, count: int = 5) -> None:
    """The live peer's next ``count`` sends complete without error and verify."""
    assert not pair.failures, f"the live peer's sends failed: {pair.summary()}"
    target = pair.sent + count
    pair.drive(lambda: pair.in_flight == 0 and pair.sent >= target, CATCH_UP, pump_limit=target)
    assert not pair.failures, f"the live peer's sends failed: {pair.summary()}"
    report = pair.report()
    assert report["verified"] and report["messages_delivered"] == pair.sent, report


def require_slow_lane(request: pytest.FixtureRequest) -> None:
    """Skip unless ``-m`` selects slow tests (the project's rule: ``-m slow`` runs them; the
    default command, ``-m "not verbs_vm"``, does not)."""
    markexpr = request.config.getoption("-m") or ""
    if "slow" not in markexpr or "not slow" in markexpr:
        pytest.skip("slow lane: select with -m slow")
