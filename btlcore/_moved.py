"""Old import names that keep working for one release, each with a ``DeprecationWarning``.

Backends and plugins used to be installed as ``btlcore.backends.NAME`` and
``btlcore.plugins.NAME``; they now live in the packages their folders name (``btlcore_sim``,
``btlcore_plugins``...).  :func:`alias_subpackages` answers an old name, and every submodule
under it, with the module object of the new name: one object under two names, so state and
monkeypatching are shared and nothing is imported twice.  Only the names given are answered;
any other name under the old package is not found, as before.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType

from .errors import BtlDeprecationWarning

#: frames that belong to the import machinery or to this module, skipped when the warning
#: names the line that asked for the old name
_MACHINERY = ("<frozen importlib", importlib.__file__, __file__)


def warn_moved(old: str, new: str) -> None:
    """Warn that ``old`` is deprecated, naming the line that imported it.

    Called by the module that holds the old name (or by the alias loader); the warning is
    attributed to the first frame past that caller and the import machinery, so the default
    filters show it where the user's own code asks for the old name.
    """
    frame = sys._getframe(2)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_MACHINERY):
        frame = frame.f_back
    where = frame.f_globals
    warnings.warn_explicit(
        f"{old} is deprecated and will be removed in the next release: import {new}",
        BtlDeprecationWarning, frame.f_code.co_filename, frame.f_lineno,
        module=where.get("__name__", "<string>"),
        registry=where.setdefault("__warningregistry__", {}))


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module already imported (or importable) under its new name."""

    __slots__ = ("new", "module_spec")

    def __init__(self, new: str) -> None:
        self.new = new
        self.module_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warn_moved(spec.name, self.new)
        module = importlib.import_module(self.new)
        # The import system keeps the module's own __name__, __loader__, __package__ and
        # __path__ (it fills only what is missing) but sets __spec__ to the old name's spec:
        # exec_module puts the module's own spec back.
        self.module_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module ran once, under its new name): restore its own spec."""
        module.__spec__ = self.module_spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Finds ``OLD.NAME[.SUB...]`` as ``NEW[.SUB...]`` for the NAME -> NEW pairs it was given."""

    __slots__ = ("old", "targets")

    def __init__(self, old: str, targets: Mapping[str, str]) -> None:
        self.old = old
        self.targets = dict(targets)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.old + "."):
            return None
        name, _, sub = fullname[len(self.old) + 1:].partition(".")
        new = self.targets.get(name)
        if new is None:
            return None
        if sub:
            new = f"{new}.{sub}"
        if importlib.util.find_spec(new) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def alias_subpackages(old: str, targets: Mapping[str, str]) -> None:
    """Answer ``old.NAME`` (and its submodules) with ``targets[NAME]`` from now on.

    The finder goes first on ``sys.meta_path``: after the old parent resolves to the new
    package, the ordinary path finder would otherwise load a second copy of each submodule
    from the new package's folder under the old name.
    """
    if not any(isinstance(f, _AliasFinder) and f.old == old for f in sys.meta_path):
        sys.meta_path.insert(0, _AliasFinder(old, targets))


def moved_to_run(name: str) -> object:
    """``btlcore.transport.open`` and ``run_until`` moved to :mod:`btlcore.run` (the transport
    module holds the Transport); the old names work for one release, with a warning."""
    if name in ("open", "run_until"):
        from . import run

        warnings.warn(f"btlcore.transport.{name} moved to btlcore.run.{name} (or btlcore.{name})",
                      BtlDeprecationWarning, stacklevel=3)
        return getattr(run, name)
    raise AttributeError(f"module 'btlcore.transport' has no attribute {name!r}")
