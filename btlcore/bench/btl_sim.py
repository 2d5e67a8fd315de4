"""btlcore on the simulator, in this process: speed of the core, and efficiency under loss.

* Segments per wall-second, lossless: how many data segments the protocol core pushes through
  a perfect simulated link per second of real time (the simulator's own cost included), with
  the end-to-end CRC32C on (the simulator's default: a fabric may be told to corrupt frames);
  and again on a fabric that promises never to corrupt, where the core leaves the CRC out,
  as it does on a device with a link-level CRC.  The note says which.
* Efficiency under random loss (1 %, 5 %, 10 %) and a burst model (Gilbert-Elliott, mean loss
  5 %, mean burst 4 datagrams), one transfer of 1 MiB messages on a 1 Gb/s link with a 1 ms
  one-way delay:
    - transmissions per lost segment: retransmissions / data segments the link dropped,
      first transmissions and retransmissions alike (1.0 is ideal: every loss repaired once,
      none resent needlessly); beside it, the share of retransmissions that reached the
      receiver as duplicates (needless ones, seen from the other end);
    - standalone ACKs per data segment;
    - goodput as a fraction of the link rate (virtual time);
    - completion time in RTTs (virtual);
  each beside the ideal for this transfer: every byte crossing the link 1/(1 - loss) times on
  average, plus one round trip.
  Lost data segments are the loss model's drops on the data direction, scaled by the data
  segments' share of the frames offered there (the few handshake and ACK frames that go the
  same way).  If the fabric does not count drops, they are estimated as loss x transmissions
  (exact in expectation for random loss) and the result says so.
"""

from __future__ import annotations

import time
from typing import Any

from . import btl_adapter as A
from .harness import BenchError, Result, measured
from .profiles import Profile

SECTION = "btl_sim"
TAG = 1
MESSAGE = 1 << 20
LINK_MBPS = 1000.0
DELAY = 0.001
BURST_LOSS = 0.05
BURST_LENGTH = 4.0


def transfer(fab: Any, nbytes: int, timeout: float) -> dict[str, Any]:
    """Send ``nbytes`` in 1 MiB messages from one simulated transport to another; return the
    counters of both ends, the wall time and the virtual time it took."""
    a = A.open_sim(fab, name="a")
    b = A.open_sim(fab, name="b")
    got = [0]
    done = [0, 0]
    errors: list[BaseException] = []

    def on_data(peer: Any, tag: int, data: Any) -> None:
        got[0] += len(data)

    def completed(exc: BaseException | None) -> None:
        done[0 if exc is None else 1] += 1
        if exc is not None:
            errors.append(exc)

    A.on(b, TAG, on_data)
    peer = A.connect(a, A.address(b))
    # the handshake and one small message first, so that the figures are the transfer's own
    A.send(a, peer, TAG, b"x", callback=completed)
    A.run_until([a, b], lambda: done[0] + done[1] >= 1, timeout, wall=0.9 * timeout)
    got[0] = 0
    done[0] = done[1] = 0
    sa0, sb0 = A.stats(a), A.stats(b)
    l0 = A.link_losses(fab, "a", "b")
    v0 = A.sim_now(fab, a)
    n = max(1, nbytes // MESSAGE)
    msg = bytes(MESSAGE)
    w0 = time.perf_counter()
    for _ in range(n):  # (as fast as the send buffer takes them)
        A.send_waiting([a, b], a, peer, TAG, msg, completed, timeout)
    A.run_until([a, b], lambda: done[0] + done[1] >= n, timeout, wall=0.9 * timeout)
    wall = time.perf_counter() - w0
    virt = A.sim_now(fab, a) - v0
    if done[0] < n:
        why = f": {type(errors[0]).__name__}: {errors[0]}" if errors else ""
        raise BenchError(f"simulated transfer: {done[0]} of {n} messages completed, {done[1]} failed{why}")
    sa, sb = A.delta(A.stats(a), sa0), A.delta(A.stats(b), sb0)
    l1 = A.link_losses(fab, "a", "b")
    link = (l1[0] - l0[0], l1[1] - l0[1]) if l0 and l1 else None
    crc = A.crc_on(a)
    A.close(a)
    A.close(b)
    return {"bytes": n * MESSAGE, "delivered": got[0], "wall": wall, "virtual": virt, "sender": sa,
            "receiver": sb, "link": link, "crc": crc}


def segment_rate(profile: Profile, integrity: bool = False) -> Result:
    """``integrity``: on a fabric that promises intact frames (the transports then send no
    CRC); else on the default fabric (CRC on)."""
    A.require("simulator")
    rates: list[float] = []
    acks: list[float] = []
    segs = 0.0
    crc = None
    for i in range(profile.warmup + profile.trials):
        fab = A.fabric(seed=1 + i, loss=0.0, delay=DELAY / 10, rate_mbps=100_000.0, integrity=integrity)
        r = transfer(fab, profile.sim_bytes, timeout=profile.deadline)
        segs = A.data_segments(r["sender"])
        crc = r["crc"]
        if i >= profile.warmup:
            rates.append(segs / r["wall"])
            acks.append(r["receiver"].get("num_ack_sends", 0) / segs if segs else 0.0)
    if integrity:
        return measured("btl.sim_rate_integrity", SECTION,
                        "simulator, lossless, fabric that never corrupts: data segments per wall-second", "1/s",
                        rates, segments=segs, bytes=profile.sim_bytes, acks_per_segment=sorted(acks)[len(acks) // 2],
                        crc=crc)
    return measured("btl.sim_rate", SECTION, "simulator, lossless: data segments per wall-second", "1/s",
                    rates, segments=segs, bytes=profile.sim_bytes, acks_per_segment=sorted(acks)[len(acks) // 2],
                    crc=crc)


def efficiency(profile: Profile, loss: float, burst: float | None = None) -> list[Result]:
    """Four results for one loss model, each over ``profile.trials`` seeds."""
    A.require("simulator")
    key = f"burst{int(round(loss * 100))}" if burst else f"random{int(round(loss * 100))}"
    label = (f"{loss:.0%} burst loss (mean burst {burst:g})" if burst else f"{loss:.0%} random loss")
    tx, acks, frac, rtts, needless = [], [], [], [], []
    estimated = False
    ideal_rtts = ideal_frac = 0.0
    for i in range(profile.trials):
        fab = A.fabric(seed=100 + i, loss=loss, delay=DELAY, rate_mbps=LINK_MBPS, burst=burst)
        try:
            r = transfer(fab, profile.loss_bytes, timeout=profile.deadline)
        except BenchError as exc:
            raise BenchError(f"{exc} (fabric seed {100 + i}, loss {loss:g}, burst {burst}, "
                             f"{profile.loss_bytes} B)") from None
        s, rc = r["sender"], r["receiver"]
        segs = A.data_segments(s)
        if r["link"] and r["link"][0]:
            # frames the loss model dropped on a -> b, scaled to the data segments' share of them
            offered, dropped = r["link"]
            lost = dropped * min(1.0, segs / offered)
        else:
            lost, estimated = loss * segs, True
        tx.append(s.get("num_resends", 0) / lost if lost else 1.0)
        # cross-check from the other end: retransmissions that arrived as duplicates
        resends = s.get("num_resends", 0)
        needless.append(rc.get("num_dup_recvs", 0) / resends if resends else 0.0)
        acks.append(rc.get("num_ack_sends", 0) / segs if segs else 0.0)
        link_bps = LINK_MBPS * 1e6 / 8
        frac.append(r["bytes"] / r["virtual"] / link_bps if r["virtual"] > 0 else 0.0)
        rtts.append(r["virtual"] / (2 * DELAY))
        # the best any protocol could do: every byte crosses the link 1/(1-loss) times on
        # average, plus one round trip to start and finish
        ideal_time = r["bytes"] / link_bps / (1.0 - loss) + 2 * DELAY
        ideal_rtts = ideal_time / (2 * DELAY)
        ideal_frac = r["bytes"] / link_bps / ideal_time
    common: dict[str, Any] = {"loss": loss, "burst": burst, "bytes": profile.loss_bytes, "link_mbps": LINK_MBPS,
              "delay": DELAY, "lost_estimated": estimated}
    sec = SECTION
    return [
        measured(f"btl.loss.{key}.tx_per_loss", sec, f"{label}: transmissions per lost segment", "x", tx,
                 better="lower", needless=sorted(needless)[len(needless) // 2], **common),
        measured(f"btl.loss.{key}.acks_per_seg", sec, f"{label}: standalone ACKs per data segment", "x", acks,
                 better="lower", **common),
        measured(f"btl.loss.{key}.goodput_frac", sec, f"{label}: goodput / link rate", "x", frac,
                 ideal=ideal_frac, **common),
        measured(f"btl.loss.{key}.rtts", sec, f"{label}: completion time in RTTs", "x", rtts,
                 better="lower", ideal=ideal_rtts, **common),
    ]
