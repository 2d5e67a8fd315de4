"""Deprecated: fault scripts as strings, for any backend.  Use :mod:`btlcore.faults`
(``btlcore.open(backend, faults=Faults(...))``), whose words also duplicate, delay, reorder
and corrupt, on what is received as well as what is sent::

    FaultScript("drop 5%", "drop nth 10,11", "drop type ACK 3")  # the 3rd ACK
    t = btlcore.open("udp", plugins=[FaultScript("drop 2%", seed=1)])

Rules: ``drop P%`` (random, seeded), ``drop nth N[,N...]`` (the Nth datagram sent,
1-based), ``drop type DATA|ACK|HELLO|HELLO_ACK [K]`` (every datagram of that type, or only
the Kth).  Each outgoing datagram is dropped if any rule says so.  Each rule is now a rule of
a :class:`btlcore.faults.Faults` plan (``script.faults``) judged on the send filter.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

from btlcore.device import Channel, hookimpl
from btlcore.errors import BtlDeprecationWarning, ConfigError
from btlcore.faults import LOCAL, Faults, make_rule
from btlcore.protocol.wire import TYPE_NAMES

_TYPES = {name: code for code, name in TYPE_NAMES.items()}
# the order the old script judged its rules in: nth, then the random rate, then the types
_ORDER = {"nth": 0, "rate": 1, "type": 2}


class FaultScript:
    def __init__(self, *rules: str, seed: int = 0) -> None:
        warnings.warn("btlcore_plugins.faults.FaultScript is deprecated: use "
                      "btlcore.open(..., faults=btlcore.faults.Faults(...))", BtlDeprecationWarning, stacklevel=2)
        self.faults = Faults(seed)
        self.faults.rng = random.Random(seed)  # (the old script's stream, draw for draw)
        self.sent = 0
        self.dropped = 0
        parsed = sorted((self._parse(rule) for rule in rules), key=lambda kr: _ORDER[kr[0]])
        for _kind, rule in parsed:
            self.faults.add(rule)

    def _parse(self, rule: str) -> tuple[str, Any]:
        words = rule.split()
        try:
            if len(words) == 2 and words[0] == "drop" and words[1].endswith("%"):
                rate = float(words[1][:-1]) / 100
                if not 0 <= rate <= 1:
                    raise ValueError
                return "rate", make_rule("drop", probability=rate)
            if len(words) == 3 and words[:2] == ["drop", "nth"]:
                return "nth", make_rule("drop", nth={int(x) for x in words[2].split(",")})
            if len(words) in (3, 4) and words[:2] == ["drop", "type"] and words[2] in _TYPES:
                nth = int(words[3]) if len(words) == 4 else None
                return "type", make_rule("drop", type=_TYPES[words[2]], nth=nth)
        except ValueError:
            pass
        raise ConfigError(
            f"bad fault rule {rule!r}: allowed are 'drop P%', 'drop nth N[,N...]', "
            f"'drop type {'|'.join(_TYPES)} [K]'")

    @hookimpl
    def btl_frame_filter(self, transport: Any, channel: Channel, data: bytes) -> bool:
        self.sent += 1
        drop = self.faults.judge(self.faults.rules, 0.0, LOCAL, None, data, _no_peers) is not None
        if drop:
            self.dropped += 1
        return not drop


def _no_peers(refs: Any) -> frozenset[Any]:
    return frozenset()
