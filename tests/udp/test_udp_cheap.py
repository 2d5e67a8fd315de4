"""Cheap udp transports (issue #11): one port names a device (its channels on PORT and
PORT + 1, ephemeral ones too), and 1,000 of them in one process are ordinary.

The memory bound is generous (the figure itself is in ``btl bench``, btl.udp_transport_mem):
before the receive arenas were mmap-ed, a transport held 20 MB at open, so 1,000 of them
20 GB; now about 0.1 MB.  The test stops opening as soon as the bound is passed, so that the
old code fails after about 50 transports instead of eating the machine.
"""

from __future__ import annotations

import gc
import os

import pytest

import btlcore
from btlcore_udp import _address

pytestmark = pytest.mark.timeout(180)

TRANSPORTS = 1000
MEMORY_BOUND = 1 << 30  # 1 GiB for 1,000: 1 MB each, half the 2 MB
CONFIG = btlcore.Config()


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_ephemeral_ports_are_pairs():
    opened = []
    try:
        for _ in range(200):
            t = btlcore.open("udp", config=CONFIG)
            opened.append(t)
            prio, data = (s[1] for s in t.device.device.local_sockaddrs)
            assert data == prio + 1, (prio, data)
            _fam, _ip, pport, dport, _scope = _address.decode(t.address)
            assert (pport, dport) == (prio, prio + 1)
            assert _address.to_text(t.address) == f"127.0.0.1:{prio}"
    finally:
        for t in opened:
            t.close(flush=False)


def test_ephemeral_pair_skips_a_taken_port_plus_one():
    # take every port + 1 the kernel might hand out next: the device must pick again
    import socket

    blockers = []
    t = None
    try:
        for _ in range(20):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            blockers.append(s)
        t = btlcore.open("udp", config=CONFIG)
        prio, data = (s[1] for s in t.device.device.local_sockaddrs)
        assert data == prio + 1
    finally:
        if t is not None:
            t.close(flush=False)
        for s in blockers:
            s.close()


def test_explicit_data_port_still_apart():
    t = btlcore.open("udp", config=CONFIG, port=0, data_port=0)
    try:
        prio, data = (s[1] for s in t.device.device.local_sockaddrs)
        assert _address.to_text(t.address) in (f"127.0.0.1:{prio}", f"udp://127.0.0.1:{prio}+{data}")
    finally:
        t.close(flush=False)


@pytest.fixture
def many_fds():
    """Three descriptors per transport (two sockets, an epoll): raise the soft limit to the
    hard one for the test, or skip where even that is too low."""
    import resource

    need = 3 * TRANSPORTS + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        yield
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"{TRANSPORTS} transports need {need} file descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_thousand_transports_in_one_process(many_fds):
    btlcore.open("udp", config=CONFIG).close(flush=False)  # imports and first-use costs
    gc.collect()
    before = _rss()
    opened = []
    try:
        for i in range(TRANSPORTS):
            opened.append(btlcore.open("udp", config=CONFIG))
            grown = _rss() - before
            assert grown < MEMORY_BOUND, f"{i + 1} udp transports took {grown / 1e6:.0f} MB"
        # and they work: the last one talks to the first
        a, b = opened[0], opened[-1]
        got = []
        b.on(5, lambda peer, tag, data: got.append(bytes(data)))
        peer = a.connect(b.address)
        done = []
        a.send(peer, 5, b"x" * 100_000, done.append)
        btlcore.run_until([a, b], lambda: bool(done and got), timeout=20)
        assert done == [None] and got == [b"x" * 100_000]
        print(f"{TRANSPORTS} udp transports: {(_rss() - before) / TRANSPORTS / 1e3:.0f} kB each")
    finally:
        for t in opened:
            t.close(flush=False)
