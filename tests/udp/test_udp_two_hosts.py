"""btlcore between two "hosts" (network namespaces) over a lossy, rate-limited veth: every
message is delivered exactly once, intact and in order, and every send completes.

The link (``netns.py``): nftables drops N % of the UDP packets arriving on each side (data one
way, ACKs the other), and tc tbf limits what A sends.  Traffic goes only to addresses inside
the namespaces this test creates; everything is bounded in count and time.
"""

from __future__ import annotations

import hashlib
import random
import time

import pytest

import netns

transport = pytest.importorskip("btlcore.transport", reason="the btlcore core is not there yet")

from btlcore.config import Config  # noqa: E402
from btlcore.registry import open_device  # noqa: E402
from btlcore.run import run_until  # noqa: E402

pytestmark = [pytest.mark.netns, pytest.mark.timeout(180)]

_REASON = netns.unavailable(need_nft=True, need_tc=True)
if _REASON:
    pytestmark.append(pytest.mark.skip(reason=f"network namespaces unavailable: {_REASON}"))

TAG = 7


@pytest.fixture
def link():
    with netns.NetnsPair() as pair:
        yield pair


def _transport(link: netns.NetnsPair, side: str, config: Config, **options):
    with link.inside(side):
        device = open_device("udp", {"host": link.ip4[side], **options})
    return transport.Transport(device, config, seed=1234 if side == "a" else 5678)


def _messages(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    sizes = [rng.choice([1, 100, 1400, 1500, 9000, 40_000, 200_000]) for _ in range(count)]
    return [rng.randbytes(n) for n in sizes]


@pytest.mark.parametrize("loss, rate", [(0, None), (5, "50mbit"), (20, None)],
                         ids=["clean", "loss5-50mbit", "loss20"])
def test_exactly_once_over_lossy_link(link, loss, rate):
    if loss:
        link.set_loss(loss, side="a")
        link.set_loss(loss, side="b")
    if rate:
        link.set_rate(rate, side="a", burst="64kb", latency="20ms")
    config = Config(rto_initial=0.05, peer_timeout=60.0, handshake_timeout=30.0, max_retries=200)
    ta = _transport(link, "a", config)
    tb = _transport(link, "b", config)
    try:
        messages = _messages(150, seed=loss)
        got: list[bytes] = []
        done: list[BaseException | None] = []
        tb.on(TAG, lambda peer, tag, data: got.append(bytes(data)))
        peer = ta.connect(tb.address)
        for m in messages:
            ta.send(peer, TAG, m, callback=done.append)
        run_until([ta, tb], lambda: len(done) == len(messages) and len(got) >= len(messages),
                            timeout=120)
        settle = time.monotonic() + 0.3  # a duplicate delivery would show up now
        while time.monotonic() < settle:
            ta.progress(0.01)
            tb.progress(0.01)
        assert done == [None] * len(messages)
        assert len(got) == len(messages), "a message was delivered twice"
        assert [hashlib.sha256(g).digest() for g in got] == [hashlib.sha256(m).digest() for m in messages]
        dropped = link.loss_counter("a") + link.loss_counter("b") if loss else 0
        print(f"loss {loss}% rate {rate}: nft dropped {dropped}; a pushed back "
              f"{ta.device.device.stats()['tx_pushbacks']}; a {ta.stats_line()}; b {tb.stats_line()}")
        if loss:
            assert dropped > 0
    finally:
        ta.close(flush=False)
        tb.close(flush=False)


RECEIVER = r"""
import hashlib, sys, time
from btlcore.config import Config
from btlcore.registry import open_device
from btlcore.run import run_until
from btlcore.transport import Transport
want, limit = int(sys.argv[2]), float(sys.argv[3])
t = Transport(open_device("udp", {"host": sys.argv[1]}),
              Config(peer_timeout=60.0, handshake_timeout=30.0, max_retries=200))
print(t.address.hex(), flush=True)
digests = []
t.on(7, lambda peer, tag, data: digests.append(hashlib.sha256(data).hexdigest()))
try:
    run_until([t], lambda: len(digests) >= want, timeout=limit)
except TimeoutError:
    pass
linger = time.monotonic() + 1.0  # keep ACKing retransmissions; a duplicate would show now
while time.monotonic() < linger:
    t.progress(0.05)
print("\n".join(digests))
print("received", len(digests), flush=True)
t.close(flush=False)
"""


def test_exactly_once_between_two_processes(link):
    """Sender in namespace A (this process), receiver in namespace B (another process, on
    its own CPU): 10% loss each way and a 100 Mbit/s limit on A's side."""
    import select
    import subprocess
    import sys

    link.set_loss(10, side="a")
    link.set_loss(10, side="b")
    link.set_rate("100mbit", side="a", burst="64kb", latency="20ms")
    messages = _messages(120, seed=99)
    child = subprocess.Popen(
        link.exec_argv("b", sys.executable, "-c", RECEIVER, link.ip4["b"], str(len(messages)), "90"),
        stdout=subprocess.PIPE, text=True)
    ta = None
    try:
        ready, _, _ = select.select([child.stdout], [], [], 30)
        assert ready, "the receiver did not start within 30 s"
        address = bytes.fromhex(child.stdout.readline().strip())
        config = Config(rto_initial=0.05, peer_timeout=60.0, handshake_timeout=30.0, max_retries=200)
        ta = _transport(link, "a", config)
        peer = ta.connect(address)
        done: list[BaseException | None] = []
        for m in messages:
            ta.send(peer, TAG, m, callback=done.append)
        run_until([ta], lambda: len(done) == len(messages), timeout=90)
        assert done == [None] * len(messages)
        out, _ = child.communicate(timeout=60)
        lines = out.split()
        assert lines[-2:] == ["received", str(len(messages))], out[-300:]
        assert lines[:-2] == [hashlib.sha256(m).hexdigest() for m in messages]
        print(f"two processes, 10% loss each way, 100 Mbit/s: a {ta.stats_line()}")
    finally:
        if ta is not None:
            ta.close(flush=False)
        if child.poll() is None:
            child.kill()
            child.wait(10)
