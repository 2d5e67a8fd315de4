"""One fairness cell set up as :func:`btlcore.bench.flows.run_flows` sets it up (same fabric,
bottleneck, senders and seeds), for the diagnosis scripts beside this one: they step it to
marks of their own and read what the sweep does not print."""
from __future__ import annotations

from typing import Any

from btlcore import Config, run_until
from btlcore.bench import flows as F
from btlcore_sim import Fabric, LinkModel


class Cell:
    """``n`` flows of the default Config through one drop-tail bottleneck."""

    def __init__(self, rate: float, delay: float, queue_bdp: float, n: int, seed: int) -> None:
        path = F.PathSpec(rate, delay, 0.0, None, queue_bdp)
        self.fab = Fabric(seed=seed, default=LinkModel(loss=0.0, delay=delay), coalesce=F.COALESCE)
        self.flows: list[Any]
        self.flows, _dead = F._open(self.fab, [Config()] * n, seed, F.MTU)
        bn = self.fab.bottleneck([(f"s{i}", f"r{i}") for i in range(n)], rate, queue_bdp=queue_bdp,
                                 aqm="droptail")
        for f in self.flows:
            f.cap = max(F.MIN_OUTSTANDING, int(2 * (path.bdp + (bn.limit or path.bdp))))
        self.transports = [t for f in self.flows for t in (f.sender, f.receiver)]
        self.messages = F._Messages(seed)

    def advance(self, mark: float) -> None:
        """Run to virtual time ``mark`` as run_flows does (fill every writable flow, run until
        one is)."""
        fab, flows = self.fab, self.flows
        while fab.now < mark:
            for f in flows:
                if f.writable:
                    F._fill(f, self.messages)
            run_until(self.transports, lambda: fab.now >= mark or any(f.writable for f in flows),
                      timeout=mark - fab.now + 1e-3)

    def taken(self) -> list[int]:
        """Bytes each flow's receiver took off the link so far (delivered and held)."""
        return [F._taken(f) for f in self.flows]

    def taken_at(self, marks: list[float]) -> list[list[int]]:
        """:meth:`taken` at each of ``marks`` (ascending virtual times)."""
        got = []
        for mark in marks:
            self.advance(mark)
            got.append(self.taken())
        return got

    def close(self) -> None:
        for t in self.transports:
            t.close()
        self.fab.close()
