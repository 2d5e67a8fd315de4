"""The ``sim`` backend's hook implementations (entry point ``btlcore_sim.plugin``).

``btlcore.device.DeviceOps.bind`` binds these functions to a :class:`SimNIC`, so
``ops.post_send(channel, dest, data)`` calls :func:`btl_device_post_send` directly.  The hooks
delegate to the NIC or the fabric: the per-frame ones (``post_send_many``, ``post_send``,
``poll_recv_from``, ``poll_recv``, ``wait``) to methods of the compiled :class:`SimNIC` and
:class:`Fabric` (a hook stays a pure function: pluggy marks it).

Device options (``btlcore.registry.open_device("sim", options)``):

``fabric``            the :class:`~btlcore_sim.fabric.Fabric` to join (default:
                      the process-wide one, made with ``seed`` on first use)
``mtu``               largest datagram, bytes (default 9000; 64 to 65507)
``send_queue_depth``  send-queue slots per channel (default 1024)
``recv_queue_depth``  receive-queue frames per channel (default 4096)
``name``              the NIC's name in stats and pcap comments (default ``sim<N>``)
``seed``              only used to make the default fabric

The ``btl`` command's hooks (:class:`btlcore.device.CliSpec`) are at the end: the link
options of ``btl transfer`` (``--loss``, ``--burst``, ...), ``--pcap``, and the local pair on
which ``btl demo`` and ``btl transfer --backend sim`` run both ends in one process.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from btlcore.device import Capabilities, Channel, ChannelInfo, LocalPair, Probe, hookimpl

from .fabric import Fabric, open_nic
from .links import Link
from .models import LinkModel
from .nic import MAX_NODES, SimNIC, node_address, parse_address
from .queues import CLI_DEFAULT_QUEUE, MIN_QUEUE_FRAMES, parse_queue


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
    return device.post_many(((channel, dest, data),)) == 1


@hookimpl
def btl_device_post_send_many(device: SimNIC, items: Sequence[tuple[Channel, Link, Any]]) -> int:
    """Post ``(channel, dest, data)`` items in order; return how many were taken (a full
    send queue stops the batch): :meth:`SimNIC.post_many <.nic.SimNIC.post_many>`."""
    return device.post_many(items)


@hookimpl
def btl_device_poll_recv(device: SimNIC, budget: int) -> Sequence[bytes]:
    return device.poll_from(budget)[0]


@hookimpl
def btl_device_poll_recv_from(device: SimNIC, budget: int) -> tuple[Sequence[bytes], Sequence[Any]]:
    """Up to ``budget`` frames, priority channel first, and their sources:
    :meth:`SimNIC.poll_from <.nic.SimNIC.poll_from>`."""
    return device.poll_from(budget)


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
def btl_device_reply_dest(device: SimNIC, source: Any) -> Link:
    """The link to the NIC a frame came from (its source is ``(address, channel)``)."""
    if not isinstance(source, tuple) or len(source) != 2:
        raise ValueError(f"sim: a source is (address, channel), not {source!r}")
    return device.resolve(source[0])


@hookimpl
def btl_device_peer_sources(device: SimNIC, dest: Link) -> tuple[Any, ...]:
    """The sources the NIC at the end of ``dest`` sends from: ``(its address, channel)``."""
    return tuple((dest.dst.address, channel) for channel in (0, 1))


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


@hookimpl
def btl_address_text(address: bytes) -> str:
    """``sim:N``, N the node id (the NIC's address is 02:00:00:00 and N in two bytes)."""
    return f"sim:{parse_address(address)}"


@hookimpl
def btl_address_parse(text: str) -> bytes:
    """``sim:N``, the MAC form ``02:00:00:00:00:05``, or hex."""
    body = text.strip()
    if body.startswith("sim:") and body[4:].isdigit():
        node = int(body[4:])
        if not 0 < node <= MAX_NODES:
            raise ValueError(f"sim address {text!r}: in sim:N, N (a node id) is 1 to {MAX_NODES}")
        return node_address(node)
    try:
        raw = bytes.fromhex(body.replace(":", ""))
        parse_address(raw)
    except ValueError:
        raise ValueError(f"expected a sim address as sim:N (N the node id), 02:00:00:00:hi:lo or "
                         f"hex, got {text!r}") from None
    return raw


# ---------------------------------------------------------------------------------- the btl command

CLI_COALESCE = 20e-6
"""20 us of interrupt coalescing, as a real NIC: receivers handle frames in batches."""
CLI_MTU = 9000
LINK_FLAGS = ("loss", "burst", "reorder", "duplicate", "corrupt", "delay", "rate", "queue", "mtu")
"""The flags a run's ``link`` (in ``btl transfer --json``) reports, as given."""
DEMO_LINK: dict[str, Any] = {"loss": "0.02", "burst": None, "reorder": "0.01", "duplicate": "0.005",
                             "corrupt": "0.002", "delay": "0.5,0.05", "rate": 1000.0, "mtu": CLI_MTU}
DEMO_DESCRIPTION = ("the simulator, 2% loss, 1% reorder, 0.5% duplicates, 0.2% corruption, "
                    "0.5 ms delay, 1 Gbit/s")


@hookimpl
def btl_cli_add_options(command: str, group: argparse._ArgumentGroup) -> None:
    if command == "transfer":
        group.add_argument("--loss", help="random loss probability")
        group.add_argument("--burst", metavar="P,LEN", help="Gilbert-Elliott: long-run loss P, mean burst LEN frames")
        group.add_argument("--reorder", help="probability a frame overtakes others")
        group.add_argument("--duplicate", help="duplicate probability")
        group.add_argument("--corrupt", help="bit-flip probability")
        group.add_argument("--delay", metavar="MS[,JITTER_MS]", help="one-way delay and jitter")
        group.add_argument("--rate", type=float, metavar="MBPS",
                           help=f"link rate, Mbit/s, behind a drop-tail queue (--queue; default {CLI_DEFAULT_QUEUE})")
        group.add_argument("--queue", metavar="SIZE",
                           help="the --rate link's queue: bytes (65536, 64K, 1M) or a multiple of the path's "
                           f"bandwidth-delay product, rate x round trip (2bdp, 0.5bdp; at least {MIN_QUEUE_FRAMES} "
                           f"datagrams); default {CLI_DEFAULT_QUEUE}")
    if command in ("transfer", "demo"):
        group.add_argument("--pcap", metavar="FILE", help="write every frame (and every drop) to FILE")


@hookimpl
def btl_cli_local_pair(command: str, args: argparse.Namespace, options: Mapping[str, Any],
                       seed: int) -> LocalPair:
    """Two NICs, ``a`` and ``b``, on a fabric of their own with the link the flags describe
    (``btl demo``: the demo's preset)."""
    given = DEMO_LINK if command == "demo" else {flag: getattr(args, flag, None) for flag in LINK_FLAGS}
    pcap = getattr(args, "pcap", None)
    fabric = Fabric(seed=seed, default=cli_link_model(given), pcap=pcap, coalesce=CLI_COALESCE)
    mtu = given["mtu"] or CLI_MTU
    ends = ({**options, "fabric": fabric, "mtu": mtu, "name": "a"},
            {**options, "fabric": fabric, "mtu": mtu, "name": "b"})

    def finish() -> dict[str, Any]:
        if pcap:
            fabric.close_pcap()
        out: dict[str, Any] = {"link": {k: v for k, v in given.items() if v is not None}, "fabric": fabric.stats()}
        if given.get("rate") is not None:  # the queue in force, bytes (a multiple of the BDP resolved)
            out["queue_bytes"] = fabric.link(fabric.node("a"), fabric.node("b")).queue_limit
        return out

    return LocalPair(ends, finish, DEMO_DESCRIPTION if command == "demo" else "the simulator")


def _prob(text: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{flag}: expected a probability from 0 to 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{flag}: expected a probability from 0 to 1, got {text!r}")
    return value


def _delay(text: str) -> tuple[float, ...]:
    """``--delay MS[,JITTER_MS]`` in seconds."""
    try:
        parts = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--delay: expected MS or MS,JITTER_MS, got {text!r}") from None
    if len(parts) > 2 or any(x < 0 for x in parts):
        raise ValueError(f"--delay: expected MS or MS,JITTER_MS (>= 0), got {text!r}")
    return tuple(x / 1000 for x in parts)


def cli_link_model(given: Mapping[str, Any]) -> LinkModel:
    """The link of ``btl transfer``'s flags (as given: text, ``rate`` a float); a bad value
    raises ``ValueError`` naming its flag."""
    kw: dict[str, Any] = {}
    if given.get("loss") is not None:
        kw["loss"] = _prob(given["loss"], "--loss")
    burst = given.get("burst")
    if burst is not None:
        try:
            p_s, n_s = burst.split(",")
            mean_len = float(n_s)
        except ValueError:
            raise ValueError(f"--burst: expected P,LEN (loss rate, mean burst length), got {burst!r}") from None
        kw["burst"] = (_prob(p_s, "--burst P"), mean_len)
    for name in ("reorder", "duplicate", "corrupt"):
        if given.get(name) is not None:
            kw[name] = _prob(given[name], f"--{name}")
    if given.get("delay") is not None:
        delay = _delay(given["delay"])
        kw["delay"] = delay[0]
        if len(delay) == 2:
            kw["jitter"] = delay[1]
    rate = given.get("rate")
    if rate is not None:
        if rate <= 0:
            raise ValueError(f"--rate: expected a positive Mbit/s figure, got {rate}")
        kw["rate_mbps"] = rate
        kw["queue_limit"], kw["queue_bdp"] = parse_queue(given.get("queue") or CLI_DEFAULT_QUEUE)
    elif given.get("queue") is not None:
        raise ValueError("--queue: the queue is the --rate link's; give --rate MBPS too")
    if kw.get("reorder") and not kw.get("delay"):
        kw["delay"] = 0.001  # netem's reorder needs a delay to overtake
    return LinkModel(**kw)
