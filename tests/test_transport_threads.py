"""The thread model (issue #11, item 12): a transport belongs to the first thread that drives
it; another thread's call raises RuntimeError naming both threads and changes nothing;
``Transport.wake()`` is the one call any thread may make, and it ends a blocked
``progress(timeout)`` promptly on udp."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import btlcore
from btlcore_sim import Fabric


def in_thread(fn: Callable[[], Any], name: str = "intruder") -> BaseException | None:
    """Run ``fn`` in a new thread; the exception it raised (None if none)."""
    caught: list[BaseException | None] = [None]

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            caught[0] = exc

    t = threading.Thread(target=run, name=name)
    t.start()
    t.join(10)
    assert not t.is_alive()
    return caught[0]


def exchange(a: btlcore.Transport, b: btlcore.Transport, peer: btlcore.Peer, got: list[bytes],
             data: bytes) -> None:
    done: list[BaseException | None] = []
    a.send(peer, 1, data, done.append)
    btlcore.run_until([a, b], lambda: bool(done) and data in got, timeout=5)
    assert done == [None]


def test_send_from_another_thread_fails_clearly_and_changes_nothing() -> None:
    fab = Fabric(seed=1)
    a, b = btlcore.open("sim", fabric=fab), btlcore.open("sim", fabric=fab)
    got: list[bytes] = []
    b.on(1, lambda p, t, d: got.append(bytes(d)))
    peer = a.connect(b.address)  # the main thread drives a: it owns it
    exchange(a, b, peer, got, b"first")
    sent = peer.counters.num_msgs_sent
    exc = in_thread(lambda: a.send(peer, 1, b"from another thread"))
    assert isinstance(exc, RuntimeError)
    text = str(exc)
    assert "'intruder'" in text and f"'{threading.current_thread().name}'" in text
    assert peer.counters.num_msgs_sent == sent and not a.engine.has_outstanding()
    exchange(a, b, peer, got, b"second")
    assert got == [b"first", b"second"]
    a.close()
    b.close()


@pytest.mark.parametrize("call", ["progress", "recv", "connect", "flush", "close", "on", "expose",
                                  "run_until", "put"])
def test_every_driving_call_is_refused_from_a_foreign_thread(call: str) -> None:
    fab = Fabric(seed=1)
    a, b = btlcore.open("sim", fabric=fab), btlcore.open("sim", fabric=fab)
    got: list[bytes] = []
    b.on(1, lambda p, t, d: got.append(bytes(d)))
    peer = a.connect(b.address)
    b.progress()  # the main thread owns both
    calls: dict[str, Callable[[], Any]] = {
        "progress": lambda: a.progress(), "recv": lambda: a.recv(0), "connect": lambda: a.connect(b.address),
        "flush": lambda: a.flush(0), "close": lambda: a.close(), "on": lambda: a.on(2, print),
        "expose": lambda: a.expose(bytearray(4)), "run_until": lambda: btlcore.run_until([a], lambda: True),
        "put": lambda: a.put(peer, 0, 0, b"x"),
    }
    exc = in_thread(calls[call])
    assert isinstance(exc, RuntimeError) and "may not use it" in str(exc)
    assert not a.closed and 2 not in a._handlers and not a.engine.regions
    exchange(a, b, peer, got, b"still mine")
    a.close()
    b.close()


def test_set_up_in_one_thread_driven_in_another() -> None:
    # registrations do not claim the transport: open and register here, serve there
    fab = Fabric(seed=1)
    a, b = btlcore.open("sim", fabric=fab), btlcore.open("sim", fabric=fab)
    got: list[bytes] = []
    b.on(1, lambda p, t, d: got.append(bytes(d)))
    assert in_thread(lambda: exchange(a, b, a.connect(b.address), got, b"worker")) is None
    # the worker has ended: the next thread to drive them takes them over
    exchange(a, b, a.connect(b.address), got, b"main again")
    assert got == [b"worker", b"main again"]
    a.close()
    b.close()


def test_wake_from_another_thread_on_sim_is_harmless() -> None:
    fab = Fabric(seed=1)
    a = btlcore.open("sim", fabric=fab)
    assert in_thread(a.wake) is None
    a.progress(0.01)
    a.close()
    a.wake()  # after close: nothing to wake, no error


@pytest.mark.parametrize("busy_poll", [False, True])
def test_wake_returns_a_blocked_progress_on_udp(busy_poll: bool) -> None:
    t = btlcore.open("udp", bind="127.0.0.1:0", busy_poll=busy_poll)
    try:
        t.progress()  # this thread owns it
        woke = threading.Event()

        def waker() -> None:
            time.sleep(0.3)
            t.wake()
            woke.set()

        thread = threading.Thread(target=waker, name="waker")
        start = time.monotonic()
        thread.start()
        t.progress(10.0)
        elapsed = time.monotonic() - start
        thread.join(5)
        assert woke.is_set() and 0.25 <= elapsed < 3.0, elapsed
        # the wake was consumed: the next wait waits again
        start = time.monotonic()
        t.progress(0.2)
        assert time.monotonic() - start >= 0.15
        # a short wait (select path) is woken too, and a wake before the wait ends it at once
        t.wake()
        start = time.monotonic()
        t.progress(0.03)
        assert time.monotonic() - start < 0.025
    finally:
        t.close()


def test_wake_while_serving_on_udp_then_traffic_still_flows() -> None:
    a = btlcore.open("udp", bind="127.0.0.1:0")
    b = btlcore.open("udp", bind="127.0.0.1:0")
    got: list[bytes] = []
    b.on(1, lambda p, t, d: got.append(bytes(d)))
    try:
        peer = a.connect(b.address)
        exchange(a, b, peer, got, b"before")
        for _ in range(3):  # woken repeatedly: each blocked wait of b returns at once
            timer = threading.Timer(0.1, b.wake)
            timer.start()
            start = time.monotonic()
            b.progress(10.0)
            assert time.monotonic() - start < 3.0
            timer.join()
        exchange(a, b, peer, got, b"after")
        assert got == [b"before", b"after"]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("woken", [0, 2])
def test_wake_returns_run_until_over_several_udp_transports(woken: int) -> None:
    """run_until over several udp transports waits in one select(): a Transport.wake() from
    another thread ends it promptly (its wake descriptor is watched), and is consumed."""
    ts = [btlcore.open("udp", bind="127.0.0.1:0") for _ in range(3)]
    try:
        flag = threading.Event()

        def waker() -> None:
            time.sleep(0.3)
            flag.set()
            ts[woken].wake()

        thread = threading.Thread(target=waker, name="waker")
        start = time.monotonic()
        thread.start()
        assert btlcore.run_until(ts, flag.is_set, timeout=20.0)
        elapsed = time.monotonic() - start
        thread.join(5)
        assert elapsed < 5.0, elapsed  # (the next deadline was 20 s away: nothing else ends it)
        # consumed: the next run_until waits in select again instead of spinning
        passes = [0]
        pass_of = ts[0]._pass

        def counted() -> None:
            passes[0] += 1
            pass_of()
        ts[0]._pass = counted  # type: ignore[method-assign]
        with pytest.raises(TimeoutError):
            btlcore.run_until(ts, lambda: False, timeout=0.3)
        assert passes[0] < 50, passes[0]
    finally:
        for t in ts:
            t.close()


@pytest.mark.parametrize("timeout", [0.0, 0, 0.001])
def test_progress_fast_path_still_refuses_a_foreign_thread(timeout: float) -> None:
    # progress() is the compiled pass's (Progress.progress): its fast path (a float wait on
    # a device that waits first, or no wait) runs only for the owner thread
    t = btlcore.open("udp", host="127.0.0.1")
    try:
        assert t.progress == t._progress.progress  # (bound on the instance, as send)
        t.progress(timeout)  # the main thread owns it
        exc = in_thread(lambda: t.progress(timeout))
        assert isinstance(exc, RuntimeError) and "may not use it" in str(exc)
        assert t.progress(timeout) == 0  # still the owner's
    finally:
        t.close()
