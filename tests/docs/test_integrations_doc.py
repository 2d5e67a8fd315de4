"""docs/integrations.md: its examples run, and its asyncio table names every public member
of btlcore.aio.Transport."""

from __future__ import annotations

import inspect

import pytest
from docskit import block_params, read, run_block, runnable_blocks  # type: ignore[import-not-found]

import btlcore.aio


def test_integrations_md_has_its_examples() -> None:
    assert len(runnable_blocks("integrations.md")) >= 3
    assert "## Dask" in read("integrations.md")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("doc,code", block_params("integrations.md"))
def test_integrations_md_examples_run(doc: str, code: str) -> None:
    run_block(doc, code)


def test_the_asyncio_table_names_every_public_member() -> None:
    text = read("integrations.md").split("## asyncio and uvloop")[1].split("\n## ")[0]
    names = {n for n, _ in inspect.getmembers(btlcore.aio.Transport) if not n.startswith("_")}
    missing = sorted(n for n in names if f"`{n}" not in text)
    assert not missing, f"integrations.md's asyncio table does not mention {missing}"
