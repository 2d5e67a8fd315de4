"""The Device interface: the only door between the protocol core and a backend.

A backend is a pluggy plugin (a module or object) registered under its name in the
``btlcore.backends`` entry-point group.  It implements the hooks of :class:`DeviceSpec`.
Every per-device hook takes the backend's own device object as its first argument, so that
a backend keeps its state wherever it likes (a socket pair, a simulated NIC, verbs QPs).

Why hookspecs *and* direct calls: pluggy gives discovery, validation of the implementation
against the spec, and third-party backends for free; but a hook call costs about 2 us, too
much for every packet.  :func:`btlcore.registry.open_device` therefore validates the chosen
backend once and binds its implementation functions to the device (:class:`DeviceOps`); the
per-packet path calls those bound functions directly.

The contract, in the words a backend author needs:

* Datagrams are unreliable: the device may lose, duplicate, reorder or corrupt them.  It must
  never deliver a datagram longer than the channel MTU, and never split or merge them.
* ``post_send`` borrows ``data`` for the duration of the call only (copy it if you queue it).
  It returns ``False`` when the channel's send queue is full: the core keeps the datagram and
  posts it again later, so a posted message is never lost to back-pressure.
* ``poll_recv`` returns datagrams (any bytes-like) from every channel, priority channel
  first.  They stay valid until the next ``poll_recv`` call; the core copies what it keeps.
* ``clock`` returns the device's ``now()`` in seconds: virtual on the simulator, monotonic
  elsewhere.  ``wait(deadline)`` blocks (or advances virtual time) until a datagram may have
  arrived or ``deadline`` passes; ``deadline=None`` means "until something happens".
* ``poll_recv_from`` (optional) is ``poll_recv`` that also says where each datagram came
  from: the same datagrams, and a parallel sequence of their source addresses in the
  device's own form (hashable, ``==``-comparable, one value per channel of a peer).  A
  backend that does not implement it gets no source checks.

What the device can do, it declares in :class:`Capabilities` (``btl_device_capabilities``);
the core never probes the device object.  Every field has a default, so a backend written
before a field existed keeps working:

* ``mtu``, ``max_inline``, ``send_queue_depth``, ``recv_queue_depth``: sizes.
* ``integrity``: delivered frames are intact (verbs' ICRC); otherwise the core adds CRC32C.
* ``virtual_time``: ``clock`` is virtual and ``wait`` advances it (the simulator).
* ``gather_sends``: ``post_send`` and ``post_send_many`` also take a datagram given as a
  list of buffers, sent as one datagram; the engine then leaves bulk payloads uncopied
  (used only together with ``post_send_many``).
* ``sends_complete_at_once``: a send is complete when ``post_send`` returns (UDP's
  ``sendto``), so ``poll_completions`` never has anything to reap and the core skips it.
* ``wait_wakes_on_input``: ``wait`` returns at once when input is already there (real time,
  readiness-based), so ``progress(timeout)`` may wait before it reads instead of reading
  sockets that are nearly always empty first.  Ignored on a virtual-time device.
* ``reports_source``: the backend implements ``poll_recv_from``, and the core uses it.
* ``seed``: the device's own seed, where its randomness is reproducible (the simulator):
  unless the user gave a seed, the core seeds its generator from it and the device's
  address, so a run is the same every time.  None: the core draws a random seed.
* ``instance``: on a virtual-time device, which opening of a device on its network this
  is (counting from 0, reopens included).  A simulated node's incarnations are ordered by
  it, so a node reopened at an old address is seen as a restart.  None: the core numbers
  the openings of such devices itself.

The reproducibility facts (``seed``, ``instance``) live in :class:`Capabilities` rather than
in a hook of their own: like the MTU they are facts about one opened device, read once when
a transport opens on it.

Backends written before the declared capabilities told the core by attributes of their
device object (``wait_wakes_on_input``, ``gather_sends``, ``sends_complete_at_once``,
``seed`` or ``fabric.seed``, ``instance``).  :meth:`DeviceOps.bind` still reads those the
declared capabilities lack, once (on the first ``capabilities()`` call), with a
``DeprecationWarning``, and turns them into the capability values.
"""

from __future__ import annotations

import argparse
import enum
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import pluggy

from .errors import BtlDeprecationWarning

PROJECT = "btlcore"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
DIRECT = "btl_direct"  # the attribute by which a hook implementation names its direct call


def direct(fast: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a per-device hook implementation with the function :class:`DeviceOps` binds in
    its place (a function taking the device first).  A compiled (mypyc) function is a
    builtin that pluggy cannot mark, so the hook pluggy registers is a plain wrapper, and
    the per-packet calls go to ``fast`` with no wrapper in between."""

    def mark(hook: Callable[..., Any]) -> Callable[..., Any]:
        setattr(hook, DIRECT, fast)
        return hook

    return mark


class Channel(enum.IntEnum):
    """The two channels of a device, as in usnic: ACKs and tiny messages never wait behind
    bulk data."""

    PRIORITY = 0
    DATA = 1


@attrs.define(slots=True, frozen=True)
class Probe:
    """Whether a backend can be used on this machine, and if not, why not."""

    usable: bool
    reason: str = ""


@attrs.define(slots=True, frozen=True)
class Capabilities:
    """What a device can carry.  Sizes are whole datagrams (btlcore header included)."""

    mtu: int
    """Largest datagram on the data channel."""
    max_inline: int = 0
    """Sends up to this size go inline (no buffer to register); 0 if not applicable."""
    send_queue_depth: int = 1024
    recv_queue_depth: int = 1024
    integrity: bool = False
    """True if the device guarantees that delivered frames are intact (verbs' ICRC);
    otherwise the core adds an end-to-end CRC32C."""
    virtual_time: bool = False
    """True if ``clock`` is virtual (the simulator): ``wait`` advances time."""
    gather_sends: bool = False
    """``post_send`` and ``post_send_many`` take a datagram as a list of buffers."""
    sends_complete_at_once: bool = False
    """Sends complete inside ``post_send``: the core never calls ``poll_completions``."""
    wait_wakes_on_input: bool = False
    """``wait`` returns at once when input is already there (real-time devices)."""
    reports_source: bool = False
    """The backend implements ``btl_device_poll_recv_from`` (each datagram's source)."""
    seed: int | None = None
    """The device's own reproducible seed (the simulator's), or None."""
    instance: int | None = None
    """Virtual-time devices: this device's opening on its network (orders a node's lives)."""


@attrs.define(slots=True, frozen=True)
class ChannelInfo:
    """What :meth:`DeviceSpec.btl_device_create_channel` settled on for one channel."""

    channel: Channel
    mtu: int
    send_queue_depth: int
    recv_queue_depth: int


class DeviceSpec:
    """The hooks a backend implements.  All but ``btl_device_fds``, ``btl_device_readable``, ``btl_device_wake``,
    ``btl_device_post_send_many``, ``btl_device_poll_recv_from``, ``btl_device_reply_dest``
    and the address hooks (``btl_address_text``, ``btl_address_parse``) are required."""

    @hookspec(firstresult=True)
    def btl_backend_probe(self, options: Mapping[str, Any]) -> Probe:  # type: ignore[empty-body]
        """Can this backend run here with these options?  Must not raise."""

    @hookspec(firstresult=True)
    def btl_device_open(self, options: Mapping[str, Any]) -> Any:
        """Open a device and return the backend's device object.

        Unknown or invalid options raise ``btlcore.ConfigError`` naming the option and the
        allowed values.  ``options`` holds ``"seed"`` (an int) when the user gave one; a
        backend whose randomness must be reproducible (the simulator) declares its seed as
        :attr:`Capabilities.seed`, and the core seeds its own generator from it."""

    @hookspec(firstresult=True)
    def btl_device_capabilities(self, device: Any) -> Capabilities:  # type: ignore[empty-body]
        """Report what the device can do: sizes, integrity, clock kind, the optional
        behaviours the core may rely on, and its reproducibility facts (see the module
        docstring for every field)."""

    @hookspec(firstresult=True)
    def btl_device_create_channel(  # type: ignore[empty-body]
        self, device: Any, channel: Channel, mtu: int
    ) -> ChannelInfo:
        """Create one channel (a socket, a QP, a simulated queue) asking for datagrams of at
        most ``mtu`` bytes; return what was granted (the MTU may be smaller)."""

    @hookspec(firstresult=True)
    def btl_device_post_send(  # type: ignore[empty-body]
        self, device: Any, channel: Channel, dest: Any, data: bytes | bytearray | memoryview
    ) -> bool:
        """Post one datagram to ``dest`` (a handle from ``btl_device_resolve``).  False means
        the send queue is full; the core will post it again later."""

    @hookspec(firstresult=True)
    def btl_device_post_send_many(  # type: ignore[empty-body]
        self, device: Any, items: Sequence[tuple[Channel, Any, Any]]
    ) -> int:
        """Optional: post ``(channel, dest, data)`` items in order in as few system calls as
        the device can (UDP GSO, a verbs WR chain); return how many were taken (a prefix:
        the core keeps the rest).  Without it the core calls ``post_send`` per datagram."""

    @hookspec(firstresult=True)
    def btl_device_poll_recv(self, device: Any, budget: int) -> Sequence[Any]:  # type: ignore[empty-body]
        """Return up to ``budget`` received datagrams (bytes-like), priority channel first."""

    @hookspec(firstresult=True)
    def btl_device_poll_recv_from(  # type: ignore[empty-body]
        self, device: Any, budget: int
    ) -> tuple[Sequence[Any], Sequence[Any]]:
        """Optional: ``poll_recv`` with sources.  Return ``(datagrams, sources)``: the
        datagrams as ``poll_recv`` returns them, and a parallel sequence of the address each
        came from, in the device's own form: hashable, ``==``-comparable, the same value for
        every datagram sent from one channel of a peer and a different one per channel (UDP:
        the sending socket's ``(host, port)``).  A device implementing it declares
        ``Capabilities.reports_source``; the core then calls it instead of ``poll_recv``."""

    @hookspec(firstresult=True)
    def btl_device_peer_sources(self, device: Any, dest: Any) -> Sequence[Any] | None:
        """Optional (with ``poll_recv_from``): the sources, as ``poll_recv_from`` reports
        them, that the peer at ``dest`` (a ``btl_device_resolve`` handle) sends from, one per
        channel; None if unknown.  The core then drops its connection's datagrams from any
        other source; without the hook it learns them from the connection's first datagrams."""

    @hookspec(firstresult=True)
    def btl_device_check_connect(self, device: Any, address: bytes) -> None:
        """Optional: the application connects to the peer at ``address`` (not called for a
        peer whose HELLO reached us).  Raise :class:`~btlcore.errors.AddressUnreachable`
        naming both addresses when that peer could never answer this device (``udp``: a
        dual-stack device advertising an IPv6 address, toward an IPv4-bound peer), instead
        of a handshake that times out in silence."""

    @hookspec(firstresult=True)
    def btl_device_path_errors(self, device: Any) -> Sequence[Any]:  # type: ignore[empty-body]
        """Optional: the destinations (``post_send`` handles' addresses, as sources are
        reported) that the network said were unreachable since the last call (an ICMP port
        unreachable: ``udp`` with ``IP_RECVERR``), emptied by the call.  The core fails a
        peer there only if it has also gone silent (ICMP is easy to forge)."""

    @hookspec(firstresult=True)
    def btl_device_poll_completions(self, device: Any) -> int:  # type: ignore[empty-body]
        """Reap send completions (freeing send-queue slots); return how many were reaped."""

    @hookspec(firstresult=True)
    def btl_device_local_address(self, device: Any) -> bytes:  # type: ignore[empty-body]
        """This device's address as bytes: the blob a peer passes to ``resolve``."""

    @hookspec(firstresult=True)
    def btl_device_resolve(self, device: Any, address: bytes) -> Any:
        """Turn a peer's address bytes into a destination handle for ``post_send``.  A
        malformed address raises ``ValueError``."""

    @hookspec(firstresult=True)
    def btl_device_reply_dest(self, device: Any, source: Any) -> Any:
        """Optional, with ``poll_recv_from``: a destination handle for ``post_send`` that
        reaches ``source`` (a source as ``poll_recv_from`` reported it) on every channel, so
        that the core answers a handshake where it came from, never at an address written
        inside it.  A source it cannot answer raises ``ValueError`` (no reply is sent).
        Without it, replies go to the resolved address the HELLO names (the old way)."""

    @hookspec(firstresult=True)
    def btl_device_clock(self, device: Any) -> Callable[[], float]:  # type: ignore[empty-body]
        """Return the device's ``now()`` function (seconds)."""

    @hookspec(firstresult=True)
    def btl_device_wait(self, device: Any, deadline: float | None) -> None:
        """Block (or advance virtual time) until input may be ready or ``deadline``."""

    @hookspec(firstresult=True)
    def btl_device_fds(self, device: Any) -> Sequence[int]:  # type: ignore[empty-body]
        """File descriptors that become readable when input arrives (for event loops and
        multi-device waits).  Optional: a device without any returns ``[]``."""

    @hookspec(firstresult=True)
    def btl_device_readable(self, device: Any, fd: int) -> None:
        """Optional: an event loop saw ``fd`` (one of ``btl_device_fds``) readable, so the
        next ``poll_recv`` may read it without asking the OS which descriptor has input
        (``udp``: saves an ``epoll_wait`` per pass under asyncio).  Called just before that
        ``poll_recv``; a device without it asks, as it does after any other wakeup."""

    @hookspec(firstresult=True)
    def btl_device_wake(self, device: Any) -> None:
        """Make a ``btl_device_wait`` blocked in another thread return now (or the next one,
        if none is blocked).  The one hook called from any thread.  Optional: a device
        whose waits take no wall time (virtual time) has nothing to interrupt."""

    @hookspec(firstresult=True)
    def btl_device_wake_fd(self, device: Any) -> int | None:
        """Optional (with ``btl_device_wake``): a file descriptor that becomes readable when
        ``btl_device_wake`` is called, so that ``run_until``'s one ``select()`` over several
        devices ends on a wake too; the next ``btl_device_wait`` (any deadline) clears it."""

    @hookspec(firstresult=True)
    def btl_device_close(self, device: Any) -> None:
        """Release everything the device holds.  Idempotent."""

    @hookspec(firstresult=True)
    def btl_address_text(self, address: bytes) -> str | None:
        """Optional: an address of this backend as people type it (udp: ``HOST:PORT``), the
        form :meth:`btl_address_parse` takes back; ``Transport.address_text`` and the ``btl``
        command print it.  Without it the text form is the address in hex."""

    @hookspec(firstresult=True)
    def btl_address_parse(self, text: str) -> bytes | None:
        """Optional: the address written as :meth:`btl_address_text` writes it, or in hex,
        back to bytes (``connect()`` takes text through it).  Bad text raises ``ValueError``
        saying which forms are allowed."""


class ToolSpec:
    """Hooks for tool plugins (``plugins/``): observers that are wired in only when some
    plugin implements them, so they cost nothing otherwise."""

    @hookspec
    def btl_transport_opened(self, transport: Any) -> None:
        """A transport was opened on a device."""

    @hookspec
    def btl_frame_sent(self, transport: Any, channel: Channel, data: bytes) -> None:
        """A datagram left this transport (called only if some plugin implements it)."""

    @hookspec
    def btl_frame_received(self, transport: Any, data: bytes) -> None:
        """A datagram arrived at this transport (called only if some plugin implements it)."""

    @hookspec
    def btl_frame_filter(self, transport: Any, channel: Channel, data: bytes) -> bool | None:
        """Fault injection: return False to drop this outgoing datagram as if the network
        lost it (called only if some plugin implements it)."""

    @hookspec
    def btl_transport_closed(self, transport: Any, stats: Mapping[str, Any]) -> None:
        """A transport closed; ``stats`` are its final counters."""



@attrs.define(slots=True, frozen=True)
class LocalPair:
    """Both ends of a run inside this process (``btl demo``, ``btl transfer --backend sim``),
    as :meth:`CliSpec.btl_cli_local_pair` returns them."""

    options: tuple[Mapping[str, Any], Mapping[str, Any]]
    """The device options of each end: the command opens ``btlcore.open(backend, **options[i])``."""
    finish: Callable[[], Mapping[str, Any]]
    """Called once, after both ends are closed: releases what the pair holds (a capture file)
    and returns fields added to the run's result (the simulator: ``link`` and ``fabric``)."""
    description: str = ""
    """The medium in words, for ``btl demo``'s first line (``"the simulator, 2% loss, ..."``)."""


class CliSpec:
    """Optional hooks through which a backend takes part in the ``btl`` command, so that the
    command names no backend's knob.  Each is called once, when the command starts (never
    per packet); a backend implements any of them, or none."""

    @hookspec
    def btl_cli_add_options(self, command: str, group: argparse._ArgumentGroup) -> None:
        """Add this backend's options of ``btl <command>`` (``"demo"``, ``"transfer"``,
        ``"serve"``) to ``group``, an argument group titled with the backend's name.  Every
        backend is asked, whichever ``--backend`` is chosen, so that ``--help`` shows them all;
        one given with another backend is an error.  Flags must not clash with the command's
        own or another backend's."""

    @hookspec(firstresult=True)
    def btl_cli_device_options(self, command: str, args: argparse.Namespace) -> Mapping[str, Any] | None:
        """Turn this backend's parsed options (attributes of ``args``) into device options for
        ``btlcore.open``.  A bad value raises ``ValueError`` naming the flag."""

    @hookspec(firstresult=True)
    def btl_cli_local_pair(  # type: ignore[empty-body]
        self, command: str, args: argparse.Namespace, options: Mapping[str, Any], seed: int
    ) -> LocalPair:
        """Implemented by a backend that runs both ends of ``btl transfer`` (and, for the
        simulator, ``btl demo``) in this process, on one medium: make that medium from this
        backend's options in ``args`` and ``seed``; ``options`` are the device options the
        command line gave (``--option``, ``--mtu``).  A bad value raises ``ValueError``
        naming the flag.  Without it, ``btl transfer`` sends to a ``btl serve`` (``--peer``)."""

    @hookspec(firstresult=True)
    def btl_cli_parse_address(self, text: str) -> bytes | None:
        """``--peer`` text (``HOST:PORT`` on udp) to an address; ``ValueError`` says what is
        wrong.  Without it the command takes the address as hex (what ``btl serve`` prints)."""

    @hookspec(firstresult=True)
    def btl_cli_format_address(self, address: bytes) -> str | None:
        """An address in words, printed by ``btl serve`` next to its hex."""


REQUIRED_HOOKS = (
    "btl_backend_probe",
    "btl_device_open",
    "btl_device_capabilities",
    "btl_device_create_channel",
    "btl_device_post_send",
    "btl_device_poll_recv",
    "btl_device_poll_completions",
    "btl_device_local_address",
    "btl_device_resolve",
    "btl_device_clock",
    "btl_device_wait",
    "btl_device_close",
)


#: device-object attributes that told the core what a device can do before
#: :class:`Capabilities` declared it (read once by :meth:`DeviceOps.bind`, with a warning)
LEGACY_FLAGS = ("wait_wakes_on_input", "gather_sends", "sends_complete_at_once")


def legacy_capabilities(backend: str, device: Any, declared: Capabilities) -> dict[str, Any]:
    """The capability values a backend written before the declared capabilities gave as
    attributes of its device object, where ``declared`` lacks them: ``{field: value}``,
    with one ``DeprecationWarning`` naming them.  Empty for a backend that declares
    everything it has."""
    found: dict[str, Any] = {}
    for name in LEGACY_FLAGS:  # (truth values, as the transport read them)
        if getattr(device, name, False) and not getattr(declared, name):
            found[name] = True
    if declared.seed is None:
        seed = getattr(device, "seed", None)
        if seed is None:
            seed = getattr(getattr(device, "fabric", None), "seed", None)
        if seed is not None:
            found["seed"] = seed
    if declared.instance is None and declared.virtual_time:
        instance = getattr(device, "instance", None)
        if instance is not None:
            found["instance"] = instance
    if found:
        warnings.warn(
            f"backend {backend!r} tells btlcore what its device can do through device "
            f"attributes ({', '.join(sorted(found))}); declare them in the Capabilities its "
            "btl_device_capabilities returns instead (device attributes are read for one more "
            "release)", BtlDeprecationWarning, stacklevel=2)
    return found


@attrs.define(slots=True)
class DeviceOps:
    """A device with its backend's hook implementations bound to it, for direct calls.

    ``ops.post_send(channel, dest, data)`` is ``backend.btl_device_post_send(device, ...)``
    without pluggy in between.  ``capabilities()`` returns what the backend declares, with
    the legacy device attributes (read once, on its first call) folded in."""

    backend: str
    device: Any
    capabilities: Callable[[], Capabilities]
    create_channel: Callable[[Channel, int], ChannelInfo]
    post_send: Callable[[Channel, Any, Any], bool]
    post_send_many: Callable[[Sequence[tuple[Channel, Any, Any]]], int] | None
    poll_recv: Callable[[int], Sequence[Any]]
    poll_completions: Callable[[], int]
    local_address: Callable[[], bytes]
    resolve: Callable[[bytes], Any]
    clock: Callable[[], Callable[[], float]]
    wait: Callable[[float | None], None]
    fds: Callable[[], Sequence[int]]
    close: Callable[[], None]
    poll_recv_from: Callable[[int], tuple[Sequence[Any], Sequence[Any]]] | None = None
    """Last, with a default: a ``DeviceOps`` built by hand as before still builds."""
    wake: Callable[[], None] | None = None
    """``btl_device_wake`` if the backend has it (from any thread)."""
    reply_dest: Callable[[Any], Any] | None = None
    """``btl_device_reply_dest`` if the backend has it: a datagram's source -> a dest."""
    peer_sources: Callable[[Any], Any] | None = None
    """``btl_device_peer_sources`` if the backend has it: a dest -> the sources it sends from."""
    path_errors: Callable[[], Sequence[Any]] | None = None
    """``btl_device_path_errors`` if the backend has it (ICMP unreachables since the last call)."""
    readable: Callable[[int], None] | None = None
    """``btl_device_readable`` if the backend has it (an event loop's readiness hint)."""
    address_text: Callable[[bytes], str | None] | None = None
    """``btl_address_text`` if the backend has it (a backend hook: no device argument)."""
    parse_address: Callable[[str], bytes | None] | None = None
    """``btl_address_parse`` if the backend has it."""
    wake_fd: Callable[[], int | None] | None = None
    """``btl_device_wake_fd`` if the backend has it (what a wake makes readable)."""
    check_connect: Callable[[bytes], None] | None = None
    """``btl_device_check_connect`` if the backend has it (at ``connect()`` to a new peer)."""
    next_due: Callable[[], float | None] | None = None
    """Set by a wrapper that holds datagrams back on purpose (``btlcore.interpose``, a delay
    fault): when the next one is due, which a driver's wait must not sleep past."""

    @classmethod
    def bind(cls, backend: str, plugin: Any, device: Any) -> DeviceOps:
        """Bind ``plugin``'s ``btl_device_*`` functions to ``device``."""

        def optional(hook: str) -> Callable[..., Any] | None:
            return bound(hook) if getattr(plugin, hook, None) else None

        def bound(hook: str, default: Callable[..., Any] | None = None) -> Callable[..., Any]:
            fn = getattr(plugin, hook, None) or default
            if fn is None:  # pragma: no cover - registry validates this first
                raise TypeError(f"backend {backend!r} does not implement {hook}")
            fast = getattr(fn, DIRECT, None)  # (see direct())
            if fast is not None:
                return types.MethodType(fast, device)
            if isinstance(fn, types.MethodType):  # a method of a plugin object
                return lambda *a, _f=fn: _f(device, *a)
            return types.MethodType(fn, device)

        poll_recv_from = optional("btl_device_poll_recv_from")
        declared = bound("btl_device_capabilities")
        legacy: list[dict[str, Any]] = []  # read once, on the first call

        def capabilities() -> Capabilities:
            caps: Capabilities = declared()
            if not legacy:
                legacy.append(legacy_capabilities(backend, device, caps))
            if legacy[0]:
                caps = attrs.evolve(caps, **legacy[0])
            if caps.reports_source and poll_recv_from is None:
                raise TypeError(f"backend {backend!r} declares reports_source but does not "
                                "implement btl_device_poll_recv_from")
            return caps

        return cls(
            backend=backend,
            device=device,
            capabilities=capabilities,
            create_channel=bound("btl_device_create_channel"),
            post_send=bound("btl_device_post_send"),
            post_send_many=optional("btl_device_post_send_many"),
            poll_recv=bound("btl_device_poll_recv"),
            poll_recv_from=poll_recv_from,
            poll_completions=bound("btl_device_poll_completions"),
            local_address=bound("btl_device_local_address"),
            resolve=bound("btl_device_resolve"),
            clock=bound("btl_device_clock"),
            wait=bound("btl_device_wait"),
            fds=bound("btl_device_fds", lambda _device: []),
            close=bound("btl_device_close"),
            wake=optional("btl_device_wake"),
            reply_dest=optional("btl_device_reply_dest") if poll_recv_from is not None else None,
            peer_sources=optional("btl_device_peer_sources") if poll_recv_from is not None else None,
            path_errors=optional("btl_device_path_errors"),
            readable=optional("btl_device_readable"),
            # backend hooks (no device argument), called as they are
            address_text=getattr(plugin, "btl_address_text", None),
            parse_address=getattr(plugin, "btl_address_parse", None),
            check_connect=optional("btl_device_check_connect"),
            wake_fd=optional("btl_device_wake_fd"),
        )
