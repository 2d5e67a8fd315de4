"""Verified flows competing for one bottleneck on the simulator: goodput, fairness, correctness.

``N`` flows, each a sender ``s<i>`` and a receiver ``r<i>`` on one fabric, every data
direction ``s<i> -> r<i>`` feeding one shared :class:`btlcore_sim.Bottleneck` (the rate and
its queue); the one-way delay and the loss are each direction's own, both ways (as ``btl
transfer --delay --loss`` sets them).  Each sender keeps its send buffer full of verified
messages (index and CRC32C, :mod:`btlcore.verify`) for ``duration`` virtual seconds, then
stops and the run drains: every message must arrive intact, once and in order, and every
send must complete.

Goodput is what receivers took off the link between ``warmup`` and ``duration`` (slow
start left out; delivered plus held for reassembly or order, so a backlog at the warm-up mark
is not counted inside the window), as a fraction of ``(1 - p) x rate``; fairness is Jain's
index over the flows' goodputs.
A retransmission is counted spurious when its segment reached the receiver twice (the
receiver's duplicate count), as a share of the data segments sent.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from math import ceil
from typing import Any

from ..config import Config
from ..protocol.autotune import tunes_cwnd
from ..protocol.wire import CHUNK_LEN, HEADER_LEN, crc32c
from ..verify import FRAME, Verifier
from .harness import BenchError

TAG = 7
MESSAGE = 1 << 14
"""Bytes per message: goodput is counted per message delivered, so a window's count is off
by at most one message per flow."""
MIN_OUTSTANDING = 1 << 21
"""Each flow keeps at most ``max(this, 2 x (BDP + queue))`` bytes sent and not completed (or
what the send buffer takes, if less): enough for any window the path allows, and a short
drain at the end."""
BODIES = 16
COALESCE = 20e-6
"""Interrupt coalescing, as ``btl transfer`` uses: receivers handle frames in batches."""
MTU = 9000


@dataclass(frozen=True)
class PathSpec:
    """One regime: the bottleneck's rate and queue, the one-way delay and the loss."""

    rate_mbps: float
    delay: float
    """One-way, seconds (the round trip is twice this)."""
    loss: float = 0.0
    """Random loss per frame, each way; with ``burst`` the long-run rate of burst loss."""
    burst: float | None = None
    """Mean burst length in frames (Gilbert-Elliott), or None for random loss."""
    queue_bdp: float = 1.0
    """The bottleneck's queue, a multiple of the BDP (at least a few datagrams)."""
    aqm: str = "droptail"

    @property
    def rtt(self) -> float:
        return 2 * self.delay

    @property
    def bdp(self) -> float:
        """Bytes: rate x round trip."""
        return self.rate_mbps * 1e6 / 8 * self.rtt

    def label(self) -> str:
        return f"{_rate(self.rate_mbps)}, {self.delay * 1e3:g} ms"

    def loss_label(self) -> str:
        if self.burst:
            return f"{self.loss:.0%} burst (mean {self.burst:g})"
        return f"{self.loss * 100:g}%" if self.loss else "lossless"


def _rate(mbps: float) -> str:
    return f"{mbps / 1000:g} Gb/s" if mbps >= 1000 else f"{mbps:g} Mb/s"


def jain(xs: Sequence[float]) -> float:
    """Jain's fairness index: ``(sum x)^2 / (n sum x^2)``, 1 when all are equal, ``1/n`` when
    one flow takes everything; 1 for no flows or all zero (nothing to be unfair about)."""
    total = sum(xs)
    squares = sum(x * x for x in xs)
    return total * total / (len(xs) * squares) if squares else 1.0


RECOVERY_RTTS = 1.25
"""Round trips one more loss of the same segment adds to its repair: an RTT before later
ACKs show the hole, and RACK's quarter of an RTT of reordering allowance."""
PROBE_GAIN = 1.25
"""The flight above the BDP while bbr probes for bandwidth (its 1.25 pacing phase)."""


def recovery_rtts(path: PathSpec, flight: float) -> float:
    """Round trips from a segment's first send to its repair's ACK, for the segment lost the
    most times in a round trip's ``flight`` (segments): one, and :data:`RECOVERY_RTTS` more per
    loss, counting the losses that hit at least one segment in fifty round trips (``flight x
    p^k >= 0.02``: a short run sees it, and one such hole stalls the window).  Until that
    ACK the receiver holds everything sent after it: the span of sequence numbers in flight
    is this many round trips of data, not one."""
    k = 0
    while path.loss > 0 and k < 8 and flight * path.loss ** (k + 1) >= 0.02:
        k += 1
    return 1.0 + RECOVERY_RTTS * k


def _pow2(n: float) -> int:
    return 1 << int(n - 1).bit_length()


def window_needs(path: PathSpec, cfg: Config, mtu: int = MTU) -> dict[str, int]:
    """The parameters too small for a path, with the value that would do: the sweep lists
    them beside the cells that need them (and runs those cells again with them).

    What a flow needs is more than the BDP once the path loses: the receiver holds what
    arrived after a hole until its repair lands, :func:`recovery_rtts` round trips after its
    first send, so the span from the ACK point to the newest segment sent is that many
    round trips of data (times :data:`PROBE_GAIN`, for bbr's probes).  That span is bounded
    by ``window`` (segments) and by the receiver's ``recv_buffer`` (in full chunks: the
    sender's send window, autotune.send_window); the sender's ``send_buffer`` holds the flight
    and each message a hole keeps from completing.  At its default ``cwnd_max`` is no bound
    (window auto-tuning raises it to cover the BDP, within the send window); a ``cwnd_max``
    set by hand is listed if it is below bbr's window of two BDPs."""
    bdp = path.bdp
    chunk = mtu - HEADER_LEN - CHUNK_LEN
    flight = bdp / chunk  # segments a round trip holds
    rtts = recovery_rtts(path, flight)
    span = ceil(PROBE_GAIN * rtts * flight)
    holes = flight * path.loss * rtts  # segments awaiting their repair at any time
    needs: dict[str, int] = {}
    if cfg.window < span:
        needs["window"] = span
    if not tunes_cwnd(cfg) and cfg.cwnd_max and cfg.cwnd_max < 2 * flight:
        needs["cwnd_max"] = ceil(2 * flight)
    if cfg.send_buffer < PROBE_GAIN * bdp + holes * MESSAGE:
        needs["send_buffer"] = _pow2(PROBE_GAIN * bdp + holes * MESSAGE)
    if cfg.recv_buffer < span * chunk:
        needs["recv_buffer"] = _pow2(span * chunk)
    return needs


@dataclass
class _Flow:
    index: int
    sender: Any
    receiver: Any
    peer: Any
    verifier: Verifier
    sent: int = 0
    sent_bytes: int = 0
    cap: int = MIN_OUTSTANDING
    completed: int = 0
    failed: list[str] = field(default_factory=list)
    got: int = 0
    writable: bool = True


class _Messages:
    """Verified messages made cheaply: ``BODIES`` bodies cut from one seeded block, their
    CRCs computed once; the index in each frame makes every message distinct."""

    __slots__ = ("bodies",)

    def __init__(self, seed: int) -> None:
        block = random.Random(seed).randbytes(MESSAGE + BODIES * 4096)
        size = MESSAGE - FRAME.size
        self.bodies = [(block[k * 4096:k * 4096 + size], crc32c(block[k * 4096:k * 4096 + size]))
                       for k in range(BODIES)]

    def make(self, index: int) -> bytes:
        body, crc = self.bodies[index % BODIES]
        return FRAME.pack(index & 0xFFFFFFFF, crc) + body


def _open(fab: Any, configs: Sequence[Config], seed: int, mtu: int) -> tuple[list[_Flow], list[str]]:
    """Open the flows' transports on ``fab`` and connect each sender to its receiver."""
    from .. import open as open_transport

    dead: list[str] = []
    flows: list[_Flow] = []
    for i, cfg in enumerate(configs):
        s = open_transport("sim", config=cfg, seed=seed * 1000 + 2 * i, fabric=fab, name=f"s{i}", mtu=mtu)
        r = open_transport("sim", config=cfg, seed=seed * 1000 + 2 * i + 1, fabric=fab, name=f"r{i}", mtu=mtu)
        flow = _Flow(i, s, r, None, Verifier(ordered=True))
        flows.append(flow)

        def on_data(peer: Any, tag: int, data: Any, flow: _Flow = flow) -> None:
            flow.verifier.on_data(data)
            flow.got += len(data)

        def on_peer(event: str, peer: Any, exc: BaseException | None, flow: _Flow = flow, end: str = "") -> None:
            if event == "writable":
                flow.writable = True
            elif event == "failed":
                dead.append(f"flow {flow.index}: {end} declared its peer dead ({exc})")

        r.on(TAG, on_data)
        s.on_peer(partial(on_peer, flow=flow, end="sender"))
        r.on_peer(partial(on_peer, flow=flow, end="receiver"))
        flow.peer = s.connect(r.address)
    return flows, dead


def _fill(flow: _Flow, messages: _Messages) -> None:
    """Send until the send buffer refuses (``WouldBlock``), then wait for ``writable``."""
    from ..errors import WouldBlock

    def done(exc: BaseException | None) -> None:
        flow.completed += 1
        if exc is not None and len(flow.failed) < 3:
            flow.failed.append(repr(exc))
        if (flow.sent - flow.completed) * MESSAGE < flow.cap:
            flow.writable = True

    while (flow.sent - flow.completed) * MESSAGE < flow.cap:
        try:
            flow.sender.send(flow.peer, TAG, messages.make(flow.sent), done)
        except WouldBlock:
            flow.writable = False
            return
        flow.sent += 1
        flow.sent_bytes += MESSAGE
    flow.writable = False


def run_flows(path: PathSpec, configs: Sequence[Config], duration: float, warmup: float, *,
              seed: int = 1, mtu: int = MTU, wall_limit: float = 300.0,
              drain_timeout: float = 600.0) -> dict[str, Any]:
    """Run one flow per config through a bottleneck of ``path`` (module docstring); return
    the figures: ``goodput_frac``, ``jain``, ``shares``, ``spurious_frac``, ``verified``,
    ``dead`` (peers declared dead), and the counters they come from."""
    from btlcore_sim import Fabric, LinkModel

    from .. import run_until

    if not 0 <= warmup < duration:
        raise ValueError(f"need 0 <= warmup < duration, got {warmup}, {duration}")
    model = (LinkModel(burst=(path.loss, path.burst), delay=path.delay) if path.burst
             else LinkModel(loss=path.loss, delay=path.delay))
    fab = Fabric(seed=seed, default=model, coalesce=COALESCE)
    flows, dead = _open(fab, configs, seed, mtu)
    bn = fab.bottleneck([(f"s{i}", f"r{i}") for i in range(len(flows))], path.rate_mbps,
                   queue_bdp=path.queue_bdp, aqm=path.aqm)
    queue = bn.limit or path.bdp
    for f in flows:
        f.cap = max(MIN_OUTSTANDING, int(2 * (path.bdp + queue)))
    ts = [t for f in flows for t in (f.sender, f.receiver)]
    messages = _Messages(seed)
    wall0 = time.perf_counter()

    def bounded(pred: Any) -> Any:
        def check() -> bool:
            if time.perf_counter() - wall0 > wall_limit:
                raise BenchError(f"no end within {wall_limit:g} s of real time (virtual {fab.now:.3f} s)")
            return bool(pred())
        return check

    marks: dict[float, list[int]] = {}
    for mark in (warmup, duration):
        while fab.now < mark:
            for f in flows:
                if f.writable:
                    _fill(f, messages)
            run_until(ts, bounded(lambda m=mark: fab.now >= m or any(f.writable for f in flows)),
                      timeout=mark - fab.now + 1e-3)
        marks[mark] = [_taken(f) for f in flows]
    sent_stats = [f.sender.stats() for f in flows]
    try:
        run_until(ts, bounded(lambda: all(f.completed == f.sent and f.verifier.delivered >= f.sent for f in flows)),
                  timeout=drain_timeout)
        drained = True
    except TimeoutError:
        drained = False
    out = _figures(path, flows, marks[warmup], marks[duration], duration - warmup, drained, dead)
    out.update(wall_s=time.perf_counter() - wall0, virtual_s=fab.now, fabric=fab.queue_stats(),
               measured_stats=_sum_stats(sent_stats))
    for t in ts:
        t.close()
    fab.close()
    return out


def _taken(flow: _Flow) -> int:
    """Message bytes the receiver has taken off the link: delivered, and held (chunks in
    reassembly, messages waiting for an earlier one).  Delivered alone would count a backlog
    held at the warm-up mark inside the measured window, when its hole is repaired."""
    peer = flow.receiver.engine.peers_by_addr.get(flow.sender.address)
    held = 0 if peer is None else int(flow.receiver.peer_stats(peer)["bytes_held"])
    return flow.got + held


def _sum_stats(stats: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in stats:
        for k, v in s.items():
            if isinstance(v, (int, float)):
                out[k] = out.get(k, 0) + v
    return out


def _figures(path: PathSpec, flows: Sequence[_Flow], before: Sequence[int], after: Sequence[int],
             window: float, drained: bool, dead: list[str]) -> dict[str, Any]:
    """Goodput, fairness, spurious retransmissions and correctness of a finished run."""
    rates = [(b - a) / window for a, b in zip(before, after, strict=True)]
    ideal = (1.0 - path.loss) * path.rate_mbps * 1e6 / 8
    total = sum(rates)
    tx = [f.sender.stats() for f in flows]
    rx = [f.receiver.stats() for f in flows]
    resends = sum(s.get("num_resends", 0) for s in tx)
    data_sends = sum(s.get("num_total_sends", 0) - s.get("num_ack_sends", 0) - s.get("num_hello_sends", 0)
                     for s in tx)
    dups = sum(s.get("num_dup_recvs", 0) for s in rx)
    errors: list[str] = []
    for f in flows:
        rep = f.verifier.report({"messages": f.sent}, reset=False)
        if not rep["verified"]:
            errors.append(f"flow {f.index}: " + "; ".join(rep["errors"][:2]))
        if f.failed:
            errors.append(f"flow {f.index}: sends failed: {f.failed[0]}")
    if not drained:
        errors.append("the flows did not drain: " + ", ".join(
            f"flow {f.index} {f.verifier.delivered}/{f.sent} delivered, {f.completed} completed" for f in flows))
    verified_bytes = sum(f.verifier.bytes_delivered for f in flows if not f.failed)
    return {
        "goodput_frac": total / ideal if ideal else 0.0,
        "goodput_mbps": total * 8 / 1e6,
        "flow_mbps": [r * 8 / 1e6 for r in rates],
        "shares": [r / total if total else 0.0 for r in rates],
        "jain": jain(rates),
        "spurious_frac": dups / data_sends if data_sends else 0.0,
        "resend_frac": resends / data_sends if data_sends else 0.0,
        "sent_bytes": sum(f.sent_bytes for f in flows),
        "verified_bytes": verified_bytes,
        "verified": not errors and not dead,
        "errors": errors + dead,
        "dead": len(dead),
    }
