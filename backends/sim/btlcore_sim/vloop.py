"""An asyncio event loop on a fabric's virtual clock: a ``btlcore.aio`` application under
test runs on simulated time, 30 seconds of protocol in milliseconds, the same every run.

::

    from btlcore_sim import Fabric
    from btlcore_sim.vloop import run

    async def main():
        async with btlcore.aio.open("sim", fabric=fabric, name="a") as a, \\
                   btlcore.aio.open("sim", fabric=fabric, name="b") as b:
            ...
            await asyncio.sleep(30)        # 30 virtual seconds: no wall time to speak of

    run(main(), Fabric(seed=1))

How: :class:`VirtualLoop` is asyncio's selector loop whose ``time()`` is the fabric's clock.
Where a real loop would block in its selector until the next timer, this one moves the
fabric's clock instead (``Fabric.advance``: up to that timer, or to the next frame landing
before it); real descriptors (the loop's own wake-up pipe) are polled without waiting.  The
transports of ``btlcore.aio`` see ``loop.btl_clock`` (the fabric's clock, theirs) and drive
themselves from the loop's timers, and ``loop.btl_watch`` runs a transport's pass when frames
land on its NIC, as ``add_reader`` does for a socket.  Nothing depends on the wall clock, so a
seeded run is the same every time.  A loop with no timer and nothing in flight can never
wake: it raises ``RuntimeError`` rather than hang.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .fabric import Fabric
from .nic import SimNIC

T = TypeVar("T")


class _VirtualSelector(selectors.BaseSelector):
    """A real selector for real descriptors, never waiting: the wait is virtual time."""

    __slots__ = ("real", "loop")

    def __init__(self) -> None:
        self.real = selectors.DefaultSelector()
        self.loop: VirtualLoop | None = None

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self.real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.real.modify(fileobj, events, data)

    def get_map(self) -> Any:
        return self.real.get_map()

    def close(self) -> None:
        self.real.close()

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = self.real.select(0)
        loop = self.loop
        if loop is None:  # (closing)
            return events
        if events or (timeout is not None and timeout <= 0) or loop._frames_landed():
            return events
        fabric = loop.fabric
        if timeout is None and not fabric.heap and not fabric.landed:
            raise RuntimeError("virtual-time loop: no timer is scheduled and no frame is in flight, "
                               "so what the loop waits for can never happen")
        fabric.advance(None if timeout is None else fabric.now + timeout)
        loop._frames_landed()
        return events


class VirtualLoop(asyncio.SelectorEventLoop):
    """asyncio's loop on ``fabric``'s virtual clock (see the module docstring)."""

    def __init__(self, fabric: Fabric) -> None:
        self._watched: dict[SimNIC, Callable[[], None]] = {}
        selector = _VirtualSelector()
        super().__init__(selector)
        if not isinstance(fabric, Fabric):
            self.close()
            raise TypeError(f"fabric must be a btlcore_sim.Fabric, not {type(fabric).__name__}")
        self.fabric = fabric
        self.btl_clock: Callable[[], float] = fabric.clock
        """The clock this loop runs on (``btlcore.aio`` drives a transport on it directly)."""
        selector.loop = self
        self._clock_resolution = 1e-9

    def time(self) -> float:
        return self.fabric.now

    def btl_watch(self, device: Any, callback: Callable[[], None]) -> None:
        """Call ``callback`` (soon) whenever frames wait in ``device``'s receive queues."""
        nic = getattr(device, "device", device)
        if not isinstance(nic, SimNIC) or nic.fabric is not self.fabric:
            raise ValueError(f"{device!r} is not a NIC of this loop's fabric")
        self._watched[nic] = callback

    def btl_unwatch(self, device: Any) -> None:
        self._watched.pop(getattr(device, "device", device), None)

    def _frames_landed(self) -> bool:
        """Schedule the pass of every watched NIC with frames waiting; True if any."""
        found = False
        for nic, callback in self._watched.items():
            if nic.rx[0] or nic.rx[1]:
                self.call_soon(callback)
                found = True
        return found

    def close(self) -> None:
        super().close()
        self._watched.clear()


def run(main: Coroutine[Any, Any, T], fabric: Fabric) -> T:
    """``asyncio.run(main)`` on ``fabric``'s virtual clock."""
    with asyncio.Runner(loop_factory=lambda: VirtualLoop(fabric)) as runner:
        return runner.run(main)
