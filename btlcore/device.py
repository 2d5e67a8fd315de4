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

Two optional attributes of the backend's device object let the core skip work (the UDP
device sets both; absent means False):

* ``wait_wakes_on_input``: ``wait`` returns at once when input is already there (real time,
  readiness-based), so ``progress(timeout)`` may wait before it reads instead of reading
  sockets that are nearly always empty first.
* ``gather_sends``: ``post_send`` and ``post_send_many`` also take a datagram given as a
  list of buffers, sent as one datagram; the engine then leaves bulk payloads uncopied.
"""

from __future__ import annotations

import argparse
import enum
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import pluggy

PROJECT = "btlcore"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


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


@attrs.define(slots=True, frozen=True)
class ChannelInfo:
    """What :meth:`DeviceSpec.btl_device_create_channel` settled on for one channel."""

    channel: Channel
    mtu: int
    send_queue_depth: int
    recv_queue_depth: int


class DeviceSpec:
    """The hooks a backend implements.  All but ``btl_device_fds`` and
    ``btl_device_post_send_many`` are required."""

    @hookspec(firstresult=True)
    def btl_backend_probe(self, options: Mapping[str, Any]) -> Probe:  # type: ignore[empty-body]
        """Can this backend run here with these options?  Must not raise."""

    @hookspec(firstresult=True)
    def btl_device_open(self, options: Mapping[str, Any]) -> Any:
        """Open a device and return the backend's device object.

        Unknown or invalid options raise ``btlcore.ConfigError`` naming the option and the
        allowed values.  ``options`` holds ``"seed"`` (an int) when the user gave one; a
        backend whose randomness must be reproducible (the simulator) exposes it as the
        device's ``seed`` (or its ``fabric.seed``) attribute, and the core seeds its own
        generator from it."""

    @hookspec(firstresult=True)
    def btl_device_capabilities(self, device: Any) -> Capabilities:  # type: ignore[empty-body]
        """Report MTU, inline size, queue depths, integrity and clock kind."""

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
    def btl_device_close(self, device: Any) -> None:
        """Release everything the device holds.  Idempotent."""


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


@attrs.define(slots=True)
class DeviceOps:
    """A device with its backend's hook implementations bound to it, for direct calls.

    ``ops.post_send(channel, dest, data)`` is ``backend.btl_device_post_send(device, ...)``
    without pluggy in between."""

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

    @classmethod
    def bind(cls, backend: str, plugin: Any, device: Any) -> DeviceOps:
        """Bind ``plugin``'s ``btl_device_*`` functions to ``device``."""

        def optional(hook: str) -> Callable[..., Any] | None:
            return bound(hook) if getattr(plugin, hook, None) else None

        def bound(hook: str, default: Callable[..., Any] | None = None) -> Callable[..., Any]:
            fn = getattr(plugin, hook, None) or default
            if fn is None:  # pragma: no cover - registry validates this first
                raise TypeError(f"backend {backend!r} does not implement {hook}")
            if isinstance(fn, types.MethodType):  # a method of a plugin object
                return lambda *a, _f=fn: _f(device, *a)
            return types.MethodType(fn, device)

        return cls(
            backend=backend,
            device=device,
            capabilities=bound("btl_device_capabilities"),
            create_channel=bound("btl_device_create_channel"),
            post_send=bound("btl_device_post_send"),
            post_send_many=optional("btl_device_post_send_many"),
            poll_recv=bound("btl_device_poll_recv"),
            poll_completions=bound("btl_device_poll_completions"),
            local_address=bound("btl_device_local_address"),
            resolve=bound("btl_device_resolve"),
            clock=bound("btl_device_clock"),
            wait=bound("btl_device_wait"),
            fds=bound("btl_device_fds", lambda _device: []),
            close=bound("btl_device_close"),
        )
