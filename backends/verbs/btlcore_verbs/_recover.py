"""Bringing a channel back after its QP left RTS: rare (a local error), so out of the
per-datagram functions, which call :func:`recover` when a completion came in error."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._channel import _INLINE_SLOT, _SLOT_MASK, _Chan, poll_cq_into

if TYPE_CHECKING:
    from ._device import VerbsDevice


def recover(device: VerbsDevice, ch: _Chan) -> None:
    """Bring a channel whose QP left RTS (a receive or send completed in error) back.

    A UD QP goes to the error state on a local error (a receive buffer too small, a bad
    lkey) and to SQE on a send error; every posted work request is then flushed.  Recovery
    takes the QP through RESET, INIT, RTR to RTS again, starts a new *generation* of work
    request ids (so completions still on their way from the old one are recognised and
    ignored, never double-freeing a slot), forgets outstanding sends (lost, as on a wire:
    the core retransmits) and reposts every receive slot not lent out or holding data."""
    pv = device._pv
    e = pv["e"]
    ch.broken = False
    try:
        state = int(ch.qp.query(e.IBV_QP_STATE)[0].qp_state)
    except Exception:
        state = -1
    if state == int(e.IBV_QPS_RTS):
        # an error completion that did not take the QP down: repost what it consumed
        busy = {slot for c, slot in device._lent if c is ch}
        busy.update(w & _SLOT_MASK for w, st, _ in ch.stash if not st and w >> 24 == ch.gen)
        _repost_missing(device, ch, busy)
        return
    device.qp_recoveries += 1
    # what already arrived stays deliverable; flushed receives are just dropped
    poll_cq_into(ch, 1 << 30)
    gen = ch.gen
    ch.stash[:] = [(w, st, n) for w, st, n in ch.stash if not st and w >> 24 == gen]
    attr = pv["QPAttr"]()
    try:
        attr.qp_state = e.IBV_QPS_RESET
        ch.qp.modify(attr, e.IBV_QP_STATE)
        attr = pv["QPAttr"](port_num=device.port)
        attr.qp_state = e.IBV_QPS_INIT
        attr.qkey = device.options.qkey
        attr.pkey_index = 0
        ch.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_QKEY)
        attr = pv["QPAttr"]()
        attr.qp_state = e.IBV_QPS_RTR
        ch.qp.modify(attr, e.IBV_QP_STATE)
        attr = pv["QPAttr"]()
        attr.qp_state = e.IBV_QPS_RTS
        attr.sq_psn = 0
        ch.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)
    except Exception as exc:
        device.last_error = f"recovery of the {ch.channel.name} QP failed: {exc}"
        raise OSError(f"verbs: the {ch.channel.name} QP of {device.name} entered the error "
                      f"state and could not be recovered: {exc}") from exc
    # a new generation of work request ids; the stash's slots keep their data
    ch.gen = gen = (gen + 1) & 0xFFFFFF
    ch.stash[:] = [((gen << 24) | (w & _SLOT_MASK), st, n) for w, st, n in ch.stash]
    tag = (gen << 32) | (ch.channel << 24)
    for i, wr in enumerate(ch.send_wrs):
        wr.wr_id = tag | i
    ch.inline_wr.wr_id = tag | _INLINE_SLOT
    ch.outstanding = 0
    ch.free[:] = range(ch.sq_depth - 1, -1, -1)
    rtag = gen << 24
    for i, wr in enumerate(ch.recv_wrs):
        wr.wr_id = rtag | i
    busy = {slot for c, slot in device._lent if c is ch}
    busy.update(w & _SLOT_MASK for w, _st, _n in ch.stash)
    _repost_missing(device, ch, busy, everything=True)


def _repost_missing(device: VerbsDevice, ch: _Chan, busy: set[int], everything: bool = False) -> None:
    """Post the receive slots of ``ch`` that are not ``busy``: after a reset all of them,
    otherwise only those whose completion ended in error (tracked as not posted)."""
    for slot in range(ch.rq_depth):
        if slot in busy or (not everything and slot not in ch.unposted):
            continue
        try:
            ch.qp.post_recv(ch.recv_wrs[slot])
        except device._rdma_error as exc:
            device.rx_errors += 1
            device.last_error = f"post_recv failed: {exc}"
    ch.unposted.clear()
