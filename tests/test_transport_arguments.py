"""Every public call of a Transport refuses bad arguments at the call (issue #11, item 8):
``TypeError`` or ``ValueError`` naming the argument and what is allowed, nothing queued, and
the transport works afterwards (each test ends with a real send and receive)."""

from __future__ import annotations

import array
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import btlcore
from btlcore import Config, Transport
from btlcore_sim import Fabric


class Ends:
    def __init__(self) -> None:
        self.fab = Fabric(seed=3)
        self.a = btlcore.open("sim", fabric=self.fab)
        self.b = btlcore.open("sim", fabric=self.fab)
        self.got: list[bytes] = []
        self.b.on(9, lambda p, t, d: self.got.append(bytes(d)))
        self.peer = self.a.connect(self.b.address)

    def works(self) -> None:
        """A real message goes through, and nothing a refused call queued comes with it."""
        done: list[BaseException | None] = []
        before = len(self.got)
        self.a.send(self.peer, 9, b"still works", done.append)
        btlcore.run_until([self.a, self.b], lambda: bool(done) and len(self.got) > before, timeout=5)
        assert done == [None] and self.got[before:] == [b"still works"]
        assert self.a.engine.has_outstanding() is False

    def close(self) -> None:
        self.a.close()
        self.b.close()
        self.fab.close()


@pytest.fixture
def ends() -> Iterator[Ends]:
    e = Ends()
    yield e
    e.close()


def refused(exc: type[Exception], name: str, call: Callable[[], Any]) -> str:
    with pytest.raises(exc) as info:
        call()
    text = str(info.value)
    assert name in text, text
    return text


# -- send ------------------------------------------------------------------------------

@pytest.mark.parametrize("tag, exc", [
    (1.0, TypeError), (True, TypeError), ("7", TypeError), (None, TypeError),
    (-1, ValueError), (65536, ValueError),
])
def test_send_tag(ends: Ends, tag: Any, exc: type[Exception]) -> None:
    text = refused(exc, "tag", lambda: ends.a.send(ends.peer, tag, b"x"))
    assert "65535" in text
    ends.works()


def test_send_float_tag_does_not_wedge_progress(ends: Ends) -> None:
    # the defect the issue measured: accepted, then a later progress() failed
    with pytest.raises(TypeError):
        ends.a.send(ends.peer, 1.0, b"x")
    for _ in range(10):
        ends.a.progress()
    ends.works()


@pytest.mark.parametrize("data, exc", [
    ("text", TypeError), (12, TypeError), (None, TypeError), ([1, 2], TypeError),
    (memoryview(bytes(8))[::2], ValueError),
])
def test_send_data(ends: Ends, data: Any, exc: type[Exception]) -> None:
    text = refused(exc, "data", lambda: ends.a.send(ends.peer, 9, data))
    if exc is TypeError:
        assert "bytes-like" in text
    ends.works()


def test_send_accepts_every_bytes_like(ends: Ends) -> None:
    for data in (bytearray(b"ab"), memoryview(b"cd"), array.array("B", b"ef")):
        ends.a.send(ends.peer, 9, data)
    btlcore.run_until([ends.a, ends.b], lambda: len(ends.got) == 3, timeout=5)
    assert ends.got == [b"ab", b"cd", b"ef"]


def test_send_callback(ends: Ends) -> None:
    refused(TypeError, "callback", lambda: ends.a.send(ends.peer, 9, b"x", callback=5))  # type: ignore[arg-type]
    ends.works()


def test_send_peer_of_wrong_type(ends: Ends) -> None:
    refused(TypeError, "peer", lambda: ends.a.send(ends.b.address, 9, b"x"))  # type: ignore[arg-type]
    ends.works()


def test_send_peer_of_another_transport(ends: Ends) -> None:
    c = btlcore.open("sim", fabric=ends.fab)
    try:
        foreign = c.connect(ends.b.address)
        text = refused(ValueError, "peer", lambda: ends.a.send(foreign, 9, b"x"))
        assert "not a peer of this transport" in text
    finally:
        c.close(flush=False)
    ends.works()


# -- put, expose, unexpose ---------------------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, name", [
    ({"key": 1.0}, TypeError, "key"), ({"key": -1}, ValueError, "key"), ({"key": 1 << 32}, ValueError, "key"),
    ({"offset": "0"}, TypeError, "offset"), ({"offset": -1}, ValueError, "offset"),
    ({"offset": 1 << 64}, ValueError, "offset"), ({"offset": False}, TypeError, "offset"),
    ({"data": "text"}, TypeError, "data"), ({"callback": "no"}, TypeError, "callback"),
    ({"peer": "no"}, TypeError, "peer"),
])
def test_put(ends: Ends, kwargs: dict[str, Any], exc: type[Exception], name: str) -> None:
    region = bytearray(16)
    key = ends.b.expose(region)
    args: dict[str, Any] = {"peer": ends.peer, "key": key, "offset": 0, "data": b"abc", "callback": None}
    args.update(kwargs)
    refused(exc, name, lambda: ends.a.put(**args))
    done: list[BaseException | None] = []
    ends.a.put(ends.peer, key, 2, b"abc", done.append)
    btlcore.run_until([ends.a, ends.b], lambda: bool(done), timeout=5)
    assert done == [None] and region[2:5] == b"abc"
    ends.works()


@pytest.mark.parametrize("buffer, exc", [(b"read-only", ValueError), ("text", TypeError), (7, TypeError)])
def test_expose(ends: Ends, buffer: Any, exc: type[Exception]) -> None:
    refused(exc, "buffer", lambda: ends.b.expose(buffer))
    assert ends.b.engine.regions == {}
    ends.works()


@pytest.mark.parametrize("key, exc", [("1", TypeError), (-1, ValueError), (True, TypeError)])
def test_unexpose(ends: Ends, key: Any, exc: type[Exception]) -> None:
    kept = ends.b.expose(bytearray(4))
    refused(exc, "key", lambda: ends.b.unexpose(key))
    assert kept in ends.b.engine.regions
    ends.works()


# -- handlers -----------------------------------------------------------------------------

@pytest.mark.parametrize("tag, handler, exc, name", [
    (1.5, print, TypeError, "tag"), (70000, print, ValueError, "tag"), (9, "print", TypeError, "handler"),
])
def test_on(ends: Ends, tag: Any, handler: Any, exc: type[Exception], name: str) -> None:
    refused(exc, name, lambda: ends.b.on(tag, handler))
    ends.works()  # the handler of tag 9 is still the one registered before


def test_on_put_and_on_peer(ends: Ends) -> None:
    refused(TypeError, "handler", lambda: ends.b.on_put(3))  # type: ignore[arg-type]
    refused(TypeError, "on_error", lambda: ends.b.on_put(None, on_error="x"))  # type: ignore[arg-type]
    refused(TypeError, "handler", lambda: ends.a.on_peer(object()))  # type: ignore[arg-type]
    refused(TypeError, "keep", lambda: ends.a.add_send_filter(None))  # type: ignore[arg-type]
    ends.works()


# -- connect, progress, recv, flush, close, run_until, peer_stats -----------------------

# text is an address too now (address_text, #13), but "00ff" is no address of the backend's
@pytest.mark.parametrize("address, exc", [("00ff", ValueError), ("", ValueError), (5, TypeError),
                                          (b"", ValueError)])
def test_connect(ends: Ends, address: Any, exc: type[Exception]) -> None:
    n = len(ends.a.peers)
    refused(exc, "address", lambda: ends.a.connect(address))
    assert len(ends.a.peers) == n
    ends.works()


@pytest.mark.parametrize("timeout, exc", [
    ("1", TypeError), (None, TypeError), (-1.0, ValueError), (float("nan"), ValueError),
    (float("inf"), ValueError), (True, TypeError),
])
def test_progress_timeout(ends: Ends, timeout: Any, exc: type[Exception]) -> None:
    refused(exc, "timeout", lambda: ends.a.progress(timeout))
    ends.works()


@pytest.mark.parametrize("timeout, exc", [("1", TypeError), (-0.5, ValueError)])
def test_recv_and_flush_timeout(ends: Ends, timeout: Any, exc: type[Exception]) -> None:
    refused(exc, "timeout", lambda: ends.b.recv(timeout))
    refused(exc, "timeout", lambda: ends.a.flush(timeout))
    ends.works()


def test_close_flush_argument(ends: Ends) -> None:
    refused(TypeError, "flush", lambda: ends.a.close(flush="yes"))  # type: ignore[arg-type]
    assert not ends.a.closed
    ends.works()


def test_peer_stats(ends: Ends) -> None:
    refused(TypeError, "peer", lambda: ends.a.peer_stats("x"))  # type: ignore[arg-type]
    assert ends.a.peer_stats(ends.peer)["num_msgs_sent"] >= 0
    ends.works()


@pytest.mark.parametrize("args, exc, name", [
    ((None, lambda: True), TypeError, "transports"),
    (("ab", lambda: True), TypeError, "transports"),
    (((), lambda: True), ValueError, "transport"),
    ("nopredicate", TypeError, "predicate"),
    ("badtimeout", TypeError, "timeout"),
    ("negtimeout", ValueError, "timeout"),
])
def test_run_until(ends: Ends, args: Any, exc: type[Exception], name: str) -> None:
    pair: list[Transport] = [ends.a, ends.b]
    call: Callable[[], Any]
    if args == "nopredicate":
        call = lambda: btlcore.run_until(pair, True)  # type: ignore[arg-type]  # noqa: E731
    elif args == "badtimeout":
        call = lambda: btlcore.run_until(pair, lambda: True, timeout="5")  # type: ignore[arg-type]  # noqa: E731
    elif args == "negtimeout":
        call = lambda: btlcore.run_until(pair, lambda: True, timeout=-1)  # noqa: E731
    else:
        call = lambda: btlcore.run_until(*args)  # noqa: E731
    refused(exc, name, call)
    ends.works()


def test_run_until_single_transport_not_in_a_list(ends: Ends) -> None:
    refused(TypeError, "transports", lambda: btlcore.run_until(ends.a, lambda: True))  # type: ignore[arg-type]
    ends.works()


# -- btlcore.open -------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, name", [
    ({"backend": 3}, "backend"), ({"config": {"window": 4}}, "config"),
    ({"seed": "1"}, "seed"), ({"seed": 1.5}, "seed"), ({"plugins": "pcap"}, "plugins"),
])
def test_open(ends: Ends, kwargs: dict[str, Any], name: str) -> None:
    args: dict[str, Any] = {"backend": "sim", "fabric": ends.fab}
    args.update(kwargs)
    refused(TypeError, name, lambda: btlcore.open(**args))
    ends.works()


def test_open_still_takes_good_arguments(ends: Ends) -> None:
    t = btlcore.open("sim", fabric=ends.fab, config=Config(window=64), seed=5, plugins=[])
    t.close()
    ends.works()
