"""A bottleneck link for congestion-control unit tests: one sender driven by an algorithm's
window and pacing rate, a drop-tail queue served at a fixed rate, a propagation delay, random
loss, and ACKs that come back as the engine's RateSamples (delivery rate by the draft's rules).

Not the engine: segments are counted, never retransmitted (a lost one is declared lost when
three later ones are acknowledged, as fast retransmit would); what it measures is what the
algorithm made of the path: the rate it delivered, the queue it built, the windows it set.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from typing import Any

from btlcore import Config
from btlcore.protocol import congestion
from btlcore.protocol.congestion.rate import RateSample
from btlcore.protocol.peers import Peer
from btlcore.protocol.rtt import RetransmitTimer

DUP_THRESH = 3


def FakePeer(seg: int, isn: int) -> Peer:
    """A real :class:`~btlcore.protocol.peers.Peer` with what an algorithm reads set: a
    stand-in object would not do once the algorithms are compiled (mypyc checks the type)."""
    peer = Peer(b"\x00" * 6, None, 1, isn, RetransmitTimer(True, 1.0, 0.001, 60.0, 1.0), 1 << 20)
    peer.chunk_cap = seg - 32
    return peer


class Link:
    """``rate`` bytes/s, ``delay`` one-way seconds, a queue of ``queue`` bytes (None: 1 BDP),
    random ``loss``."""

    def __init__(self, rate: float, delay: float, queue: float | None = None, loss: float = 0.0,
                 seed: int = 1) -> None:
        self.rate, self.delay, self.loss = rate, delay, loss
        self.queue = queue if queue is not None else rate * 2 * delay
        self.rng = random.Random(seed)
        self.free = 0.0  # when the bottleneck finishes what it holds (flows may share it)

    @property
    def bdp(self) -> float:
        return self.rate * 2 * self.delay


class Run:
    """One flow over a :class:`Link` for ``duration`` seconds of virtual time."""

    def __init__(self, cc_name: str, link: Link, *, seg: int = 1500, isn: int = 12345,
                 handshake_rtt: bool = True, app_rate: float | None = None, chunk_cap: int | None = None,
                 algorithm: Any = None,
                 on_sample: Callable[[Run, RateSample], None] | None = None, **config: Any) -> None:
        # (``algorithm``: a ready-made instance, e.g. a subclass with a feature turned off)
        self.cc = algorithm or congestion.load(cc_name)(Config(cc=cc_name, **config))
        self.link, self.seg = link, seg
        self.peer = FakePeer(seg, isn)
        if chunk_cap is not None:
            self.peer.chunk_cap = chunk_cap  # (the payload the MTU allows, whatever the segments)
        if handshake_rtt:
            self.peer.timer.min_rtt = self.peer.timer.srtt = 2 * link.delay
        self.cc.on_new_peer(self.peer)  # type: ignore[arg-type]
        self.app_rate = app_rate  # bytes/s the application offers (None: always more)
        self.on_sample = on_sample
        self._on_rate_sample = getattr(self.cc, "on_rate_sample", None)
        self.now = 0.0
        self.seq = 0
        self.events: list[tuple[float, int, int]] = []  # (ack arrival, seq, 0)
        self.sent: dict[int, tuple[float, int, float, float, bool]] = {}
        self.delivered, self.delivered_time, self.first_sent = 0, 0.0, 0.0
        self.inflight = 0
        self.next_send = 0.0
        self.app_credit = 0.0
        self.recovery_seq = 0
        self.lost_total = self.sent_total = self.dropped_queue = 0
        self.max_queue = 0.0
        self.acked_seqs: list[int] = []  # in ACK order (for loss detection)
        self.highest_acked = -1
        self.trace: list[tuple[float, float, float]] = []  # (time, cwnd, pacing_rate) per sample

    # -- sending ---------------------------------------------------------------------------

    def _send(self) -> None:
        now, link, seg = self.now, self.link, self.seg
        if self.inflight == 0:
            self.first_sent = self.delivered_time = now
        seq = self.seq
        self.seq += 1
        self.sent_total += 1
        self.sent[seq] = (now, self.delivered, self.delivered_time, self.first_sent,
                          self.app_rate is not None and self.app_credit < 2 * seg)
        self.peer.unacked[seq] = None
        self.inflight += seg
        rate = self.peer.pacing_rate
        self.next_send = max(self.next_send, now) + (seg / rate if rate > 0 else 0.0)
        if self.app_rate is not None:
            self.app_credit -= seg
        queued = max(0.0, link.free - now) * link.rate
        self.max_queue = max(self.max_queue, queued)
        if link.rng.random() < link.loss:
            return  # random loss (before the queue)
        if queued + seg > link.queue:
            self.dropped_queue += 1
            return  # drop-tail
        link.free = max(link.free, now) + seg / link.rate
        heapq.heappush(self.events, (link.free + 2 * link.delay, seq, 0))

    def _can_send(self) -> bool:
        if len(self.peer.unacked) >= self.peer.cwnd:
            return False
        if self.app_rate is not None and self.app_credit < self.seg:
            return False
        return self.next_send <= self.now + 1e-12

    # -- acknowledgements ------------------------------------------------------------------

    def _ack(self, seq: int) -> None:
        now, seg, peer = self.now, self.seg, self.peer
        sent_at, p_delivered, p_time, p_first, app_limited = self.sent.pop(seq)
        del peer.unacked[seq]
        self.inflight -= seg
        self.delivered += seg
        self.delivered_time = now
        interval = max(sent_at - p_first, now - p_time)
        self.first_sent = sent_at
        rtt = now - sent_at
        t = peer.timer
        t.min_rtt = rtt if t.min_rtt is None else min(t.min_rtt, rtt)
        t.srtt = rtt if t.srtt is None else t.srtt + (rtt - t.srtt) / 8
        rate = (self.delivered - p_delivered) / interval if interval >= t.min_rtt else 0.0
        if peer.cwnd < self.cc.cwnd_max:
            self.cc.on_ack(peer)  # type: ignore[arg-type]
        lost = self._detect_losses(seq)
        if self._on_rate_sample is not None:
            s = RateSample(now, rate, interval, self.delivered, seg, lost, self.inflight, rtt, app_limited,
                           p_delivered)
            self._on_rate_sample(peer, s)
            if self.on_sample is not None:
                self.on_sample(self, s)
        self.trace.append((now, peer.cwnd, peer.pacing_rate))

    def _detect_losses(self, seq: int) -> int:
        """Segments sent DUP_THRESH before one just acknowledged and not acknowledged are lost."""
        if seq <= self.highest_acked:
            return 0
        self.highest_acked = seq
        lost = 0
        episode = False
        for s in list(itertools.takewhile(lambda s: s <= seq - DUP_THRESH, self.sent)):
            del self.sent[s]
            del self.peer.unacked[s]
            self.inflight -= self.seg
            lost += self.seg
            self.lost_total += 1
            if s >= self.recovery_seq:
                episode = True
        if episode:
            self.recovery_seq = self.seq
            self.cc.on_loss_episode(self.peer)  # type: ignore[arg-type]
        return lost

    # -- the loop --------------------------------------------------------------------------

    @property
    def link_free(self) -> float:
        return self.link.free

    def run(self, duration: float) -> Run:
        end = self.now + duration
        while self.now < end:
            self._send_all()
            self._advance(self._next(end))
        return self

    def _send_all(self) -> None:
        while self._can_send():
            self._send()

    def _next(self, end: float) -> float:
        """When something happens next (an ACK, the pacer, the application), at most ``end``."""
        nxt = self.events[0][0] if self.events else end
        if len(self.peer.unacked) < self.peer.cwnd and self.next_send > self.now:
            nxt = min(nxt, self.next_send)
        if self.app_rate is not None:
            nxt = min(nxt, self.now + 1e-4)
        return max(self.now, min(nxt, end))

    def _advance(self, t: float) -> None:
        if self.app_rate is not None:
            self.app_credit = min(self.app_credit + self.app_rate * (t - self.now), 64 * self.seg)
        self.now = t
        events = self.events
        while events and events[0][0] <= t:
            _, seq, _ = heapq.heappop(events)
            if seq in self.sent:
                self._ack(seq)

    def goodput(self, since: float = 0.0) -> float:
        """Bytes/s delivered since ``since`` (from the trace of delivered counts)."""
        return self.delivered / self.now if since == 0.0 else self._delivered_since(since)

    def _delivered_since(self, since: float) -> float:
        n = sum(1 for t, _, _ in self.trace if t >= since)
        return n * self.seg / (self.now - since)


def share(runs: list[Run], duration: float) -> None:
    """Run several flows over one :class:`Link` (each made with it), in time order."""
    now = min(r.now for r in runs)
    end = max(r.now for r in runs) + duration
    while now < end:
        for r in runs:
            r.now = max(r.now, now)
            r._send_all()
        now = min(r._next(end) for r in runs)
        for r in runs:
            if now >= r.now:
                r._advance(now)


def jain(rates: list[float]) -> float:
    """Jain's fairness index: 1.0 when all are equal, 1/n when one takes everything."""
    return sum(rates) ** 2 / (len(rates) * sum(x * x for x in rates))
