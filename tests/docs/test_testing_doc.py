"""docs/testing.md: every ``python test-file`` block is a user's test file, run by pytest
with the plugin (no conftest) and passing; the replay it describes is what a failure shows."""

from __future__ import annotations

import re

import pytest
from docskit import read  # type: ignore[import-not-found]

pytest_plugins = ["pytester"]


def _test_files() -> list[tuple[int, str]]:
    text = read("testing.md")
    return [(text[:m.start()].count("\n") + 1, m.group(1))
            for m in re.finditer(r"^```python test-file\n(.*?)^```$", text, re.S | re.M)]


def test_the_page_has_its_examples() -> None:
    assert len(_test_files()) >= 6


@pytest.mark.timeout(300)
@pytest.mark.parametrize("code", [pytest.param(code, id=f"testing.md:{line}") for line, code in _test_files()])
def test_each_example_passes_as_a_users_test_file(pytester: pytest.Pytester, code: str) -> None:
    pytester.makepyfile(test_example=code)
    result = pytester.runpytest("-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 1 and "failed" not in outcomes and "error" not in outcomes, \
        result.stdout.str()


def test_the_header_and_replay_lines_are_as_shown(pytester: pytest.Pytester) -> None:
    text = read("testing.md")
    header = re.search(r"^btlcore: --btl-seed \d+ .*$", text, re.M)
    assert header is not None
    pytester.makepyfile(test_mine='''
def test_transfer_survives(btl_fabric):
    assert btl_fabric.seed < 0
''')
    result = pytester.runpytest("--btl-seed", "2718281828")
    result.stdout.fnmatch_lines([header.group(0), "*- btlcore replay -*",
                                 "pytest 'test_mine.py::test_transfer_survives' --btl-seed 2718281828"])
    assert "pytest 'tests/test_mine.py::test_transfer_survives' --btl-seed 2718281828" in text
