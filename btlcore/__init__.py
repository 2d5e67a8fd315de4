"""btlcore: reliable messaging over unreliable datagrams.

The core (this package) is sans-I/O; backends (``btlcore_sim``, ``btlcore_udp``,
``btlcore_verbs``, or a third party's) do the I/O and are found by name through the
``btlcore.backends`` entry-point group.
"""

from .config import Config
from .device import Capabilities, Channel, ChannelInfo, Probe, hookimpl
from .errors import (
    BackendUnavailable,
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
from .protocol.engine import Engine
from .protocol.peers import Peer, PeerState
from .registry import list_backends
from .run import open, run_until
from .transport import Message, Transport

__version__ = "0.1.0"

__all__ = [
    "Engine", "Message", "Peer", "PeerState", "Transport", "list_backends", "open", "run_until",
    "BackendUnavailable", "BtlError", "Capabilities", "Channel", "ChannelInfo", "Config",
    "ConfigError", "MessageTooLarge", "PeerClosed", "PeerError", "PeerRestarted", "PeerUnreachable",
    "Probe", "PutError", "TransportClosed", "WouldBlock", "hookimpl",
    "VersionMismatch",
]
