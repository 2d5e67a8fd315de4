"""One channel's state on the device (its QP, receive CQ, registered send and receive
slots, prepared work requests) and the layout of the work-request ids that find a slot
again from its completion."""

from __future__ import annotations

from typing import Any

import attrs

from btlcore.device import Channel

GRH = 40  # every receive slot has the Global Routing Header in front of the datagram
POLL_BATCH = 32  # work completions taken per cq.poll call
#: wr_id: generation << 32 | channel << 24 | slot for sends, generation << 24 | slot for
#: receives; this slot number marks an inline send (no buffer held)
_INLINE_SLOT = 0xFFFFFF
_SLOT_MASK = 0xFFFFFF


@attrs.define(slots=True, eq=False)
class _Chan:
    channel: Channel
    qp: Any
    rcq: Any
    mtu: int  # largest datagram sent on this channel (create_channel may lower it)
    recv_mtu: int  # largest datagram a receive slot holds
    sq_depth: int
    rq_depth: int
    max_inline: int
    send_view: memoryview
    send_stride: int
    send_sges: list[Any]
    send_wrs: list[Any]
    recv_view: memoryview
    recv_stride: int
    recv_wrs: list[Any]
    inline_view: memoryview
    inline_sge: Any
    inline_wr: Any
    free: list[int] = attrs.Factory(list)
    outstanding: int = 0
    stash: list[tuple[int, int, int]] = attrs.Factory(list)
    gen: int = 0  # work request id generation, bumped by recover()
    broken: bool = False  # an error completion was seen: recover() at the next chance
    unposted: set[int] = attrs.Factory(set)  # receive slots whose completion was an error


def poll_cq_into(ch: _Chan, limit: int) -> int:
    """Move up to ``limit`` receive completions of ``ch`` from its CQ to its stash."""
    got = 0
    poll = ch.rcq.poll
    stash = ch.stash
    while got < limit:
        n, wcs = poll(min(POLL_BATCH, limit - got))
        if not n:
            break
        stash.extend((wc.wr_id, wc.status, wc.byte_len) for wc in wcs)
        got += n
    return got
