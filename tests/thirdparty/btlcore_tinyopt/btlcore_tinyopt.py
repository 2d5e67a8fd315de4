"""A third-party backend with a command-line option of its own (a test fixture for the ``btl``
command's CliSpec hooks): ``--tiny-depth N`` must reach ``btl_device_open``, which refuses to
open and says which options it got.  ``parse_peer`` is the form from before the hooks."""

from __future__ import annotations

from typing import Any

from btlcore import ConfigError, Probe, hookimpl


@hookimpl
def btl_cli_add_options(command: str, group: Any) -> None:
    if command in ("transfer", "serve"):
        group.add_argument("--tiny-depth", type=int, metavar="N", help="the tiny device's queue depth")


@hookimpl
def btl_cli_device_options(command: str, args: Any) -> dict[str, Any]:
    return {} if args.tiny_depth is None else {"depth": args.tiny_depth}


def parse_peer(text: str) -> bytes:
    if not text.startswith("tiny:"):
        raise ValueError(f"expected tiny:NAME, got {text!r}")
    return text.encode()


@hookimpl
def btl_backend_probe(options: Any) -> Probe:
    return Probe(True, "")


@hookimpl
def btl_device_open(options: Any) -> Any:
    raise ConfigError(f"tiny device asked to open with options {dict(sorted(options.items()))}")


def _never(*args: Any) -> Any:  # the device never opens
    raise AssertionError("unreachable")


btl_device_capabilities = hookimpl(lambda device: _never())
btl_device_create_channel = hookimpl(lambda device, channel, mtu: _never())
btl_device_post_send = hookimpl(lambda device, channel, dest, data: _never())
btl_device_poll_recv = hookimpl(lambda device, budget: _never())
btl_device_poll_completions = hookimpl(lambda device: _never())
btl_device_local_address = hookimpl(lambda device: _never())
btl_device_resolve = hookimpl(lambda device, address: _never())
btl_device_clock = hookimpl(lambda device: _never())
btl_device_wait = hookimpl(lambda device, deadline: _never())
btl_device_close = hookimpl(lambda device: _never())
