"""The import paths and Engine forms of the last release keep working, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest

from btlcore.errors import BtlDeprecationWarning

OLD_MODULES = {
    "btlcore.engine": "Engine",
    "btlcore.wire": "decode",
    "btlcore.window": "ReceiveWindow",
    "btlcore.stats": "aggregate",
    "btlcore.peer": "Peer",
    "btlcore.rtt": "RetransmitTimer",
}


@pytest.mark.parametrize("name", sorted(OLD_MODULES))
def test_old_module_paths_import_with_a_deprecation_warning(name: str) -> None:
    sys.modules.pop(name, None)
    with pytest.warns(BtlDeprecationWarning, match=name):
        mod = importlib.import_module(name)
    assert hasattr(mod, OLD_MODULES[name])


def test_old_engine_module_keeps_the_event_codes() -> None:
    sys.modules.pop("btlcore.engine", None)
    with pytest.warns(BtlDeprecationWarning):
        mod = importlib.import_module("btlcore.engine")
    codes = [mod.EV_MESSAGE, mod.EV_COMPLETE, mod.EV_PUT, mod.EV_PUT_ERROR, mod.EV_PEER_FAILED,
             mod.EV_PEER_RESTARTED]
    assert codes == [0, 1, 2, 3, 4, 5]


def test_get_timer_is_next_deadline_with_a_warning() -> None:
    from btlcore import Config
    from btlcore.testing.enginepair import EnginePair

    p = EnginePair(Config())
    p.connect(0, 1)
    with pytest.warns(BtlDeprecationWarning, match="get_timer"):
        assert p.a.get_timer() == p.a.next_deadline()
    with pytest.warns(BtlDeprecationWarning, match="get_timer"):
        assert p.a.get_timer(pending_work=False) == p.a.next_deadline(pending_work=False)


def test_the_enginepair_docstring_example_runs() -> None:
    import btlcore.testing.enginepair as ep

    doc = ep.__doc__ or ""
    example = "\n".join(line[4:] for line in doc.split("::\n\n")[1].split("\n\nEach step")[0].splitlines())
    exec(compile(example, "enginepair-docstring", "exec"), {})
