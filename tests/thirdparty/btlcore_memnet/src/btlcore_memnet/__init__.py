"""``memnet``: a btlcore backend living in its own distribution, knowing btlcore only
through its public Device interface.  Devices in one process share a switch; datagrams are
queued in memory and delivered on the next poll (unreliable only in that a full receive
queue drops).  It exists to prove that a third party's backend works with no change to
btlcore."""

from __future__ import annotations

import itertools
import struct
import time
from collections import deque

from btlcore import Capabilities, ChannelInfo, ConfigError, Probe, hookimpl

_SWITCH: dict[int, "MemDevice"] = {}
_IDS = itertools.count(1)
_ADDR = struct.Struct("!4sI")
MAGIC = b"MEMN"


class MemDevice:
    def __init__(self, mtu: int, depth: int) -> None:
        self.id = next(_IDS)
        self.mtu = mtu
        self.depth = depth
        self.rx: deque[bytes] = deque()
        _SWITCH[self.id] = self


@hookimpl
def btl_backend_probe(options):
    return Probe(True, "in-process network (third-party test backend)")


@hookimpl
def btl_device_open(options):
    unknown = set(options) - {"mtu", "depth", "seed"}
    if unknown:
        raise ConfigError(f"unknown memnet option {sorted(unknown)[0]!r}; allowed: mtu, depth")
    return MemDevice(int(options.get("mtu", 4096)), int(options.get("depth", 100000)))


@hookimpl
def btl_device_capabilities(device):
    return Capabilities(mtu=device.mtu, integrity=True)


@hookimpl
def btl_device_create_channel(device, channel, mtu):
    return ChannelInfo(channel, min(mtu, device.mtu), device.depth, device.depth)


@hookimpl
def btl_device_post_send(device, channel, dest, data):
    peer = _SWITCH.get(dest)
    if peer is not None and len(peer.rx) < peer.depth:
        peer.rx.append(bytes(data))
    return True


@hookimpl
def btl_device_poll_recv(device, budget):
    rx = device.rx
    return [rx.popleft() for _ in range(min(budget, len(rx)))]


@hookimpl
def btl_device_poll_completions(device):
    return 0


@hookimpl
def btl_device_local_address(device):
    return _ADDR.pack(MAGIC, device.id)


@hookimpl
def btl_device_resolve(device, address):
    if len(address) != _ADDR.size or address[:4] != MAGIC:
        raise ValueError(f"not a memnet address: {bytes(address).hex()}")
    return _ADDR.unpack(address)[1]


@hookimpl
def btl_device_clock(device):
    return time.monotonic


@hookimpl
def btl_device_wait(device, deadline):
    pass  # everything is delivered at once: nothing to wait for


@hookimpl
def btl_device_close(device):
    _SWITCH.pop(device.id, None)
