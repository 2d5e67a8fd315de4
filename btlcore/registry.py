"""Backends by name: discovery through entry points, validation, and binding, once.

``open_device("sim")`` loads the ``btlcore.backends`` entry point named ``sim``, checks that
it implements every required hook of :class:`~btlcore.device.DeviceSpec`, opens a device
and returns :class:`~btlcore.device.DeviceOps`, whose methods call the backend directly.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Mapping
from typing import Any

import attrs
import pluggy

from .device import PROJECT, REQUIRED_HOOKS, CliSpec, DeviceOps, DeviceSpec, Probe, ToolSpec
from .errors import BackendUnavailable, ConfigError

BACKEND_GROUP = "btlcore.backends"
PLUGIN_GROUP = "btlcore.plugins"


@attrs.define(slots=True, frozen=True)
class BackendStatus:
    """One backend as ``btl backends`` shows it."""

    name: str
    source: str
    usable: bool
    reason: str


def _entry_points(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=group)}


def backend_names() -> list[str]:
    return sorted(_entry_points(BACKEND_GROUP))


def load_backend(name: str) -> Any:
    """Import the backend plugin registered under ``name`` and validate it against the spec."""
    return _load_backend(name)[0]


def backend_hooks(name: str) -> pluggy.HookRelay:
    """Backend ``name``'s hooks called through pluggy: for the calls made once, as the ``btl``
    command's :class:`~btlcore.device.CliSpec` hooks (an unimplemented one returns ``None``)."""
    return _load_backend(name)[1].hook


#: backends loaded and validated, by name: the entry-point scan alone costs about 4 ms, most of
#: what opening a transport took (a process opening 1,000 endpoints pays it once)
_loaded: dict[str, tuple[Any, pluggy.PluginManager]] = {}


def _load_backend(name: str) -> tuple[Any, pluggy.PluginManager]:
    hit = _loaded.get(name)
    if hit is not None:
        return hit
    eps = _entry_points(BACKEND_GROUP)
    if name not in eps:
        raise BackendUnavailable(
            f"unknown backend {name!r}; available backends: {', '.join(sorted(eps)) or 'none'}"
            " (see 'btl backends')")
    try:
        plugin = eps[name].load()
    except Exception as exc:  # an import error in a third-party backend must not crash us
        raise BackendUnavailable(f"backend {name!r} failed to load: {type(exc).__name__}: {exc}") from exc
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(DeviceSpec)
    pm.add_hookspecs(CliSpec)
    pm.register(plugin, name=name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise BackendUnavailable(f"backend {name!r} is not a valid btlcore backend: {exc}") from exc
    missing = [hook for hook in REQUIRED_HOOKS if not getattr(plugin, hook, None)]
    if missing:
        raise BackendUnavailable(f"backend {name!r} does not implement {', '.join(missing)}")
    _loaded[name] = plugin, pm  # (only a valid one: a failure is reported again next time)
    return plugin, pm


def probe(name: str, options: Mapping[str, Any] | None = None) -> BackendStatus:
    eps = _entry_points(BACKEND_GROUP)
    source = eps[name].value if name in eps else "?"
    try:
        plugin = load_backend(name)
        result: Probe = plugin.btl_backend_probe(options=dict(options or {}))
    except BackendUnavailable as exc:
        return BackendStatus(name, source, False, str(exc))
    except Exception as exc:  # a probe must not raise; if it does, report it
        return BackendStatus(name, source, False, f"probe raised {type(exc).__name__}: {exc}")
    return BackendStatus(name, source, bool(result.usable), result.reason)


def list_backends() -> list[BackendStatus]:
    return [probe(name) for name in backend_names()]


def open_device(name: str, options: Mapping[str, Any] | None = None) -> DeviceOps:
    """Pick backend ``name`` once and return its device with direct-call bindings."""
    plugin = load_backend(name)
    opts = dict(options or {})
    status: Probe = plugin.btl_backend_probe(options=opts)
    if not status.usable:
        others = [s for s in list_backends() if s.name != name]
        usable = [s.name for s in others if s.usable]
        raise BackendUnavailable(
            f"backend {name!r} cannot be used here: {status.reason}. "
            f"Usable backends: {', '.join(usable) or 'none'}"
            + "".join(f"; {s.name}: {s.reason}" for s in others if not s.usable))
    device = plugin.btl_device_open(options=opts)
    return DeviceOps.bind(name, plugin, device)


def tool_plugin_manager(extra: list[Any] | None = None,
                        environ: Mapping[str, str] | None = None) -> pluggy.PluginManager:
    """A plugin manager holding the tool plugins given in code (``extra``) plus those named
    in ``BTL_PLUGINS`` (comma-separated names of the ``btlcore.plugins`` entry-point group;
    an entry point that is a class is instantiated with no arguments)."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(ToolSpec)
    for plugin in extra or []:
        pm.register(plugin)
    env = os.environ if environ is None else environ
    names = [n.strip() for n in env.get("BTL_PLUGINS", "").split(",") if n.strip()]
    if names:
        eps = _entry_points(PLUGIN_GROUP)
        for name in names:
            if name not in eps:
                raise ConfigError(f"unknown plugin {name!r} in BTL_PLUGINS; installed tool plugins: "
                                  f"{', '.join(sorted(eps)) or 'none'}")
            obj = eps[name].load()
            pm.register(obj() if isinstance(obj, type) else obj, name=name)
    return pm
