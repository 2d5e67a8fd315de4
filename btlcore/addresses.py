"""Addresses as people type them: each backend's text form, and back.

An address is the backend's bytes (``Transport.address``), which a peer passes to
``connect``.  People and configuration files want text: the backend gives its own form
through the optional hooks ``btl_address_text`` and ``btl_address_parse`` (udp ``HOST:PORT``,
sim ``sim:N``, verbs ``verbs:[GID]:QPN+QPN...``); a backend without them is written in hex.
Hex is always accepted back, so what ``btl serve`` printed before keeps working.
"""

from __future__ import annotations

from typing import Any

from . import checks
from .device import DeviceOps


def text(ops: DeviceOps, address: bytes) -> str:
    """``address`` in the backend's text form (hex when it has none)."""
    hook = ops.address_text
    if hook is not None:
        out = hook(bytes(address))
        if out is not None:
            return str(out)
    return bytes(address).hex()


def parse(ops: DeviceOps, value: Any, name: str = "address") -> bytes:
    """What ``connect`` takes: the address's bytes (any bytes-like), or its text (the
    backend's form, or hex).  Bad text raises ``ValueError`` naming the forms allowed."""
    if not isinstance(value, str):
        return checks.address(value, name)
    written = value.strip()
    if not written:
        raise ValueError(f"{name} is empty: pass the other side's transport.address or address_text")
    hook = ops.parse_address
    if hook is not None:
        out = hook(written)
        if out is not None:
            return checks.address(out, name)
    try:
        return checks.address(bytes.fromhex(written), name)
    except ValueError:
        example = "" if hook is None else f" or {ops.backend}'s text form (transport.address_text)"
        raise ValueError(f"{name} {value!r} is not a {ops.backend} address: expected the hex form "
                         f"(transport.address.hex()){example}") from None
