"""docs/integrations.md's Dask section states the numbers the code uses."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("distributed")

from btlcore.dask import frames, mux  # noqa: E402

DOC = (Path(__file__).resolve().parents[2] / "docs" / "integrations.md").read_text()


def test_the_dask_section_states_the_chunk_size_limit_and_tag_in_use() -> None:
    section = DOC.split("## Dask", 1)[1]
    assert f"chunks of {frames.CHUNK >> 20} MiB" in section
    assert f"A message of up to {frames.RNDV_MIN >> 20} MiB travels inline" in section
    assert f"at most {mux.LIMIT >> 20} MiB of them" in section
    assert f"`{frames.TAG:#06X}`".replace("0X", "0x") in section
    assert 'protocol="btl://"' in section and "dask scheduler --protocol btl" in section
    assert "btlcore.dask.ForkedTransport" in section and "require_encryption" in section
