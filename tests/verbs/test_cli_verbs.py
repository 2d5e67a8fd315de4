"""``btl serve`` and ``btl transfer`` on verbs (two processes on one RDMA port)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from btlcore import cli


@pytest.fixture
def server(need_verbs, tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "btlcore.cli", "serve", "--backend", "verbs",
                             "--json", "--out", str(tmp_path / "in")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        hello = json.loads(line)
        assert hello["event"] == "listening" and hello["backend"] == "verbs"
        yield hello["address"], tmp_path / "in"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_transfer_messages(server, capsys):
    address, _ = server
    rc = cli.main(["transfer", "--backend", "verbs", "--peer", address, "--messages", "300",
                   "--size", "8-20000", "--seed", "5", "--json", "--timeout", "60"])
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert rc == 0 and result["verified"], result


def test_transfer_file(server, capsys, tmp_path):
    address, in_dir = server
    src = tmp_path / "payload.bin"
    src.write_bytes(os.urandom(3 << 20))
    rc = cli.main(["transfer", "--backend", "verbs", "--peer", address, "--file", str(src),
                   "--option", "inline=off", "--json", "--timeout", "60"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and result["verified"], result
    assert (in_dir / "payload.bin").read_bytes() == src.read_bytes()


def test_bad_peer_is_a_usage_error(need_verbs, capsys):
    rc = cli.main(["transfer", "--backend", "verbs", "--peer", "127.0.0.1:7000", "--messages", "1"])
    assert rc != 0
    err = capsys.readouterr().err  # names both forms it takes (#13: the text form, or hex)
    assert "--peer: expected a verbs address as verbs:[GID]:" in err and "or as hex" in err
    assert "'127.0.0.1:7000'" in err
