"""Fixtures for the tests that keep docs/ honest (helpers live in docskit.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ``BTL_*`` variable of the caller's shell, and a fresh default simulator fabric: the
    docs' examples must run as a reader would run them."""
    from btlcore_sim import reset_default_fabric

    for key in list(os.environ):
        if key.startswith("BTL_"):
            monkeypatch.delenv(key)
    reset_default_fabric()
    yield
    reset_default_fabric()
