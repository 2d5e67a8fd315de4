"""The backends' part of the command line, asked through the :class:`~btlcore.device.CliSpec`
hooks once, when the command starts: their option groups, their device options, a run with
both ends in this process, and the text form of their addresses.

This is why the command names no backend's knob: the simulator's link options, UDP's local
address and a third party's flags all arrive here, each in a group titled with its backend's
name.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from .. import registry
from ..device import LocalPair
from ..errors import BackendUnavailable
from .args import UsageError, name_value_pairs

OWNERS = "backend_flags"
"""The namespace attribute mapping each backend flag's dest to (backend, flag, default)."""


def add_groups(sp: argparse.ArgumentParser, command: str, names: Iterable[str] | None = None,
               with_backend_flag: bool = True) -> None:
    """Ask every backend (or those in ``names``) for its options of ``btl <command>``, each
    into a group of its own.  A backend that cannot load adds nothing ('btl backends' says
    why); one whose hook fails is reported on stderr and left out."""
    owners: dict[str, tuple[str, str, Any]] = {}
    for name in registry.backend_names() if names is None else names:
        try:
            hooks = registry.backend_hooks(name)
        except BackendUnavailable:
            continue
        group = sp.add_argument_group(f"{name} backend (--backend {name})" if with_backend_flag
                                      else f"{name} backend")
        try:
            hooks.btl_cli_add_options(command=command, group=group)
        except Exception as exc:  # a clash, or a third party's bug: never a dead command
            print(f"btl: backend {name!r} options left out of 'btl {command}': {exc}", file=sys.stderr)
        for action in group._group_actions:
            owners[action.dest] = (name, action.option_strings[0], action.default)
    sp.set_defaults(**{OWNERS: owners})


def check_foreign(args: argparse.Namespace) -> None:
    """A backend's flag given with another ``--backend`` is a mistake, not something to ignore."""
    owners: dict[str, tuple[str, str, Any]] = getattr(args, OWNERS, {})
    for dest, (name, flag, default) in owners.items():
        if name != args.backend and getattr(args, dest, default) != default:
            raise UsageError(f"{flag} applies to the {name} backend only (--backend {name})")


def device_options(backend: str, command: str, args: argparse.Namespace) -> dict[str, Any]:
    """``--option NAME=VALUE`` pairs, then what the backend makes of its own flags."""
    options: dict[str, Any] = dict(name_value_pairs(getattr(args, "option", None), "--option"))
    own = registry.backend_hooks(backend).btl_cli_device_options(command=command, args=args)
    options.update(own or {})
    return options


def runs_locally(backend: str) -> bool:
    """Whether ``btl transfer --backend NAME`` runs both ends here (no ``--peer``)."""
    return bool(registry.backend_hooks(backend).btl_cli_local_pair.get_hookimpls())


def local_pair(backend: str, command: str, args: argparse.Namespace, options: Mapping[str, Any],
               seed: int) -> LocalPair:
    pair: LocalPair | None = registry.backend_hooks(backend).btl_cli_local_pair(
        command=command, args=args, options=options, seed=seed)
    if pair is None:
        raise UsageError(f"backend {backend!r} cannot run 'btl {command}' in one process")
    return pair


def parse_address(backend: str, text: str) -> bytes:
    """``--peer``: the backend's own text form (``HOST:PORT`` on udp), else the address as
    hex (what ``btl serve`` prints)."""
    try:
        hooks = registry.backend_hooks(backend)
        address: bytes | None = hooks.btl_address_parse(text=text)  # (address_text's form, #13)
        if address is None:
            address = hooks.btl_cli_parse_address(text=text)
        legacy = getattr(registry.load_backend(backend), "parse_peer", None)  # before CliSpec
        if address is None and legacy is not None:
            address = legacy(text)
    except ValueError as exc:
        raise UsageError(f"--peer: {exc}") from None
    if address is not None:
        return bytes(address)
    try:
        return bytes.fromhex(text.removeprefix("hex:").replace(":", ""))
    except ValueError:
        raise UsageError(f"--peer: expected the address {backend!r} printed (hex), got {text!r}") from None


def format_address(backend: str, address: bytes) -> str | None:
    """The backend's words for an address (``Transport.address_text``'s form; ``btl serve``
    prints it, and the hex beside it)."""
    hooks = registry.backend_hooks(backend)
    text: str | None = hooks.btl_address_text(address=address)
    if text is None:
        text = hooks.btl_cli_format_address(address=address)
    legacy = getattr(registry.load_backend(backend), "describe_address", None)  # before CliSpec
    if text is None and legacy is not None:
        text = str(legacy(address))
    return text
