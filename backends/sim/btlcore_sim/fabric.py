"""The simulated fabric: NICs, the links between them, scripted faults, capture and stats.

A :class:`Fabric` is a switch with a perfect clock.  Every pair of NICs is joined by two
independent :class:`~btlcore_sim.links.Link` directions, each following a
:class:`~btlcore_sim.links.LinkModel` (the fabric's default unless ``set_link``
gave that direction its own).  Time is virtual (:class:`Scheduler`): it moves only when a
device's ``wait`` is called, so a 30-second scenario runs in as much wall time as its frames
cost.  One integer seed decides every random draw: each direction has its own
``random.Random`` seeded from ``(seed, src node id, dst node id)``, so a run is replayable
frame for frame, and traffic on one link never shifts the draws of another.

Nodes are named in the API by anything that identifies a NIC: its address (bytes), its
name (str), the device object, or the :class:`~btlcore.device.DeviceOps` from
``open_device``.
"""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mypy_extensions import mypyc_attr

from btlcore.errors import BtlDeprecationWarning, ConfigError
from btlcore.faults import Faults, Rule, make_rule
from btlcore.protocol import wire

from .links import DROP_CAUSES, Link
from .models import LinkModel
from .nic import MAX_NODES, SimNIC, check_options, parse_address
from .pcap import PcapWriter
from .queues import Bottleneck
from .rules import Partition, normalise_fields
from .scheduler import Scheduler

NodeRef = Any
"""bytes (an address), str (a name), a SimNIC, or a DeviceOps."""


# subclassed by pure Python (third parties, tests): allowed when compiled
@mypyc_attr(allow_interpreted_subclasses=True)
class Fabric(Scheduler):
    """Any number of simulated NICs on one virtual clock.  See the module docstring."""

    __slots__ = ("seed", "_opened", "nics", "names", "_default", "_models", "_links", "_partitions",
                 "faults", "_keys", "integrity", "_shared", "bottlenecks")
    seed: int
    integrity: bool
    """The fabric never corrupts a frame (see ``__init__``); its NICs report it."""
    _opened: int
    nics: dict[int, SimNIC]
    names: dict[str, SimNIC]
    _default: LinkModel
    _models: dict[tuple[int, int], LinkModel]
    _links: dict[tuple[int, int], Link]
    _partitions: list[Partition]
    faults: Faults
    """The scripted faults of every link (:mod:`btlcore.faults`; ``src``, ``dst`` and
    ``peer`` name NICs as ``node`` does).  Each link draws from its own random stream."""
    _keys: dict[tuple[Any, ...], frozenset[bytes]]
    _shared: dict[tuple[int, int], Bottleneck]
    bottlenecks: list[Bottleneck]
    """The shared bottlenecks, in the order they were made."""

    def __init__(self, seed: int = 0, default: LinkModel | None = None,
                 pcap: str | os.PathLike[str] | None = None, coalesce: float = 0.0,
                 integrity: bool = False) -> None:
        """``coalesce``: interrupt coalescing, seconds (a NIC's rx-usecs).  0 wakes the
        receivers at every frame's exact arrival; e.g. 20e-6 lands everything due within
        20 us of the next arrival at once, so that receivers handle batches (much faster to
        simulate, and closer to a real NIC).  Deterministic either way.

        ``integrity``: a promise, kept for the fabric's whole life, that no frame is ever
        corrupted: a link model with ``corrupt > 0`` is refused (as the default or for any
        direction), and the NICs report ``Capabilities.integrity``, as a NIC with a link-level
        CRC does, so the core leaves out its own CRC32C (unless ``Config(crc="on")``).  Off
        by default: then corruption may be configured at any time, and the core checks."""
        Scheduler.__init__(self)
        if not isinstance(integrity, bool):
            raise ConfigError(f"bad value {integrity!r} for fabric 'integrity': allowed is True or False")
        self.integrity = integrity
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ConfigError(f"bad fabric seed {seed!r}: allowed is an integer")
        if not isinstance(coalesce, (int, float)) or isinstance(coalesce, bool) or not 0 <= coalesce <= 1:
            raise ConfigError(f"bad value {coalesce!r} for fabric 'coalesce': allowed is a number "
                              "of seconds from 0 to 1")
        self.coalesce = float(coalesce)
        self.seed = seed
        self.nics = {}
        self.names = {}
        self._opened = 0
        self._default = self._allowed(default) if default is not None else LinkModel()
        self._models = {}
        self._links = {}
        self._partitions = []
        self.faults = Faults(seed)
        self.faults.listeners.append(self._faults_changed)
        self._keys = {}
        self._shared = {}
        self.bottlenecks = []
        if pcap is not None:
            self.open_pcap(pcap)

    # -- nodes --------------------------------------------------------------------------

    def add_nic(self, options: Mapping[str, Any]) -> SimNIC:
        """Make a NIC from (already validated) device options; the backend's open hook."""
        if options.get("address") is not None:
            return self._reopen_nic(options)
        self._keys.clear()
        node_id = len(self.nics) + 1
        if node_id > MAX_NODES:
            raise ConfigError(f"a sim fabric holds at most {MAX_NODES} NICs")
        name = options.get("name") or f"sim{node_id}"
        if name in self.names:
            raise ConfigError(f"bad value {name!r} for sim option 'name': another NIC on this "
                              "fabric has it")
        return self._install_nic(node_id, name, options)

    def _install_nic(self, node_id: int, name: str, options: Mapping[str, Any]) -> SimNIC:
        """Make the NIC and file it under its node id and name; number its opening."""
        nic = SimNIC(self, node_id, name, options["mtu"], options["send_queue_depth"],
                     options["recv_queue_depth"])
        nic.instance = self._opened
        self._opened += 1
        self.nics[node_id] = nic
        self.names[name] = nic
        return nic

    def _reopen_nic(self, options: Mapping[str, Any]) -> SimNIC:
        """A new NIC at a closed NIC's address: a restarted process on the same host and
        port.  The links to and from the address are kept (peers' resolved destinations
        stay valid) and re-pointed at the new NIC; frames in flight to the old one are lost
        with it, as on a real restart."""
        node_id = parse_address(options["address"])
        old = self.nics.get(node_id)
        if old is None:
            raise ConfigError(f"bad value for sim option 'address': no NIC ever had "
                              f"{bytes(options['address']).hex(':')} on this fabric")
        if not old.closed:
            raise ConfigError(f"bad value for sim option 'address': {old.name} "
                              f"({old.address.hex(':')}) is still open; close it first")
        name = options.get("name") or old.name
        if name != old.name and name in self.names:
            raise ConfigError(f"bad value {name!r} for sim option 'name': another NIC on this "
                              "fabric has it")
        self.names.pop(old.name, None)
        nic = self._install_nic(node_id, name, options)
        nic.links = old.links
        for (src, dst), link in self._links.items():
            if src == node_id:
                link.src = nic
            if dst == node_id:
                link.dst = nic
                link.dst_rx = nic.rx
                link.dst_rx_from = nic.rx_from
                link.dst_mtus = nic.mtus
                link.dst_depth = nic.rq_depth
            if node_id in (src, dst):
                link.refresh()
        return nic

    def reopen(self, address: bytes, **options: Any) -> Any:
        """``open_device`` at a closed NIC's ``address`` (see :meth:`_reopen_nic`)."""
        return self.open_device(address=address, **options)

    def open_device(self, **options: Any) -> Any:
        """``btlcore.registry.open_device("sim", {"fabric": self, **options})``."""
        from btlcore import registry

        return registry.open_device("sim", {"fabric": self, **options})

    def node(self, ref: NodeRef) -> SimNIC:
        """The NIC ``ref`` names (address, name, device or DeviceOps); ValueError if none."""
        if isinstance(ref, SimNIC):
            if ref.fabric is not self:
                raise ValueError(f"NIC {ref.name} is on another fabric")
            return ref
        if isinstance(ref, str):
            if ref not in self.names:
                raise ValueError(f"no NIC named {ref!r} on this fabric; NICs: {', '.join(self.names)}")
            return self.names[ref]
        if isinstance(ref, (bytes, bytearray, memoryview)):
            node_id = parse_address(ref)
            if node_id not in self.nics:
                raise ValueError(f"unknown sim address {bytes(ref).hex(':')}: no such NIC on this fabric")
            return self.nics[node_id]
        device = getattr(ref, "device", None)
        if isinstance(device, SimNIC):
            return self.node(device)
        raise ValueError(f"cannot name a NIC with {ref!r}")

    def _group(self, refs: Iterable[NodeRef] | NodeRef) -> frozenset[int]:
        if isinstance(refs, (str, bytes, bytearray, memoryview, SimNIC)) or hasattr(refs, "device"):
            refs = [refs]
        return frozenset(self.node(r).node_id for r in refs)

    def nic_closed(self, nic: SimNIC) -> None:
        for (src, dst), link in self._links.items():
            if nic.node_id in (src, dst):
                link.refresh()

    # -- links --------------------------------------------------------------------------

    def link(self, src: SimNIC, dst: SimNIC) -> Link:
        """The direction ``src -> dst`` (made on first use; resolve returns it)."""
        link = src.links.get(dst.node_id)
        if link is not None:
            return link
        key = (src.node_id, dst.node_id)
        rng = random.Random(f"btlcore.sim/{self.seed}/{src.node_id}->{dst.node_id}")
        link = Link(self, src, dst, rng, name=f"{src.name}->{dst.name}")
        link.dst_rx = dst.rx
        link.dst_rx_from = dst.rx_from
        link.sources = tuple((src.address, channel) for channel in (0, 1))
        link.dst_mtus = dst.mtus
        link.dst_depth = dst.rq_depth
        self._links[key] = link
        src.links[dst.node_id] = link
        self._rebuild(link)
        return link

    def _rebuild(self, link: Link) -> None:
        """Re-read everything the fabric imposes on ``link`` (model, partitions, scripts)."""
        key = (link.src.node_id, link.dst.node_id)
        link.partitions = tuple(sorted((p.start, p.end) for p in self._partitions if p.cuts(*key)))
        src, dst = link.src.address, link.dst.address
        link.rules = tuple(r for r in self.faults.rules if r.on_path(src, dst, self.keys_of))
        link.shared = self._shared.get(key)
        link.apply(self._models.get(key, self._default), self.round_trip(*key))

    def round_trip(self, src: int, dst: int) -> float:
        """The fixed delay of ``src -> dst`` plus that of the way back: the round trip a
        ``queue_bdp`` queue is sized with."""
        there = self._models.get((src, dst), self._default)
        back = self._models.get((dst, src), self._default)
        return float(there.delay) + float(back.delay)

    def _rebuild_all(self) -> None:
        for link in self._links.values():
            self._rebuild(link)

    def _allowed(self, model: LinkModel) -> LinkModel:
        """``model``, unless it breaks the fabric's integrity promise."""
        if self.integrity and model.corrupt:
            raise ConfigError(f"link parameter 'corrupt' must be 0 on a fabric made with "
                              f"integrity=True (its NICs promise intact frames), not {model.corrupt!r}")
        return model

    @property
    def default_model(self) -> LinkModel:
        """The model of every direction that ``set_link`` did not name."""
        return self._default

    @default_model.setter
    def default_model(self, model: LinkModel) -> None:
        if not isinstance(model, LinkModel):
            raise TypeError(f"expected a LinkModel, got {type(model).__name__}")
        self._default = self._allowed(model)
        self._rebuild_all()
        self._size_bottlenecks()

    def set_link(self, src: NodeRef, dst: NodeRef, model: LinkModel | None, *,
                 both_ways: bool = False) -> None:
        """Give the direction ``src -> dst`` (and ``dst -> src`` if ``both_ways``) its own
        model; ``None`` returns it to the default.  Frames already in flight keep theirs."""
        if model is not None and not isinstance(model, LinkModel):
            raise TypeError(f"expected a LinkModel, got {type(model).__name__}")
        if model is not None:
            self._allowed(model)
        a, b = self.node(src).node_id, self.node(dst).node_id
        for key in ((a, b), (b, a)) if both_ways else ((a, b),):
            if model is None:
                self._models.pop(key, None)
            else:
                self._models[key] = model
        for key in ((a, b), (b, a)):  # the way back too: its round trip (a BDP queue) changed
            if key in self._links:
                self._rebuild(self._links[key])
        self._size_bottlenecks()

    def link_model(self, src: NodeRef, dst: NodeRef) -> LinkModel:
        key = (self.node(src).node_id, self.node(dst).node_id)
        return self._models.get(key, self._default)

    # -- shared bottlenecks -----------------------------------------------------------------

    def bottleneck(self, directions: Iterable[tuple[NodeRef, NodeRef]], rate_mbps: float, *,
                   queue_limit: int = 0, queue_bdp: float = 0.0, aqm: str = "droptail",
                   name: str | None = None) -> Bottleneck:
        """One queue and rate limiter that every ``(src, dst)`` direction in ``directions``
        feeds, so that flows between different node pairs compete for ``rate_mbps``; sized
        ``queue_limit`` bytes or ``queue_bdp`` times rate x the longest round trip carried;
        ``aqm`` ``droptail`` or ``codel`` (see :mod:`.queues`).  A direction feeds one
        bottleneck at most; its own rate and queue are then unused."""
        pairs = [(self.node(s).node_id, self.node(d).node_id) for s, d in directions]
        if not pairs:
            raise ValueError("a bottleneck needs at least one (src, dst) direction")
        taken = [k for k in pairs if k in self._shared]
        if taken:
            raise ValueError(f"direction {self.nics[taken[0][0]].name}->{self.nics[taken[0][1]].name} "
                             f"already feeds bottleneck {self._shared[taken[0]].name!r}")
        bn = Bottleneck(name or f"bottleneck{len(self.bottlenecks) + 1}", rate_mbps, queue_limit, queue_bdp, aqm)
        self.bottlenecks.append(bn)
        for key in pairs:
            self._shared[key] = bn
            if key in self._links:
                self._rebuild(self._links[key])
        self._size_bottlenecks()
        return bn

    def _size_bottlenecks(self) -> None:
        """Size each bottleneck's queue for the longest round trip and frame it carries."""
        for bn in self.bottlenecks:
            keys = [k for k, b in self._shared.items() if b is bn]
            rtt = max(self.round_trip(*k) for k in keys)
            frame = max(min(self._models.get(k, self._default).mtu or self.nics[k[0]].mtu,
                            self.nics[k[0]].mtu) for k in keys)
            bn.size(rtt, frame)

    # -- scripted faults ----------------------------------------------------------------

    def partition(self, start: float, end: float | None, group_a: Iterable[NodeRef] | NodeRef,
                  group_b: Iterable[NodeRef] | NodeRef | None = None) -> Partition:
        """Cut ``group_a`` from ``group_b`` (default: every other node, including NICs
        opened later), both ways, for virtual times ``start <= t < end``."""
        end_t = float("inf") if end is None else float(end)
        if not 0.0 <= float(start) <= end_t:
            raise ValueError(f"partition needs 0 <= start <= end, got start={start}, end={end}")
        a = self._group(group_a)
        b = None if group_b is None else self._group(group_b)
        if b is not None and a & b:
            raise ValueError("a node cannot be on both sides of a partition")
        part = Partition(float(start), end_t, a, b)
        self._partitions.append(part)
        self._rebuild_all()
        return part

    def heal(self, partition: Partition | None = None) -> None:
        """Remove one partition (or all of them) before it ends by itself."""
        if partition is None:
            self._partitions.clear()
        else:
            self._partitions.remove(partition)
        self._rebuild_all()

    def keys_of(self, refs: tuple[Any, ...]) -> frozenset[bytes]:
        """The addresses of the NICs ``refs`` names (how fault rules name nodes here)."""
        keys = self._keys.get(refs)
        if keys is None:
            keys = self._keys[refs] = frozenset(self.node(r).address for r in refs)
        return keys

    def _faults_changed(self) -> None:
        """``faults`` changed: refuse (and take back) a rule that cannot apply to this
        fabric, then re-read every link."""
        for rule in list(self.faults.rules):
            try:
                if rule.direction is not None:
                    raise ValueError("a fault's 'direction' applies where the plan sits on one endpoint "
                                     "(btlcore.open(..., faults=plan)); on a fabric name 'src' and 'dst'")
                for refs in (rule.src, rule.dst, rule.peer, *(rule.cut or ())):
                    if refs is not None:
                        self.keys_of(refs)  # (a NIC it names must exist: ValueError)
            except ValueError:
                self.faults.rules.remove(rule)
                self._rebuild_all()
                raise
        self._rebuild_all()

    def drop_nth(self, src: NodeRef, dst: NodeRef, n: int, *more: int) -> None:
        """Deprecated: ``faults.drop(src=..., dst=..., nth=...)``.  Drop the ``n``-th (and
        each of ``more``) frame offered to ``src -> dst``, counting from 1 since the link was
        made (every frame posted to it counts); dropped under the cause ``nth``."""
        warnings.warn("Fabric.drop_nth is deprecated: use fabric.faults.drop(src=..., dst=..., nth=...) "
                      "(btlcore.faults)", BtlDeprecationWarning, stacklevel=2)
        indices = (n, *more)
        if any(isinstance(i, bool) or not isinstance(i, int) or i < 1 for i in indices):
            raise ValueError(f"frame numbers count from 1, got {indices}")
        a, b = self.node(src), self.node(dst)
        link = self._links.get((a.node_id, b.node_id))
        offered = 0 if link is None else link.offered + link.fast_frames
        ahead = frozenset(i - offered for i in indices if i > offered)
        if ahead:  # (first, before every other rule, as the old nth list was)
            front = sum(1 for r in self.faults.rules if r.cause == "nth")
            self.faults.add(make_rule("drop", src=a.address, dst=b.address, nth=ahead, cause="nth"), front)

    def drop_matching(self, src: NodeRef | None = None, dst: NodeRef | None = None,
                      where: Callable[[wire.Datagram], bool] | None = None, *,
                      count: int | None = None, **fields: Any) -> Rule:
        """Deprecated: ``faults.drop(src=..., dst=..., where=..., count=..., **fields)``.
        Drop frames from ``src`` to ``dst`` (None: any) whose decoded fields equal
        ``fields`` and for which ``where(datagram)`` holds, at most ``count`` of them;
        dropped under the cause ``rule``.  Returns the rule (``rule.matched`` counts)."""
        warnings.warn("Fabric.drop_matching is deprecated: use fabric.faults.drop(src=..., dst=..., "
                      "where=..., count=..., **fields) (btlcore.faults)", BtlDeprecationWarning, stacklevel=2)
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ValueError(f"count must be None or an integer >= 1, got {count!r}")
        if where is None and not fields:
            raise ValueError("drop_matching needs fields to match or a 'where' predicate")
        return self.faults.add(make_rule(
            "drop", src=None if src is None else self.node(src).address,
            dst=None if dst is None else self.node(dst).address, where=where, count=count,
            cause="rule", **normalise_fields(fields)))

    def remove_rule(self, rule: Rule) -> None:
        """Remove a fault rule (``faults.remove(rule)``)."""
        self.faults.remove(rule)

    # -- capture ------------------------------------------------------------------------

    def open_pcap(self, path: str | os.PathLike[str]) -> None:
        """Capture from now on into the pcapng file ``path`` (see :mod:`.pcap`)."""
        self.close_pcap()
        self.pcap = PcapWriter(path)
        self._rebuild_all()

    def close_pcap(self) -> None:
        if self.pcap is not None:
            self.pcap.close()
            self.pcap = None
            self._rebuild_all()

    # -- reporting ----------------------------------------------------------------------

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per direction ``"src->dst"`` (in the order links were made): frames offered,
        delivered, dropped (total and by cause), duplicated, corrupted, and bytes."""
        return {link.name: link.stats() for link in self._links.values()}

    def queue_stats(self) -> dict[str, dict[str, Any]]:
        """Per shared bottleneck, by name: :meth:`Bottleneck.stats <.queues.Bottleneck.stats>`."""
        return {bn.name: bn.stats() for bn in self.bottlenecks}

    def totals(self) -> dict[str, Any]:
        """The sums of :meth:`stats` over every link."""
        out: dict[str, Any] = {"offered": 0, "delivered": 0, "dropped": 0, "drops": {},
                               "duplicated": 0, "corrupted": 0, "bytes_offered": 0,
                               "bytes_delivered": 0, "in_flight": 0}
        for link in self._links.values():
            st = link.stats()
            for key, value in st.items():
                if key == "drops":
                    for cause, n in value.items():
                        out["drops"][cause] = out["drops"].get(cause, 0) + n
                else:
                    out[key] += value
        out["drops"] = {c: out["drops"][c] for c in DROP_CAUSES if c in out["drops"]}
        out["in_flight"] = self.pending() - sum(1 for ev in self.heap if ev[2] is None)
        return out

    def close(self) -> None:
        """Close every NIC and the capture file."""
        for nic in list(self.nics.values()):
            nic.close()
        self.close_pcap()

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_default_fabric: Fabric | None = None


def default_fabric(seed: int = 0) -> Fabric:
    """The process-wide fabric that devices opened without a ``fabric`` option join.
    Made on first use with ``seed`` (later seeds are ignored; see :func:`reset_default_fabric`)."""
    global _default_fabric
    if _default_fabric is None:
        _default_fabric = Fabric(seed=seed)
    return _default_fabric


def reset_default_fabric(fabric: Fabric | None = None) -> None:
    """Forget (or replace) the process-wide fabric, closing the old one."""
    global _default_fabric
    if _default_fabric is not None and _default_fabric is not fabric:
        _default_fabric.close()
    _default_fabric = fabric


def open_nic(options: Mapping[str, Any]) -> SimNIC:
    """Validate device options and add a NIC to the chosen fabric."""
    checked = check_options(options)
    fabric = options.get("fabric")
    if fabric is None:
        fabric = default_fabric(checked["seed"])
    elif not isinstance(fabric, Fabric):
        raise ConfigError(f"bad value {fabric!r} for sim option 'fabric': allowed is a "
                          "btlcore_sim.Fabric")
    return fabric.add_nic(checked)
