"""Deprecated: moved to :mod:`btlcore.protocol.stats` (this re-export goes in the next release)."""

import warnings as _warnings

import btlcore.protocol.stats as _m0
from btlcore.errors import BtlDeprecationWarning

for _m in (_m0,):
    globals().update({k: v for k, v in vars(_m).items() if not k.startswith("__")})
del _m

_warnings.warn("btlcore.stats is deprecated: import from btlcore.protocol.stats", BtlDeprecationWarning, stacklevel=2)
