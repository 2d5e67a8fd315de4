"""Choosing the build: ``BTL_PURE`` forces the pure one, a stale build runs pure, and
``btl --version`` says which build runs (btlcore/_native.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from btlcore import _native


def _run(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != _native.PURE_ENV}
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env={**base, **env},
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_btl_pure_loads_every_compiled_module_from_its_source() -> None:
    code = ("import importlib, btlcore, btlcore_sim; from btlcore import _native; "
            "mods = [importlib.import_module(m) for m in _native.MODULES]; "
            "print(btlcore.compiled, all(m.__file__.endswith('.py') for m in mods), "
            "all(_native.is_compiled(m) for m in mods))")
    assert _run(code, BTL_PURE="1") == "False True False"
    compiled, _, every = _run(code).split()
    assert compiled == every  # compiled exactly where every listed module runs compiled


def test_a_source_changed_since_the_build_makes_the_build_stale(tmp_path: Path) -> None:
    pkg = tmp_path / "btlcore"
    pkg.mkdir()
    (pkg / "hot.py").write_text("X = 1\n")
    (pkg / _native.MANIFEST).write_text(json.dumps(
        {"modules": {"btlcore.hot": _native.source_digest(b"X = 1\n")}}))
    assert _native._stale(str(pkg)) is None
    (pkg / "hot.py").write_text("X = 2\n")
    assert _native._stale(str(pkg)) == "btlcore.hot changed since it was compiled"
    (pkg / _native.MANIFEST).unlink()
    assert _native._stale(str(pkg)) == "no compiled build"


def test_version_names_the_build() -> None:
    assert _run("from btlcore.cli import version_line; print(version_line())", BTL_PURE="1").endswith(
        ", pure Python, Python " + ".".join(map(str, sys.version_info[:3])))
