"""A device bound to a loopback address reports integrity (its frames are memory copies on
this host, as kernel TCP trusts them), so btlcore leaves out its CRC32C there; everywhere
else, with ``crc=on``, and under a faults plan (which may corrupt), the CRC stays."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import btlcore
from btlcore.faults import Faults
from btlcore.testing.hosts import has_ipv6_loopback
from btlcore_udp._sockets import is_loopback

PAYLOAD = bytes(range(256)) * 300


@pytest.fixture
def made() -> Iterator[list[btlcore.Transport]]:
    opened: list[btlcore.Transport] = []
    yield opened
    for t in opened:
        t.close(flush=False)


def _open(made: list[btlcore.Transport], bind: str, **kw: object) -> btlcore.Transport:
    t = btlcore.open("udp", bind=bind, **kw)  # type: ignore[arg-type]
    made.append(t)
    return t


def _exchange(a: btlcore.Transport, b: btlcore.Transport) -> None:
    got: list[bytes] = []
    b.on(7, lambda peer, tag, data: got.append(bytes(data)))
    a.send(a.connect(b.address), 7, PAYLOAD)
    btlcore.run_until([a, b], lambda: bool(got), timeout=30)
    assert got == [PAYLOAD]


@pytest.mark.parametrize(("host", "loop"), [
    ("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("0.0.0.0", False), ("::", False), ("10.1.2.3", False), ("fe80::1%lo", False)])
def test_loopback_addresses_are_told_apart(host: str, loop: bool) -> None:
    assert is_loopback(host) is loop


def test_a_loopback_device_promises_integrity_and_sends_no_crc(made: list[btlcore.Transport]) -> None:
    a, b = _open(made, "127.0.0.1:0"), _open(made, "127.0.0.1:0")
    assert a.capabilities.integrity and b.capabilities.integrity
    assert not a.engine.crc and not b.engine.crc
    _exchange(a, b)


@pytest.mark.skipif(not has_ipv6_loopback(), reason="::1 cannot be bound here")
def test_the_ipv6_loopback_too(made: list[btlcore.Transport]) -> None:
    a, b = _open(made, "[::1]:0"), _open(made, "[::1]:0")
    assert a.engine.crc is False and b.engine.crc is False
    _exchange(a, b)


def test_a_wildcard_device_keeps_the_crc(made: list[btlcore.Transport]) -> None:
    """A wildcard hears every interface: its frames may have crossed a wire."""
    a = _open(made, "0.0.0.0:0", advertise="127.0.0.1")
    assert a.capabilities.integrity is False and a.engine.crc is True


def test_crc_on_keeps_it_and_both_ends_still_talk(made: list[btlcore.Transport]) -> None:
    a = _open(made, "127.0.0.1:0", config=btlcore.Config(crc="on"))
    b = _open(made, "127.0.0.1:0")
    assert a.engine.crc is True and b.engine.crc is False
    _exchange(a, b)
    _exchange(b, a)
    assert a.stats()["num_crc_errors"] == 0 and b.stats()["num_crc_errors"] == 0


def test_a_faults_plan_brings_the_crc_back_so_its_corruption_is_caught(
        made: list[btlcore.Transport]) -> None:
    plan = Faults(seed=1)
    bad = plan.corrupt(direction="recv", type="DATA", nth=3)
    a = _open(made, "127.0.0.1:0", config=btlcore.Config(mtu=1500))
    b = _open(made, "127.0.0.1:0", config=btlcore.Config(mtu=1500), faults=plan)
    assert b.capabilities.integrity is False and b.engine.crc is True
    _exchange(a, b)
    assert bad.matched == 1 and b.stats()["num_crc_errors"] == 1
