"""Dask's ``btl://`` comm backend: addresses, the connector, the listener, and the transports
behind them.

Transports: one btlcore transport (``udp``) per listener, and one per loop and local host
shared by every outgoing connection the process makes on that loop (a transport belongs to
one thread, and each Dask loop runs in one).  Between two transports there is one btlcore
peer, and every Dask comm between them is multiplexed over it (:mod:`.mux`).

Addresses are ``btl://HOST:PORT``: the udp transport's text form, PORT its first socket (the
second is on PORT + 1).  btlcore does not encrypt: a ``Security`` that asks for TLS (an
``ssl_context``, or ``require_encryption``) is refused, with the reason.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from distributed.comm.addressing import parse_host_port, unparse_host_port
from distributed.comm.core import BaseListener, Comm, CommClosedError, Connector
from distributed.comm.registry import Backend
from distributed.comm.utils import ensure_concrete_host as _concrete
from distributed.utils import ensure_ip
from distributed.utils import get_ip as _get_ip

from .. import aio
from ..config import Config
from ..errors import BtlError
from .comm import BTLComm
from .mux import Endpoint, Link

log = logging.getLogger("btlcore.dask")

PREFIX = "btl://"
BACKEND = "udp"

# Dask's address helpers (typed here: Dask's are not annotated)
ensure_concrete_host: Callable[..., str] = _concrete
get_ip: Callable[[str], str] = _get_ip

#: the shared outgoing endpoint of each (loop, local host)
_outgoing: dict[tuple[asyncio.AbstractEventLoop, str], Endpoint] = {}
#: every endpoint this process opened (closed at exit, told apart after a fork)
_endpoints: set[Endpoint] = set()


def refuse_tls(connection_args: dict[str, Any], what: str, address: str) -> None:
    """btlcore does not encrypt: say so rather than send in the clear what TLS was asked for."""
    if connection_args.get("ssl_context") is not None or connection_args.get("require_encryption"):
        raise RuntimeError(
            f"btl:// cannot {what} {PREFIX}{address} with TLS: btlcore does not encrypt (its place is a "
            "trusted network); use tls:// for encrypted comms, or a Security without TLS for btl://")


def _open(bind: str) -> aio.Transport:
    """A transport for comms: the ``BTL_*`` environment applies, but delivery stays in
    order (the chunks of a message, and a comm's CLOSE after its data, rely on it)."""
    return aio.open(BACKEND, config=Config.build({"ordered": True}), bind=bind)


def _local_host_for(ip: str) -> str:
    """The local address that reaches ``ip`` (loopback for loopback)."""
    if ip.startswith("127.") or ip == "::1":
        return ip if ip == "::1" else "127.0.0.1"
    return get_ip(ip)  # (IPv4 or IPv6, as ip is)


def outgoing(ip: str) -> Endpoint:
    """The endpoint this process's outgoing connections to ``ip`` use on the running loop."""
    loop = asyncio.get_running_loop()
    local = _local_host_for(ip)
    for key in [k for k in _outgoing if k[0].is_closed()]:
        stale = _outgoing.pop(key)
        _endpoints.discard(stale)
        stale.abort()
    endpoint = _outgoing.get((loop, local))
    if endpoint is None or endpoint.t.closed:
        endpoint = Endpoint(_open(unparse_host_port(local, 0)))
        _outgoing[(loop, local)] = endpoint
        _endpoints.add(endpoint)
    return endpoint


def _after_fork_in_child() -> None:
    """The child keeps the parent's endpoints (its comms still point at them) but makes
    its own from now on; using an old one raises :class:`~.mux.ForkedTransport`."""
    _outgoing.clear()
    _endpoints.clear()


def _at_exit() -> None:
    """Tell peers we are gone (CLOSE, sent once: not waiting up to ``close_timeout`` for
    acknowledgements from peers that may have exited first) rather than let them wait for
    ``peer_timeout``."""
    for endpoint in list(_endpoints):
        if endpoint.pid != os.getpid() or endpoint.t.closed:
            continue
        sync = endpoint.sync
        try:
            endpoint.t.driver.stop()
            sync.engine.start_close(sync.now(), None)
            sync.progress()
            endpoint.t.abort()
        except Exception:  # (best effort: the loop's thread may still own it)
            pass
    _endpoints.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_exit)


class BTLConnector(Connector):
    """Connects over the process's shared outgoing transport: awaits btlcore's handshake,
    then opens a comm on the peer (OPEN, answered ACCEPT or REFUSE)."""

    async def connect(self, address: str, deserialize: bool = True, **connection_args: Any) -> Comm:
        refuse_tls(connection_args, "connect to", address)
        host, port = parse_host_port(address)
        ip = ensure_ip(host)
        endpoint = outgoing(ip)
        try:
            peer = endpoint.t.connect(unparse_host_port(ip, port))
        except ValueError as exc:
            raise ValueError(f"btl: bad address {PREFIX}{address}: {exc}") from None
        try:
            await endpoint.t.wait_connected(peer)
        except BtlError as exc:
            raise CommClosedError(f"btl: could not connect to {PREFIX}{address}: {exc}") from exc
        link = endpoint.link(peer)
        comm = BTLComm(link, PREFIX + endpoint.address_text, PREFIX + address, opener=True,
                       deserialize=deserialize)
        comm.comm_id = link.add(comm)
        await comm.opened()
        return comm


class BTLListener(BaseListener):
    """A btlcore transport bound to the address; each OPEN from a peer becomes a comm,
    handed to ``comm_handler`` after Dask's handshake.  ``stop()`` refuses new comms, and
    the transport closes once the comms it carries have ended."""

    prefix = PREFIX

    def __init__(self, address: str, comm_handler: Callable[[Comm], Awaitable[None] | None],
                 deserialize: bool = True, allow_offload: bool = True, default_host: str | None = None,
                 default_port: int = 0, **connection_args: Any) -> None:
        super().__init__()
        refuse_tls(connection_args, "listen on", address)
        self.ip, self.port = parse_host_port(address, default_port)
        self.default_host = default_host
        self.comm_handler = comm_handler
        self.deserialize = deserialize
        self.allow_offload = allow_offload
        self.endpoint: Endpoint | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        host = self.ip or "0.0.0.0"
        self.endpoint = Endpoint(_open(unparse_host_port(host, self.port)), accept=self._accept)
        _endpoints.add(self.endpoint)
        self.port = parse_host_port(self.endpoint.address_text)[1]
        self.ip = host

    def stop(self) -> None:
        endpoint = self.endpoint
        if endpoint is None or endpoint.accept is None:
            return
        endpoint.accept = None
        self.abort_handshaking_comms()
        endpoint.on_idle = _closer(endpoint, self._tasks)
        if endpoint.comms == 0:
            endpoint.on_idle()

    def get_host_port(self) -> tuple[str, int]:
        if self.endpoint is None:
            raise ValueError("invalid operation on a btl listener that was not started")
        return self.ip, self.port

    @property
    def listen_address(self) -> str:
        return PREFIX + unparse_host_port(*self.get_host_port())

    @property
    def contact_address(self) -> str:
        host, port = self.get_host_port()
        return PREFIX + unparse_host_port(ensure_concrete_host(host, default_host=self.default_host), port)

    def _accept(self, link: Link, comm_id: int) -> BTLComm | None:
        comm = BTLComm(link, self.contact_address, link.text, opener=False, deserialize=self.deserialize)
        comm.allow_offload = self.allow_offload
        comm.comm_id = link.add(comm, comm_id)
        task = asyncio.get_running_loop().create_task(self._handle(comm))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return comm

    async def _handle(self, comm: BTLComm) -> None:
        try:
            await self.on_connection(comm)
        except CommClosedError:
            log.info("Connection from %s closed before handshake completed", comm.peer_address)
            return
        result = self.comm_handler(comm)
        if result is not None:
            await result


def _closer(endpoint: Endpoint, tasks: set[asyncio.Task[None]]) -> Callable[[], None]:
    """The stopped listener's transport closes (gracefully, in a task) once idle."""

    def close() -> None:
        if endpoint.t.closed:
            return
        _endpoints.discard(endpoint)
        task = endpoint.t.loop.create_task(endpoint.close())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    return close


class BTLBackend(Backend):
    """Registered as ``btl`` in the entry-point group ``distributed.comm.backends``."""

    def get_connector(self) -> Connector:
        return BTLConnector()

    def get_listener(self, loc: str, handle_comm: Any, deserialize: bool, **connection_args: Any) -> BTLListener:
        return BTLListener(loc, handle_comm, deserialize, **connection_args)

    def get_address_host(self, loc: str) -> str:
        return parse_host_port(loc)[0]

    def get_address_host_port(self, loc: str) -> tuple[str, int]:
        return parse_host_port(loc)

    def resolve_address(self, loc: str) -> str:
        host, port = parse_host_port(loc)
        return unparse_host_port(ensure_ip(host), port)

    def get_local_address_for(self, loc: str) -> str:
        host, _ = parse_host_port(loc)
        return unparse_host_port(_local_host_for(ensure_ip(host)), None)
