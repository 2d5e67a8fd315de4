"""Which build runs: the modules compiled with mypyc, or the same sources as pure Python.

The hot path (the protocol core, the transport's progress pass, the udp backend's send,
receive and wait paths, and the simulator's per-frame path) may be compiled
by mypyc into C extensions that sit beside their ``.py`` sources (``scripts/setup.sh`` and
``pip wheel`` build them where a C compiler is present; see ``hatch_build.py``).  A compiled
extension shadows the ``.py`` of the same name, so choosing the pure build takes an import
hook: :func:`select` puts a finder first on ``sys.meta_path`` that loads every name of
:data:`MODULES` from its ``.py`` source.

It does so when ``BTL_PURE`` is set (to anything but ``0`` or empty), and when the compiled
build is stale: the build writes the SHA-256 of every source it compiled into
:data:`MANIFEST`, and a source that no longer matches (edited since the build) makes the whole
process run pure -- never old compiled code, never a mix (compiled code reaches the classes of
the other compiled modules directly, so a half-compiled process would not work).  A stale build
says so once (a :class:`RuntimeWarning`); ``bash scripts/setup.sh`` rebuilds.

This module is pure Python, imports nothing of btlcore, and runs first in
``btlcore/__init__.py``, before any module it governs is imported.  The build reads
:data:`MODULES` from this file too (it loads it by path), so the list lives in one place.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

#: the environment variable that forces the pure build (reserved: ``Config`` ignores it)
PURE_ENV = "BTL_PURE"

#: the modules mypyc compiles, each with its source path relative to the checkout's root (the
#: folder of ``pyproject.toml``); everything else is always pure Python
MODULES: dict[str, str] = {
    **{f"btlcore.protocol.{m}": f"btlcore/protocol/{m}.py" for m in (
        "autotune", "delivery", "engine", "guard", "handshake", "lifecycle", "pacing", "packetizer",
        "peers", "receive", "recovery", "rtt", "sampled", "state", "stats", "timeout", "timers", "tlp", "undo",
        "versions", "window", "wire")},
    **{f"btlcore.protocol.congestion.{m}": f"btlcore/protocol/congestion/{m}.py" for m in (
        "aimd", "base", "bbr", "cubic", "model", "none", "rate")},
    **{f"btlcore_sim.{m}": f"backends/sim/btlcore_sim/{m}.py" for m in (
        "fabric", "links", "nic", "scheduler")},
    "btlcore.progress": "btlcore/progress.py",
    **{f"btlcore_udp.{m}": f"backends/udp/btlcore_udp/{m}.py" for m in ("_receive", "_send", "_state", "_wait")},
}

#: mypyc's shared library for the whole group (a top-level module beside ``btlcore``)
GROUP = "btlcore_native"

#: written by the build beside this file: ``{"modules": {name: sha256 of its source}}``
MANIFEST = "_native.json"


def source_digest(data: bytes) -> str:
    """The fingerprint the build records and the import compares (SHA-256, hex)."""
    return hashlib.sha256(data).hexdigest()


class PureFinder(importlib.abc.MetaPathFinder):
    """Finds each compiled module's ``.py`` source and loads that instead of the extension."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        leaf = fullname.rpartition(".")[2]
        for folder in path or sys.path:
            source = os.path.join(folder, leaf + ".py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None  # not found here: the ordinary finders report it


def _stale(root: str) -> str | None:
    """Why the compiled build must not run (``None``: it may): no manifest, or a source that
    changed since it was compiled."""
    try:
        with open(os.path.join(root, MANIFEST)) as f:
            built: dict[str, str] = json.load(f)["modules"]
    except (OSError, ValueError, KeyError, TypeError):
        return "no compiled build"
    here = os.path.dirname(root)  # btlcore/ -> the folder holding the btlcore package
    for name, digest in built.items():
        source = _source_of(name, here)
        try:
            with open(source, "rb") as f:
                if source_digest(f.read()) != digest:
                    return f"{name} changed since it was compiled"
        except OSError:
            return f"{name}: its source {source} is missing"
    return None


def _source_of(name: str, here: str) -> str:
    """Where ``name``'s source is: under its top-level package's folder, wherever that is (a
    checkout keeps the backends under ``backends/``; a wheel puts them beside ``btlcore``).
    ``find_spec`` of a top-level name locates the package without importing it."""
    top, _, rest = name.partition(".")
    spec = None if top == "btlcore" else importlib.util.find_spec(top)
    base = os.path.dirname(spec.origin) if spec is not None and spec.origin else os.path.join(here, top)
    return os.path.join(base, *rest.split(".")) + ".py"


def select() -> bool:
    """Choose the build for this process (once, before any compiled module is imported) and
    return whether the compiled one may run."""
    if any(isinstance(f, PureFinder) for f in sys.meta_path):
        return False
    root = os.path.dirname(os.path.abspath(__file__))
    forced = os.environ.get(PURE_ENV, "") not in ("", "0")
    why = None if forced else _stale(root)
    if why is None and not forced:
        return True
    if why and why != "no compiled build":
        warnings.warn(f"btlcore: running pure Python: {why} (rebuild: bash scripts/setup.sh)",
                      RuntimeWarning, stacklevel=3)
    sys.meta_path.insert(0, PureFinder(list(MODULES)))
    return False


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from a compiled extension."""
    return isinstance(getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader)
