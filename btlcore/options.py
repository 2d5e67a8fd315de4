"""Backend options: what every backend's option parsing shares.

A backend's options come from code (``btlcore.open("udp", mtu=9000)``) over its own
environment variables (``BTL_UDP_MTU=9000``); an unknown name in either is an error that
lists the known ones, so that a typo never passes silently."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ConfigError


def env_options(prefix: str, known: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``<prefix><NAME>`` variables (``BTL_UDP_MTU``) as options named ``name``."""
    environ = os.environ if environ is None else environ
    known = list(known)
    out = {}
    for key, value in environ.items():
        if key.startswith(prefix):
            name = key[len(prefix):].lower()
            if name not in known:
                raise ConfigError(f"unknown environment variable {key}; known: "
                                  + ", ".join(prefix + n.upper() for n in known))
            out[name] = value
    return out


def check_known(backend: str, options: Mapping[str, Any], known: Iterable[str]) -> None:
    """Refuse an option name the backend does not have, naming the ones it has."""
    known = list(known)
    for name in options:
        if name not in known:
            raise ConfigError(f"unknown {backend} option {name!r}; known options: {', '.join(known)}")
