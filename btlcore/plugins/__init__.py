"""Deprecated: the old home of btlcore's plugins, kept for one release.

The plugins are the package ``btlcore_plugins`` (folder ``plugins/btlcore_plugins``), found
through the ``btlcore.plugins`` entry-point group.  ``btlcore.plugins.NAME`` still imports, as
the very same module object, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .._moved import alias_subpackages

_MOVED = {name: f"btlcore_plugins.{name}" for name in ("faults", "pcap", "stats")}

alias_subpackages(__name__, _MOVED)


def __getattr__(name: str) -> ModuleType:
    """``btlcore.plugins.stats`` as an attribute, imported (and warned about) on first use."""
    if name in _MOVED:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
