"""Deprecated: the old home of btlcore's own backends, kept for one release.

The backends are the packages ``btlcore_sim``, ``btlcore_udp`` and ``btlcore_verbs`` (folders
``backends/NAME/btlcore_NAME``), found through the ``btlcore.backends`` entry-point group (see
``btlcore.registry``).  ``btlcore.backends.NAME[.SUB]`` still imports, as the very same module
object, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .._moved import alias_subpackages

_MOVED = {"sim": "btlcore_sim", "udp": "btlcore_udp", "verbs": "btlcore_verbs"}

alias_subpackages(__name__, _MOVED)


def __getattr__(name: str) -> ModuleType:
    """``btlcore.backends.sim`` as an attribute, imported (and warned about) on first use."""
    if name in _MOVED:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
