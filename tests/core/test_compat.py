"""The import paths and Engine forms of the last release keep working, with a warning."""

from __future__ import annotations

import importlib
import sys

import pytest

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
    with pytest.warns(DeprecationWarning, match=name):
        mod = importlib.import_module(name)
    assert hasattr(mod, OLD_MODULES[name])


def test_old_engine_module_keeps_the_event_codes() -> None:
    sys.modules.pop("btlcore.engine", None)
    with pytest.warns(DeprecationWarning):
        mod = importlib.import_module("btlcore.engine")
    codes = [mod.EV_MESSAGE, mod.EV_COMPLETE, mod.EV_PUT, mod.EV_PUT_ERROR, mod.EV_PEER_FAILED,
             mod.EV_PEER_RESTARTED]
    assert codes == [0, 1, 2, 3, 4, 5]
