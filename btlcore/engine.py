"""Deprecated: moved to :mod:`btlcore.protocol.engine` (this re-export goes in the next release)."""

import warnings as _warnings

import btlcore.protocol.engine as _m0
import btlcore.protocol.events as _m1
import btlcore.protocol.handshake as _m5
import btlcore.protocol.packetizer as _m3
import btlcore.protocol.receive as _m6
import btlcore.protocol.recovery as _m4
import btlcore.protocol.state as _m2
from btlcore.errors import BtlDeprecationWarning

for _m in (_m0, _m1, _m2, _m3, _m4, _m5, _m6):
    globals().update({k: v for k, v in vars(_m).items() if not k.startswith("__")})
del _m

_warnings.warn("btlcore.engine is deprecated: import from btlcore.protocol.engine", BtlDeprecationWarning, stacklevel=2)
