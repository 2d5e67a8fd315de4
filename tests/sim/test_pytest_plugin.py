"""The pytest plugin (btlcore_sim.pytest_plugin), as a user meets it: a test file of their
own, no conftest, run by pytest with the plugin found through its pytest11 entry point."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from btlcore_sim.pytest_plugin import derive_seed, replay_command

pytest_plugins = ["pytester"]

# a user's test: a lossy, jittery transfer whose capture and counters it writes down
USER_TEST = '''
import hashlib, json, pathlib
import btlcore
from btlcore_sim import LinkModel

def record(name, **facts):
    out = pathlib.Path("out")
    out.mkdir(exist_ok=True)
    (out / (name + ".json")).write_text(json.dumps(facts, sort_keys=True))

def test_transfer(btl_fabric, btl_seed):
    btl_fabric.default_model = LinkModel(delay=1e-3, jitter=3e-4, loss=0.05, duplicate=0.01,
                                         reorder=0.02)
    btl_fabric.open_pcap("transfer.pcapng")
    a = btlcore.open("sim", fabric=btl_fabric, name="a")
    b = btlcore.open("sim", fabric=btl_fabric, name="b")
    got = []
    b.on(7, lambda peer, tag, data: got.append(bytes(data)))
    a.send(a.connect(b.address), 7, bytes(range(256)) * 400)
    btlcore.run_until([a, b], lambda: got, timeout=30)
    a.close(); b.close()
    btl_fabric.close_pcap()
    digest = hashlib.sha256(pathlib.Path("transfer.pcapng").read_bytes()).hexdigest()
    record("test_transfer", seed=btl_seed, pcap=digest, totals=btl_fabric.totals(),
           now=btl_fabric.now)
    assert got == [bytes(range(256)) * 400]

def test_one(btl_seed):
    record("test_one", seed=btl_seed)

def test_two(btl_seed):
    record("test_two", seed=btl_seed)

def test_three(btl_fabric):
    record("test_three", seed=btl_fabric.seed)
'''

FAILING_TEST = '''
import btlcore

def test_ok(btl_fabric):
    a, b = btl_fabric.nodes(2)

def test_fails(btl_fabric):
    a, b = btl_fabric.nodes(2)
    assert btl_fabric.now < 0, "a bug found on a seeded fabric"

def test_fails_without_the_fixture():
    assert False
'''


def _seed_of(stdout: str) -> int:
    found = re.search(r"btlcore: --btl-seed (\d+)", stdout)
    assert found, stdout
    return int(found.group(1))


def _records(path: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((path / "out").glob("*.json"))}


def _clear(path: Path) -> None:
    for p in (path / "out").glob("*.json"):
        p.unlink()


def test_the_seed_is_random_by_default_and_printed_in_the_header(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TEST)
    first = pytester.runpytest("-k", "one or two")
    first.assert_outcomes(passed=2)
    seed = _seed_of(first.stdout.str())
    assert _records(pytester.path)["test_one"]["seed"] == derive_seed(seed, "test_user.py::test_one")
    second = pytester.runpytest("-k", "one")
    assert _seed_of(second.stdout.str()) != seed  # (2**-32 odds of a false failure)


def test_the_same_seed_gives_the_same_run_packet_for_packet(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TEST)
    runs = []
    for seed in (5, 5, 6):
        _clear(pytester.path)
        result = pytester.runpytest("--btl-seed", str(seed), "-k", "transfer")
        result.assert_outcomes(passed=1)
        assert _seed_of(result.stdout.str()) == seed
        runs.append(_records(pytester.path)["test_transfer"])
    assert runs[0] == runs[1]
    assert runs[0]["totals"]["dropped"] > 0  # the lossy link was in force
    assert runs[2]["seed"] != runs[0]["seed"]
    assert runs[2]["pcap"] != runs[0]["pcap"]


def test_a_failure_carries_the_command_that_replays_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bug=FAILING_TEST)
    result = pytester.runpytest("--btl-seed", "4242")
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    command = "pytest 'test_bug.py::test_fails' --btl-seed 4242"
    result.stdout.fnmatch_lines(["*btlcore replay*", command])
    assert out.count("btlcore replay") == 1  # not for the test that used no btlcore fixture
    # the command runs that one test again, with the seed it had
    replay = pytester.runpytest("test_bug.py::test_fails", "--btl-seed", "4242")
    replay.assert_outcomes(failed=1)
    replay.stdout.fnmatch_lines([command])


def test_the_replay_command_quotes_the_node_id() -> None:
    assert replay_command("t.py::test_x[it's]", 3) == "pytest 't.py::test_x[it'\"'\"'s]' --btl-seed 3"


def test_per_test_seeds_do_not_depend_on_order_or_selection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TEST)
    ids = [f"test_user.py::{name}" for name in ("test_one", "test_two", "test_three")]
    pytester.runpytest("--btl-seed", "77", *ids).assert_outcomes(passed=3)
    together = _records(pytester.path)
    _clear(pytester.path)
    pytester.runpytest("--btl-seed", "77", *reversed(ids)).assert_outcomes(passed=3)
    assert _records(pytester.path) == together
    _clear(pytester.path)
    pytester.runpytest("--btl-seed", "77", ids[1]).assert_outcomes(passed=1)
    assert _records(pytester.path) == {"test_two": together["test_two"]}
    assert len({r["seed"] for r in together.values()}) == 3
    assert together["test_three"]["seed"] == derive_seed(77, ids[2])


def test_under_xdist_the_workers_share_the_controllers_seed(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_user=USER_TEST)
    result = pytester.runpytest_subprocess("-n", "2", "-p", "xdist", "-k", "not transfer")
    result.assert_outcomes(passed=3)
    seed = _seed_of(result.stdout.str())
    got = _records(pytester.path)
    assert got == {name: {"seed": derive_seed(seed, f"test_user.py::{name}")}
                   for name in ("test_one", "test_two", "test_three")}


def test_bad_seeds_are_refused_with_what_is_allowed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TEST)
    result = pytester.runpytest("--btl-seed", "many")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*--btl-seed*allowed is an integer*"])


def test_a_marker_pins_a_tests_seed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_pinned='''
import pytest

@pytest.mark.btl_seed(1234)
def test_pinned(btl_fabric, btl_seed):
    assert btl_seed == 1234 and btl_fabric.seed == 1234
''')
    pytester.runpytest("--btl-seed", "1").assert_outcomes(passed=1)
    pytester.runpytest("--btl-seed", "2").assert_outcomes(passed=1)
