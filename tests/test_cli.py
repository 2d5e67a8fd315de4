"""The btl command as a user meets it: exit codes, one-line errors, the --json object,
determinism of a seeded run (pcap bytes and statistics), the progress bar only on a
terminal, and a file sent over udp between two processes arriving byte-identical."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from btlcore import cli

BTL = [sys.executable, "-m", "btlcore.cli"]


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BTL, *args], capture_output=True, text=True, timeout=timeout)


def test_demo_verifies_and_exits_zero() -> None:
    r = run("demo")
    assert r.returncode == 0, r.stderr
    assert "verified: yes" in r.stdout and "resends" in r.stdout and "goodput" in r.stdout


def test_transfer_json_has_the_promised_fields() -> None:
    r = run("transfer", "--loss", "0.05", "--reorder", "0.02", "--delay", "0.5,0.1", "--messages", "150",
            "--size", "8-20000", "--seed", "4", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    for key in ("backend", "seed", "messages_sent", "messages_delivered", "bytes_delivered", "verified",
                "sim_time_s", "wall_time_s", "stats"):
        assert key in d, key
    assert d["verified"] is True and d["messages_delivered"] == d["messages_sent"] == 150
    assert d["seed"] == 4 and d["stats"]["num_resends"] > 0
    assert r.stderr == ""  # no progress bar, no seed line with --json when piped


@pytest.mark.parametrize("args,needle", [
    (["transfer", "--loss", "2"], "--loss: expected a probability"),
    (["transfer", "--backend", "nope", "--peer", "x"], "unknown backend 'nope'; available backends"),
    (["transfer", "--set", "window=3"], "parameter 'window'"),
    (["transfer", "--burst", "0.1"], "--burst: expected P,LEN"),
    (["transfer", "--size", "9-2"], "--size"),
    (["transfer", "--backend", "udp"], "--peer is required"),
])
def test_mistakes_get_one_line_and_exit_2(args: list[str], needle: str) -> None:
    r = run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert needle in lines[-1] and "Traceback" not in r.stderr


def test_same_seed_same_pcap_and_stats(tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        pcap = tmp_path / f"run{i}.pcapng"
        r = run("transfer", "--burst", "0.03,3", "--duplicate", "0.01", "--corrupt", "0.01", "--delay", "1,0.2",
                "--rate", "500", "--messages", "80", "--seed", "11", "--pcap", str(pcap), "--json")
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        outs.append((hashlib.sha256(pcap.read_bytes()).hexdigest(), d["stats"], d["fabric"], d["sim_time_s"]))
    assert outs[0] == outs[1]
    other = run("transfer", "--burst", "0.03,3", "--messages", "80", "--seed", "12", "--json")
    assert json.loads(other.stdout)["stats"] != outs[0][1]


def test_backends_lists_each_with_its_state() -> None:
    r = run("backends")
    assert r.returncode == 0
    rows = {line.split()[0]: line for line in r.stdout.splitlines()}
    assert rows["sim"].split()[1] == "usable" and rows["udp"].split()[1] == "usable"
    assert "verbs" in rows  # usable in the VM, unavailable (with the reason) elsewhere


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    bar = cli.Progress(10, enabled=True)
    bar.update(10, 1000)
    bar.close()
    assert "100.0%" in tty.getvalue() and "10/10 msgs" in tty.getvalue()
    pipe = io.StringIO()  # not a terminal
    monkeypatch.setattr(sys, "stderr", pipe)
    bar = cli.Progress(10, enabled=True)
    bar.update(10, 1000)
    assert pipe.getvalue() == ""
    monkeypatch.setattr(sys, "stderr", tty := _Tty())
    bar = cli.Progress(10, enabled=False)  # --json
    bar.update(10, 1000)
    assert tty.getvalue() == ""


def test_file_over_udp_arrives_byte_identical(tmp_path: Path) -> None:
    src = tmp_path / "payload.bin"
    src.write_bytes(bytes(range(256)) * 12345 + b"tail")
    out = tmp_path / "received"
    server = subprocess.Popen([*BTL, "serve", "--backend", "udp", "--bind", "127.0.0.1:0", "--out", str(out),
                               "--json"], stdout=subprocess.PIPE, text=True)
    try:
        hello = json.loads(server.stdout.readline())  # type: ignore[union-attr]
        r = run("transfer", "--backend", "udp", "--peer", hello["address"], "--file", str(src), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        d = json.loads(r.stdout)
        assert d["verified"] is True and d["file"]["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
        deadline = time.monotonic() + 10
        while not (out / "payload.bin").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (out / "payload.bin").read_bytes() == src.read_bytes()
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_udp_transfer_to_serve_with_host_port(tmp_path: Path) -> None:
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if port >= 65535:
        pytest.skip("no port pair free")
    server = subprocess.Popen([*BTL, "serve", "--backend", "udp", "--bind", f"127.0.0.1:{port}", "--json"],
                              stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()  # type: ignore[union-attr]
        r = run("transfer", "--backend", "udp", "--peer", f"127.0.0.1:{port}", "--messages", "300",
                "--size", "100-200000", "--seed", "3", "--json")
        d = json.loads(r.stdout)
        assert r.returncode == 0 and d["verified"] and d["messages_delivered"] == 300, d
        # #12 item 8: what the sender measured of the path, toward a server too
        path = d["path"]
        assert path["srtt"] > 0 and path["min_rtt"] > 0 and path["cwnd"] > 0, path
        assert {"rttvar", "pacing_rate", "delivery_rate", "bytes_in_flight", "num_spurious_retrans"} <= set(path)
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_serve_prints_the_address_people_type_and_transfer_takes_it() -> None:
    """#13: ``btl serve`` prints ``Transport.address_text`` (``HOST:PORT`` on udp) first, the
    hex beside it; ``--json`` has both; ``btl transfer --peer`` takes the text form."""
    server = subprocess.Popen([*BTL, "serve", "--backend", "udp", "--bind", "127.0.0.1:0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()  # type: ignore[union-attr]
        head, _, rest = line.partition("address ")
        assert head == "btl serve: backend udp, ", line
        text, _, hexed = rest.strip().partition(" (hex ")
        host, _, port = text.rpartition(":")
        assert host == "127.0.0.1" and port.isdigit(), line
        assert bytes.fromhex(hexed.rstrip(")"))[4:6] == int(port).to_bytes(2, "big")  # the same address
        r = run("transfer", "--backend", "udp", "--peer", text, "--messages", "5", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["verified"] is True
    finally:
        server.terminate()
        server.wait(timeout=10)
    server = subprocess.Popen([*BTL, "serve", "--backend", "udp", "--bind", "127.0.0.1:0", "--json"],
                              stdout=subprocess.PIPE, text=True)
    try:
        hello = json.loads(server.stdout.readline())  # type: ignore[union-attr]
        assert hello["address_text"].startswith("127.0.0.1:")
        assert hello["address_text"].endswith(f":{int.from_bytes(bytes.fromhex(hello['address'])[4:6], 'big')}")
    finally:
        server.terminate()
        server.wait(timeout=10)
