"""A third-party backend in its own distribution works with no change to btlcore: install
tests/thirdparty/btlcore_memnet (into a scratch folder, not the venv), then find it by name
through its entry point and pass the conformance suite with it, in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).parent
PACKAGE = HERE / "thirdparty" / "btlcore_memnet"


def test_third_party_backend_installs_and_passes_conformance(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(PACKAGE)],
        check=True, capture_output=True, text=True)
    assert list(target.glob("btlcore_memnet-*.dist-info")), "the distribution did not install"
    suite = tmp_path / "test_memnet_conformance.py"
    suite.write_text(textwrap.dedent("""
        import btlcore
        from btlcore.testing.conformance import BackendHarness, ConformanceTests

        def test_found_by_name():
            names = [b.name for b in btlcore.list_backends()]
            assert "memnet" in names
            with btlcore.open("memnet") as t:
                assert t.backend == "memnet" and t.address.startswith(b"MEMN")

        class MemnetHarness(BackendHarness):
            backend = "memnet"
            supports_restart = False

        class TestMemnet(ConformanceTests):
            harness_class = MemnetHarness
    """))
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "passed" in result.stdout and "failed" not in result.stdout
