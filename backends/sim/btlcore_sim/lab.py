"""A fabric with what a test wants around it: nodes opened and wired together, and virtual
time advanced by the clock (:meth:`Lab.run_for`) or to a condition (:meth:`Lab.run_until`).

The pytest fixture ``btl_fabric`` (:mod:`btlcore_sim.pytest_plugin`) is a :class:`Lab`,
seeded per test::

    def test_ping(btl_fabric):
        a, b = btl_fabric.nodes(2)                  # opened, connected, handshakes done
        got = []
        b.on(7, lambda peer, tag, data: got.append(data))
        a.send(a.connect(b.address), 7, b"ping")
        btl_fabric.run_until(lambda: got)           # virtual seconds, not wall seconds

A :class:`Lab` is a :class:`~btlcore_sim.fabric.Fabric`: ``btlcore.open("sim",
fabric=lab)`` opens a node on it as on any fabric; the helpers drive the transports opened
with :meth:`Lab.open` or :meth:`Lab.nodes` (or those passed to them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from string import ascii_lowercase
from typing import Any

from btlcore.protocol.peers import PeerState
from btlcore.run import open as open_transport
from btlcore.run import run_until
from btlcore.transport import Transport

from .fabric import Fabric


class Lab(Fabric):
    """A :class:`Fabric` that remembers the transports opened through it and drives them."""

    __slots__ = ("transports",)
    transports: list[Transport]

    def __init__(self, seed: int = 0, **fabric_options: Any) -> None:
        Fabric.__init__(self, seed, **fabric_options)
        self.transports = []

    def open(self, name: str | None = None, **kw: Any) -> Transport:
        """``btlcore.open("sim", fabric=self, name=name, **kw)`` (``config``, ``faults``,
        ``plugins`` and the sim options), remembered for the helpers and closed with the lab."""
        t = open_transport("sim", fabric=self, name=name, **kw)
        self.transports.append(t)
        return t

    def nodes(self, n: int, *, connect: bool = True, timeout: float = 10.0, **kw: Any) -> list[Transport]:
        """``n`` new nodes (named ``a``, ``b``, ... or ``n26``, ...), each connected to
        every other and their handshakes done (unless ``connect=False``), in virtual time."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"bad node count {n!r}: allowed is an integer >= 1")
        start = len(self.names)
        made = [self.open(ascii_lowercase[i] if i < 26 and ascii_lowercase[i] not in self.names
                          else f"n{i}", **kw) for i in range(start, start + n)]
        if connect and n > 1:
            for t in made:
                for other in made:
                    if other is not t:
                        t.connect(other.address)
            self.run_until(lambda: all(p.state is PeerState.ESTABLISHED for t in made for p in t.peers),
                           timeout=timeout, transports=made)
        return made

    def _driven(self, transports: Sequence[Transport] | None) -> list[Transport]:
        ts = list(self.transports if transports is None else transports)
        return [t for t in ts if not t.closed]

    def run_for(self, dt: float, transports: Sequence[Transport] | None = None) -> float:
        """Let ``dt`` seconds of virtual time pass, progressing the transports (default:
        those opened through the lab).  Returns the new time."""
        if isinstance(dt, bool) or not isinstance(dt, (int, float)) or not dt >= 0:
            raise ValueError(f"bad duration {dt!r}: allowed is a number of seconds >= 0")
        end = self.now + dt
        ts = self._driven(transports)
        if not ts:
            self.run(end)
            return self.now
        while True:
            for t in ts:
                t.progress()
            if self.now >= end:
                return self.now
            wake = end
            for t in ts:
                d = t.next_deadline()
                if d is not None and d < wake:
                    wake = d
            if wake > self.now:
                self.advance(wake)

    def run_until(self, predicate: Callable[[], Any], timeout: float = 10.0,
                  transports: Sequence[Transport] | None = None) -> float:
        """Progress the transports (default: those opened through the lab) until
        ``predicate()`` is true; ``TimeoutError`` after ``timeout`` virtual seconds.
        Returns the time it became true."""
        ts = self._driven(transports)
        if ts:
            run_until(ts, predicate, timeout)
            return self.now
        end = self.now + timeout
        while not predicate():
            if self.now >= end:
                raise TimeoutError(f"condition not met within {timeout:g} s")
            if not self.heap:
                self.now = end
                continue
            self.run(min(end, self.heap[0][0]))
        return self.now

    def close(self) -> None:
        """Close the transports opened through the lab (without flushing), then the fabric."""
        for t in self.transports:
            if not t.closed:
                t.close(flush=False)
        Fabric.close(self)
