"""The pytest plugin of the simulator backend (entry point ``pytest11``: installed with
btlcore, loaded by every pytest run; no conftest needed).

* ``btl_fabric``: a fresh :class:`~btlcore_sim.lab.Lab` (a seeded
  :class:`~btlcore_sim.fabric.Fabric` with test helpers) per test, closed after it;
  ``btlcore.open("sim", fabric=btl_fabric)`` opens a node on it.
* ``btl_loop``: an asyncio loop on ``btl_fabric``'s virtual clock
  (:class:`btlcore_sim.vloop.VirtualLoop`) for ``btlcore.aio`` applications:
  ``btl_loop.run_until_complete(main())``.
* ``btl_seed``: that test's seed.  ``@pytest.mark.btl_seed(N)`` pins it to ``N`` (a seed
  that once found a bug, kept as a regression test), whatever the session's seed.
* ``--btl-seed N``: the session's seed (default: a random one), printed in the session
  header.  Under pytest-xdist the controller picks it once and hands it to every worker.
* Each test's seed is derived from the session seed and the test's node id alone, so the
  order and the selection of tests change nothing: a test run on its own with the session's
  seed runs packet for packet as it did among the others.
* A failing test that used these fixtures carries the command that replays it, in its
  report (a ``btlcore replay`` section, and ``user_properties`` for JUnit XML):
  ``pytest 'NODEID' --btl-seed N``.

The module imports nothing of btlcore until a test asks for a fixture: loading it costs a
pytest run that does not use btlcore nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import random
from collections.abc import Iterator
from typing import Any

import pytest

SEED_KEY = pytest.StashKey[int]()
SEED_BITS = 32
_FIXTURES = ("btl_fabric", "btl_seed", "btl_loop")


def _seed_arg(text: str) -> int:
    try:
        seed = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad value {text!r} for --btl-seed: allowed is an integer") from None
    if seed < 0:
        raise argparse.ArgumentTypeError(f"bad value {text!r} for --btl-seed: allowed is an integer >= 0")
    return seed


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("btlcore", "btlcore simulator (btl_fabric fixture)")
    group.addoption("--btl-seed", type=_seed_arg, default=None, metavar="N",
                    help="the session seed every btl_fabric's seed is derived from "
                         "(default: a random one, printed in the header)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "btl_seed(n): run this test's btl_fabric with seed n, "
                            "whatever --btl-seed says")
    seed = config.getoption("btl_seed", None)
    if seed is None:
        worker = getattr(config, "workerinput", None)  # a pytest-xdist worker: the controller's
        if worker is not None and "btl_seed" in worker:
            seed = int(worker["btl_seed"])
        else:
            seed = random.SystemRandom().getrandbits(SEED_BITS)
    config.stash[SEED_KEY] = seed


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, on the controller: every worker gets the controller's seed."""
    node.workerinput["btl_seed"] = node.config.stash[SEED_KEY]


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.stash[SEED_KEY]
    return f"btlcore: --btl-seed {seed} (rerun with it to replay every btl_fabric test)"


def derive_seed(session_seed: int, nodeid: str) -> int:
    """A test's seed (48 bits): the session's and its node id, hashed (independent of the
    order and selection of tests)."""
    digest = hashlib.blake2b(f"btlcore/{session_seed}/{nodeid}".encode(), digest_size=6).digest()
    return int.from_bytes(digest, "big")


def replay_command(nodeid: str, session_seed: int) -> str:
    """The shell command that reruns one test with the session's seed."""
    quoted = "'" + nodeid.replace("'", "'\"'\"'") + "'"
    return f"pytest {quoted} --btl-seed {session_seed}"


@pytest.fixture
def btl_seed(request: pytest.FixtureRequest) -> int:
    """This test's seed (see the module docstring)."""
    pinned = request.node.get_closest_marker("btl_seed")
    if pinned is not None:
        if len(pinned.args) != 1 or isinstance(pinned.args[0], bool) or not isinstance(pinned.args[0], int):
            raise pytest.UsageError(f"@pytest.mark.btl_seed takes one integer, not {pinned.args!r}")
        return int(pinned.args[0])
    return derive_seed(request.config.stash[SEED_KEY], request.node.nodeid)


@pytest.fixture
def btl_fabric(btl_seed: int) -> Iterator[Any]:
    """A fresh simulated fabric (a :class:`btlcore_sim.lab.Lab`) seeded for this test."""
    from .lab import Lab

    lab = Lab(seed=btl_seed)
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def btl_loop(btl_fabric: Any) -> Iterator[Any]:
    """An asyncio event loop on ``btl_fabric``'s virtual clock (closed after the test)."""
    from .vloop import VirtualLoop

    loop = VirtualLoop(btl_fabric)
    try:
        yield loop
    finally:
        if not loop.is_closed():
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and any(name in _FIXTURES for name in getattr(item, "fixturenames", ())):
        command = replay_command(item.nodeid, item.config.stash[SEED_KEY])
        report.sections.append(("btlcore replay", command))
        report.user_properties.append(("btl_replay", command))
    return report
