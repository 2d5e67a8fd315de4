"""``python3 -m btlcore_verbs.selftest``: is verbs usable here, and how fast is the
device layer?  Opens two devices on the same port and streams datagrams from one to the
other (data channel, full MTU; priority channel, small inline sends), reporting datagrams per
second and the send-queue pushbacks seen.  Options as ``KEY=VALUE`` arguments (device=rxe0...).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from btlcore.device import Channel

from . import plugin
from ._options import parse

if TYPE_CHECKING:
    from ._device import VerbsDevice


def stream(a: VerbsDevice, b: VerbsDevice, channel: Channel, size: int, count: int,
           timeout: float = 60.0) -> tuple[float, int]:
    dest = a.resolve(b.local_address())
    payload = bytes(size)
    sent = got = 0
    pushbacks = a.tx_pushbacks
    t0 = time.perf_counter()
    deadline = time.monotonic() + timeout
    while got < count and time.monotonic() < deadline:
        while sent < count and a.post_send(channel, dest, payload):
            sent += 1
        a.poll_completions()
        got += len(b.poll_recv(256))
    elapsed = time.perf_counter() - t0
    b.poll_recv(0)
    while a.poll_completions():
        pass
    return (got / elapsed if elapsed else 0.0), a.tx_pushbacks - pushbacks


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    options = dict(arg.split("=", 1) for arg in args)
    status = plugin.probe(options)
    print(f"verbs probe: {'usable' if status.usable else 'unavailable'}: {status.reason}")
    if not status.usable:
        return 1
    from ._device import VerbsDevice

    a, b = VerbsDevice(parse(options)), VerbsDevice(parse(options))
    try:
        print(a.describe())
        for dev in (a, b):
            dev.create_channel(Channel.PRIORITY, 768)
            dev.create_channel(Channel.DATA, 0)
        mtu = a.capabilities().mtu
        rate, pb = stream(a, b, Channel.DATA, mtu, 5000)
        print(f"data channel, {mtu} B datagrams: {rate:,.0f}/s ({rate * mtu * 8 / 1e6:,.0f} Mbit/s), "
              f"{pb} send-queue pushbacks")
        small = min(64, a.max_inline) or 64
        rate, pb = stream(a, b, Channel.PRIORITY, small, 5000)
        print(f"priority channel, {small} B datagrams ({'inline' if a.max_inline >= small else 'buffered'}): "
              f"{rate:,.0f}/s, {pb} send-queue pushbacks")
        lost = a.tx_datagrams - b.rx_datagrams
        print(f"sent {a.tx_datagrams}, received {b.rx_datagrams} ({lost} dropped), errors "
              f"tx {a.tx_errors} rx {b.rx_errors}")
    finally:
        a.close()
        b.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
