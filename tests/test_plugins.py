"""Tool plugins on a real backend: pcap tracing, stats at close, fault scripts."""

from __future__ import annotations

import json

import pytest

import btlcore
from btlcore.errors import BtlDeprecationWarning
from btlcore_plugins.faults import FaultScript
from btlcore_plugins.pcap import PcapTracer
from btlcore_plugins.stats import StatsReporter


def _pair(**kw):
    a = btlcore.open("udp", **kw)
    b = btlcore.open("udp")
    return a, b


def test_pcap_tracer_writes_frames_scapy_dissects(tmp_path):
    scapy_all = pytest.importorskip("scapy.all")
    from btlcore_sim import layers  # noqa: F401  (binds the btlcore layers)

    path = tmp_path / "trace.pcap"
    tracer = PcapTracer(str(path))
    a, b = _pair(plugins=[tracer])
    got = []
    b.on(1, lambda p, t, d: got.append(d))
    peer = a.connect(b.address)
    a.send(peer, 1, b"traced" * 100)
    btlcore.run_until([a, b], lambda: bool(got), timeout=5)
    a.close()
    b.close()
    packets = scapy_all.rdpcap(str(path))
    assert len(packets) == tracer.frames >= 3  # HELLO, HELLO_ACK, DATA at least
    kinds = {p.lastlayer().name for p in packets}
    assert any("btl" in k.lower() or "hello" in k.lower() or "data" in k.lower() for k in kinds), kinds
    assert any(bytes(p)[42:].endswith(b"traced" * 100) for p in packets)


def test_stats_reporter_at_close(tmp_path):
    out = tmp_path / "stats.jsonl"
    rep = StatsReporter(stream=None, json_path=str(out))
    a, b = _pair(plugins=[rep])
    got = []
    b.on(1, lambda p, t, d: got.append(d))
    peer = a.connect(b.address)
    for _ in range(10):
        a.send(peer, 1, b"x")
    btlcore.run_until([a, b], lambda: len(got) == 10 and a.stats()["num_msgs_completed"] == 10, timeout=5)
    a.close()
    b.close()
    line = json.loads(out.read_text().splitlines()[0])
    assert line["backend"] == "udp" and line["num_msgs_completed"] == 10


def test_fault_script_drops_and_protocol_recovers():
    with pytest.warns(BtlDeprecationWarning):  # (the old plugin, kept working: btlcore.faults replaces it)
        faults = FaultScript("drop 10%", "drop nth 3,4", "drop type ACK 1", seed=3)
    a, b = _pair(plugins=[faults])
    got = []
    b.on(1, lambda p, t, d: got.append(d))
    peer = a.connect(b.address)
    msgs = [bytes([i]) * (i * 100) for i in range(100)]
    for m in msgs:
        a.send(peer, 1, m)
    btlcore.run_until([a, b], lambda: len(got) == 100, timeout=20)
    assert got == msgs
    assert faults.dropped >= 3 and a.stats()["num_resends"] >= 1


def test_fault_script_rejects_bad_rule():
    with pytest.raises(btlcore.ConfigError, match="bad fault rule"), pytest.warns(BtlDeprecationWarning):
        FaultScript("drop lots")


def test_btl_plugins_env_loads_installed_tool_plugins(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BTL_PLUGINS", "stats,pcap")
    monkeypatch.setenv("BTL_PCAP", str(tmp_path / "env.pcap"))
    a, b = _pair()
    peer = a.connect(b.address)
    a.send(peer, 1, b"via env")
    btlcore.run_until([a, b], lambda: a.stats()["num_msgs_completed"] == 1, timeout=5)
    a.close()
    b.close()
    assert "btlcore[udp" in capsys.readouterr().err  # StatsReporter printed the stats line
    assert (tmp_path / "env.pcap").stat().st_size > 24  # PcapTracer wrote frames


def test_btl_plugins_env_unknown_name(monkeypatch):
    monkeypatch.setenv("BTL_PLUGINS", "nosuch")
    with pytest.raises(btlcore.ConfigError, match="unknown plugin 'nosuch'.*pcap"):
        btlcore.open("sim")
