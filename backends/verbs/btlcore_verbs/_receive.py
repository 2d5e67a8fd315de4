"""The receive path: ``poll_recv`` hands out memoryviews of the registered receive slots,
the priority channel first, and gives the previous call's slots back (reposts them) first.

A plain function taking the device first, installed as the device's method and as the hook
implementation (no wrapper per datagram)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from btlcore.device import Channel

from ._channel import _SLOT_MASK, GRH, poll_cq_into
from ._recover import recover

if TYPE_CHECKING:
    from ._device import VerbsDevice


def poll_recv(device: VerbsDevice, budget: int) -> list[memoryview]:
    """Up to ``budget`` datagrams, the priority channel first.  The views handed out by the
    previous call are given back to the device (their buffers reposted) first."""
    if device._lent:
        _repost(device)
    out: list[memoryview] = []
    if budget <= 0 or device.closed:
        return out
    lent = device._lent
    nbytes = 0
    for ch in device._chans:
        if len(out) < budget and len(ch.stash) < budget - len(out):
            poll_cq_into(ch, budget - len(out) - len(ch.stash))
        stash = ch.stash
        take = min(len(stash), budget - len(out))
        if not take:
            continue
        view = ch.recv_view
        stride = ch.recv_stride
        mtu = ch.recv_mtu
        gen = ch.gen
        for wr_id, status, byte_len in stash[:take]:
            slot = wr_id & _SLOT_MASK
            if wr_id >> 24 != gen:
                device.stale_completions += 1  # from before a QP recovery: ignore
                continue
            if status:
                device.rx_errors += 1
                device.last_error = f"receive completion status {int(status)}"
                ch.broken = True
                if slot < ch.rq_depth:
                    ch.unposted.add(slot)
                continue
            if slot >= ch.rq_depth:  # not a work request of ours
                continue
            lent.append((ch, slot))
            n = byte_len - GRH
            if n > mtu or n < 0:
                device.rx_oversize += 1
                continue
            off = slot * stride + GRH
            out.append(view[off:off + n])
            nbytes += n
        del stash[:take]
        if ch.broken:
            recover(device, ch)
        if ch.channel == Channel.PRIORITY:
            device.rx_priority += len(out)
    device.rx_datagrams += len(out)
    device.rx_bytes += nbytes
    return out


def _repost(device: VerbsDevice) -> None:
    lent = device._lent
    for ch, slot in lent:
        try:
            ch.qp.post_recv(ch.recv_wrs[slot])
        except device._rdma_error as exc:
            device.rx_errors += 1
            device.last_error = f"post_recv failed: {exc}"
    lent.clear()
