"""btlcore: reliable messaging over unreliable datagrams.

The core (this package) is sans-I/O; backends (``btlcore.backends.*``) do the I/O and are
found by name through the ``btlcore.backends`` entry-point group.
"""

from .config import Config
from .device import Capabilities, Channel, ChannelInfo, Probe, hookimpl
from .errors import (
    BackendUnavailable,
    BtlError,
    ConfigError,
    MessageTooLarge,
    PeerError,
    PeerRestarted,
    PeerUnreachable,
    TransportClosed,
)

__all__ = [
    "BackendUnavailable", "BtlError", "Capabilities", "Channel", "ChannelInfo", "Config",
    "ConfigError", "MessageTooLarge", "PeerError", "PeerRestarted", "PeerUnreachable", "Probe",
    "TransportClosed", "hookimpl",
]
