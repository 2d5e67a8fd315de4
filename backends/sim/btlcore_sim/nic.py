"""A simulated NIC: the device object the ``sim`` backend hands to the core.

It owns what a real NIC owns: two channels (priority and data) with their MTUs, a send
queue and a receive queue per channel, and an address.  It does not own the wire: frames
leave through the :class:`~btlcore_sim.links.Link` that ``resolve`` returned, and
arrive in ``rx`` when the fabric lands them.

Queues behave like a NIC's, not like a socket's:

* A send-queue slot is taken from post until the frame's last bit left the rate limiter
  (at once on an unlimited link).  ``post_send`` returns False when every slot is taken,
  and the datagram is not lost: the core posts it again.  The fabric wakes ``wait`` when
  the first slot frees.
* A receive queue holds ``recv_queue_depth`` frames; a frame landing on a full one is
  dropped and counted (``rx_queue``), as a NIC with no posted receive buffer drops it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from btlcore.device import Capabilities, Channel, ChannelInfo
from btlcore.errors import ConfigError

from .links import Link

if TYPE_CHECKING:
    from .fabric import Fabric

DEFAULT_MTU = 9000
MIN_MTU = 64
MAX_MTU = 65507  # the largest UDP payload, so every frame fits the pcap's IPv4/UDP
DEFAULT_SEND_QUEUE_DEPTH = 1024
DEFAULT_RECV_QUEUE_DEPTH = 4096
MAX_QUEUE_DEPTH = 1 << 24
ADDRESS_PREFIX = b"\x02\x00\x00\x00"
"""An address is a locally administered MAC, 02:00:00:00:hi:lo, with the node id in the
last two bytes; the pcap uses it as the Ethernet address too."""
ADDRESS_LEN = 6
MAX_NODES = 0xFFFF
_EMPTY: tuple[Any, ...] = ()

OPTIONS = ("fabric", "mtu", "send_queue_depth", "recv_queue_depth", "name", "seed", "address")


def node_address(node_id: int) -> bytes:
    return ADDRESS_PREFIX + node_id.to_bytes(2, "big")


def parse_address(address: Any) -> int:
    """The node id in ``address``; ValueError if it is not a sim address."""
    if not isinstance(address, (bytes, bytearray, memoryview)):
        raise ValueError(f"a sim address is {ADDRESS_LEN} bytes, not {type(address).__name__}")
    raw = bytes(address)
    if len(raw) != ADDRESS_LEN or raw[:4] != ADDRESS_PREFIX:
        raise ValueError(f"malformed sim address {raw.hex(':')}: expected 02:00:00:00:xx:xx")
    node_id = int.from_bytes(raw[4:], "big")
    if node_id == 0:
        raise ValueError(f"malformed sim address {raw.hex(':')}: node id 0 is never assigned")
    return node_id


def _int_option(options: Mapping[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"bad value {value!r} for sim option {name!r}: allowed is an integer "
                          f"from {lo} to {hi}")
    return value


def check_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the device options; return them with defaults filled in (fabric excepted)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigError(f"unknown sim option {unknown[0]!r}; allowed options: {', '.join(OPTIONS)}")
    name = options.get("name")
    if name is not None and (not isinstance(name, str) or not name or "->" in name):
        raise ConfigError(f"bad value {name!r} for sim option 'name': allowed is a non-empty "
                          "string without '->'")
    seed = options.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"bad value {seed!r} for sim option 'seed': allowed is an integer")
    address = options.get("address")
    if address is not None:
        try:
            parse_address(address)
        except ValueError as exc:
            raise ConfigError(f"bad value for sim option 'address': {exc}") from None
    return {
        "address": None if address is None else bytes(address),
        "mtu": _int_option(options, "mtu", DEFAULT_MTU, MIN_MTU, MAX_MTU),
        "send_queue_depth": _int_option(options, "send_queue_depth", DEFAULT_SEND_QUEUE_DEPTH,
                                        1, MAX_QUEUE_DEPTH),
        "recv_queue_depth": _int_option(options, "recv_queue_depth", DEFAULT_RECV_QUEUE_DEPTH,
                                        1, MAX_QUEUE_DEPTH),
        "name": name,
        "seed": seed,
    }


class SimNIC:
    """One NIC on a :class:`~btlcore_sim.fabric.Fabric`.  Lists indexed by
    channel (``rx``, ``mtus``, ...) are shared with the links that feed this NIC and are
    only ever changed in place.  A plain slotted class, not attrs: compiled, its per-frame
    methods (:meth:`post_many`, :meth:`poll_from`) read typed slots."""

    __slots__ = ("fabric", "node_id", "name", "mtu", "send_queue_depth", "recv_queue_depth", "address",
                 "mtus", "sq_depth", "rq_depth", "rx", "rx_from", "inflight", "completed", "closed",
                 "links", "wake_at", "instance")
    fabric: Fabric
    node_id: int
    name: str
    mtu: int
    send_queue_depth: int
    recv_queue_depth: int
    address: bytes
    mtus: list[int]
    """Per channel: the MTU granted by create_channel (-1 once closed)."""
    sq_depth: list[int]
    rq_depth: list[int]
    rx: list[list[bytes]]
    """Per channel: frames landed and not yet polled."""
    rx_from: list[list[Any]]
    """Per channel, parallel to ``rx``: each frame's source (its link's ``sources``)."""
    inflight: list[list[float]]
    """Per channel: the times at which taken send-queue slots free, sorted (a link's frames
    leave in order, so a new one nearly always goes at the end; reaping cuts a prefix)."""
    completed: int
    """Send completions not yet reaped by poll_completions."""
    closed: bool
    links: dict[int, Link]
    """Outgoing links by destination node id (resolve's cache)."""
    wake_at: float
    instance: int
    """How many NICs the fabric had opened before this one (reopens included)."""

    def __init__(self, fabric: Fabric, node_id: int, name: str, mtu: int, send_queue_depth: int,
                 recv_queue_depth: int) -> None:
        self.fabric = fabric
        self.node_id = node_id
        self.name = name
        self.mtu = mtu
        self.send_queue_depth = send_queue_depth
        self.recv_queue_depth = recv_queue_depth
        self.address = node_address(node_id)
        self.mtus = [mtu, mtu]
        self.sq_depth = [send_queue_depth] * 2
        self.rq_depth = [recv_queue_depth] * 2
        self.rx = [[], []]
        self.rx_from = [[], []]
        self.inflight = [[], []]
        self.completed = 0
        self.closed = False
        self.links = {}
        self.wake_at = -1.0
        self.instance = 0

    def __repr__(self) -> str:
        return f"SimNIC({self.name!r}, node_id={self.node_id}{', closed' if self.closed else ''})"

    @property
    def seed(self) -> int:
        """Declared as ``Capabilities.seed``, from which the core seeds its own generator: the fabric's seed
        and this NIC's opening, so that a NIC reopened at an old address (a restarted
        process) draws a new incarnation, yet every run with the same seed is the same."""
        return self.fabric.seed * 1_000_003 + self.instance

    # -- control path -------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        return Capabilities(
            mtu=self.mtu,
            max_inline=0,
            send_queue_depth=self.send_queue_depth,
            recv_queue_depth=self.recv_queue_depth,
            integrity=self.fabric.integrity,  # only a fabric that can never corrupt says so
            virtual_time=True,
            reports_source=True,
            seed=self.seed,
            instance=self.instance,
        )

    def create_channel(self, channel: int, mtu: object) -> ChannelInfo:
        channel = Channel(channel)
        if isinstance(mtu, bool) or not isinstance(mtu, int) or mtu < MIN_MTU:
            raise ValueError(f"channel MTU {mtu!r}: must be an integer >= {MIN_MTU}")
        granted = min(mtu, self.mtu)
        if not self.closed:
            self.mtus[channel] = granted
        return ChannelInfo(channel, granted, self.sq_depth[channel], self.rq_depth[channel])

    def resolve(self, address: Any) -> Link:
        if self.closed:
            raise RuntimeError(f"{self.name}: device is closed")
        node_id = parse_address(address)
        dst = self.fabric.nics.get(node_id)
        if dst is None:
            raise ValueError(f"unknown sim address {bytes(address).hex(':')}: no such NIC on "
                             f"this fabric")
        return self.fabric.link(self, dst)

    # -- the per-frame path (the plugin's post and poll hooks) ----------------------------

    def post_many(self, items: Sequence[tuple[int, Any, Any]]) -> int:
        """Post ``(channel, dest, data)`` items in order; return how many were taken (a full
        send queue stops the batch).  The driver hands over a progress pass's frames in one
        call, so the per-frame work here is a few slot reads and one append or heap push: on a
        perfect link the frame lands in the peer's receive queue at once, with no event made."""
        mtus = self.mtus
        inflight = self.inflight
        sq_depth = self.sq_depth
        i = 0
        total = len(items)
        while i < total:
            channel, dest, data = items[i]
            if not isinstance(dest, Link) or dest.src is not self:
                raise ValueError(f"destination {dest!r} was not resolved on {self.name}")
            n = len(data)
            if n > mtus[channel]:
                if self.closed:
                    raise RuntimeError(f"{self.name}: device is closed")
                raise ValueError(f"{self.name}: a {n}-byte datagram exceeds channel "
                                 f"{Channel(channel).name}'s MTU of {mtus[channel]}")
            infl = inflight[channel]
            if infl and len(infl) >= sq_depth[channel] and not self.reap(channel):
                return i  # the send queue is full; the fabric wakes wait() when a slot frees
            i += 1
            if dest.ideal and n <= dest.dst_mtus[channel]:
                queue = dest.dst_rx[channel]
                if len(queue) < dest.dst_depth[channel]:
                    queue.append(data if type(data) is bytes else bytes(data))
                    dest.dst_rx_from[channel].append(dest.sources[channel])
                    dest.fast_frames += 1
                    dest.fast_bytes += n
                    self.completed += 1
                    dest.fabric.landed = True
                    continue
            dest.transmit(channel, data)
            if dest.plain and i < total:
                i = dest.transmit_run(channel, items, i)  # the frames that follow it on this link
        return total

    def poll_from(self, budget: int) -> tuple[Sequence[bytes], Sequence[Any]]:
        """Up to ``budget`` frames, priority channel first, and their sources: the sending NIC's
        address and channel, ``(address, channel)``.  The receive queues and their parallel
        source queues are cut alike, handing over whole lists where the budget allows."""
        rx = self.rx
        rx_from = self.rx_from
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
        if len(prio) + len(data) <= budget:
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
        rx[0] = []
        rx_from[0] = []
        rest = budget - len(prio)
        data_from = rx_from[1]
        prio.extend(data[:rest])
        prio_from.extend(data_from[:rest])
        del data[:rest], data_from[:rest]
        return prio, prio_from

    def reap(self, channel: int) -> bool:
        """Free the send-queue slots whose frames have left; True if one is free now.
        When none is, ask the fabric to wake ``wait`` when the first one frees."""
        infl = self.inflight[channel]
        if infl and infl[0] <= self.fabric.now:
            done = bisect_right(infl, self.fabric.now)
            del infl[:done]
            self.completed += done
        if len(infl) < self.sq_depth[channel]:
            return True
        if self.wake_at != infl[0]:
            self.wake_at = infl[0]
            self.fabric.wake(infl[0])
        return False

    def poll_completions(self) -> int:
        for channel in (0, 1):
            if self.inflight[channel]:
                self.reap(channel)
        done = self.completed
        self.completed = 0
        return done

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.mtus[:] = [-1, -1]  # in place: links landing frames here now drop them
        for queue in (*self.rx, *self.rx_from):
            queue.clear()
        for infl in self.inflight:
            infl.clear()
        self.fabric.nic_closed(self)
