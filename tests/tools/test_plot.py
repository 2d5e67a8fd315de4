"""``btl plot``: a valid PNG or SVG from a lossy simulated transfer's capture and from its
trace, and the time-sequence data behind it (btlcore.timeseq) agreeing with both."""

from __future__ import annotations

import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from btlcore import captures, timeseq
from btlcore.protocol import wire

from capkit import lossy_transfer, udp_transfer, write_pcap

pytest.importorskip("matplotlib", reason="btl plot needs matplotlib (the 'plot' extra, installed by scripts/setup.sh)")

BTL = [sys.executable, "-m", "btlcore.cli"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, object]]:
    d = tmp_path_factory.mktemp("plot")
    fabric = lossy_transfer(d / "run.pcapng", trace=d / "run.jsonl")
    return d / "run.pcapng", d / "run.jsonl", fabric.totals()


def btl_plot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BTL, "plot", *args], capture_output=True, text=True, timeout=300)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert data[-8:-4] == b"IEND"
    width, height = struct.unpack("!II", data[16:24])
    return width, height


def test_plot_a_lossy_capture_as_png(run: tuple[Path, Path, dict[str, object]], tmp_path: Path) -> None:
    pcap, _, totals = run
    out = tmp_path / "capture.png"
    r = btl_plot(str(pcap), "-o", str(out))
    assert r.returncode == 0, r.stderr
    width, height = png_size(out)
    assert width > 400 and height > 300
    assert "retransmissions" in r.stdout and "drops: loss" in r.stdout
    import matplotlib.image

    pixels = matplotlib.image.imread(str(out))
    assert pixels.shape[:2] == (height, width) and pixels.std() > 0.05  # not a blank canvas


def test_plot_a_trace_as_svg_with_window_and_rtt(run: tuple[Path, Path, dict[str, object]], tmp_path: Path) -> None:
    _, trace, _ = run
    out = tmp_path / "trace.svg"
    r = btl_plot(str(trace), "-o", str(out), "--title", "a lossy run")
    assert r.returncode == 0, r.stderr
    root = ET.parse(out).getroot()
    assert root.tag.endswith("svg")
    text = out.read_text()
    for label in ("cwnd (segments)", "RTT (ms)", "retransmission", "SACK block", "a lossy run"):
        assert label in text, label


def test_capture_and_trace_tell_the_same_story(run: tuple[Path, Path, dict[str, object]]) -> None:
    pcap, trace, totals = run
    kind_c, (cap, *_) = timeseq.load(pcap)
    kind_t, (tr, *_) = timeseq.load(trace)
    assert (kind_c, kind_t) == ("capture", "trace")
    assert cap.segments == tr.segments and len(cap.resent) == len(tr.resent) > 0
    assert sorted(s for _, s in cap.sent + cap.resent) == sorted(s for _, s in tr.sent + tr.resent)
    assert [a for _, a in cap.acks] == [a for _, a in tr.acks]  # the ACKs that reached the sender
    assert sorted((lo, hi) for _, lo, hi in cap.sacks) == sorted((lo, hi) for _, lo, hi in tr.sacks)
    assert tr.cwnd and tr.srtt and tr.losses and not cap.cwnd
    # the drops by cause, as the fabric counted them (data segments: the run's only lossy ones)
    data_drops = {cause: len(p) for cause, p in cap.drops.items()}
    frames = [c for c in captures.read(pcap) if c.dropped]
    assert sum(data_drops.values()) == sum(1 for c in frames if c.datagram.type == wire.T_DATA) > 0
    drops = totals["drops"]
    assert isinstance(drops, dict) and set(data_drops) <= set(drops)
    # the ACK line never goes back and ends at the last segment
    acks = [a for _, a in cap.acks]
    assert acks == sorted(acks) and acks[-1] == max(s for _, s in cap.sent)
    assert min(s for _, s in cap.sent) == 1


def test_a_udp_capture_pairs_acks_with_their_data_whatever_the_ports(tmp_path: Path) -> None:
    """On udp, data goes between the data sockets and ACKs between the priority sockets: the
    ACK line is found by sequence numbers, not ports."""
    frames = udp_transfer(messages=8, size=20_000)
    path = tmp_path / "udp.pcap"
    write_pcap(path, frames)
    kind, flows = timeseq.load(path)
    flow = flows[0]
    data_ports = {(f[2], f[4]) for f in frames if f[5][1] == wire.T_DATA}
    ack_ports = {(f[4], f[2]) for f in frames if f[5][1] == wire.T_ACK}
    assert kind == "capture" and len(data_ports) == 1 and not data_ports & ack_ports
    assert flow.acks and flow.acks[-1][1] == max(s for _, s in flow.sent) == flow.segments
    r = btl_plot(str(path), "-o", str(tmp_path / "udp.png"))
    assert r.returncode == 0 and png_size(tmp_path / "udp.png")[0] > 400


def test_corrupted_segments_are_drops_not_points(tmp_path: Path) -> None:
    """A copy the receiver drops for its CRC32C is a drop (cause 'corrupted'); its sequence
    number, maybe the flipped bit, is never drawn."""
    path = tmp_path / "corrupt.pcapng"
    fabric = lossy_transfer(path, seed=2, corrupt=0.1)
    _, (flow, *_) = timeseq.load(path)
    corrupted = [c for c in captures.read(path) if not c.crc_ok]
    assert fabric.totals()["corrupted"] > 0 and corrupted
    assert 0 < len(flow.drops.get("corrupted", [])) <= len(corrupted)
    assert max(s for _, s in flow.sent + flow.resent) < 10_000  # no seq read from a damaged copy
    r = btl_plot(str(path), "-o", str(tmp_path / "w.png"), "--time", "1:3")
    assert r.returncode == 0, r.stderr
    bad = btl_plot(str(path), "-o", str(tmp_path / "w.png"), "--time", "3")
    assert bad.returncode == 2 and "FROM:TO" in bad.stderr


def test_a_capture_cut_short_gives_the_same_graph_but_sack(run: tuple[Path, Path, dict[str, object]],
                                                           tmp_path: Path) -> None:
    """tcpdump -s 100 keeps every header: the same segments, retransmissions and ACK line as
    the whole capture (the SACK blocks of the ACKs that were cut are lost)."""
    pcap, _, _ = run
    frames = [(c.time, "192.0.2.1" if c.src.startswith("10.0.0.1") else "192.0.2.2", 40000,
               "192.0.2.2" if c.src.startswith("10.0.0.1") else "192.0.2.1", 40000, c.datagram.encode())
              for c in captures.read(pcap) if not c.dropped]
    write_pcap(tmp_path / "whole.pcap", frames)
    write_pcap(tmp_path / "short.pcap", frames, snaplen=100)
    (whole, *_), (short, *_) = (timeseq.load(tmp_path / n)[1] for n in ("whole.pcap", "short.pcap"))
    assert (short.sent, short.resent, short.acks) == (whole.sent, whole.resent, whole.acks)
    assert set(short.sacks) < set(whole.sacks)
    cut = [c for c in captures.read(tmp_path / "short.pcap") if c.truncated]
    assert cut and all(c.size > 58 and c.crc_ok for c in cut)
    raw = max((f[5] for f in frames), key=len)
    assert captures.looks_like_btl(raw[:50], len(raw)) and not captures.looks_like_btl(raw[:50])


def test_plot_errors_say_what_is_allowed(run: tuple[Path, Path, dict[str, object]], tmp_path: Path) -> None:
    pcap, _, _ = run
    r = btl_plot(str(pcap), "-o", str(tmp_path / "x.jpg"))
    assert r.returncode == 2 and "*.png or *.svg" in r.stderr
    junk = tmp_path / "junk.txt"
    junk.write_text("hello")
    r = btl_plot(str(junk), "-o", str(tmp_path / "x.png"))
    assert r.returncode == 2 and "neither a capture" in r.stderr
    r = btl_plot(str(pcap), "-o", str(tmp_path / "x.png"), "--flow", "192.0.2.99")
    assert r.returncode == 2 and "no flow from" in r.stderr and "10.0.0.1:7471" in r.stderr
    r = btl_plot(str(tmp_path / "missing.pcap"), "-o", str(tmp_path / "x.png"))
    assert r.returncode == 2 and "missing.pcap" in r.stderr


def test_a_paced_trace_gets_its_pacing_row(tmp_path: Path) -> None:
    """A trace whose congestion controller paces (written here by hand, as the trace format
    says) gets a pacing-rate row; an unpaced one (aimd's, above) does not."""
    import json

    events = [{"t": 0.0, "event": "trace", "format": "btlcore-trace/1"}]
    for i in range(1, 20):
        events.append({"t": i * 1e-3, "node": "a", "peer": "b", "event": "packet_sent", "type": "DATA",
                       "seq": 100 + i, "retransmission": i == 7})
        events.append({"t": i * 1e-3, "node": "a", "peer": "b", "event": "metrics_updated", "cwnd": 10 + i,
                       "ssthresh": None, "srtt": 1e-3, "min_rtt": 1e-3, "rttvar": 0.0, "pacing_rate": 1e6 * i})
    trace = tmp_path / "paced.jsonl"
    trace.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    _, (flow,) = timeseq.load(trace)
    assert (len(flow.sent), len(flow.resent), flow.pacing[-1]) == (18, 1, (0.018, 19e6))
    r = btl_plot(str(trace), "-o", str(tmp_path / "paced.svg"))
    assert r.returncode == 0, r.stderr
    assert "pacing (Mbit/s)" in (tmp_path / "paced.svg").read_text()
    r = btl_plot(str(tmp_path / "paced.jsonl"), "-o", str(tmp_path / "p.svg"), "--time", "4.5:9.5")
    assert r.returncode == 0 and "4 segments, 1 retransmissions" in r.stdout
