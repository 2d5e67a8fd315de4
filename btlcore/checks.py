"""Argument checks for the public calls of :class:`~btlcore.transport.Transport`: each
raises ``TypeError`` or ``ValueError`` naming the argument and what is allowed, before
anything is queued, so a mistake fails at the call instead of wedging a later ``progress``.

The per-message calls (``send``, ``put``) test the common case inline with ``type(x) is``
comparisons and come here only for the rest; these helpers are the slow, wordy path."""

from __future__ import annotations

import math
from typing import Any

from .config import Config

TAG_MAX = 0xFFFF
KEY_MAX = (1 << 32) - 1
OFFSET_MAX = (1 << 64) - 1


def _kind(value: Any) -> str:
    return type(value).__name__


def tag(value: Any, name: str = "tag") -> int:
    """A message tag: an ``int`` (not ``bool``) from 0 to 65535."""
    if type(value) is not int:
        raise TypeError(f"{name} must be an int from 0 to {TAG_MAX}, not {_kind(value)} {value!r}")
    if not 0 <= value <= TAG_MAX:
        raise ValueError(f"{name} {value} is out of range: tags are 0 to {TAG_MAX}")
    return value


def integer(value: Any, name: str, hi: int, what: str) -> int:
    """An ``int`` (not ``bool``) from 0 to ``hi``."""
    if type(value) is not int:
        raise TypeError(f"{name} must be an int ({what}), not {_kind(value)} {value!r}")
    if not 0 <= value <= hi:
        raise ValueError(f"{name} {value} is out of range: {what} are 0 to {hi}")
    return value


def _view(value: Any, name: str, allowed: str) -> memoryview:
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(f"{name} must be {allowed}, not {_kind(value)}") from None
    if not view.c_contiguous:
        raise ValueError(f"{name} must be one contiguous buffer, not a strided {_kind(value)}")
    return view


def data(value: Any, name: str = "data") -> None:
    """A bytes-like object that one flat byte view can be taken of."""
    if type(value) is bytes:
        return
    if isinstance(value, str):
        raise TypeError(f"{name} must be bytes-like (bytes, bytearray, memoryview, array...), "
                        f"not str: encode it first")
    _view(value, name, "bytes-like (bytes, bytearray, memoryview, array...)")


def writable(value: Any, name: str = "buffer") -> None:
    """A writable, contiguous bytes-like object (a put target)."""
    view = _view(value, name, "a writable bytes-like object (bytearray, memoryview of one, array...)")
    if view.readonly:
        raise ValueError(f"{name} must be writable (bytearray, memoryview of one, ...), "
                         f"not a read-only {_kind(value)}")


def address(value: Any, name: str = "address") -> bytes:
    """A peer address: bytes-like (another transport's ``address``), not empty."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be bytes (the other side's transport.address), "
                        f"not {_kind(value)} {value!r}")
    out = bytes(value)
    if not out:
        raise ValueError(f"{name} is empty: pass the other side's transport.address")
    return out


def connectable(value: Any, device: Any, known: Any) -> bytes:
    """A peer address to connect to: :func:`address`, and for a peer not ``known`` yet, the
    device's word (its optional ``check_connect``: AddressUnreachable, naming both
    addresses, for a peer that could never answer it -- rather than a silent handshake)."""
    out = address(value)
    check = getattr(device, "check_connect", None)
    if check is not None and out not in known:
        check(out)
    return out


def function(value: Any, name: str, optional: bool = True) -> None:
    """A callable (or, when ``optional``, None)."""
    if value is None and optional:
        return
    if not callable(value):
        allowed = "a callable or None" if optional else "a callable"
        raise TypeError(f"{name} must be {allowed}, not {_kind(value)} {value!r}")


def seconds(value: Any, name: str = "timeout", optional: bool = False) -> float | None:
    """A duration: a finite ``int`` or ``float`` >= 0 (or None when ``optional``)."""
    if value is None and optional:
        return None
    if type(value) not in (int, float):
        allowed = "a number of seconds >= 0" + (" or None" if optional else "")
        raise TypeError(f"{name} must be {allowed}, not {_kind(value)} {value!r}")
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{name} {value!r} is out of range: a finite number of seconds >= 0")
    return float(value)


def flag(value: Any, name: str) -> bool:
    if type(value) is not bool:
        raise TypeError(f"{name} must be True or False, not {_kind(value)} {value!r}")
    return value


def open_arguments(backend: Any, config: Any, seed: Any, plugins: Any) -> None:
    """The arguments of :func:`btlcore.open` (the options are the backend's to check)."""
    if backend is not None and type(backend) is not str:
        raise TypeError(f"backend must be a backend name (str) or None, not {_kind(backend)} {backend!r}")
    if config is not None and not isinstance(config, Config):
        raise TypeError(f"config must be a btlcore.Config (Config.build(...)) or None, not {_kind(config)}")
    if seed is not None and type(seed) is not int:
        raise TypeError(f"seed must be an int or None, not {_kind(seed)} {seed!r}")
    if isinstance(plugins, (str, bytes)) or not hasattr(plugins, "__iter__"):
        raise TypeError(f"plugins must be a sequence of plugin objects, not {_kind(plugins)} {plugins!r}")


def foreign_thread(address: bytes, owner: Any, owner_ident: int | None, me: Any) -> RuntimeError:
    """The error for a call from a thread that does not own the transport at ``address``."""
    return RuntimeError(
        f"btlcore transport {address.hex()} belongs to thread {owner.name!r} "
        f"(ident {owner_ident}); thread {me.name!r} (ident {me.ident}) may not use it: "
        "drive a transport from one thread, and use Transport.wake() from others")


def not_our_peer(peer: Any, peer_type: type[Any], address: bytes) -> Exception:
    """The error for a ``peer`` argument that is no Peer, or a Peer of another transport."""
    if type(peer) is not peer_type:
        return TypeError(f"peer must be a btlcore.Peer (from connect() or a handler), "
                         f"not {type(peer).__name__} {peer!r}")
    return ValueError(f"peer {peer.address.hex()} is not a peer of this transport "
                      f"({address.hex()}): use the Peer its connect() returned")
