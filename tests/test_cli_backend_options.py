"""The backends' part of the ``btl`` command (the CliSpec hooks): each backend brings its own
flags, in a group of its own that ``--help`` always shows; a backend's flag with another
backend is an error; a third party's flag reaches its ``btl_device_open``; and the command
itself names no backend's knob and imports no backend."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import btlcore
from btlcore import cli
from btlcore.device import CliSpec

HERE = Path(__file__).parent
CLI_DIR = Path(cli.__file__).parent
TINY = HERE / "thirdparty" / "btlcore_tinyopt"
BTL = [sys.executable, "-m", "btlcore.cli"]
SIM_FLAGS = ("--loss", "--burst", "--reorder", "--duplicate", "--corrupt", "--delay", "--rate", "--pcap")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BTL, *args], capture_output=True, text=True, timeout=120, env=env)


def test_the_command_names_no_backend_knob() -> None:
    sources = {p.name: p.read_text() for p in CLI_DIR.glob("*.py")}
    assert {"demo.py", "transfer.py", "serve.py", "backends.py", "params.py", "bench.py"} <= set(sources)
    for name, text in sources.items():
        for needle in (*SIM_FLAGS, "--bind", "LinkModel", "Fabric", "btlcore_sim", "backends.sim",
                       "btlcore_udp", "btlcore_verbs", "COALESCE"):
            assert needle not in text, f"btlcore/cli/{name} names {needle}"


def test_the_command_imports_no_backend() -> None:
    for path in CLI_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith(("btlcore_sim", "btlcore_udp", "btlcore_verbs")), (path.name, name)
                assert "backends" not in name.split("."), (path.name, name)


@pytest.mark.parametrize("backend", ["sim", "udp", "verbs"])
def test_help_shows_every_backend_group_whatever_the_backend(backend: str) -> None:
    r = run("transfer", "--backend", backend, "--help")
    assert r.returncode == 0, r.stderr
    sim = r.stdout.split("sim backend (--backend sim):")[1].split("\n\n")[0]
    for flag in SIM_FLAGS:
        assert flag in sim, flag
    assert "--bind" in r.stdout.split("udp backend (--backend udp):")[1]
    assert "--mtu" in r.stdout.split("sim backend")[0]  # every backend's device option


def test_serve_and_demo_take_their_backends_flags() -> None:
    assert "--bind" in run("serve", "--help").stdout.split("udp backend (--backend udp):")[1]
    demo = run("demo", "--help").stdout
    assert "--pcap" in demo.split("sim backend:")[1] and "--loss" not in demo


@pytest.mark.parametrize("args,needle", [
    (["transfer", "--backend", "udp", "--peer", "127.0.0.1:9", "--delay", "1"],
     "--delay applies to the sim backend only (--backend sim)"),
    (["transfer", "--backend", "verbs", "--peer", "00", "--pcap", "x.pcap"],
     "--pcap applies to the sim backend only (--backend sim)"),
    (["transfer", "--bind", "127.0.0.1:0", "--messages", "1"], "--bind applies to the udp backend only"),
])
def test_a_backends_flag_with_another_backend_is_a_usage_error(args: list[str], needle: str) -> None:
    r = run(*args)
    assert r.returncode == 2 and needle in r.stderr.strip().splitlines()[-1], r.stderr


def test_transfer_json_reports_the_link_as_given(tmp_path: Path) -> None:
    pcap = tmp_path / "t.pcapng"
    r = run("transfer", "--loss", "0.01", "--rate", "100", "--mtu", "1500", "--messages", "20", "--seed", "2",
            "--pcap", str(pcap), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["link"] == {"loss": "0.01", "rate": 100.0, "mtu": 1500}
    assert d["fabric"] and d["sim_time_s"] > 0 and pcap.stat().st_size > 0


def test_every_cli_hook_is_documented_in_backends_md() -> None:
    text = (HERE.parent / "docs" / "backends.md").read_text()
    hooks = [n for n in vars(CliSpec) if n.startswith("btl_")]
    assert len(hooks) == 5
    for hook in hooks:
        assert f"`{hook}(" in text, f"backends.md does not describe {hook}"
    assert "`LocalPair(" in text


def test_bench_runs_the_installed_benchmarks() -> None:
    r = run("bench", "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: btl bench") and "--quick" in r.stdout


# ---------------------------------------------------------------------------------- a third party's flag


@pytest.fixture
def tiny_env(tmp_path: Path) -> dict[str, str]:
    """The fixture backend ``tiny`` (tests/thirdparty/btlcore_tinyopt), found through its entry
    point as if installed: a dist-info next to the module, on PYTHONPATH of a subprocess."""
    info = tmp_path / "btlcore_tinyopt-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: btlcore-tinyopt\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[btlcore.backends]\ntiny = btlcore_tinyopt\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TINY), str(tmp_path)])}


def test_a_third_party_flag_reaches_its_device_open(tiny_env: dict[str, str]) -> None:
    r = run("transfer", "--backend", "tiny", "--peer", "tiny:x", "--tiny-depth", "7", "--messages", "1",
            env=tiny_env)
    assert r.returncode == 2
    assert "tiny device asked to open with options {'depth': 7}" in r.stderr.strip().splitlines()[-1]
    r = run("serve", "--backend", "tiny", "--tiny-depth", "3", env=tiny_env)
    assert "{'depth': 3}" in r.stderr and r.returncode == 2


def test_a_third_party_group_in_help_and_its_flag_elsewhere(tiny_env: dict[str, str]) -> None:
    r = run("transfer", "--help", env=tiny_env)
    assert "--tiny-depth N" in r.stdout.split("tiny backend (--backend tiny):")[1]
    assert "--loss" in r.stdout  # the built-in backends' groups are still there
    r = run("transfer", "--tiny-depth", "7", "--messages", "1", env=tiny_env)
    assert r.returncode == 2 and "--tiny-depth applies to the tiny backend only" in r.stderr


def test_a_legacy_parse_peer_is_still_used(tiny_env: dict[str, str]) -> None:
    r = run("transfer", "--backend", "tiny", "--peer", "elsewhere", env=tiny_env)
    assert r.returncode == 2 and "--peer: expected tiny:NAME, got 'elsewhere'" in r.stderr


def test_backends_still_lists_the_builtin_ones() -> None:
    assert {"sim", "udp", "verbs"} <= {b.name for b in btlcore.list_backends()}
