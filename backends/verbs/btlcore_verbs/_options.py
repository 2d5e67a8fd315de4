"""The verbs device's options: parsed, checked and defaulted in one place.

Options come from code (``open_device("verbs", {"device": "rxe0"})``) and from the
environment as ``BTL_VERBS_<NAME>`` (``BTL_VERBS_GID_INDEX=1``); explicit options win.
Values may be typed or strings (``"1"``, ``"0x11111111"``, ``"auto"``).  Anything unknown or
out of range raises :class:`~btlcore.errors.ConfigError` naming the option and what it allows.
Whether the named device and port exist is checked when the device opens (that needs
pyverbs); here only the values' shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from btlcore import options as _shared
from btlcore.errors import ConfigError

ENV_PREFIX = "BTL_VERBS_"
DEFAULT_QKEY = 0x42544C31  # "BTL1"; the high bit must stay clear (controlled QKeys need privilege)
MAX_QKEY = 0x7FFFFFFF
MAX_QUEUE = 1 << 16
TRISTATE = ("auto", "on", "off")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

#: name -> what it allows, for error messages and docs.
ALLOWED = {
    "device": "an RDMA device name as ibv_devices lists it (e.g. rxe0), or 'auto': the first "
    "device with an active port",
    "port": "'auto' (the device's first active port) or an integer from 1 to 255",
    "gid_index": "'auto' (skip zero GIDs, prefer the IPv4-mapped RoCE v2 GID) or an integer "
    "from 0 to 65535 naming a GID table entry",
    "mtu": "0 or 'auto' (the port's active MTU), or one of 256, 512, 1024, 2048, 4096: the "
    "largest datagram, at most the active MTU (to match a peer on a smaller-MTU port)",
    "qkey": f"an integer from 0 to {MAX_QKEY:#x} (both peers must use the same; default "
    f"{DEFAULT_QKEY:#x})",
    "send_queue_depth": f"an integer from 1 to {MAX_QUEUE}: send work requests (and send "
    "buffers) per channel",
    "recv_queue_depth": f"an integer from 2 to {MAX_QUEUE}: receive buffers per channel",
    "inline": "one of auto, on, off: small sends inline in the work request (on: fail if the "
    "device cannot)",
    "seed": "an integer or None (ignored: the verbs device needs no randomness)",
}


@attrs.define(slots=True, frozen=True)
class VerbsOptions:
    """The settled options of one device (None = choose automatically)."""

    device: str | None = None
    port: int | None = None
    gid_index: int | None = None
    mtu: int = 0
    qkey: int = DEFAULT_QKEY
    send_queue_depth: int = 256
    recv_queue_depth: int = 1024
    inline: str = "auto"


def _fail(name: str, value: Any) -> ConfigError:
    return ConfigError(f"bad value {value!r} for verbs option {name!r} ({ENV_PREFIX}{name.upper()}): "
                       f"allowed is {ALLOWED[name]}")


def _int(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool):
        raise _fail(name, value)
    if isinstance(value, str):
        try:
            value = int(value.strip(), 0)
        except ValueError:
            raise _fail(name, value) from None
    if not isinstance(value, int) or not lo <= value <= hi:
        raise _fail(name, value)
    return value


def _auto_int(name: str, value: Any, lo: int, hi: int) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    return _int(name, value, lo, hi)


def env_options(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``BTL_VERBS_*`` variables as options.  An unknown one is an error."""
    return _shared.env_options(ENV_PREFIX, ALLOWED, environ)


def parse(options: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> VerbsOptions:
    """Validate ``options`` (over ``BTL_VERBS_*`` defaults) into :class:`VerbsOptions`."""
    _shared.check_known("verbs", options, ALLOWED)
    opts: dict[str, Any] = env_options(environ)
    opts.update(options)
    device = opts.get("device")
    if device is not None:
        if not isinstance(device, (str, bytes)) or not device.strip():
            raise _fail("device", device)
        device = device.decode() if isinstance(device, bytes) else device.strip()
        if device.lower() == "auto":
            device = None
    inline = opts.get("inline", "auto")
    if isinstance(inline, bool):
        inline = "on" if inline else "off"
    if isinstance(inline, str) and inline.strip().lower() in _TRUE + _FALSE + ("auto",):
        low = inline.strip().lower()
        inline = "auto" if low == "auto" else ("on" if low in _TRUE else "off")
    else:
        raise _fail("inline", inline)
    mtu_value = opts.get("mtu", 0)
    if isinstance(mtu_value, str) and mtu_value.strip().lower() == "auto":
        mtu_value = 0
    mtu = _int("mtu", mtu_value, 0, 4096)
    if mtu not in (0, 256, 512, 1024, 2048, 4096):
        raise _fail("mtu", mtu_value)
    if opts.get("seed") is not None:
        _int("seed", opts["seed"], -(1 << 63), (1 << 64) - 1)
    return VerbsOptions(
        device=device,
        port=_auto_int("port", opts.get("port"), 1, 255),
        gid_index=_auto_int("gid_index", opts.get("gid_index"), 0, 65535),
        mtu=mtu,
        qkey=_int("qkey", opts.get("qkey", DEFAULT_QKEY), 0, MAX_QKEY),
        send_queue_depth=_int("send_queue_depth", opts.get("send_queue_depth", 256), 1, MAX_QUEUE),
        recv_queue_depth=_int("recv_queue_depth", opts.get("recv_queue_depth", 1024), 2, MAX_QUEUE),
        inline=inline,
    )
