"""docs/api.md against the code: every parameter with its default, every counter, every
``btl`` command and option, the command snippets, the Transport members, the errors, and
every ``python runnable`` block run on the simulator."""

from __future__ import annotations

import argparse
import inspect
import re
from pathlib import Path
from typing import Any

import attrs
import pytest
from docskit import (  # type: ignore[import-not-found]
    block_params,
    cells,
    read,
    row,
    run_block,
    run_btl,
    runnable_blocks,
    shape,
    snippet,
)

from btlcore.cli import build_parser
from btlcore.config import Config
from btlcore.protocol.stats import MODULE_COUNTERS, PEER_COUNTERS

# ------------------------------------------------------------------------------ parameters


@pytest.mark.parametrize("field", attrs.fields(Config), ids=lambda f: f.name)
def test_every_parameter_in_api_md_with_its_default(field: attrs.Attribute) -> None:  # type: ignore[type-arg]
    name, default, allowed, env, meaning = cells(row(read("api.md"), f"`{field.name}`"))
    assert default == f"`{field.default!r}`"
    assert env == f"`BTL_{field.name.upper()}`"
    described = {n: (a, d) for n, _, a, d in Config.describe()}
    assert allowed == described[field.name][0]
    assert meaning == described[field.name][1]


def test_env_reserved_names_documented() -> None:
    from btlcore.config import RESERVED_ENV, RESERVED_ENV_PREFIXES

    text = read("api.md")
    for name in (*RESERVED_ENV, *RESERVED_ENV_PREFIXES):
        assert f"`{name}`" in text, name


# ------------------------------------------------------------------------------ counters


@pytest.mark.parametrize("name", PEER_COUNTERS + MODULE_COUNTERS)
def test_every_counter_in_api_md(name: str) -> None:
    found = cells(row(read("api.md"), f"`{name}`"))
    assert len(found) == 2 and found[1], f"{name} has no one-line description"


def test_counter_split_between_peer_and_transport_tables() -> None:
    text = read("api.md")
    peer_part, module_part = text.split("Per transport (`btlcore.protocol.stats.MODULE_COUNTERS`")
    for name in PEER_COUNTERS:
        assert f"| `{name}` |" in peer_part
    for name in MODULE_COUNTERS:
        assert f"| `{name}` |" in module_part.split("## Errors")[0]


# ------------------------------------------------------------------------------ the btl command


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("btl has no subcommands")


@pytest.mark.parametrize("command", sorted(_subparsers(build_parser())))
def test_every_btl_command_and_option_in_api_md(command: str) -> None:
    text = read("api.md")
    assert f"### `btl {command}`" in text
    section = text.split(f"### `btl {command}`")[1].split("\n### ")[0]
    sub = _subparsers(build_parser())[command]
    actions = list(sub._actions)
    if command == "bench":  # btl bench hands every option to the runner ('btl bench --help')
        from btlcore.bench.runner import parser as bench_parser

        actions += bench_parser()._actions
        assert len(actions) > 5
    for action in actions:
        for opt in action.option_strings:
            if opt in ("-h", "--help"):
                continue
            assert opt in section or (opt in ("--set", "--json") and opt in text), \
                f"btl {command} {opt} is not documented"


def test_cli_snippets_show_current_output_format() -> None:
    """The summary lines in api.md's snippets are the ones the code prints."""
    text = read("api.md")
    for needle in ("  verified: yes", "  messages: ", "standalone ACKs received", "btl serve: backend udp, address "):
        assert needle in text
    from btlcore import cli

    # the package: each command's module prints its own lines
    src = "".join(p.read_text() for p in sorted(Path(cli.__file__).parent.glob("*.py")))
    for needle in ("verified: ", "standalone ACKs received", "btl serve: backend "):
        assert needle in src


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", [
    "btl demo",
    "btl transfer --seed 7 --messages 200 --size 8-20000 --loss 0.05 --burst 0.02,4 --reorder 0.01"
    " --delay 1,0.2 --rate 1000",
])
def test_cli_snippets_have_the_shape_of_current_output(command: str, clean_env: Any) -> None:
    """The numbers may drift as the protocol is tuned; the lines must not."""
    shown = snippet(command)
    real = run_btl(command.split()[1:])
    assert [shape(x) for x in real] == [shape(x) for x in shown]
    assert real[-1] == shown[-1] == "  verified: yes"


def test_params_snippet_is_current() -> None:
    real = run_btl(["params"])
    assert snippet("btl params") == real[:len(snippet("btl params"))]


# ------------------------------------------------------------------------------ Transport and errors


def test_api_md_lists_every_public_transport_member() -> None:
    from btlcore.transport import Transport

    text = read("api.md").split("## Transport")[1].split("\n## ")[0]
    names = {n for n, _ in inspect.getmembers(Transport) if not n.startswith("_")}
    init = inspect.getsource(Transport.__init__)
    names |= set(re.findall(r"self\.([a-z][a-z_]*)\b(?:: [^=]+)? =", init))
    missing = sorted(n for n in names if f"`{n}" not in text)
    assert not missing, f"api.md's Transport table does not mention {missing}"


def test_api_md_names_every_exported_error() -> None:
    from btlcore import errors

    text = read("api.md").split("## Errors")[1]
    for name, obj in vars(errors).items():
        if isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == errors.__name__:
            assert f"`{name}`" in text, name


# ------------------------------------------------------------------------------ runnable code


def test_api_md_has_runnable_examples() -> None:
    assert len(runnable_blocks("api.md")) >= 5


@pytest.mark.timeout(120)
@pytest.mark.parametrize("doc,code", block_params("api.md"))
def test_runnable_example(doc: str, code: str, clean_env: Any) -> None:
    run_block(doc, code)
