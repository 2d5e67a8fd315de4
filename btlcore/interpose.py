"""Faults on one endpoint of any backend: an interposer on the device's send and receive
paths that applies a :class:`~btlcore.faults.Faults` plan (drop, duplicate, delay, reorder,
corrupt, partitions) to what the transport posts and to what it polls.

``btlcore.open(backend, faults=plan)`` wraps the opened device here, before the transport
binds its calls; without ``faults`` nothing is wrapped, so the per-datagram path of a
transport without faults is exactly what it was (the choice is made once, at open).

Paths: what is sent goes from :data:`~btlcore.faults.LOCAL` to its destination handle;
what is received from its source (where the device reports sources) to ``LOCAL``.  A rule's
``peer`` (btlcore addresses, as ``transport.address``) is turned into those handles and
sources with the device's own ``resolve`` and ``peer_sources``; a device that reports no
sources matches no ``peer`` criterion on what it receives.

Delayed datagrams are held here and let go when due: at the next post or poll, and at the
end of a ``wait``, whose deadline is brought forward to the next one (on the simulator the
delays are exact virtual time; on a real device, as exact as the loop's wake-ups).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence
from typing import Any

import attrs

from .device import Capabilities, DeviceOps
from .faults import LOCAL, Faults, Refs, Rule


class Interposer:
    """The wrapped send and receive calls of one device (see the module docstring)."""

    __slots__ = ("ops", "faults", "now", "_keys", "_later", "_serial", "_held", "_inbox")

    def __init__(self, ops: DeviceOps, faults: Faults) -> None:
        if not isinstance(faults, Faults):
            raise TypeError(f"faults must be a btlcore.faults.Faults, not {type(faults).__name__}")
        self.ops = ops
        self.faults = faults
        self.now = ops.clock()
        self._keys: dict[Refs, frozenset[Any]] = {}
        # delayed datagrams: (due, serial, direction, channel, dest or source, data)
        self._later: list[tuple[float, int, str, int, Any, bytes]] = []
        self._serial = 0
        # reordered datagrams: [datagrams still to pass, direction, channel, path key, data]
        self._held: list[list[Any]] = []
        self._inbox: list[tuple[bytes, Any]] = []  # received datagrams due for the next poll

    def wrap(self) -> DeviceOps:
        """The device's calls with this interposer's in place of the datagram paths."""
        return attrs.evolve(self.ops, capabilities=self.capabilities,
                            post_send=self.post_send, post_send_many=None,
                            poll_recv=self.poll_recv,
                            poll_recv_from=None if self.ops.poll_recv_from is None else self.poll_recv_from,
                            wait=self.wait, next_due=self.next_due)

    def capabilities(self) -> Capabilities:
        """The device's, but never ``integrity``: a plan may corrupt datagrams (rules can be
        added while the transport runs), and the transport must then see it by its CRC."""
        return attrs.evolve(self.ops.capabilities(), integrity=False)

    def keys_of(self, refs: Refs) -> Collection[Any]:
        """The destination handles and sources of the peers ``refs`` names."""
        keys = self._keys.get(refs)
        if keys is None:
            found: set[Any] = set()
            for ref in refs:
                if not isinstance(ref, bytes):
                    raise ValueError(f"bad peer {ref!r} in a fault rule: on an endpoint, name peers by "
                                     "their btlcore address (bytes, as transport.address)")
                dest = self.ops.resolve(ref)
                found.add(dest)
                if self.ops.peer_sources is not None:
                    found.update(self.ops.peer_sources(dest) or ())
            keys = self._keys[refs] = frozenset(found)
        return keys

    # -- send ---------------------------------------------------------------------------

    def post_send(self, channel: int, dest: Any, data: Any) -> bool:
        now = self.now()
        if self._later:
            self._release(now)
        rule = self.faults.judge(self.faults.rules, now, LOCAL, dest, data, self.keys_of)
        taken = self._send(rule, now, channel, dest, data)
        if self._held and taken:
            self._passed("send", dest, channel)
        return taken

    def _send(self, rule: Rule | None, now: float, channel: int, dest: Any, data: Any) -> bool:
        post = self.ops.post_send
        if rule is None:
            return post(channel, dest, data)  # type: ignore[arg-type]
        action = rule.action
        if action == "drop":
            return True
        if action == "duplicate":
            taken = post(channel, dest, data)  # type: ignore[arg-type]
            for _ in range(rule.arg if taken else 0):
                post(channel, dest, data)  # type: ignore[arg-type]
            return taken
        if action == "corrupt":
            return post(channel, dest, self.faults.flip(rule, data)[0])  # type: ignore[arg-type]
        if action == "delay":
            self._later_push(now + rule.arg, "send", channel, dest, bytes(data))
        else:  # reorder
            self._held.append([rule.arg, "send", channel, dest, bytes(data)])
        return True

    # -- receive ------------------------------------------------------------------------

    def poll_recv(self, budget: int) -> Sequence[Any]:
        return self._polled(budget, False)[0]

    def poll_recv_from(self, budget: int) -> tuple[Sequence[Any], Sequence[Any]]:
        return self._polled(budget, True)

    def _polled(self, budget: int, sources: bool) -> tuple[Sequence[Any], Sequence[Any]]:
        now = self.now()
        if self._later:
            self._release(now)
        if sources:
            datagrams, froms = self.ops.poll_recv_from(budget)  # type: ignore[misc]
        else:
            datagrams, froms = self.ops.poll_recv(budget), None
        if not self.faults.rules and not self._held and not self._inbox:
            return datagrams, froms or ()
        out: list[tuple[Any, Any]] = self._inbox
        self._inbox = []
        for i, data in enumerate(datagrams):
            source = None if froms is None else froms[i]
            self._received(now, data, source, out)
        return [d for d, _ in out], [s for _, s in out]

    def _received(self, now: float, data: Any, source: Any, out: list[tuple[Any, Any]]) -> None:
        """What the plan makes of one received datagram, appended to ``out``."""
        rule = self.faults.judge(self.faults.rules, now, source, LOCAL, data, self.keys_of)
        action = None if rule is None else rule.action
        if action is None:
            out.append((data, source))
        elif action == "duplicate":
            out.extend([(bytes(data), source)] * (1 + rule.arg))  # type: ignore[union-attr]
        elif action == "corrupt":
            out.append((self.faults.flip(rule, data)[0], source))  # type: ignore[arg-type]
        elif action == "delay":
            self._later_push(now + rule.arg, "recv", 0, source, bytes(data))  # type: ignore[union-attr]
        elif action == "reorder":
            self._held.append([rule.arg, "recv", 0, source, bytes(data)])  # type: ignore[union-attr]
            return
        if self._held and action != "drop":
            released = self._passed("recv", source, 0)
            out.extend((d, source) for d in released)

    # -- what waits ---------------------------------------------------------------------

    def _later_push(self, due: float, direction: str, channel: int, key: Any, data: bytes) -> None:
        self._serial += 1
        heapq.heappush(self._later, (due, self._serial, direction, channel, key, data))

    def _release(self, now: float) -> None:
        """Let every delayed datagram that is due go (sends posted, receipts queued)."""
        later = self._later
        while later and later[0][0] <= now:
            _due, _n, direction, channel, key, data = heapq.heappop(later)
            if direction == "send":
                self.ops.post_send(channel, key, data)  # type: ignore[arg-type]  # (refused: lost)
            else:
                self._inbox.append((data, key))

    def _passed(self, direction: str, key: Any, channel: int) -> list[bytes]:
        """One more datagram went ``direction`` by ``key``: release the reordered ones that
        waited for it (sends posted now; receipts returned)."""
        out = []
        for entry in list(self._held):
            if entry[1] != direction or entry[3] != key:
                continue
            entry[0] -= 1
            if entry[0] <= 0:
                self._held.remove(entry)
                if direction == "send":
                    self.ops.post_send(entry[2], key, entry[4])
                else:
                    out.append(entry[4])
        return out

    def next_due(self) -> float | None:
        """When the next delayed datagram is due (now: received ones wait for a poll), so
        that every driver (``run_until`` over several transports, ``btlcore.aio``) wakes
        for it, not only this device's own wait."""
        if self._inbox:
            return self.now()
        return self._later[0][0] if self._later else None

    def wait(self, deadline: float | None) -> None:
        """The device's wait, over by the time the next delayed datagram is due."""
        if self._later:
            due = self._later[0][0]
            if due <= self.now() or self._inbox:
                self._release(self.now())
                return
            if deadline is None or due < deadline:
                deadline = due
        elif self._inbox:
            return
        self.ops.wait(deadline)
        if self._later:
            self._release(self.now())


def interpose(ops: DeviceOps, faults: Faults) -> DeviceOps:
    """``ops`` with ``faults`` applied on its send and receive paths."""
    return Interposer(ops, faults).wrap()
