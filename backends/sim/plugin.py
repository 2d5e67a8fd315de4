"""The ``sim`` backend's hook implementations (entry point ``btlcore.backends.sim.plugin``).

``btlcore.device.DeviceOps.bind`` binds these functions to a :class:`SimNIC`, so
``ops.post_send(channel, dest, data)`` calls :func:`btl_device_post_send` directly.  The
per-frame hooks (``post_send_many``, which ``post_send`` wraps, ``poll_recv_from``, which
``poll_recv`` wraps, ``wait``)
are the implementation, not wrappers: on a perfect link a post lands the frame in the
peer's receive queue in a handful of slot reads, with no event, closure or object made.
Everything else delegates to the NIC or the fabric.

Device options (``btlcore.registry.open_device("sim", options)``):

``fabric``            the :class:`~btlcore.backends.sim.fabric.Fabric` to join (default:
                      the process-wide one, made with ``seed`` on first use)
``mtu``               largest datagram, bytes (default 9000; 64 to 65507)
``send_queue_depth``  send-queue slots per channel (default 1024)
``recv_queue_depth``  receive-queue frames per channel (default 4096)
``name``              the NIC's name in stats and pcap comments (default ``sim<N>``)
``seed``              only used to make the default fabric
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from btlcore.device import Capabilities, Channel, ChannelInfo, Probe, hookimpl

from .fabric import open_nic
from .links import Link
from .nic import SimNIC

_EMPTY: tuple[Any, ...] = ()


@hookimpl
def btl_backend_probe(options: Mapping[str, Any]) -> Probe:
    return Probe(True, "simulated fabric in virtual time (always available)")


@hookimpl
def btl_device_open(options: Mapping[str, Any]) -> SimNIC:
    return open_nic(options)


@hookimpl
def btl_device_capabilities(device: SimNIC) -> Capabilities:
    return device.capabilities()


@hookimpl
def btl_device_create_channel(device: SimNIC, channel: Channel, mtu: int) -> ChannelInfo:
    return device.create_channel(channel, mtu)


@hookimpl
def btl_device_post_send(device: SimNIC, channel: Channel, dest: Link,
                         data: bytes | bytearray | memoryview) -> bool:
    return btl_device_post_send_many(device, ((channel, dest, data),)) == 1


@hookimpl
def btl_device_post_send_many(device: SimNIC, items: Sequence[tuple[Channel, Link, Any]]) -> int:
    """Post ``(channel, dest, data)`` items in order; return how many were taken (a full
    send queue stops the batch).  The driver hands over a progress pass's frames in one
    call, so the per-frame work here is a few slot reads and one append or heap push."""
    mtus = device.mtus
    inflight = device.inflight
    sq_depth = device.sq_depth
    i = 0
    total = len(items)
    while i < total:
        channel, dest, data = items[i]
        if dest.src is not device:
            raise ValueError(f"destination {dest!r} was not resolved on {device.name}")
        n = len(data)
        if n > mtus[channel]:
            if device.closed:
                raise RuntimeError(f"{device.name}: device is closed")
            raise ValueError(f"{device.name}: a {n}-byte datagram exceeds channel "
                             f"{Channel(channel).name}'s MTU of {mtus[channel]}")
        infl = inflight[channel]
        if infl and len(infl) >= sq_depth[channel] and not device.reap(channel):
            return i  # the send queue is full; the fabric wakes wait() when a slot frees
        i += 1
        if dest.ideal and n <= dest.dst_mtus[channel]:
            queue = dest.dst_rx[channel]
            if len(queue) < dest.dst_depth[channel]:
                queue.append(bytes(data))
                dest.dst_rx_from[channel].append(dest.sources[channel])
                dest.fast_frames += 1
                dest.fast_bytes += n
                device.completed += 1
                dest.fabric.landed = True
                continue
        dest.transmit(channel, data)
        if dest.plain and i < total:
            i = dest.transmit_run(channel, items, i)  # the frames that follow it on this link
    return total


@hookimpl
def btl_device_poll_recv(device: SimNIC, budget: int) -> Sequence[bytes]:
    return btl_device_poll_recv_from(device, budget)[0]


@hookimpl
def btl_device_poll_recv_from(device: SimNIC, budget: int) -> tuple[Sequence[bytes], Sequence[Any]]:
    """Up to ``budget`` frames, priority channel first, and their sources: the sending NIC's
    address and channel, ``(address, channel)``.  The receive queues and their parallel
    source queues are cut alike, handing over whole lists where the budget allows."""
    rx = device.rx
    rx_from = device.rx_from
    prio = rx[0]
    data = rx[1]
    if not prio:
        if not data:
            return _EMPTY, _EMPTY
        data_from = rx_from[1]
        if len(data) <= budget:
            rx[1] = []
            rx_from[1] = []
            return data, data_from
        out, out_from = data[:budget], data_from[:budget]
        del data[:budget], data_from[:budget]
        return out, out_from
    prio_from = rx_from[0]
    total = len(prio) + len(data)
    if total <= budget:
        rx[0] = []
        rx_from[0] = []
        if data:
            prio.extend(data)
            prio_from.extend(rx_from[1])
            data.clear()
            rx_from[1].clear()
        return prio, prio_from
    if len(prio) >= budget:
        out, out_from = prio[:budget], prio_from[:budget]
        del prio[:budget], prio_from[:budget]
        return out, out_from
    out, out_from = prio, prio_from
    rx[0] = []
    rx_from[0] = []
    rest = budget - len(out)
    data_from = rx_from[1]
    out.extend(data[:rest])
    out_from.extend(data_from[:rest])
    del data[:rest], data_from[:rest]
    return out, out_from


@hookimpl
def btl_device_poll_completions(device: SimNIC) -> int:
    return device.poll_completions()


@hookimpl
def btl_device_local_address(device: SimNIC) -> bytes:
    return device.address


@hookimpl
def btl_device_resolve(device: SimNIC, address: bytes) -> Link:
    return device.resolve(address)


@hookimpl
def btl_device_clock(device: SimNIC) -> Callable[[], float]:
    return device.fabric.clock


@hookimpl
def btl_device_wait(device: SimNIC, deadline: float | None) -> None:
    device.fabric.advance(deadline)


@hookimpl
def btl_device_fds(device: SimNIC) -> Sequence[int]:
    return []


@hookimpl
def btl_device_close(device: SimNIC) -> None:
    device.close()
