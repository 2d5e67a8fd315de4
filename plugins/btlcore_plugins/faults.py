"""Fault scripts for any backend: drop outgoing datagrams by rule, as the simulator's
scripted drops do, but on real sockets or verbs QPs (ns-3's list error model, netem's
random loss), to test recovery on real hardware::

    FaultScript("drop 5%", "drop nth 10,11", "drop type ACK 3")  # the 3rd ACK
    t = btlcore.open("udp", plugins=[FaultScript("drop 2%", seed=1)])

Rules: ``drop P%`` (random, seeded), ``drop nth N[,N...]`` (the Nth datagram sent,
1-based), ``drop type DATA|ACK|HELLO|HELLO_ACK [K]`` (every datagram of that type, or only
the Kth).  Each outgoing datagram is dropped if any rule says so.
"""

from __future__ import annotations

import random
from typing import Any

from btlcore.device import Channel, hookimpl
from btlcore.errors import ConfigError
from btlcore.protocol.wire import TYPE_NAMES

_TYPES = {name: code for code, name in TYPE_NAMES.items()}


class FaultScript:
    def __init__(self, *rules: str, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._rate = 0.0
        self._nth: set[int] = set()
        self._types: dict[int, int | None] = {}
        self._seen_by_type: dict[int, int] = {}
        self.sent = 0
        self.dropped = 0
        for rule in rules:
            self._parse(rule)

    def _parse(self, rule: str) -> None:
        words = rule.split()
        try:
            if len(words) == 2 and words[0] == "drop" and words[1].endswith("%"):
                self._rate = float(words[1][:-1]) / 100
                if not 0 <= self._rate <= 1:
                    raise ValueError
                return
            if len(words) == 3 and words[:2] == ["drop", "nth"]:
                self._nth |= {int(x) for x in words[2].split(",")}
                return
            if len(words) in (3, 4) and words[:2] == ["drop", "type"] and words[2] in _TYPES:
                self._types[_TYPES[words[2]]] = int(words[3]) if len(words) == 4 else None
                return
        except ValueError:
            pass
        raise ConfigError(
            f"bad fault rule {rule!r}: allowed are 'drop P%', 'drop nth N[,N...]', "
            f"'drop type {'|'.join(_TYPES)} [K]'")

    @hookimpl
    def btl_frame_filter(self, transport: Any, channel: Channel, data: bytes) -> bool:
        self.sent += 1
        drop = self.sent in self._nth or (self._rate and self._rng.random() < self._rate)
        if len(data) > 1 and data[1] in self._types:
            count = self._seen_by_type[data[1]] = self._seen_by_type.get(data[1], 0) + 1
            k = self._types[data[1]]
            drop = drop or k is None or k == count
        if drop:
            self.dropped += 1
        return not drop
