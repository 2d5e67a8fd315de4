"""btlcore: reliable messaging over unreliable datagrams.

The core (this package) is sans-I/O; backends (``btlcore_sim``, ``btlcore_udp``,
``btlcore_verbs``, or a third party's) do the I/O and are found by name through the
``btlcore.backends`` entry-point group.
"""

import logging

from . import _native

# first: choose the compiled or the pure build before any module it governs is imported
_compiled_allowed = _native.select()

from .config import Config  # noqa: E402
from .device import Capabilities, Channel, ChannelInfo, Probe, hookimpl  # noqa: E402
from .errors import (  # noqa: E402
    BackendUnavailable,
    BtlDeprecationWarning,
    BtlError,
    ConfigError,
    MessageTooLarge,
    PeerClosed,
    PeerError,
    PeerRestarted,
    PeerUnreachable,
    PutError,
    TransportClosed,
    VersionMismatch,
    WouldBlock,
)
from .protocol import engine as _engine  # noqa: E402
from .protocol.engine import Engine  # noqa: E402
from .protocol.peers import Peer, PeerState  # noqa: E402
from .registry import list_backends  # noqa: E402
from .run import open, run_until  # noqa: E402
from .transport import Message, Transport  # noqa: E402

__version__ = "0.1.0"

#: whether this process runs the mypyc-compiled hot path (``False``: the pure-Python build,
#: because nothing was compiled, ``BTL_PURE`` is set, or the build is older than its sources)
compiled: bool = _compiled_allowed and _native.is_compiled(_engine)

# a library's loggers print nothing until the application configures logging (no "last
# resort" lines on stderr): the one handler for every btlcore.* logger
logging.getLogger("btlcore").addHandler(logging.NullHandler())

__all__ = [
    "Engine", "Message", "Peer", "PeerState", "Transport", "list_backends", "open", "run_until",
    "BackendUnavailable", "BtlDeprecationWarning", "BtlError", "Capabilities", "Channel", "ChannelInfo", "Config",
    "ConfigError", "MessageTooLarge", "PeerClosed", "PeerError", "PeerRestarted", "PeerUnreachable",
    "Probe", "PutError", "TransportClosed", "WouldBlock", "hookimpl",
    "VersionMismatch", "compiled",
]
