"""Issue #11, item 3 on real processes: a udp server SIGKILLed and restarted at the same port.
Its new life answers the client's next datagram with an "unknown connection" notice, so the
client's pending sends complete (failed with PeerRestarted) within 1.5 s of the new life
hearing its first datagram, not after peer_timeout; nothing of the old life reaches the new
one, and the next send is delivered to it over a new handshake."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from test_udp_processes import free_port_pair  # type: ignore[import-not-found]

import btlcore
from btlcore.errors import PeerRestarted

PEER = Path(__file__).with_name("udp_restart_peer.py")


class Life:
    """One life of the server process."""

    def __init__(self, port: int) -> None:
        self.proc = subprocess.Popen([sys.executable, str(PEER), str(port)], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert line, "server process did not start"
        self.address = bytes.fromhex(line)

    def first_rx(self) -> float:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert line, "the server's new life never heard a datagram"
        return float(json.loads(line)["first_rx"])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def test_sigkill_and_restart_at_the_same_port_is_learnt_at_once() -> None:
    port = free_port_pair()
    first = Life(port)
    second = None
    try:
        with btlcore.open("udp", config=btlcore.Config(peer_timeout=30.0)) as t:
            echoes: list[bytes] = []
            t.on(2, lambda peer, tag, data: echoes.append(bytes(data)))
            peer = t.connect(first.address)
            for i in range(3):
                t.send(peer, 1, b"first life %d" % i)
            btlcore.run_until([t], lambda: len(echoes) == 3, timeout=10)
            first.kill()
            done: dict[int, BaseException | None] = {}
            for i in range(20):  # pending: the old life cannot acknowledge them
                t.send(peer, 1, (b"to the old life %d " % i) * (1 + 300 * (i % 3)),
                       lambda exc, i=i: done.__setitem__(i, exc))
            end = time.monotonic() + 2.0
            while time.monotonic() < end:  # the client retransmits into the void (backing off)
                t.progress(timeout=0.05)
            assert not done
            second = Life(port)
            assert second.address == first.address
            btlcore.run_until([t], lambda: len(done) == 20, timeout=25)
            completed = time.time()
            heard = second.first_rx()
            took = completed - heard
            print(f"restart learnt {took * 1000:.1f} ms after the new life heard its first datagram "
                  f"(issue #11 asks for 1.5 s); counters {t.stats()['num_peer_restarts']} restart(s)")
            assert all(isinstance(exc, PeerRestarted) or exc is None for exc in done.values()), done
            assert took < 3.0  # 1.5 s asked; a generous margin on a loaded machine
            assert t.stats()["num_peer_restarts"] == 1
            # the next send: a new handshake with the new life, delivered and echoed
            echoes.clear()
            t.send(peer, 1, b"to the new life")
            btlcore.run_until([t], lambda: echoes == [b"to the new life"], timeout=10)
    finally:
        first.kill()
        if second is not None:
            second.kill()


def test_icmp_port_unreachable_hastens_the_failure_of_a_silent_peer() -> None:
    """A server SIGKILLed: its ports are closed, and loopback answers our retransmissions
    with ICMP port unreachable.  The client fails the peer once it has been silent for half
    of peer_timeout (ICMP alone never does it), well before peer_timeout."""
    port = free_port_pair()
    server = Life(port)
    try:
        timeout = 6.0
        with btlcore.open("udp", config=btlcore.Config(peer_timeout=timeout)) as t:
            echoes: list[bytes] = []
            t.on(2, lambda peer, tag, data: echoes.append(bytes(data)))
            peer = t.connect(server.address)
            t.send(peer, 1, b"hello")
            btlcore.run_until([t], lambda: echoes == [b"hello"], timeout=10)
            server.kill()
            start = time.monotonic()
            done: list[BaseException | None] = []
            t.send(peer, 1, b"anyone?", done.append)
            btlcore.run_until([t], lambda: bool(done), timeout=2 * timeout)
            took = time.monotonic() - start
            icmp = t.stats()["num_icmp_errors"]
            print(f"silent peer failed after {took:.2f} s (peer_timeout {timeout} s), "
                  f"{icmp} ICMP errors seen")
            assert isinstance(done[0], btlcore.PeerUnreachable) and "ICMP" in str(done[0])
            assert timeout / 2 - 0.2 <= took < timeout - 0.5 and icmp >= 1
    finally:
        server.kill()
