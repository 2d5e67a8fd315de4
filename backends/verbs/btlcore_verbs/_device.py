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
"""

from __future__ import annotations

import ctypes
import ipaddress
import mmap
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from btlcore.device import Capabilities, Channel, ChannelInfo
from btlcore.errors import ConfigError

from . import _address, _pyverbs
from ._options import ALLOWED, VerbsOptions

GRH = 40
INLINE_WANT = 256  # inline bytes asked of the QP when inline is auto/on
POLL_BATCH = 32  # work completions taken per cq.poll call
_INLINE_SLOT = 0xFFFFFF  # wr_id slot for inline sends (no buffer held)
_SLOT_MASK = 0xFFFFFF
SPIN_SECONDS = 50e-6  # wait(): busy-poll this long before sleeping
SLEEP_MIN, SLEEP_MAX = 20e-6, 1e-3  # wait(): sleeps between polls, doubling


_PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}


class Unavailable(Exception):
    """No usable RDMA device/port here; the message says why (a probe reason)."""


def _round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def _gid_bytes(text: str) -> bytes:
    return bytes.fromhex(str(text).replace(":", ""))


def _gid_text(raw: bytes) -> str:
    h = raw.hex()
    return ":".join(h[i:i + 4] for i in range(0, 32, 4))


def mtu_bytes(enum_value: int) -> int:
    """ibv_mtu (1..5) -> bytes (256..4096)."""
    return 128 << int(enum_value)


@attrs.define(slots=True)
class GidChoice:
    index: int
    gid: bytes
    gid_type: int
    why: str

    @property
    def text(self) -> str:
        return _address.gid_str(self.gid)


def _gid_entries(pv: dict[str, Any], ctx: Any, port: int, table_len: int) -> list[tuple[int, bytes, int]]:
    """(index, gid, type) of the port's non-zero GIDs."""
    out = []
    try:
        for ent in ctx.query_gid_table(max(table_len, 1) * 4):
            if ent.port_num == port:
                text = ent.gid_str() if callable(ent.gid_str) else ent.gid_str
                out.append((int(ent.gid_index), _gid_bytes(text), int(ent.gid_type)))
    except Exception:  # older kernels: no ioctl for the table; walk it
        out = []
        for i in range(table_len):
            try:
                raw = _gid_bytes(str(ctx.query_gid(port, i)))
            except Exception:
                continue
            try:  # ibv_query_gid_type speaks ibv_gid_type_sysfs: 0 IB/RoCE v1, 1 RoCE v2
                gtype = 2 if int(ctx.query_gid_type(port, i)) == 1 else 1
            except Exception:
                gtype = -1
            out.append((i, raw, gtype))
    return sorted(e for e in out if e[1] != bytes(16))


def choose_gid(pv: dict[str, Any], ctx: Any, dev_name: str, port: int, table_len: int,
               want: int | None) -> GidChoice:
    """The GID index to send from.  ``want`` None: skip zero GIDs, prefer an IPv4-mapped RoCE
    v2 GID (it routes over IP; link-local index 0 often does not), then any RoCE v2 GID that
    is not link-local, then anything non-link-local, then the first."""
    e = pv["e"]
    entries = _gid_entries(pv, ctx, port, table_len)
    v2 = int(e.IBV_GID_TYPE_ROCE_V2)
    if want is not None:
        for idx, raw, gtype in entries:
            if idx == want:
                return GidChoice(idx, raw, gtype, "option gid_index")
        listing = ", ".join(f"{i} ({_address.gid_str(r)})" for i, r, _ in entries) or "none"
        raise ConfigError(f"bad value {want!r} for verbs option 'gid_index' (BTL_VERBS_GID_INDEX): "
                          f"{dev_name} port {port} has no non-zero GID there; usable: {listing}")
    if not entries:
        raise Unavailable(f"{dev_name} port {port} has no non-zero GID (is its netdev up with an "
                          "IP address?)")

    def score(ent: tuple[int, bytes, int]) -> int:
        ip = ipaddress.IPv6Address(ent[1])
        if ent[2] == v2 and ip.ipv4_mapped is not None:
            return 3
        if ent[2] == v2 and not ip.is_link_local:
            return 2
        return 1 if not ip.is_link_local else 0

    best = max(entries, key=lambda ent: (score(ent), -ent[0]))
    why = {3: "IPv4-mapped RoCE v2", 2: "RoCE v2", 1: "not link-local", 0: "first non-zero"}[score(best)]
    return GidChoice(best[0], best[1], best[2], why)


def list_devices(pv: dict[str, Any]) -> list[str]:
    """Names of the RDMA devices; raises Unavailable saying why there are none."""
    try:
        devs = pv["get_device_list"]()
    except Exception as exc:
        devs = None
        err = f"{type(exc).__name__}: {exc}"
    if not devs:
        if not os.path.isdir("/sys/class/infiniband_verbs"):
            why = "the kernel has no ib_uverbs loaded (and no RDMA driver such as rdma_rxe)"
        elif not os.listdir("/sys/class/infiniband"):
            why = ("ib_uverbs is loaded but no device is registered; for Soft-RoCE: modprobe "
                   "rdma_rxe; rdma link add rxe0 type rxe netdev lo")
        else:
            why = ("devices exist in /sys/class/infiniband but libibverbs has no provider for "
                   "them (install ibverbs-providers)")
        if devs is None:
            why += f"; ibv_get_device_list failed ({err})"
        raise Unavailable(f"no RDMA devices: {why}")
    return [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in devs]


def find_port(pv: dict[str, Any], opts: VerbsOptions) -> tuple[Any, str, int, Any]:
    """Open the device and pick the port: -> (context, name, port, port_attr).

    An explicitly named device or port that does not exist raises ConfigError; no active
    port raises Unavailable."""
    names = list_devices(pv)
    if opts.device is not None and opts.device not in names:
        raise ConfigError(f"bad value {opts.device!r} for verbs option 'device' (BTL_VERBS_DEVICE): "
                          f"no such RDMA device; devices here: {', '.join(names)}")
    active = int(pv["e"].IBV_PORT_ACTIVE)
    seen = []
    for name in [opts.device] if opts.device else names:
        ctx = pv["Context"](name=name)
        try:
            nports = ctx.query_device().phys_port_cnt
            if opts.port is not None and opts.port > nports:
                raise ConfigError(f"bad value {opts.port!r} for verbs option 'port' (BTL_VERBS_PORT): "
                                  f"{name} has {nports} port(s)")
            for port in [opts.port] if opts.port else range(1, nports + 1):
                attr = ctx.query_port(port)
                if int(attr.state) == active:
                    return ctx, name, port, attr
                state = _PORT_STATES.get(int(attr.state), str(int(attr.state)))
                seen.append(f"{name} port {port} is {state}")
        except BaseException:
            ctx.close()
            raise
        ctx.close()
    raise Unavailable("no active RDMA port: " + "; ".join(seen))


# ---------------------------------------------------------------------------------------
# Per-packet functions: plain functions taking the device first, installed both as methods
# and (in plugin.py) as the hook implementations, so the core's direct calls land here.


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


def _reap_sends(device: VerbsDevice) -> int:
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


def _poll_cq_into(device: VerbsDevice, ch: _Chan, limit: int) -> int:
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
            _poll_cq_into(device, ch, budget - len(out) - len(ch.stash))
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
    _poll_cq_into(device, ch, 1 << 30)
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


def _repost(device: VerbsDevice) -> None:
    lent = device._lent
    for ch, slot in lent:
        try:
            ch.qp.post_recv(ch.recv_wrs[slot])
        except device._rdma_error as exc:
            device.rx_errors += 1
            device.last_error = f"post_recv failed: {exc}"
    lent.clear()


@attrs.define(slots=True, eq=False)
class Destination:
    """A resolved peer: its address handle, QPNs by channel, QKey and datagram limit."""

    address: _address.VerbsAddress
    ah: Any
    qpns: tuple[int, int]
    qkey: int
    max_datagram: int


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


class VerbsDevice:
    """One verbs device: a priority and a data UD QP on one port of one RDMA device."""

    post_send = post_send
    poll_recv = poll_recv

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
        _reap_sends(self)
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
                if ch.stash or _poll_cq_into(self, ch, POLL_BATCH):
                    return
            if _reap_sends(self):
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
