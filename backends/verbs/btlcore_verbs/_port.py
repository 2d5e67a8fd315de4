"""Finding where to run: the RDMA device, its active port, and the GID to send from.

Used when a device opens and by the backend's probe; a missing device or port raises
:class:`Unavailable` with the reason (a probe reason), a bad option :class:`ConfigError`."""

from __future__ import annotations

import ipaddress
import os
from typing import Any

import attrs

from btlcore.errors import ConfigError

from . import _address
from ._options import VerbsOptions

_PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}


class Unavailable(Exception):
    """No usable RDMA device/port here; the message says why (a probe reason)."""


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
