"""Helpers for the sim backend's tests: a NIC pair on one fabric and raw btlcore frames."""

from __future__ import annotations

from typing import Any

from btlcore.device import Channel, DeviceOps
from btlcore.protocol import wire
from btlcore_sim import Fabric


class Pair:
    """Two NICs ``a`` and ``b`` on one fabric, with the handles to reach each other."""

    def __init__(self, fabric: Fabric, a: str = "a", b: str = "b", **options: Any) -> None:
        self.fabric = fabric
        self.a: DeviceOps = fabric.open_device(name=a, **options)
        self.b: DeviceOps = fabric.open_device(name=b, **options)
        self.ab = self.a.resolve(self.b.local_address())
        self.ba = self.b.resolve(self.a.local_address())

    def send(self, n: int, size: int = 100, channel: Channel = Channel.DATA,
             start: int = 0) -> None:
        """Post frames with seq start..start+n-1 from a to b (each must be accepted)."""
        for seq in range(start, start + n):
            assert self.a.post_send(channel, self.ab, frame(seq, size))

    def drain(self) -> list[bytes]:
        """Run the fabric until nothing is in flight; return what b received, in order."""
        got: list[bytes] = []
        while True:
            self.a.wait(None)
            got.extend(self.b.poll_recv(1 << 30))
            if not self.fabric.heap and not self.fabric.landed:
                return got

    def arrivals(self) -> list[tuple[float, bytes]]:
        """Like :meth:`drain`, with each frame's arrival time."""
        got: list[tuple[float, bytes]] = []
        while True:
            self.a.wait(None)
            now = self.fabric.now
            got.extend((now, f) for f in self.b.poll_recv(1 << 30))
            if not self.fabric.heap and not self.fabric.landed:
                return got


def paced(pair: Pair, n: int, interval: float, size: int = 40,
          channel: Channel = Channel.DATA) -> tuple[dict[int, float], list[tuple[float, int]]]:
    """Send ``n`` frames from a to b, one every ``interval`` seconds (later if the send
    queue pushes back), driving the fabric as a transport would.  Returns the send time of
    each seq and every arrival as ``(time, seq)``, in arrival order."""
    fabric = pair.fabric
    t0 = fabric.now
    sent: dict[int, float] = {}
    arrivals: list[tuple[float, int]] = []
    i = 0
    while True:
        blocked = False
        while i < n and fabric.now >= t0 + i * interval:
            if not pair.a.post_send(channel, pair.ab, tiny(i, size)):
                blocked = True
                break
            sent[i] = fabric.now
            i += 1
        now = fabric.now
        arrivals.extend((now, seq_of(f)) for f in pair.b.poll_recv(1 << 30))
        if i >= n and not fabric.heap and not fabric.landed:
            return sent, arrivals
        pair.a.wait(None if blocked or i >= n else t0 + i * interval)


def tiny(seq: int, size: int = 40) -> bytes:
    """A cheap valid datagram (no CRC) of ``size`` bytes carrying ``seq``."""
    plen = max(0, size - wire.HEADER_LEN)
    return wire.HEADER.pack(wire.WIRE_VERSION, wire.T_DATA, 0, 0, 0, 1, 0, seq, 0, 0, plen) + bytes(plen)


_PATTERN = bytes(range(256)) * 260


def frame(seq: int, size: int = 100, typ: int = wire.T_DATA, ack: int = 0) -> bytes:
    """A sealed btlcore datagram of exactly ``size`` bytes (at least the header)."""
    start = seq & 0xFF
    payload = _PATTERN[start:start + max(0, size - wire.HEADER_LEN)]
    return wire.Datagram(typ, seq=seq, ack=ack, payload=payload).encode()


def seq_of(data: bytes) -> int:
    return wire.decode(data).seq
