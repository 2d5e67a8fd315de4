"""Deprecated: moved to :mod:`btlcore.testing.conformance`; this name works for one release."""

from __future__ import annotations

from typing import Any

from ._moved import warn_moved
from .testing import conformance as _moved_to

warn_moved(__name__, _moved_to.__name__)


def __getattr__(name: str) -> Any:
    """Every name of the new module, read through this one."""
    return getattr(_moved_to, name)
