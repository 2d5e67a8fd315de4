"""Smoke test of the benchmark harness (``btlcore.bench``, driven by ``btl bench``).

Runs the tiniest configuration of every reference and every btlcore measurement to prove the
harness works end to end: process pairs, trials, statistics, ratios, targets, the table, the
JSON and the docs generator.  No timing assertions: the figures of the ``tiny`` profile mean
nothing."""

from __future__ import annotations

import io
import json
import math
import time
import warnings
from pathlib import Path

import pytest

from btlcore.bench import docs, harness, ref_quic, ref_tcp, ref_udp, report, runner
from btlcore.bench.profiles import TINY
from btlcore.testing.hosts import has_ipv6_loopback

pytestmark = pytest.mark.timeout(120)


def _check(r: harness.Result, unit: str) -> None:
    assert r.error is None, r.error
    assert r.skipped is None, r.skipped
    assert r.unit == unit
    assert len(r.values) == TINY.trials
    assert all(math.isfinite(v) and v > 0 for v in r.values), r.values
    assert r.stats["min"] <= r.stats["median"] <= r.stats["max"]


# -- harness pieces -------------------------------------------------------------------------

def test_summarize_gives_median_and_spread() -> None:
    s = harness.summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (3.0, 1.0, 5.0, 5)
    assert s["q1"] == 2.0 and s["q3"] == 4.0
    assert harness.summarize([7.0])["q1"] == 7.0


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "127.0.0.2", "localhost"])
def test_loopback_accepted(host: str) -> None:
    assert harness.loopback(host) == host


@pytest.mark.parametrize("host", ["8.8.8.8", "0.0.0.0", "10.0.0.1", "example.com", "::"])
def test_non_loopback_refused(host: str) -> None:
    with pytest.raises(ValueError, match="loopback only"):
        harness.loopback(host)


def _sleeper(ctl: object, seconds: float) -> None:
    time.sleep(seconds)


def _raiser(ctl: object) -> None:
    raise RuntimeError("boom")


def test_pair_is_killed_at_its_deadline() -> None:
    t0 = time.monotonic()
    with pytest.raises(harness.BenchError, match="deadline"):
        harness.run_pair(_sleeper, _sleeper, server_kw={"seconds": 60}, client_kw={"seconds": 60},
                         deadline=0.5, grace=0.1)
    assert time.monotonic() - t0 < 10


def test_pair_reports_a_failing_side() -> None:
    with pytest.raises(harness.BenchError, match="boom"):
        harness.run_pair(_sleeper, _raiser, server_kw={"seconds": 60}, deadline=10, grace=0.1)


# -- the references, tiniest configuration ---------------------------------------------------

def test_raw_udp_blast() -> None:
    r = ref_udp.blast(TINY, 1472)
    _check(r, "B/s")
    assert 0.0 <= r.extra["loss_median"] <= 1.0



@pytest.mark.parametrize("busy", [False, True])
def test_udp_pingpong(busy: bool) -> None:
    _check(ref_udp.pingpong(TINY, 64, busy), "s")


@pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback")
def test_ipv6_loopback() -> None:
    _check(ref_udp.pingpong(TINY, 64, False, host="::1"), "s")
    _check(ref_tcp.stream(TINY, host="::1"), "B/s")


def test_tcp_stream() -> None:
    _check(ref_tcp.stream(TINY), "B/s")


@pytest.mark.parametrize("busy", [False, True])
def test_tcp_pingpong(busy: bool) -> None:
    _check(ref_tcp.pingpong(TINY, 64, busy), "s")


@pytest.mark.skipif(ref_quic.available() is not None, reason="aioquic not installed")
def test_aioquic_bulk_and_echo() -> None:
    _check(ref_quic.bulk(TINY, 1472), "B/s")
    _check(ref_quic.echo(TINY), "s")


def test_aioquic_missing_is_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ref_quic, "available", lambda: "aioquic not installed (test)")
    [r] = [x for item in runner.plan(TINY) if item.section == "quic" for x in item.run()][:1]
    assert r.skipped == "aioquic not installed (test)"


# -- btlcore measurements: run where btlcore has the piece, skipped with the reason elsewhere --
# A failure inside btlcore itself (a livelock, a lost message) is reported by the benchmark as
# an error result; here it is a warning, since this file tests the harness, not the protocol.
# An error the harness made (a bad call into btlcore, a malformed result) fails the test.

HARNESS_ERRORS = ("TypeError", "AttributeError", "NameError", "KeyError", "ImportError", "IndexError")


@pytest.mark.parametrize("section", ["btl_udp", "btl_sim", "btl_scale"])
def test_btlcore_measurements_run_or_skip(section: str) -> None:
    items = [i for i in runner.plan(TINY) if i.section == section]
    assert items
    for item in items:
        results = item.run()
        assert [r.id for r in results] == [s[0] for s in item.specs]
        for r in results:
            if r.skipped is not None:
                assert r.skipped.startswith("btlcore ") and "not available yet" in r.skipped, r.skipped
            elif r.error is not None:
                assert not any(e in r.error for e in HARNESS_ERRORS), f"{r.id}: {r.error}"
                warnings.warn(f"{r.id}: btlcore failed under the benchmark: {r.error}", stacklevel=1)
            else:
                assert r.values and all(math.isfinite(v) for v in r.values), (r.id, r.values)


# -- runner, report, docs --------------------------------------------------------------------

def test_run_returns_report_and_prints_table() -> None:
    out = io.StringIO()
    rep = runner.run(profile="tiny", sections="raw_udp,tcp", out=out, log=None)
    text = out.getvalue()
    assert "Reference: raw UDP" in text and "Reference: kernel TCP" in text
    assert "Targets (goals, not tests)" in text
    ids = {r["id"] for r in rep["results"]}
    assert {"ref.udp_blast.1472", "ref.udp_rtt.64.busy", "ref.tcp_stream", "ref.tcp_rtt.64.blocking"} <= ids
    assert rep["meta"]["profile"] == "tiny"
    json.dumps(rep)  # serialisable as it is


def test_main_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert runner.main(["--profile", "tiny", "--only", "tcp", "--json", "--quiet"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rep["results"]][0] == "ref.tcp_stream"
    assert {"meta", "results", "ratios", "targets"} <= set(rep)


def test_unknown_section_is_refused() -> None:
    assert runner.main(["--profile", "tiny", "--only", "nonsense", "--quiet"]) == 2


def _fake(rid: str, value: float, unit: str = "x", **extra: object) -> dict:
    return harness.measured(rid, "btl_sim", rid, unit, [value * 0.9, value, value * 1.1], **extra).to_json()


def test_targets_and_ratios() -> None:
    results = [
        _fake("btl.udp_bulk.8972", 1.5e9, "B/s", acks_per_segment=0.1),
        _fake("ref.udp_blast.8972", 2.0e9, "B/s"),
        _fake("ref.tcp_stream", 3.0e9, "B/s"),
        _fake("btl.sim_rate", 100e3, "1/s"),
    ]
    tg = {t["target"]: t for t in report.targets(results)}
    assert tg["UDP bulk goodput vs raw UDP at 8972 B"]["status"] == report.PASS
    assert tg["UDP bulk goodput vs kernel TCP stream"]["status"] == report.FAIL
    assert tg["simulator segments per wall-second"]["status"] == report.FAIL
    assert tg["standalone ACKs per data segment, bulk 8972 B"]["status"] == report.PASS
    assert tg["memory per idle peer"]["status"] == report.NA
    [ra] = [r for r in report.ratios(results) if r["label"] == "bulk 8972 B vs raw UDP blast"]
    assert ra["ratio"] == pytest.approx(0.75)
    # beside a ratio to a reference: what raw UDP itself reaches against it
    assert tg["UDP bulk goodput vs kernel TCP stream"]["why"] == "raw UDP itself: 0.667x"
    # issue 15's round-trip goal (<= 2x raw UDP) beside issue 6's (<= 1.3x): the same ratio, two verdicts
    results += [_fake("btl.udp_rtt.64.busy", 16e-6, "s"), _fake("ref.udp_rtt.64.busy", 8.5e-6, "s")]
    tg = {t["target"]: t for t in report.targets(results)}
    assert tg["round trip 64 B busy vs raw UDP (issue 15)"]["status"] == report.PASS
    assert tg["round trip 64 B busy vs raw UDP"]["status"] == report.FAIL
    assert tg["UDP bulk goodput at 65000 B vs kernel TCP stream (issue 15)"]["status"] == report.NA
    results[-2] = _fake("btl.udp_rtt.64.busy", 18e-6, "s")
    tg = {t["target"]: t for t in report.targets(results)}
    assert tg["round trip 64 B busy vs raw UDP (issue 15)"]["status"] == report.FAIL
    results.append(_fake("ref.quic_bulk.8972", 1e8, "B/s"))
    tg = {t["target"]: t for t in report.targets(results)}
    assert tg["UDP bulk goodput vs aioquic at 8972 B"]["status"] == report.FAIL
    assert tg["UDP bulk goodput vs aioquic at 8972 B"]["why"] == "raw UDP itself: 20x"


def test_docs_written(tmp_path: Path) -> None:
    results = [_fake(f"btl.loss.random{p}.goodput_frac", 1 - p / 50, loss=p / 100, burst=None) for p in (1, 5, 10)]
    results.append(_fake("btl.loss.burst5.goodput_frac", 0.5, loss=0.05, burst=4.0))
    rep = {"meta": {"profile": "tiny"}, "results": results, "ratios": [], "targets": report.targets(results)}
    md, png = docs.write(rep, str(tmp_path))
    assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = Path(md).read_text()
    assert "benchmarks-loss.png" in text and "## Targets" in text
    empty = {"meta": {}, "results": [], "ratios": [], "targets": []}
    docs.write(empty, str(tmp_path / "empty"))
    assert (tmp_path / "empty" / "docs" / "benchmarks-loss.png").exists()
