"""Build the compiled hot path with mypyc, or fall back to pure Python with one line saying so.

hatchling runs :class:`CompileHook` for every wheel it builds, the editable one included
(``pip install -e .``, which ``scripts/setup.sh`` runs, and ``pip wheel .``).  It compiles the
modules listed in ``btlcore/_native.py`` (``MODULES``) into one mypyc group: a shared library
``btlcore_native__mypyc`` plus a small extension per module, copied beside the ``.py`` sources
(so the editable install runs them) and, for a real wheel, added to it.  It records each
source's SHA-256 in ``btlcore/_native.json``: at import, a source that no longer matches makes
the process run pure Python (see ``btlcore/_native.py``), so a stale build never runs.

Without a C compiler, or if mypyc fails, or with ``BTL_NO_COMPILE=1``, the build stays pure
Python and prints one line saying why.  ``python hatch_build.py`` compiles in place (what
``scripts/setup.sh`` does when only the sources changed since the last build);
``python hatch_build.py --clean`` removes the compiled files.

Deterministic: the same sources and compiler give the same C (mypyc sorts its output) and the
same files; the C lives in ``build/mypyc`` between builds, so an unchanged module is not
recompiled.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import sysconfig
import time
from typing import Any

try:  # only hatchling's build needs the interface; `python hatch_build.py` runs without it
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # pragma: no cover
    BuildHookInterface = object  # type: ignore[assignment,misc]

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join("build", "mypyc")
#: where each top-level package's folder sits in the checkout (the wheel puts each at its root)
PACKAGE_DIRS = {"btlcore": "btlcore", "btlcore_sim": "backends/sim/btlcore_sim",
                "btlcore_udp": "backends/udp/btlcore_udp"}
NO_COMPILE_ENV = "BTL_NO_COMPILE"


def _native() -> Any:
    """btlcore/_native.py, loaded by path (importing btlcore would import the compiled modules)."""
    spec = importlib.util.spec_from_file_location("_btlcore_native_list", os.path.join(ROOT, "btlcore", "_native.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ext_suffix() -> str:
    return str(sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def compiled_files() -> list[str]:
    """Every file a build puts in the tree (relative to the root), whether present or not."""
    nat = _native()
    files = [os.path.join(os.path.dirname(src), name.rpartition(".")[2] + _ext_suffix())
             for name, src in nat.MODULES.items()]
    return [*files, nat.GROUP + "__mypyc" + _ext_suffix(), os.path.join("btlcore", nat.MANIFEST)]


def clean() -> None:
    """Remove every compiled file from the tree: the listed ones and any extension left in the
    packages' folders by a build whose list was longer (it would shadow its ``.py``)."""
    stale = set(compiled_files())
    for folder in PACKAGE_DIRS.values():
        for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
            stale.update(os.path.relpath(os.path.join(dirpath, n), ROOT) for n in names if n.endswith(_ext_suffix()))
    for rel in stale:
        path = os.path.join(ROOT, rel)
        if os.path.exists(path):
            os.remove(path)


def compile_in_place(jobs: int = 2) -> list[str]:
    """Compile with mypyc and copy the results beside the sources; return their paths
    (relative to the root).  Raises on any failure (no compiler, a mypyc error)."""
    from mypyc.build import mypycify  # noqa: I001 (the build's requirement, not btlcore's)
    from setuptools import Distribution

    nat = _native()
    cwd = os.getcwd()
    os.chdir(ROOT)  # mypyc reads pyproject.toml's [tool.mypy] (mypy_path) from here
    try:
        clean()  # the old files must not outlive a failed build
        sources = sorted(nat.MODULES.values())
        # its own mypy cache: one shared with the venv's mypy could hold another environment's types
        options = [f"--cache-dir={os.path.join(BUILD, 'cache')}"]
        exts = mypycify([*options, *sources], opt_level="3", group_name=nat.GROUP, target_dir=BUILD, multi_file=True)
        dist = Distribution({"ext_modules": exts, "script_name": "hatch_build.py"})
        cmd: Any = dist.get_command_obj("build_ext")
        cmd.build_lib = os.path.join(BUILD, "lib")
        cmd.build_temp = os.path.join(BUILD, "temp")
        cmd.parallel = jobs
        dist.run_command("build_ext")
        by_name = {name: src for name, src in nat.MODULES.items()}
        out: list[str] = []
        for ext in exts:
            built = cmd.get_ext_fullpath(ext.name)
            if ext.name in by_name:
                dest = os.path.join(os.path.dirname(by_name[ext.name]), os.path.basename(built))
            else:  # the group's shared library: a top-level module
                dest = os.path.basename(built)
            shutil.copyfile(built, dest)
            out.append(dest)
        digests = {}
        for name, src in sorted(nat.MODULES.items()):
            with open(src, "rb") as f:
                digests[name] = nat.source_digest(f.read())
        manifest = os.path.join("btlcore", nat.MANIFEST)
        with open(manifest, "w") as f:
            json.dump({"modules": digests}, f, indent=1, sort_keys=True)
            f.write("\n")
        return [*out, manifest]
    finally:
        os.chdir(cwd)


def wheel_path(rel: str) -> str:
    """Where a file of the checkout goes in the wheel (the backends' folders lose their prefix)."""
    for top, folder in PACKAGE_DIRS.items():
        if rel.startswith(folder + os.sep):
            return top + rel[len(folder):]
    return rel


def try_compile(quiet: bool = False) -> list[str]:
    """:func:`compile_in_place`, or ``[]`` and one line on stderr saying why not."""
    if os.environ.get(NO_COMPILE_ENV, "") not in ("", "0"):
        print(f"btlcore: {NO_COMPILE_ENV} is set: pure Python build (no compiled modules)", file=sys.stderr)
        clean()
        return []
    t0 = time.monotonic()
    try:
        files = compile_in_place()
    except BaseException as exc:  # SystemExit from distutils when the compiler fails
        if isinstance(exc, KeyboardInterrupt):
            raise
        clean()
        if isinstance(exc, SystemExit):  # mypyc or the compiler said why, above
            why = "see the errors above"
        else:
            why = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        print(f"btlcore: could not compile the hot path with mypyc ({why}): pure Python build", file=sys.stderr)
        return []
    if not quiet:
        print(f"btlcore: compiled {len(files) - 2} modules with mypyc in {time.monotonic() - t0:.0f} s",
              file=sys.stderr)
    return files


class CompileHook(BuildHookInterface):  # type: ignore[misc,valid-type]
    """hatchling's custom build hook (``[tool.hatch.build.targets.wheel.hooks.custom]``)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        files = try_compile()
        if not files or version == "editable":
            return  # the editable wheel points at the tree, where the files now are
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        for rel in files:
            build_data["force_include"][os.path.join(ROOT, rel)] = wheel_path(rel)


if __name__ == "__main__":
    if sys.argv[1:] == ["--clean"]:
        clean()
    else:
        sys.exit(0 if try_compile() else 1)
