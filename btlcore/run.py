"""Opening a transport by backend name, and driving several to a condition.

:func:`open` picks the backend once (registry, entry points) and wraps its device in a
:class:`~btlcore.transport.Transport`; :func:`run_until` is the loop a program or a test
uses when it has several transports and nothing else to do in between: progress each,
check the predicate, then wait for the earliest deadline or input on any of them.
"""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Callable, Iterable, Sequence
from threading import get_ident
from typing import Any

from . import checks
from .config import Config
from .errors import ConfigError, TransportClosed
from .faults import Faults
from .interpose import interpose
from .registry import open_device
from .transport import Transport


def open(backend: str | None = None, *, config: Config | None = None, seed: int | None = None,
         plugins: Sequence[Any] = (), faults: Faults | None = None,
         trace: str | os.PathLike[str] | None = None, **options: Any) -> Transport:
    """Open a transport on ``backend`` (``"sim"``, ``"udp"``, ``"verbs"`` or a third
    party's; default ``$BTL_BACKEND`` or ``"sim"``).  ``options`` go to the backend;
    ``config`` defaults to :meth:`Config.build` (defaults plus ``BTL_*`` variables);
    ``faults`` (a :class:`btlcore.faults.Faults`) hurts this endpoint's datagrams on purpose
    (:mod:`btlcore.interpose`; without it the device is not wrapped at all); ``trace``: a file
    to write the transport's event trace to (:mod:`btlcore.trace`; default ``$BTL_TRACE``,
    else none)."""
    checks.open_arguments(backend, config, seed, plugins)
    if faults is not None and not isinstance(faults, Faults):
        raise TypeError(f"faults must be a btlcore.faults.Faults or None, not {type(faults).__name__}")
    name = backend or os.environ.get("BTL_BACKEND", "sim")
    if seed is None and os.environ.get("BTL_SEED"):
        try:
            seed = int(os.environ["BTL_SEED"], 0)
        except ValueError:
            raise ConfigError(f"bad value {os.environ['BTL_SEED']!r} for BTL_SEED: allowed is an integer") from None
    if seed is not None and "seed" not in options:
        options["seed"] = seed
    device = open_device(name, options)
    if faults is not None:
        device = interpose(device, faults)
    try:
        return Transport(device, config or Config.build(), seed=seed, plugins=plugins, trace=trace)
    except BaseException:
        device.close()
        raise


def run_until(transports: Iterable[Transport], predicate: Callable[[], bool],
              timeout: float = 10.0) -> bool:
    """Progress ``transports`` (one thread) until ``predicate()`` is true.  ``timeout`` is
    in the transports' clock: virtual seconds on the simulator.  Raises TimeoutError."""
    if isinstance(transports, Transport) or not hasattr(transports, "__iter__"):
        raise TypeError(f"transports must be an iterable of Transport (a list), "
                        f"not {type(transports).__name__}")
    ts = list(transports)
    if not ts:
        raise ValueError("run_until needs at least one transport")
    for t in ts:
        if not isinstance(t, Transport):
            raise TypeError(f"transports must hold Transport objects, not {type(t).__name__} {t!r}")
    checks.function(predicate, "predicate", optional=False)
    timeout = checks.seconds(timeout)  # type: ignore[assignment]
    for t in ts:
        if get_ident() != t._owner:
            t._claim()
    now = ts[0].now
    deadline = now() + timeout
    virtual = all(t.capabilities.virtual_time for t in ts)
    selector: selectors.BaseSelector | None | bool = None  # (False: none to be had)
    try:
        while True:
            for t in ts:
                if t.closed:
                    raise TransportClosed("run_until: a transport is closed")
                t._pass()
            if predicate():
                return True
            t_now = now()
            if t_now >= deadline:
                raise TimeoutError(f"condition not met within {timeout:g} s")
            wake = deadline
            for t in ts:
                d = t.next_deadline()
                if d is not None and d < wake:
                    wake = d
            if wake <= t_now:
                continue
            if virtual or len(ts) == 1:
                ts[0].device.wait(wake)
                continue
            if selector is None:
                made = _selector(ts)
                selector = False if made is None else made
            if isinstance(selector, selectors.BaseSelector):
                for key, _events in selector.select(max(0.0, wake - t_now)):
                    if key.data is not None:  # a Transport.wake() from another thread:
                        key.data.device.wait(t_now)  # (a wait clears it; its deadline passed)
            else:
                time.sleep(min(max(0.0, wake - t_now), 0.0005))
    finally:
        if isinstance(selector, selectors.BaseSelector):
            selector.close()


def _selector(ts: list[Transport]) -> selectors.BaseSelector | None:
    """One selector over every transport's input descriptors and wake descriptor (its data:
    the transport to clear it on), or None if there are none (run_until then polls)."""
    selector = selectors.DefaultSelector()
    for t in ts:
        for fd in t.device.fds():
            selector.register(fd, selectors.EVENT_READ)
        wake_fd = getattr(t.device, "wake_fd", None)
        woken = wake_fd() if wake_fd is not None else None
        if woken is not None:
            selector.register(woken, selectors.EVENT_READ, t)
    if not selector.get_map():
        selector.close()
        return None
    return selector
