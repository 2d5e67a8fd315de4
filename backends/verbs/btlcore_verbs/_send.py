"""The send path: ``post_send`` copies a datagram into a registered slot (or inline) and
posts it; ``reap_sends`` takes the send completions, which give the slots back.

Plain functions taking the device first: ``post_send`` is installed as the device's method
and as the hook implementation (no wrapper per datagram)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from btlcore.device import Channel

from ._channel import _INLINE_SLOT, _SLOT_MASK, POLL_BATCH
from ._recover import recover

if TYPE_CHECKING:
    from ._device import Destination, VerbsDevice


def post_send(device: VerbsDevice, channel: Channel, dest: Destination, data: Any) -> bool:
    """Post one datagram; False if the channel's send queue is full."""
    ch = device._chans[channel]
    n = len(data)
    if n > ch.mtu or n > dest.max_datagram:
        raise ValueError(f"verbs: datagram of {n} bytes exceeds the {Channel(channel).name} channel "
                         f"MTU of {min(ch.mtu, dest.max_datagram)} bytes")
    if ch.outstanding >= ch.sq_depth:
        device.tx_pushbacks += 1
        return False
    if 0 < n <= ch.max_inline:
        ch.inline_view[:n] = data
        sge = ch.inline_sge
        wr = ch.inline_wr
        slot = -1
    else:
        slot = ch.free.pop()
        off = slot * ch.send_stride
        ch.send_view[off:off + n] = data
        sge = ch.send_sges[slot]
        wr = ch.send_wrs[slot]
    sge.length = n
    wr.sg_list = sge
    wr.set_wr_ud(dest.ah, dest.qpns[channel], dest.qkey)
    try:
        ch.qp.post_send(wr)
    except device._rdma_error as exc:
        if slot >= 0:
            ch.free.append(slot)
        if exc.error_code == 12:  # ENOMEM: the provider's queue is full after all
            device.tx_pushbacks += 1
            return False
        raise OSError(exc.error_code, f"verbs: post_send on the {Channel(channel).name} QP of "
                      f"{device.name} failed: {exc}") from exc
    ch.outstanding += 1
    if slot < 0:
        device.tx_inline += 1
    device.tx_datagrams += 1
    device.tx_bytes += n
    return True


def reap_sends(device: VerbsDevice) -> int:
    """Poll the send CQ dry; free slots and queue entries.  Returns completions reaped."""
    chans = device._chans
    poll = device._scq.poll
    total = 0
    while True:
        n, wcs = poll(POLL_BATCH)
        if not n:
            break
        for wc in wcs:
            wr_id = wc.wr_id
            ch = chans[(wr_id >> 24) & 0xFF]
            if wr_id >> 32 != ch.gen:  # from before a QP recovery: already accounted for
                device.stale_completions += 1
                continue
            ch.outstanding -= 1
            slot = wr_id & _SLOT_MASK
            if slot != _INLINE_SLOT:
                ch.free.append(slot)
            if wc.status:
                device.tx_errors += 1
                device.last_error = f"send completion status {int(wc.status)} (vendor {wc.vendor_err})"
                ch.broken = True
        total += n
        if n < POLL_BATCH:
            break
    device._reaped += total
    if chans[0].broken or chans[1].broken:
        for ch in chans:
            if ch.broken:
                recover(device, ch)
    return total
