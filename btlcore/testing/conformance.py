"""The backend conformance suite: what every btlcore backend must do, as pytest tests.

It ships in the package so that a third-party backend runs the very tests ours do::

    # tests/test_conformance.py of your backend's distribution
    from btlcore.testing.conformance import BackendHarness, ConformanceTests

    class MyHarness(BackendHarness):
        backend = "mybackend"          # the entry-point name
        options = {"device": "eth0"}   # passed to btlcore.open()

    class TestMyBackend(ConformanceTests):
        harness_class = MyHarness

Every test opens transports through the harness, so a backend whose peers must be arranged
differently (a shared fabric, a server to start) overrides :meth:`BackendHarness.open`.
Timeouts are in the transports' clock: virtual seconds on the simulator.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import attrs
import pytest

from ..config import Config
from ..device import Capabilities, Channel
from ..errors import PeerRestarted, PeerUnreachable
from ..run import open as open_transport
from ..run import run_until
from ..transport import Message, Transport

#: the tag the suite sends on
TAG = 42


class BackendHarness:
    """How the suite gets transports on one backend.  Override what your backend needs."""

    backend: ClassVar[str] = "sim"
    options: ClassVar[dict[str, Any]] = {}
    #: whether :meth:`reopen` can bring a transport back at the same address
    supports_restart: ClassVar[bool] = True
    #: how many transports one test may open (many-peers test)
    max_transports: ClassVar[int] = 9
    #: seconds (in the transports' clock) a transfer test may take
    timeout: ClassVar[float] = 60.0

    def __init__(self) -> None:
        self.opened: list[Transport] = []

    def open(self, config: Config, **options: Any) -> Transport:
        """A new transport, reachable from the others this harness opened."""
        t = open_transport(self.backend, config=config, **{**self.options, **options})
        self.opened.append(t)
        return t

    def reopen(self, address: bytes, config: Config) -> Transport:
        """A new transport (a new incarnation) at ``address``, after the old one died."""
        raise NotImplementedError

    def kill(self, t: Transport) -> None:
        """Make ``t`` vanish without a word to its peers (a crashed process): nothing it
        sends from now on arrives, not even the CLOSE of its ``close()``."""
        t.engine.close()  # (its state dropped at once: no CLOSE, no wait for an answer)
        t.close(flush=False)

    def run(self, transports: list[Transport], until: Callable[[], bool], timeout: float | None = None) -> None:
        run_until([t for t in transports if not t.closed], until, self.timeout if timeout is None else timeout)

    def close_all(self) -> None:
        for t in self.opened:
            if not t.closed:
                t.close(flush=False)


@attrs.define
class Sink:
    """Collects what a transport receives on :data:`TAG`."""

    got: list[bytes] = attrs.Factory(list)
    by_peer: dict[bytes, list[bytes]] = attrs.Factory(dict)

    def __call__(self, peer: Any, tag: int, data: bytes) -> None:
        self.got.append(bytes(data))
        self.by_peer.setdefault(peer.address, []).append(bytes(data))


def _payloads(rng: random.Random, n: int, lo: int, hi: int) -> list[bytes]:
    return [rng.randbytes(rng.randint(lo, hi)) for _ in range(n)]


def _send_and_check(harness: BackendHarness, a: Transport, b: Transport, msgs: list[bytes]) -> Sink:
    """Send ``msgs`` from ``a`` to ``b``; check they all arrive in order, intact, and that
    every completion callback fired once with success."""
    sink = Sink()
    b.on(TAG, sink)
    done: list[BaseException | None] = []
    peer = a.connect(b.address)
    for m in msgs:
        a.send(peer, TAG, m, done.append)
    harness.run([a, b], lambda: len(done) == len(msgs) and len(sink.got) == len(msgs))
    assert sink.got == msgs
    assert done == [None] * len(msgs)
    return sink


def _raw_exchange(receiver: Transport, sends: dict[bytes, tuple[Transport, Channel, Any]],
                  poll: Callable[[int], tuple[Any, Any]], timeout: float = 10.0) -> dict[bytes, Any]:
    """Post each raw datagram of ``sends`` (payload -> (sender, channel, data as posted))
    straight through the senders' devices to ``receiver``'s device, again each round until it
    is seen (the device may lose it), and poll ``receiver``'s device directly; return each
    payload's value from ``poll``'s second sequence (None per datagram where there is none).
    No transport progresses meanwhile, so the engines never see these datagrams."""
    seen: dict[bytes, Any] = {}
    now = receiver.now
    deadline = now() + timeout
    dests = {id(t): t.device.resolve(receiver.address) for t, _c, _d in sends.values()}
    while len(seen) < len(sends):
        if now() >= deadline:
            missing = sorted(set(sends) - set(seen))
            raise AssertionError(f"raw datagrams never arrived within {timeout:g} s: {missing[:5]}")
        for payload, (t, channel, data) in sends.items():
            if payload not in seen:
                t.device.post_send(channel, dests[id(t)], data)
        for _ in range(20):
            datagrams, extra = poll(256)
            for i, d in enumerate(datagrams):
                raw = bytes(d)
                if raw in sends:  # anything else: corrupted on the way, or not ours
                    seen.setdefault(raw, None if extra is None else extra[i])
            if len(seen) == len(sends):
                break
            receiver.device.wait(min(deadline, now() + 0.005))
    return seen


def _drop_filter(rate: float, seed: int) -> Callable[[int, bytes], bool]:
    rng = random.Random(seed)
    return lambda channel, data: rng.random() >= rate


class ConformanceTests:
    """Subclass as ``Test<Something>`` and set ``harness_class``."""

    harness_class: ClassVar[type[BackendHarness]] = BackendHarness

    @pytest.fixture
    def harness(self) -> Iterator[BackendHarness]:
        h = self.harness_class()
        try:
            yield h
        finally:
            h.close_all()

    @staticmethod
    def config(**overrides: Any) -> Config:
        base: dict[str, Any] = {"peer_timeout": 3.0, "handshake_timeout": 3.0, "flush_timeout": 10.0}
        base.update(overrides)
        return Config(**base)

    # -- delivery ------------------------------------------------------------------------

    def test_small_messages_in_order(self, harness: BackendHarness) -> None:
        a, b = harness.open(self.config()), harness.open(self.config())
        _send_and_check(harness, a, b, _payloads(random.Random(1), 300, 0, 2000))

    def test_large_messages(self, harness: BackendHarness) -> None:
        a, b = harness.open(self.config()), harness.open(self.config())
        rng = random.Random(2)
        _send_and_check(harness, a, b, [rng.randbytes(n) for n in (1 << 20, 3 * (1 << 20) + 7, 65536, 1)])
        assert b.stats()["num_chunk_recvs"] > 0

    def test_both_directions_at_once(self, harness: BackendHarness) -> None:
        a, b = harness.open(self.config()), harness.open(self.config())
        sa, sb = Sink(), Sink()
        a.on(TAG, sa)
        b.on(TAG, sb)
        rng = random.Random(3)
        to_b, to_a = _payloads(rng, 200, 0, 20000), _payloads(rng, 200, 0, 20000)
        done: list[BaseException | None] = []
        pb, pa = a.connect(b.address), b.connect(a.address)
        for x, y in zip(to_b, to_a, strict=True):
            a.send(pb, TAG, x, done.append)
            b.send(pa, TAG, y, done.append)
        harness.run([a, b], lambda: len(done) == 400 and len(sa.got) == 200 and len(sb.got) == 200)
        assert sb.got == to_b and sa.got == to_a
        assert done == [None] * 400

    def test_many_peers(self, harness: BackendHarness) -> None:
        n = max(2, harness.max_transports - 1)
        hub = harness.open(self.config())
        sink = Sink()
        hub.on(TAG, sink)
        senders = [harness.open(self.config()) for _ in range(n)]
        expected: dict[bytes, list[bytes]] = {}
        done: list[BaseException | None] = []
        for i, s in enumerate(senders):
            msgs = _payloads(random.Random(10 + i), 30, 0, 5000)
            expected[s.address] = msgs
            peer = s.connect(hub.address)
            for m in msgs:
                s.send(peer, TAG, m, done.append)
        total = 30 * n
        harness.run([hub, *senders], lambda: len(done) == total and len(sink.got) == total)
        assert sink.by_peer == expected
        assert len(hub.peers) == n

    def test_unordered_mode_delivers_each_once(self, harness: BackendHarness) -> None:
        cfg = self.config(ordered=False)
        a, b = harness.open(cfg), harness.open(cfg)
        a.add_send_filter(_drop_filter(0.05, 4))
        sink = Sink()
        b.on(TAG, sink)
        msgs = [i.to_bytes(4, "big") * (1 + i % 50) for i in range(300)]
        done: list[BaseException | None] = []
        peer = a.connect(b.address)
        for m in msgs:
            a.send(peer, TAG, m, done.append)
        harness.run([a, b], lambda: len(done) == len(msgs) and len(sink.got) == len(msgs))
        assert sorted(sink.got) == sorted(msgs)
        assert done == [None] * len(msgs)

    def test_recv_without_handler(self, harness: BackendHarness) -> None:
        a, b = harness.open(self.config()), harness.open(self.config())
        peer = a.connect(b.address)
        a.send(peer, 7, b"first")
        a.send(peer, 7, b"second")
        got: list[Message] = []

        def both_received() -> bool:
            if len(got) < 2:
                got.extend(_drain(b))
            return len(got) == 2

        harness.run([a, b], both_received)
        assert [(m.tag, m.data) for m in got] == [(7, b"first"), (7, b"second")]
        assert got[0].peer.address == a.address

    # -- loss, death, restart ---------------------------------------------------------------

    def test_loss_recovery(self, harness: BackendHarness) -> None:
        a, b = harness.open(self.config()), harness.open(self.config())
        a.add_send_filter(_drop_filter(0.1, 5))
        b.add_send_filter(_drop_filter(0.1, 6))
        _send_and_check(harness, a, b, _payloads(random.Random(7), 200, 0, 30000))
        stats = a.stats()
        assert stats["num_resends"] > 0
        assert stats["num_fast_retrans"] + stats["num_timeout_retrans"] == stats["num_resends"]

    def test_peer_death_fails_pending_sends(self, harness: BackendHarness) -> None:
        cfg = self.config(peer_timeout=1.0, max_retries=1000)
        a, b = harness.open(cfg), harness.open(cfg)
        sink = Sink()
        b.on(TAG, sink)
        peer = a.connect(b.address)
        a.send(peer, TAG, b"hello")
        harness.run([a, b], lambda: len(sink.got) == 1)
        harness.kill(b)
        errors: list[BaseException | None] = []
        for i in range(20):
            a.send(peer, TAG, bytes(5000 * i), errors.append)
        failed: list[str] = []
        a.on_peer(lambda event, p, exc: failed.append(event))
        start = a.now()
        harness.run([a], lambda: len(errors) == 20, timeout=cfg.peer_timeout * 5)
        assert a.now() - start <= cfg.peer_timeout * 2 + 1.0
        assert len(errors) == 20 and all(isinstance(e, PeerUnreachable) for e in errors)
        assert failed == ["failed"]
        with pytest.raises(PeerUnreachable):
            a.send(peer, TAG, b"after death")

    def test_unreachable_peer_handshake_times_out(self, harness: BackendHarness) -> None:
        cfg = self.config(handshake_timeout=1.0)
        a, b = harness.open(cfg), harness.open(cfg)
        address = b.address
        harness.kill(b)
        errors: list[BaseException | None] = []
        peer = a.connect(address)
        a.send(peer, TAG, b"nobody home", errors.append)
        harness.run([a], lambda: bool(errors), timeout=10.0)
        assert isinstance(errors[0], PeerUnreachable)

    def test_restarted_peer_gets_nothing_stale(self, harness: BackendHarness) -> None:
        if not harness.supports_restart:
            pytest.skip(f"{harness.backend} harness cannot reopen an address")
        cfg = self.config()
        a, b = harness.open(cfg), harness.open(cfg)
        sink = Sink()
        b.on(TAG, sink)
        peer = a.connect(b.address)
        a.send(peer, TAG, b"before")
        harness.run([a, b], lambda: sink.got == [b"before"])
        address = b.address
        harness.kill(b)
        # sends toward the dead incarnation, never acknowledged by it
        stale: list[BaseException | None] = []
        for i in range(5):
            a.send(peer, TAG, b"stale-%d" % i, stale.append)
        a.progress()
        b2 = harness.reopen(address, cfg)
        sink2 = Sink()
        b2.on(TAG, sink2)
        # the new incarnation introduces itself; a learns of the restart
        b2.connect(a.address)
        harness.run([a, b2], lambda: len(stale) == 5)
        assert all(isinstance(e, PeerRestarted) for e in stale), stale
        fresh: list[BaseException | None] = []
        a.send(a.connect(address), TAG, b"after", fresh.append)
        harness.run([a, b2], lambda: fresh == [None] and sink2.got == [b"after"])
        assert not any(m.startswith(b"stale") for m in sink2.got)

    # -- declared capabilities, sources ----------------------------------------------------

    def test_capabilities_are_declared(self, harness: BackendHarness) -> None:
        a, b = harness.open(self.config()), harness.open(self.config())
        caps = a.capabilities
        assert isinstance(caps, Capabilities)
        for flag in ("integrity", "virtual_time", "gather_sends", "sends_complete_at_once",
                     "wait_wakes_on_input", "reports_source"):
            assert type(getattr(caps, flag)) is bool, f"Capabilities.{flag} is not a bool"
        assert caps.seed is None or type(caps.seed) is int, \
            f"Capabilities.seed must be None or an int, not {caps.seed!r}"
        assert caps.instance is None or (type(caps.instance) is int and caps.instance >= 0), \
            f"Capabilities.instance must be None or an int >= 0, not {caps.instance!r}"
        assert caps.mtu >= 256 and caps.send_queue_depth >= 1 and caps.recv_queue_depth >= 1
        if caps.reports_source:
            assert a.device.poll_recv_from is not None
        if caps.sends_complete_at_once:
            assert a.device.poll_completions() == 0
        if caps.gather_sends:  # a datagram given as a list of buffers arrives as one
            header, body = b"conformance-gather:", random.Random(12).randbytes(200)
            got = _raw_exchange(b, {header + body: (a, Channel.PRIORITY, [header, body])},
                                lambda n: (b.device.poll_recv(n), None))
            assert list(got) == [header + body]

    def test_sources_consistent_per_channel(self, harness: BackendHarness) -> None:
        a, b, c = (harness.open(self.config()) for _ in range(3))
        if not c.capabilities.reports_source:
            pytest.skip(f"{harness.backend} does not report sources (no poll_recv_from)")
        poll_from = c.device.poll_recv_from
        assert poll_from is not None
        sends: dict[bytes, tuple[Transport, Channel, Any]] = {}
        for name, t in ((b"a", a), (b"b", b)):
            for channel in Channel:
                for i in range(4):
                    payload = b"conformance-source %s %d %d" % (name, channel, i)
                    sends[payload] = (t, channel, payload)
        got = _raw_exchange(c, sends, poll_from)
        by_group: dict[bytes, set[Any]] = {}
        for payload, source in got.items():
            hash(source)
            by_group.setdefault(payload.rsplit(b" ", 1)[0], set()).add(source)
        for group, sources in by_group.items():
            assert len(sources) == 1, f"datagrams from one channel of one peer ({group!r}) " \
                                      f"came with different sources: {sources}"
        distinct = [next(iter(v)) for v in by_group.values()]
        assert len(distinct) == 4 and all(x != y for i, x in enumerate(distinct)
                                          for y in distinct[i + 1:]), \
            f"each channel of each peer needs a source of its own: {by_group}"

    def test_reply_dest_reaches_the_source(self, harness: BackendHarness) -> None:
        """``btl_device_reply_dest(source)`` is a dest that reaches the sender of a datagram
        on either channel (btlcore answers handshakes there, never at an address written
        inside them); a source it cannot answer raises ValueError."""
        a, c = harness.open(self.config()), harness.open(self.config())
        reply_dest, poll_from = c.device.reply_dest, c.device.poll_recv_from
        if reply_dest is None or poll_from is None or not c.capabilities.reports_source:
            pytest.skip(f"{harness.backend} does not answer sources (no btl_device_reply_dest)")
        probe = b"conformance-reply-probe"
        source = _raw_exchange(c, {probe: (a, Channel.PRIORITY, probe)}, poll_from)[probe]
        dest = reply_dest(source)
        answers = {b"conformance-reply %d" % ch: ch for ch in Channel}
        seen: set[bytes] = set()
        deadline = a.now() + 10.0
        while seen != set(answers):
            assert a.now() < deadline, f"answers to the source never arrived: {set(answers) - seen}"
            for data, channel in answers.items():
                if data not in seen:
                    c.device.post_send(channel, dest, data)
            for _ in range(20):
                seen.update(bytes(d) for d in a.device.poll_recv(256) if bytes(d) in answers)
                if seen == set(answers):
                    break
                a.device.wait(min(deadline, a.now() + 0.005))
        with pytest.raises(ValueError):
            reply_dest(object())

    # -- put, close ----------------------------------------------------------------------

    def test_put_lands_in_exposed_buffer(self, harness: BackendHarness) -> None:
        a, b = harness.open(self.config()), harness.open(self.config())
        region = bytearray(300_000)
        key = b.expose(region)
        landed: list[tuple[int, int]] = []
        b.on_put(lambda peer, k, offset, length: landed.append((offset, length)))
        data = random.Random(8).randbytes(200_000)
        done: list[BaseException | None] = []
        peer = a.connect(b.address)
        a.put(peer, key, 1000, data, done.append)
        a.put(peer, key, 0, b"head", done.append)
        harness.run([a, b], lambda: len(done) == 2 and len(landed) == 2)
        assert done == [None, None]
        assert bytes(region[1000:201000]) == data and bytes(region[:4]) == b"head"
        assert sorted(landed) == [(0, 4), (1000, 200_000)]

    def test_close_flushes_outstanding(self, harness: BackendHarness) -> None:
        a, b = harness.open(self.config()), harness.open(self.config())
        sink = Sink()
        b.on(TAG, sink)
        msgs = _payloads(random.Random(9), 50, 1000, 50000)
        done: list[BaseException | None] = []
        peer = a.connect(b.address)
        for m in msgs:
            a.send(peer, TAG, m, done.append)
        # close() must progress until every message is acknowledged; b keeps answering
        # only when it is progressed, so close a while b runs in the same loop
        harness.run([a, b], lambda: a.stats()["num_msgs_completed"] > 0)
        flushed: list[bool] = []
        orig_wait = a._wait

        def wait_and_serve(deadline: float | None) -> None:
            if not b.closed:
                b.progress()
            orig_wait(deadline if deadline is None else min(deadline, a.now() + 0.001))

        a._wait = wait_and_serve  # type: ignore[method-assign]
        flushed.append(a.flush())
        a.close()
        harness.run([b], lambda: len(sink.got) == len(msgs))
        assert flushed == [True]
        assert done == [None] * len(msgs)
        assert sink.got == msgs
        assert a.closed


def _drain(t: Transport) -> list[Message]:
    out: list[Message] = []
    while True:
        m = t.recv(timeout=0)
        if m is None:
            return out
        out.append(m)
