"""Two engines joined by a scriptable in-memory link on a virtual clock (no device at all):
the sans-I/O core tested on its own, as aioquic's tests drive two connections by hand."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import Any

from btlcore import Config
from btlcore.engine import EV_COMPLETE, EV_MESSAGE, Engine

Drop = Callable[[int, bytes], bool]  # (direction, datagram) -> drop it?


class EnginePair:
    """Engines ``a`` and ``b``; ``run()`` moves datagrams between them with a fixed delay,
    optional drop/duplicate/reorder decisions, and advances virtual time to the next event."""

    def __init__(self, config: Config | None = None, *, mtu: int = 1500, seed: int = 1,
                 delay: float = 0.001, drop: Drop | None = None, crc: bool = True,
                 config_b: Config | None = None) -> None:
        self.now = 0.0
        self.delay = delay
        self.drop = drop
        self.rng = random.Random(seed)
        self.sent = [0, 0]
        self.log: list[tuple[float, int, bytes]] = []
        self._flight: list[tuple[float, int, int, bytes]] = []
        self._n = 0
        cfg_a = config or Config()
        cfg_b = config_b or cfg_a
        self.a = Engine(cfg_a, address=b"A", resolve=lambda addr: addr, data_mtu=mtu,
                        priority_mtu=768, crc=crc, rng=random.Random(seed), now=0.0)
        self.b = Engine(cfg_b, address=b"B", resolve=lambda addr: addr, data_mtu=mtu,
                        priority_mtu=768, crc=crc, rng=random.Random(seed + 1), now=0.0)
        self.delivered: dict[str, list[tuple[int, bytes]]] = {"a": [], "b": []}
        self.completed: list[BaseException | None] = []
        self.other_events: list[tuple[Any, ...]] = []

    def engines(self) -> list[tuple[int, Engine]]:
        return [(0, self.a), (1, self.b)]

    def _collect(self, name: str, eng: Engine) -> None:
        for ev in eng.drain_events():
            if ev[0] == EV_MESSAGE:
                self.delivered[name].append((ev[2], bytes(ev[3])))
            elif ev[0] == EV_COMPLETE:
                ev[1](ev[2])
            else:
                self.other_events.append(ev)

    def step(self) -> bool:
        """One round: send what is due, deliver what landed, advance time.  False when
        nothing at all is left to happen."""
        for direction, eng in self.engines():
            t = eng.get_timer()
            if t is not None and t <= self.now:
                eng.handle_timer(self.now)
            for _ch, dest, buf in eng.datagrams_to_send(self.now):
                data = bytes(buf)
                self.sent[direction] += 1
                self.log.append((self.now, direction, data))
                if self.drop is not None and self.drop(direction, data):
                    continue
                self._n += 1
                heapq.heappush(self._flight, (self.now + self.delay, self._n, direction, data))
        self._collect("a", self.a)
        self._collect("b", self.b)
        # advance to the next event
        nexts = [f[0] for f in self._flight[:1]]
        for _d, eng in self.engines():
            t = eng.get_timer()
            if t is not None:
                nexts.append(max(t, self.now))
        if not nexts:
            return False
        self.now = max(self.now, min(nexts))
        while self._flight and self._flight[0][0] <= self.now:
            _t, _n, direction, data = heapq.heappop(self._flight)
            (self.b if direction == 0 else self.a).receive_datagram(data, self.now)
        self._collect("a", self.a)
        self._collect("b", self.b)
        return True

    def run(self, until: Callable[[], bool] | None = None, max_time: float = 60.0) -> float:
        while self.now < max_time:
            if until is not None and until():
                return self.now
            if not self.step():
                break
        if until is not None and not until():
            raise AssertionError(f"condition not reached by t={self.now:.3f}")
        return self.now
