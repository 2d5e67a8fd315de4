"""The import names that moved keep working for one release: the old name gives the very same
module object as the new one, with one ``DeprecationWarning`` that names the new import."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Iterator

import pytest

import btlcore
import btlcore.backends
import btlcore.plugins
import btlcore_plugins.stats
import btlcore_sim
import btlcore_sim.fabric
import btlcore_udp._device
from btlcore.errors import BtlDeprecationWarning
from btlcore.testing import conformance

OLD_ROOTS = ("btlcore.backends.", "btlcore.plugins.")


@pytest.fixture
def fresh() -> Iterator[None]:
    """Forget every old name (modules and parent attributes) before and after the test, so the
    first import of an old name in the test is the first of the process."""

    def forget() -> None:
        for name in [n for n in sys.modules if n.startswith(OLD_ROOTS) or n == "btlcore.conformance"]:
            del sys.modules[name]
        for parent in (btlcore.backends, btlcore.plugins):
            for attr in ("sim", "udp", "verbs", "faults", "pcap", "stats"):
                parent.__dict__.pop(attr, None)
        btlcore.__dict__.pop("conformance", None)

    forget()
    yield
    forget()


def _import_warns(name: str) -> tuple[object, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(name)
    return module, [w for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize(("old", "new"), [
    ("btlcore.backends.sim", "btlcore_sim"),
    ("btlcore.backends.udp", "btlcore_udp"),
    ("btlcore.backends.verbs", "btlcore_verbs"),
    ("btlcore.plugins.stats", "btlcore_plugins.stats"),
    ("btlcore.plugins.pcap", "btlcore_plugins.pcap"),
    ("btlcore.plugins.faults", "btlcore_plugins.faults"),
    ("btlcore.conformance", "btlcore.testing.conformance"),
])
def test_old_name_warns_once_and_names_the_new_one(fresh: None, old: str, new: str) -> None:
    module, caught = _import_warns(old)
    assert len(caught) == 1
    assert f"{old} is deprecated" in str(caught[0].message) and f"import {new}" in str(caught[0].message)
    assert caught[0].filename == __file__  # attributed to the importing line, not to importlib
    again, caught = _import_warns(old)
    assert again is module and caught == []
    if old != "btlcore.conformance":  # a re-export module of its own; see the next test
        assert module is importlib.import_module(new)
        assert module.__name__ == new and module.__spec__.name == new  # type: ignore[attr-defined]


def test_submodules_are_the_same_objects(fresh: None) -> None:
    with pytest.warns(BtlDeprecationWarning) as caught:
        from btlcore.backends.sim.fabric import Fabric
    assert [str(w.message).split()[0] for w in caught] == ["btlcore.backends.sim",
                                                           "btlcore.backends.sim.fabric"]
    assert Fabric is btlcore_sim.fabric.Fabric
    assert sys.modules["btlcore.backends.sim.fabric"] is btlcore_sim.fabric
    assert sys.modules["btlcore.backends.sim"] is btlcore_sim
    with pytest.warns(BtlDeprecationWarning):
        from btlcore.backends.udp import _device
    assert _device is btlcore_udp._device
    with pytest.warns(BtlDeprecationWarning):
        from btlcore.plugins.stats import StatsReporter
    assert StatsReporter is btlcore_plugins.stats.StatsReporter


def test_monkeypatching_through_either_name_is_seen_by_both(fresh: None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.warns(BtlDeprecationWarning):
        old = importlib.import_module("btlcore.backends.udp._device")
    monkeypatch.setattr("btlcore.backends.udp._device.MAX_PAYLOAD", 1234)
    assert btlcore_udp._device.MAX_PAYLOAD == 1234
    monkeypatch.setattr(btlcore_udp._device, "MAX_PAYLOAD", 4321)
    assert old.MAX_PAYLOAD == 4321


def test_attribute_of_the_old_package_imports_on_first_use(fresh: None) -> None:
    with pytest.warns(BtlDeprecationWarning, match="btlcore.backends.verbs"):
        verbs = btlcore.backends.verbs
    assert verbs is importlib.import_module("btlcore_verbs")
    with pytest.raises(AttributeError, match="nope"):
        btlcore.backends.nope  # noqa: B018


def test_conformance_reexports_the_suite(fresh: None) -> None:
    with pytest.warns(BtlDeprecationWarning, match="btlcore.testing.conformance"):
        from btlcore.conformance import BackendHarness, ConformanceTests
    assert BackendHarness is conformance.BackendHarness
    assert ConformanceTests is conformance.ConformanceTests


@pytest.mark.parametrize("name", ["btlcore.backends.nope", "btlcore.backends.sim.nope",
                                  "btlcore.plugins.nope"])
def test_names_that_never_existed_are_not_found(fresh: None, name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the parent of sim.nope is old
        with pytest.raises(ModuleNotFoundError, match=name.replace(".", r"\.")):
            importlib.import_module(name)


def test_the_new_names_raise_no_warning() -> None:
    for name in ("btlcore_sim.plugin", "btlcore_udp.plugin", "btlcore_verbs.plugin",
                 "btlcore_plugins.pcap", "btlcore.testing.conformance", "btlcore.bench.runner"):
        _, caught = _import_warns(name)
        assert caught == []


def test_transport_open_and_run_until_moved_to_run_module() -> None:
    """``btlcore.transport.open``/``run_until`` live in ``btlcore.run`` now; the old names
    still give the same functions for one release, with a DeprecationWarning."""
    import btlcore.run
    import btlcore.transport

    for name in ("open", "run_until"):
        with pytest.warns(BtlDeprecationWarning, match=f"btlcore.run.{name}"):
            assert getattr(btlcore.transport, name) is getattr(btlcore.run, name)
    with pytest.raises(AttributeError):
        btlcore.transport.no_such_name  # noqa: B018
