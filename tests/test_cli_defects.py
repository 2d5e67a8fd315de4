"""The CLI defects of issue #11 (item 11), one test each: ``serve --count`` answers every run
correctly, ``transfer`` ends in one line within ``peer_timeout`` when its server dies or goes
silent, ``--size`` from 1 byte to the largest message, no goodput line when nothing was
delivered, ``serve --json`` carries the counters, and a mistake is the first line printed."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

import btlcore
from btlcore import verify
from btlcore.cli import transfer as transfer_cmd
from btlcore.cli.report import print_summary
from btlcore.verify import TAG_DATA, TAG_FIN, Verifier, make_messages

BTL = [sys.executable, "-m", "btlcore.cli"]


def btl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BTL, *args], capture_output=True, text=True, timeout=timeout)


def start_server(*args: str) -> tuple[subprocess.Popen[str], str]:
    server = subprocess.Popen([*BTL, "serve", "--backend", "udp", "--bind", "127.0.0.1:0", "--json", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hello = json.loads(server.stdout.readline())  # type: ignore[union-attr]
    return server, hello["address"]


def stop(server: subprocess.Popen[str]) -> None:
    if server.poll() is None:
        server.kill()
    server.wait(timeout=10)


# -- serve --count -------------------------------------------------------------------------

def count_runs(runs: int) -> None:
    failures = []
    for i in range(runs):
        server, address = start_server("--count", "200")
        try:
            r = btl("transfer", "--backend", "udp", "--peer", address, "--messages", "200",
                    "--size", "1-2000", "--seed", str(i), "--json", timeout=60)
            out, _ = server.communicate(timeout=30)  # the server ends by itself
            events = [json.loads(line) for line in out.splitlines()]
            d = json.loads(r.stdout)
            ok = (r.returncode == 0 and d["verified"] and d["messages_delivered"] == 200
                  and server.returncode == 0 and [e["event"] for e in events] == ["report", "stopped"]
                  and events[0]["messages_delivered"] == 200 and events[0]["verified"])
            if not ok:
                failures.append((i, r.stdout, r.stderr, out))
        finally:
            stop(server)
    assert not failures, failures[:2]


def test_serve_count_against_transfer_5_runs() -> None:
    count_runs(5)


@pytest.mark.slow
def test_serve_count_against_transfer_50_runs(request: pytest.FixtureRequest) -> None:
    markexpr = request.config.getoption("-m") or ""
    if "slow" not in markexpr or "not slow" in markexpr:
        pytest.skip("50 runs of real processes: select with -m slow")
    count_runs(50)


def test_serve_json_report_carries_the_counters() -> None:
    server, address = start_server("--count", "20")
    try:
        r = btl("transfer", "--backend", "udp", "--peer", address, "--messages", "20", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        out, _ = server.communicate(timeout=30)
        report, stopped = (json.loads(line) for line in out.splitlines())
        assert report["stats"]["num_total_recvs"] >= 20 and report["stats"]["num_msgs_delivered"] >= 20
        assert stopped["stats"]["num_ack_sends"] >= 1 and stopped["reports"] == 1
    finally:
        stop(server)


def test_transfer_whose_messages_fill_the_send_buffer_still_sends_its_fin() -> None:
    # two 32 KiB messages fill a 64 KiB send buffer exactly: the FIN must wait for room, not fail
    server, address = start_server()
    try:
        r = btl("transfer", "--backend", "udp", "--peer", address, "--messages", "4", "--size", "32768",
                "--set", "send_buffer=65536", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["verified"] is True
    finally:
        stop(server)


def test_verifier_look_without_reset_keeps_the_run() -> None:
    # what the count-reached summary does: a later FIN is still judged on the same counts
    v = Verifier()
    for m in make_messages(1, 5, 8, 64):
        v.on_data(m)
    assert v.report({"messages": 5}, reset=False)["verified"]
    again = v.report({"messages": 5})
    assert again["verified"] and again["messages_delivered"] == 5 and v.delivered == 0


# -- a server that dies or goes silent -----------------------------------------------------

def test_transfer_ends_within_peer_timeout_when_its_server_is_killed() -> None:
    server, address = start_server()
    try:
        client = subprocess.Popen([*BTL, "transfer", "--backend", "udp", "--peer", address,
                                   "--messages", "1000000", "--size", "60000", "--timeout", "300",
                                   "--set", "peer_timeout=1.5"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2.0)  # well into the transfer
        assert client.poll() is None
        server.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        out, err = client.communicate(timeout=60)
        elapsed = time.monotonic() - killed
    finally:
        stop(server)
    assert client.returncode == 1
    assert elapsed < 1.5 + 6.0, elapsed  # peer_timeout plus a generous margin (never --timeout)
    assert "Traceback" not in err and out == ""
    lines = [line for line in err.splitlines() if not line.startswith("seed ")]
    assert len(lines) == 1 and lines[0].startswith("btl transfer: error: server "), err


def test_transfer_ends_within_peer_timeout_when_no_report_comes() -> None:
    # a "server" that acknowledges everything and never reports (idle once all is acked)
    silent = btlcore.open("udp", bind="127.0.0.1:0")
    silent.on(TAG_DATA, lambda p, t, d: None)
    silent.on(TAG_FIN, lambda p, t, d: None)
    try:
        client = subprocess.Popen([*BTL, "transfer", "--backend", "udp", "--peer", silent.address.hex(),
                                   "--messages", "50", "--timeout", "300", "--set", "peer_timeout=1"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        start = time.monotonic()
        while client.poll() is None and time.monotonic() - start < 60:
            silent.progress(0.05)
        elapsed = time.monotonic() - start
        out, err = client.communicate(timeout=10)
    finally:
        silent.close(flush=False)
    assert client.returncode == 1 and elapsed < 10, (elapsed, err)
    assert out == "" and "Traceback" not in err
    assert err.splitlines()[-1].endswith("sent no report within peer_timeout (1 s)"), err


# -- sizes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("size, unordered", [("1", False), ("1-7", False), ("1-9", True), ("3", True)])
def test_transfer_sizes_from_one_byte(size: str, unordered: bool) -> None:
    args = ["transfer", "--messages", "300", "--size", size, "--loss", "0.05", "--seed", "2", "--json"]
    r = btl(*args, *(["--unordered"] if unordered else []))
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert d["verified"] and d["messages_delivered"] == 300


@pytest.mark.parametrize("size, needle", [
    ("0", "expected 1 <= MIN"), ("0-5", "expected 1 <= MIN"),
    ("300M", "more than the largest message, 67108864 bytes"),
    ("1-65M", "more than the largest message"),
])
def test_transfer_size_out_of_range_is_one_line(size: str, needle: str) -> None:
    r = btl("transfer", "--size", size)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.splitlines() == [r.stderr.strip()] and needle in r.stderr, r.stderr


def test_size_up_to_a_raised_max_message_size_is_taken() -> None:
    r = btl("transfer", "--size", "300M", "--set", "max_message_size=209715200")
    assert r.returncode == 2 and "more than the largest message, 209715200 bytes" in r.stderr


def test_large_bodies_are_never_drawn_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # randbytes cannot draw 256 MiB or more at once: a body longer than the pool drawn once
    # per run repeats it
    monkeypatch.setattr(verify, "POOL", 1000)
    messages = list(make_messages(5, 3, 4000, 5000))
    v = Verifier()
    for m in messages:
        v.on_data(m)
    assert v.report({"messages": 3})["verified"] and all(4000 <= len(m) <= 5000 for m in messages)


def test_short_messages_checked_in_order() -> None:
    v = Verifier()
    v.on_data(verify.short_message(0, 1))
    v.on_data(verify.short_message(2, 1))  # 1 was due
    v.on_data(verify.short_message(1, 3))
    rep = v.report({"messages": 3})
    assert not rep["verified"] and any("arrived where 1 was due" in e for e in rep["errors"])
    u = Verifier(ordered=False)
    for i in (2, 0):
        u.on_data(verify.short_message(i, 2))
    assert not u.report({"messages": 3})["verified"]  # one missing
    for i in (2, 0, 1):
        u.on_data(verify.short_message(i, 2))
    assert u.report({"messages": 3})["verified"]


# -- goodput, error order -------------------------------------------------------------------

def test_no_goodput_line_when_nothing_was_delivered(capsys: pytest.CaptureFixture[str]) -> None:
    r = btl("transfer", "--loss", "1", "--timeout", "2", "--messages", "10")
    assert r.returncode == 1 and "goodput" not in r.stdout and "0 delivered" in r.stdout
    # toward a server that sent no report: what was sent is not goodput
    args: Any = type("A", (), {"backend": "udp", "peer": "x", "file": None, "timeout": 5.0})()
    result = transfer_cmd._remote_result(args, 1, btlcore.Config(), {"messages": 10}, [], [None] * 11, False,
                                         1.0, [10_000, 11], btlcore.open("sim").stats(), "line")
    assert result["goodput_mbps"] is None
    print_summary(result, "transfer")
    assert "goodput" not in capsys.readouterr().out


@pytest.mark.parametrize("args", [
    ["--size", "9-2"], ["--backend", "udp"], ["--backend", "udp", "--peer", "nohost:x"],
    ["--messages", "-1"], ["--timeout", "0"],
])
def test_mistakes_come_before_the_seed_line(args: list[str]) -> None:
    r = btl("transfer", *args)
    assert r.returncode == 2 and "seed" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("btl transfer: error: ")


def test_goodput_still_printed_for_a_delivered_run() -> None:
    r = btl("transfer", "--messages", "50", "--delay", "0.5,0", "--seed", str(random.randrange(100)))
    assert r.returncode == 0 and "goodput" in r.stdout
