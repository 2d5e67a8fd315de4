"""How long and how often each measurement runs.

``full`` is what ``docs/benchmarks.md`` is made from; ``quick`` finishes in about a minute;
``tiny`` proves the harness works (the smoke test) and its figures mean nothing.
Every trial is bounded both in time and in count: whichever limit comes first ends it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Profile:
    name: str
    trials: int
    warmup: int
    # raw UDP blast and TCP stream: seconds of sending per trial, datagram cap per trial
    blast_seconds: float
    blast_max_datagrams: int
    stream_seconds: float
    # ping-pongs: seconds and round trips per trial
    rtt_seconds: float
    rtt_max_iters: int
    # aioquic: bytes per bulk trial by datagram size, echoes per trial
    quic_bulk_bytes: dict[int, int]
    quic_echo_iters: int
    # btlcore over UDP
    btl_bulk_seconds: float
    btl_bulk_max_messages: int
    # simulator
    sim_bytes: int
    loss_bytes: int
    loss_rates: tuple[float, ...] = (0.01, 0.05, 0.10)
    # scale
    scale_peers: tuple[int, ...] = (1, 100, 1000)
    memory_peers: int = 1000
    udp_transports: int = 1000  # open at once, for the memory and open time of one
    progress_calls: int = 2000
    # hard limit for one process pair, seconds; and for the whole run (later items are skipped)
    deadline: float = 60.0
    budget: float = 1200.0
    # run each btlcore figure right after its references (False: all references first)
    interleave: bool = True
    datagram_sizes: tuple[int, ...] = (1472, 8972, 65000)
    message_sizes: tuple[int, ...] = (64, 8192)
    extra: dict[str, float] = field(default_factory=dict)


FULL = Profile(
    name="full", trials=7, warmup=1,
    blast_seconds=1.0, blast_max_datagrams=2_000_000, stream_seconds=1.0,
    rtt_seconds=0.5, rtt_max_iters=50_000,
    quic_bulk_bytes={1472: 8 << 20, 8972: 32 << 20}, quic_echo_iters=1000,
    btl_bulk_seconds=1.0, btl_bulk_max_messages=20_000,
    sim_bytes=64 << 20, loss_bytes=16 << 20,
    deadline=180.0,
)

QUICK = Profile(
    name="quick", trials=3, warmup=1,
    blast_seconds=0.25, blast_max_datagrams=500_000, stream_seconds=0.25,
    rtt_seconds=0.15, rtt_max_iters=20_000,
    quic_bulk_bytes={1472: 4 << 20, 8972: 16 << 20}, quic_echo_iters=200,
    btl_bulk_seconds=0.3, btl_bulk_max_messages=5_000,
    sim_bytes=8 << 20, loss_bytes=4 << 20,
    memory_peers=300, progress_calls=500,
    deadline=30.0, budget=120.0,
)

TINY = Profile(
    name="tiny", trials=1, warmup=0,
    blast_seconds=0.02, blast_max_datagrams=2_000, stream_seconds=0.02,
    rtt_seconds=0.02, rtt_max_iters=50,
    quic_bulk_bytes={1472: 64 << 10, 8972: 64 << 10}, quic_echo_iters=5,
    btl_bulk_seconds=0.05, btl_bulk_max_messages=4,
    sim_bytes=1 << 20, loss_bytes=256 << 10,
    loss_rates=(0.05,), scale_peers=(1, 10), memory_peers=10, progress_calls=20, udp_transports=10,
    deadline=20.0, budget=120.0, datagram_sizes=(1472,), message_sizes=(64,),
)

PROFILES = {p.name: p for p in (FULL, QUICK, TINY)}
