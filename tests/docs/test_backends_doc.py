"""docs/backends.md against the code: every hook and binding of the Device interface, the
conformance suite's test list, every ``python runnable`` block, and the whole conformance
suite run on the page's own example backend."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import attrs
import pytest
from docskit import block_params, read, run_block, runnable_blocks  # type: ignore[import-not-found]

import btlcore
from btlcore.config import Config
from btlcore.device import REQUIRED_HOOKS, DeviceOps, DeviceSpec
from btlcore.testing.conformance import BackendHarness, ConformanceTests


def test_backends_md_covers_every_hook_and_binding() -> None:
    text = read("backends.md")
    hooks = [n for n in vars(DeviceSpec) if n.startswith("btl_")]
    assert set(REQUIRED_HOOKS) <= set(hooks)
    for hook in hooks:
        assert f"`{hook}(" in text, f"backends.md does not describe {hook}"
    for field in attrs.fields(DeviceOps):
        assert f"`{field.name}`" in text, f"backends.md does not list DeviceOps.{field.name}"
    for member in ("backend", "options", "supports_restart", "max_transports", "timeout", "open", "reopen",
                   "kill", "run"):
        assert hasattr(BackendHarness, member) and f"`{member}" in text, member
    assert '[project.entry-points."btlcore.backends"]' in text


def test_conformance_test_list_in_backends_md() -> None:
    """backends.md enumerates what the suite tests; a new test must be added there."""
    tests = sorted(n for n in vars(ConformanceTests) if n.startswith("test_"))
    assert len(tests) == 15, f"the conformance suite has {len(tests)} tests now: update backends.md's list"


def test_backends_md_has_runnable_examples() -> None:
    assert len(runnable_blocks("backends.md")) >= 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("doc,code", block_params("backends.md"))
def test_runnable_example(doc: str, code: str, clean_env: Any) -> None:
    run_block(doc, code)


# -- the conformance suite on backends.md's example backend


_LOOP: dict[str, Any] = {}


def _loop_backend() -> dict[str, Any]:
    if not _LOOP:
        code = next(c for line, c in runnable_blocks("backends.md") if "class LoopBackend" in c)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, "<backends.md>", "exec"), _LOOP)  # noqa: S102
    return _LOOP


class DocsLoopHarness(BackendHarness):
    backend = "loop"
    max_transports = 9

    def open(self, config: Config, **options: Any) -> btlcore.Transport:
        t = _loop_backend()["open_loop"](config, **{**self.options, **options})
        self.opened.append(t)
        return t

    def reopen(self, address: bytes, config: Config) -> btlcore.Transport:
        return self.open(config, address=address)


@pytest.mark.timeout(120)
class TestDocsExampleBackendConformance(ConformanceTests):
    harness_class = DocsLoopHarness
