"""The verbs device: two UD queue pairs on one RDMA port, as usnic had.

Layout of one device::

    Context(device) ── PD ─┬─ send CQ (shared by both QPs; every send is signaled)
                           ├─ priority QP (UD) ── its receive CQ
                           ├─ data QP (UD) ────── its receive CQ
                           ├─ send MR:  per channel, send_queue_depth slots of MTU bytes
                           └─ recv MR:  per channel, recv_queue_depth slots of 40 + MTU bytes

Why separate receive CQs: ``poll_recv`` drains the priority channel first, so an ACK is seen
before the bulk data that arrived with it (a shared CQ would interleave them).

Receive buffers: every slot has the 40-byte GRH in front (a UD receive without room for it
puts the QP in the error state).  ``poll_recv`` returns memoryviews of the registered memory,
past the GRH; they stay valid until the next ``poll_recv``, which first reposts their slots
(``poll_recv(0)`` just gives them back).  Slots lent out are not in the receive queue, so
``recv_queue_depth`` should exceed the core's ``recv_budget`` comfortably (defaults 1024 and
256); a datagram arriving at an empty receive queue is dropped, as UD drops it.

Send buffers: ``post_send`` copies the datagram into a free slot of its channel (one memcpy
into registered memory) and posts it; the slot returns to the free list when its completion
is reaped.  Datagrams up to the QP's ``max_inline_data`` go inline instead: no slot is held,
though the send queue entry is, until its completion.  ``post_send`` returns False when the
channel has ``send_queue_depth`` sends outstanding; ``poll_completions`` (which the core calls
every progress pass) reaps their completions and frees them.  Every send is signaled: the
completion is what frees the slot.

Sizes: a UD message is at most the path MTU (the port's active MTU, 4096 on rxe over lo), and a
larger send completes "successfully" and vanishes, so ``post_send`` refuses one with
``ValueError``, as the udp device does.

Errors: a completion in error means the QP left RTS (UD QPs fail only on local errors);
:func:`recover` brings it back with a new generation of work-request ids.

Memory is anonymous mmap owned by the device and registered with ``MR(address=...)``, so a
memoryview a caller still holds never points at freed memory, even after ``close``.

Where each part lives: ``_port`` (device, port and GID discovery), ``_channel`` (a
channel's QP, CQ, slots and work-request ids), ``_send`` (the send path), ``_receive`` (the
receive path), ``_recover`` (QP recovery); this module opens the device (PD, CQs, memory,
QPs) and holds the rest of the Device interface.
"""

from __future__ import annotations

import ctypes
import mmap
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from btlcore.device import Capabilities, Channel, ChannelInfo
from btlcore.errors import ConfigError

from . import _address, _pyverbs, _receive, _send
from ._channel import _INLINE_SLOT, GRH, POLL_BATCH, _Chan, poll_cq_into
from ._options import ALLOWED, VerbsOptions
from ._port import Unavailable, _gid_text, choose_gid, find_port, mtu_bytes

INLINE_WANT = 256  # inline bytes asked of the QP when inline is auto/on
SPIN_SECONDS = 50e-6  # wait(): busy-poll this long before sleeping
SLEEP_MIN, SLEEP_MAX = 20e-6, 1e-3  # wait(): sleeps between polls, doubling


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


@attrs.define(slots=True, eq=False)
class Destination:
    """A resolved peer: its address handle, QPNs by channel, QKey and datagram limit."""

    address: _address.VerbsAddress
    ah: Any
    qpns: tuple[int, int]
    qkey: int
    max_datagram: int


class VerbsDevice:
    """One verbs device: a priority and a data UD QP on one port of one RDMA device."""

    post_send = _send.post_send
    poll_recv = _receive.poll_recv

    def __init__(self, opts: VerbsOptions) -> None:
        pv = _pyverbs.load()
        self._pv = pv
        self._rdma_error = pv["PyverbsRDMAError"]
        self.options = opts
        self.closed = False
        self._objs: list[Any] = []  # pyverbs objects to close, in creation order
        self._maps: list[mmap.mmap] = []
        self._dests: dict[bytes, Destination] = {}
        self._lent: list[tuple[_Chan, int]] = []
        self._reaped = 0
        self.tx_datagrams = self.tx_bytes = self.tx_inline = self.tx_pushbacks = self.tx_errors = 0
        self.rx_datagrams = self.rx_bytes = self.rx_priority = self.rx_errors = self.rx_oversize = 0
        self.last_error = ""
        self.qp_recoveries = self.stale_completions = 0
        try:
            self._open(pv, opts)
        except Unavailable as exc:
            self.close()
            raise OSError(f"verbs: {exc}") from None
        except BaseException:
            self.close()
            raise

    def _open(self, pv: dict[str, Any], opts: VerbsOptions) -> None:
        e = pv["e"]
        ctx, name, port, pattr = find_port(pv, opts)
        self._ctx = ctx
        self.name, self.port = name, port
        dattr = ctx.query_device()
        self.link_layer = "ethernet" if pattr.link_layer == e.IBV_LINK_LAYER_ETHERNET else "infiniband"
        self.port_mtu = mtu_bytes(pattr.active_mtu)
        # the largest datagram: the active MTU, or less if option mtu says so
        self.active_mtu = min(opts.mtu, self.port_mtu) if opts.mtu else self.port_mtu
        self.lid = int(pattr.lid)
        gid = choose_gid(pv, ctx, name, port, pattr.gid_tbl_len, opts.gid_index)
        self.gid = gid
        max_wr = int(dattr.max_qp_wr) or 1 << 14
        sq = min(opts.send_queue_depth, max_wr)
        rq = min(opts.recv_queue_depth, max_wr)
        cqe_max = int(dattr.max_cqe) or 1 << 16
        self._pd = pv["PD"](ctx)
        self._objs.append(self._pd)
        self._scq = pv["CQ"](ctx, min(2 * sq, cqe_max))
        self._objs.append(self._scq)
        mtu = self.active_mtu
        send_stride = _round_up(mtu, 64)
        recv_stride = _round_up(GRH + mtu, 64)
        # One mapping for everything: per channel, its send slots, then its receive slots,
        # then one inline scratch slot.
        per_chan = sq * send_stride + rq * recv_stride + send_stride
        size = _round_up(2 * per_chan, mmap.PAGESIZE)
        mem = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._maps.append(mem)
        self._mem_anchor = ctypes.c_char.from_buffer(mem)
        base = ctypes.addressof(self._mem_anchor)
        mr = pv["MR"](self._pd, size, e.IBV_ACCESS_LOCAL_WRITE, address=base)
        self._objs.append(mr)
        self._mr = mr
        whole = memoryview(mem)
        lkey = mr.lkey
        SGE, SendWR, RecvWR = pv["SGE"], pv["SendWR"], pv["RecvWR"]
        signaled = e.IBV_SEND_SIGNALED
        chans = []
        for channel in (Channel.PRIORITY, Channel.DATA):
            rcq = pv["CQ"](ctx, min(rq, cqe_max))
            self._objs.append(rcq)
            qp, max_inline = self._create_qp(pv, rcq, sq, rq, opts)
            start = channel * per_chan
            send_off, recv_off = start, start + sq * send_stride
            inline_off = recv_off + rq * recv_stride
            tag = channel << 24
            send_sges = [SGE(base + send_off + i * send_stride, send_stride, lkey) for i in range(sq)]
            send_wrs = [SendWR(wr_id=tag | i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[send_sges[i]],
                               send_flags=signaled) for i in range(sq)]
            recv_wrs = [RecvWR(wr_id=i, num_sge=1,
                               sg=[SGE(base + recv_off + i * recv_stride, GRH + mtu, lkey)])
                        for i in range(rq)]
            inline_sge = SGE(base + inline_off, send_stride, lkey)
            inline_wr = SendWR(wr_id=tag | _INLINE_SLOT, opcode=e.IBV_WR_SEND, num_sge=1,
                               sg=[inline_sge], send_flags=signaled | e.IBV_SEND_INLINE)
            ch = _Chan(channel=channel, qp=qp, rcq=rcq, mtu=mtu, recv_mtu=mtu, sq_depth=sq,
                       rq_depth=rq, max_inline=max_inline,
                       send_view=whole[send_off:recv_off], send_stride=send_stride,
                       send_sges=send_sges, send_wrs=send_wrs,
                       recv_view=whole[recv_off:inline_off], recv_stride=recv_stride,
                       recv_wrs=recv_wrs,
                       inline_view=whole[inline_off:inline_off + send_stride],
                       inline_sge=inline_sge, inline_wr=inline_wr, free=list(range(sq - 1, -1, -1)))
            for wr in recv_wrs:
                qp.post_recv(wr)
            chans.append(ch)
        self._chans: tuple[_Chan, _Chan] = (chans[0], chans[1])
        self.send_queue_depth, self.recv_queue_depth = sq, rq
        self.max_inline = chans[0].max_inline
        self._address = _address.VerbsAddress(
            lid=self.lid, gid=gid.gid, qkey=opts.qkey, priority_qpn=chans[0].qp.qp_num,
            data_qpn=chans[1].qp.qp_num, max_datagram=mtu)
        self._address_bytes = self._address.encode()

    def _create_qp(self, pv: dict[str, Any], rcq: Any, sq: int, rq: int,
                   opts: VerbsOptions) -> tuple[Any, int]:
        e = pv["e"]
        attr = pv["QPAttr"](port_num=self.port)
        attr.qkey = opts.qkey
        attr.pkey_index = 0
        tries = [INLINE_WANT] if opts.inline == "on" else [INLINE_WANT, 0] if opts.inline == "auto" else [0]
        last: Exception | None = None
        for inline in tries:
            cap = pv["QPCap"](max_send_wr=sq, max_recv_wr=rq, max_send_sge=1, max_recv_sge=1,
                              max_inline_data=inline)
            init = pv["QPInitAttr"](qp_type=e.IBV_QPT_UD, scq=self._scq, rcq=rcq, cap=cap)
            try:
                qp = pv["QP"](self._pd, init, attr)  # UD: straight to RTS
            except pv["PyverbsError"] as exc:
                last = exc
                continue
            self._objs.append(qp)
            granted = inline
            if inline:
                try:
                    _attr, init_out = qp.query(e.IBV_QP_CAP)
                    granted = min(inline, int(init_out.cap.max_inline_data) or inline)
                except Exception:
                    pass
            return qp, granted
        if opts.inline == "on":
            raise ConfigError(f"verbs option 'inline' is 'on' but {self.name} refused a UD QP with "
                              f"{INLINE_WANT} inline bytes ({last}); allowed is {ALLOWED['inline']}")
        raise OSError(f"verbs: cannot create a UD QP on {self.name} port {self.port}: {last}")

    # -- the rest of the Device interface ------------------------------------------------

    def capabilities(self) -> Capabilities:
        # sends complete when their completion is reaped (poll_completions), and wait()
        # polls the CQs (no completion-channel fd to block on); sources are not reported
        # yet: a receive completion has src_qp, and the GRH the sender's GID, to offer
        return Capabilities(mtu=self.active_mtu, max_inline=self.max_inline,
                            send_queue_depth=self.send_queue_depth,
                            recv_queue_depth=self.recv_queue_depth, integrity=True,
                            virtual_time=False, gather_sends=False,
                            sends_complete_at_once=False, wait_wakes_on_input=False,
                            reports_source=False)

    def create_channel(self, channel: Channel, mtu: int) -> ChannelInfo:
        ch = self._chans[Channel(channel)]
        granted = min(mtu, self.active_mtu) if mtu > 0 else self.active_mtu
        ch.mtu = granted
        return ChannelInfo(Channel(channel), granted, ch.sq_depth, ch.rq_depth)

    def poll_completions(self) -> int:
        if self.closed:
            return 0
        _send.reap_sends(self)
        n, self._reaped = self._reaped, 0
        return n

    def local_address(self) -> bytes:
        return self._address_bytes

    def resolve(self, address: bytes) -> Destination:
        key = bytes(address)
        dest = self._dests.get(key)
        if dest is not None:
            return dest
        peer = _address.decode(key)
        pv = self._pv
        gid = pv["GID"]()
        gid.gid = _gid_text(peer.gid)
        gr = pv["GlobalRoute"](dgid=gid, sgid_index=self.gid.index, hop_limit=64)
        ah = pv["AH"](self._pd, attr=pv["AHAttr"](port_num=self.port, is_global=1, gr=gr,
                                                   dlid=peer.lid))
        self._objs.append(ah)
        dest = Destination(peer, ah, (peer.priority_qpn, peer.data_qpn), peer.qkey,
                           peer.max_datagram)
        self._dests[key] = dest
        return dest

    def clock(self) -> Callable[[], float]:
        return time.monotonic

    def wait(self, deadline: float | None) -> None:
        """Poll until a datagram or a send completion is there, or ``deadline``: busy for
        SPIN_SECONDS, then sleeping 20 us doubling to 1 ms between polls (pyverbs exposes no
        completion-channel fd, so there is nothing to block on)."""
        if self.closed:
            return
        now = time.monotonic
        start = now()
        sleep = SLEEP_MIN
        chans = self._chans
        while True:
            for ch in chans:
                if ch.stash or poll_cq_into(ch, POLL_BATCH):
                    return
            if _send.reap_sends(self):
                return
            t = now()
            if deadline is not None and t >= deadline:
                return
            if t - start < SPIN_SECONDS:
                continue
            pause = sleep if deadline is None else min(sleep, deadline - t)
            time.sleep(max(pause, 0.0))
            sleep = min(sleep * 2, SLEEP_MAX)

    def fds(self) -> Sequence[int]:
        return []

    def stats(self) -> dict[str, Any]:
        return {
            "device": self.name, "port": self.port, "gid_index": self.gid.index,
            "gid": self.gid.text, "active_mtu": self.active_mtu, "max_inline": self.max_inline,
            "tx_datagrams": self.tx_datagrams, "tx_bytes": self.tx_bytes,
            "tx_inline": self.tx_inline, "tx_pushbacks": self.tx_pushbacks,
            "tx_errors": self.tx_errors, "rx_datagrams": self.rx_datagrams,
            "rx_bytes": self.rx_bytes, "rx_priority": self.rx_priority,
            "rx_errors": self.rx_errors, "rx_oversize": self.rx_oversize,
            "send_outstanding": [ch.outstanding for ch in getattr(self, "_chans", ())],
            "qp_recoveries": self.qp_recoveries, "stale_completions": self.stale_completions,
            "address_handles": len(self._dests),
        }

    def describe(self) -> str:
        return (f"verbs {self.name} port {self.port} ({self.link_layer}) gid[{self.gid.index}] "
                f"{self.gid.text} ({self.gid.why}) mtu {self.active_mtu} inline {self.max_inline} "
                f"sq {self.send_queue_depth} rq {self.recv_queue_depth} qpn "
                f"{self._address.priority_qpn}/{self._address.data_qpn}")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._dests.clear()
        self._lent.clear()
        # Children first: AHs and QPs, then CQs, the MR, the PD, the context.
        for obj in reversed(self._objs):
            try:
                obj.close()
            except Exception:
                pass
        self._objs.clear()
        ctx = getattr(self, "_ctx", None)
        if ctx is not None:
            try:
                ctx.close()
            except Exception:
                pass
        # The mappings stay alive while a caller holds a view of them; drop our references.
        self._maps.clear()
