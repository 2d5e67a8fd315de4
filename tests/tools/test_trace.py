"""The event trace (btlcore.trace): what a lossy simulated transfer's trace says equals what its
capture shows; tracing changes no datagram; off, no tracer exists; --trace on btl transfer and
btl serve."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import btlcore
from btlcore import captures
from btlcore.protocol import wire
from btlcore.protocol.congestion.aimd import Aimd
from btlcore.protocol.congestion.bbr import Bbr
from btlcore.trace import FORMAT, TracedCongestion

from capkit import lossy_transfer

BTL = [sys.executable, "-m", "btlcore.cli"]


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("trace")
    # aimd: test_metrics_follow_the_window_and_rtt follows its cut per loss episode, unpaced
    lossy_transfer(d / "run.pcapng", trace=d / "run.jsonl", cc="aimd")
    return d / "run.pcapng", d / "run.jsonl"


def test_the_trace_is_json_lines_with_time_node_and_event(traced: tuple[Path, Path]) -> None:
    evs = events(traced[1])
    assert evs[0] == {"t": 0.0, "event": "trace", "format": FORMAT}
    assert all({"t", "node", "event"} <= set(e) for e in evs[1:])
    times = [e["t"] for e in evs]
    assert times == sorted(times) and times[-1] > 0  # virtual time, one clock for both ends
    nodes = {e["node"] for e in evs[1:]}
    assert len(nodes) == 2
    kinds = {e["event"] for e in evs}
    assert {"transport_opened", "connection_started", "packet_sent", "packet_received", "metrics_updated",
            "congestion", "transport_closed"} <= kinds


def test_packets_in_the_trace_are_those_of_the_capture(traced: tuple[Path, Path]) -> None:
    pcap, trace = traced
    evs = events(trace)
    frames = list(captures.read(pcap))
    sender = next(e["node"] for e in evs if e["event"] == "packet_sent" and e["type"] == "DATA")
    sent = [e for e in evs if e["event"] == "packet_sent" and e["node"] == sender and e["type"] == "DATA"]
    data = [c.datagram for c in frames if c.datagram.type == wire.T_DATA and not c.comment.startswith("duplicate")]
    assert sorted(e["seq"] for e in sent) == sorted(d.seq for d in data)
    # a retransmission is a seq sent before (in send order)
    assert sum(e["retransmission"] for e in sent) == len(sent) - len({e["seq"] for e in sent}) > 0
    # what the sender received: the capture's delivered frames toward it, in the same order
    received = [e for e in evs if e["event"] == "packet_received" and e["node"] == sender]
    toward = [c.datagram for c in frames if not c.dropped and c.dst.startswith("10.0.0.1:")]
    assert [e["type"] for e in received] == [wire.TYPE_NAMES[d.type] for d in toward]
    acks = [(e["ack"], e["sack"]) for e in received if e["type"] == "ACK"]
    want = [(d.ack, [[d.ack + s, d.ack + s + n - 1] for s, n in wire.parse_ack_payload(d.payload)[1]])
            for d in toward if d.type == wire.T_ACK]
    assert acks == want and any(sack for _, sack in acks)


def test_metrics_follow_the_window_and_rtt(traced: tuple[Path, Path]) -> None:
    evs = events(traced[1])
    sender = next(e["node"] for e in evs if e["event"] == "packet_sent" and e["type"] == "DATA")
    metrics = [e for e in evs if e.get("node") == sender and e["event"] in ("metrics_updated", "congestion")]
    updates = [e for e in metrics if e["event"] == "metrics_updated"]
    assert updates[0]["cwnd"] == btlcore.Config().cwnd_initial and updates[0]["srtt"] is None
    assert any(e["srtt"] for e in updates) and all(e["pacing_rate"] == 0.0 for e in updates)
    # no two consecutive updates alike: written on change only
    keys = ("cwnd", "ssthresh", "srtt", "min_rtt", "rttvar", "pacing_rate")
    assert all(any(a[k] != b[k] for k in keys) for a, b in zip(updates, updates[1:], strict=False))
    # each loss episode is followed at once by the smaller window the algorithm chose
    losses = 0
    for i, e in enumerate(metrics):
        if e["event"] == "congestion" and e["trigger"] == "loss":
            before = [m["cwnd"] for m in metrics[:i] if m["event"] == "metrics_updated"][-1]
            after = metrics[i + 1]
            assert after["event"] == "metrics_updated" and after["t"] == e["t"]
            assert after["cwnd"] < before and after["ssthresh"] == after["cwnd"]
            losses += 1
    assert losses > 0


def test_tracing_changes_no_datagram(tmp_path: Path) -> None:
    """The same seeded run, traced and not: byte-identical captures."""
    lossy_transfer(tmp_path / "plain.pcapng", seed=11, messages=15)
    lossy_transfer(tmp_path / "traced.pcapng", seed=11, messages=15, trace=tmp_path / "t.jsonl")
    assert (tmp_path / "plain.pcapng").read_bytes() == (tmp_path / "traced.pcapng").read_bytes()
    assert sum(1 for e in events(tmp_path / "t.jsonl") if e["event"] == "packet_sent") > 15


def test_off_there_is_no_tracer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BTL_TRACE", raising=False)
    t = btlcore.open("sim")
    try:
        assert type(t.engine.state.cc) is Bbr  # the algorithm itself (the default), unwrapped
        assert not any(type(p).__name__ == "Tracer" for p in t._pm.get_plugins())
        assert getattr(t._post, "__name__", "") != "traced_post"
    finally:
        t.close()


def test_btl_trace_variable_and_api_switch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BTL_TRACE", str(tmp_path / "env.jsonl"))
    t = btlcore.open("sim")
    assert isinstance(t.engine.state.cc, TracedCongestion)
    t.close()
    assert events(tmp_path / "env.jsonl")[-1]["event"] == "transport_closed"
    monkeypatch.delenv("BTL_TRACE")
    with pytest.raises(TypeError, match="trace must be a file path"):
        btlcore.open("sim", trace=7)  # type: ignore[arg-type]


def test_a_traced_algorithm_keeps_its_optional_hooks_only(tmp_path: Path) -> None:
    """The wrapper has on_spurious / on_rate_sample exactly when the algorithm has them (the
    engine looks them up once: tracing must not add a code path)."""
    from btlcore.trace import Tracer

    class WithHooks(Aimd):
        calls: list[str] = []

        def on_spurious(self, peer: object) -> None:
            self.calls.append("spurious")

    class Bare:  # the four required methods only (aimd has an on_spurious since #12's undo)
        cwnd_max = 1024.0

        def on_new_peer(self, peer: Any) -> None:
            peer.cwnd = 32.0

        def on_ack(self, peer: Any) -> None: ...

        def on_loss_episode(self, peer: Any) -> None: ...

        def on_persistent_congestion(self, peer: Any) -> None: ...

    tracer = Tracer(str(tmp_path / "hooks.jsonl"))
    plain = TracedCongestion(Bare(), tracer)
    assert getattr(plain, "on_spurious", None) is None and getattr(plain, "on_rate_sample", None) is None
    hooked = TracedCongestion(WithHooks(btlcore.Config()), tracer)
    assert callable(getattr(hooked, "on_spurious", None)) and getattr(hooked, "on_rate_sample", None) is None
    assert hooked.cwnd_max == Aimd(btlcore.Config()).cwnd_max
    tracer.close()


def test_btl_transfer_trace_on_the_simulator(tmp_path: Path) -> None:
    trace = tmp_path / "cli.jsonl"
    r = subprocess.run([*BTL, "transfer", "--backend", "sim", "--loss", "0.05", "--messages", "40",
                        "--seed", "4", "--trace", str(trace), "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    evs = events(trace)
    assert len({e["node"] for e in evs[1:]}) == 2  # both ends, one file
    assert sum(1 for e in evs if e["event"] == "transport_closed") == 2
    pcap = tmp_path / "old.pcap"  # a .pcap keeps what --trace wrote before
    r = subprocess.run([*BTL, "transfer", "--backend", "sim", "--messages", "5", "--seed", "4", "--trace",
                        str(pcap), "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert pcap.read_bytes()[:4] == b"\xd4\xc3\xb2\xa1" and len(list(captures.read(pcap))) > 5


def test_btl_serve_trace_over_udp(tmp_path: Path) -> None:
    trace = tmp_path / "server.jsonl"
    server = subprocess.Popen([*BTL, "serve", "--backend", "udp", "--bind", "127.0.0.1:0", "--count", "30",
                               "--trace", str(trace), "--json"], stdout=subprocess.PIPE, text=True)
    try:
        hello = json.loads(server.stdout.readline())  # type: ignore[union-attr]
        r = subprocess.run([*BTL, "transfer", "--backend", "udp", "--peer", hello["address"], "--messages", "30",
                            "--json"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        server.wait(timeout=120)
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=10)
    evs = events(trace)
    assert evs[1]["event"] == "transport_opened" and evs[1]["backend"] == "udp"
    got = [e for e in evs if e["event"] == "packet_received" and e["type"] == "DATA"]
    assert len({e["seq"] for e in got}) >= 30 and evs[-1]["event"] == "transport_closed"
    # a receiver's trace plots too: its flow as it arrived, with the ACKs it sent
    pytest.importorskip("matplotlib")
    from btlcore import timeseq

    _, (flow, *back) = timeseq.load(trace)  # (busiest first; back: the server's report to the client)
    assert flow.receiver == evs[1]["node"] and flow.segments == len(got) and flow.acks
    assert all(f.sender == evs[1]["node"] for f in back)
    assert flow.acks[-1][1] == max(s for _, s in flow.sent)
    r = subprocess.run([*BTL, "plot", str(trace), "-o", str(tmp_path / "server.png")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and "ACKs" in r.stdout, r.stderr
