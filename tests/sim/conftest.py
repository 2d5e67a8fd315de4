"""Fixtures for the sim backend's tests (helpers live in simkit.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from btlcore_sim import Fabric, LinkModel, reset_default_fabric

from simkit import Pair  # type: ignore[import-not-found]


@pytest.fixture(autouse=True)
def _fresh_default_fabric() -> Iterator[None]:
    reset_default_fabric()
    yield
    reset_default_fabric()


@pytest.fixture
def make_pair() -> Iterator[Callable[..., Pair]]:
    """``make_pair(model=None, seed=1, pcap=None, **device_options)``: a fresh fabric
    with NICs ``a`` and ``b``."""
    made: list[Fabric] = []

    def make(model: LinkModel | None = None, seed: int = 1, pcap: Any = None,
             **options: Any) -> Pair:
        fabric = Fabric(seed=seed, default=model, pcap=pcap)
        made.append(fabric)
        return Pair(fabric, **options)

    yield make
    for fabric in made:
        fabric.close()
