"""The udp device's hot state: every field the send, receive and wait paths touch per
datagram or per pass, declared with its type on one native class.

Why a class of its own: ``_send``, ``_receive`` and ``_wait`` are compiled with mypyc, and
compiled code reads a field of a native class at a fixed offset in the object (with its
type known: an ``int`` counter is added to in C), where a field of an ordinary Python object
is a dictionary lookup by name, 20 to 40 ns each, about forty of them per datagram sent and
received.  :class:`~btlcore_udp.UdpDevice` is this class's (pure Python) subclass: it fills
the fields in ``__init__`` and holds the rest of the Device interface (addresses, channels,
stats), whose fields stay in its ``__dict__`` (a legacy backend's flags may be set on it too).
In the pure build (``BTL_PURE=1``) this is an ordinary class with the same fields.

Only the failure paths (``_errors``) and the bookkeeping of ``_bound_text`` are methods here;
the per-datagram code is in plain functions taking the device first (``_send``, ``_receive``,
``_wait``), which the core calls directly (``btlcore.device.direct``)."""

from __future__ import annotations

import socket
from typing import Any

from mypy_extensions import mypyc_attr


@mypyc_attr(allow_interpreted_subclasses=True)
class UdpState:
    """The fields of a udp device that its per-datagram paths use (see the module's text)."""

    # -- the device as a whole
    closed: bool
    family: int
    local_sockaddrs: tuple[Any, ...]
    # -- sockets and their calls (tests swap these for stand-ins)
    _socks: tuple[Any, ...]  # (priority, data) sockets
    _prio_sock: Any
    _data_sock: Any
    _prio_fd: int
    _data_fd: int
    _sendto: tuple[Any, ...]  # each socket's bound sendto
    _recv_from: tuple[Any, ...]  # each socket's bound recvfrom (a lone datagram's read: _receive._read_lone)
    # -- sizes
    _max_payload: int
    _mtus: list[int]  # per channel
    _recv_mtu: int
    _recv_size: int  # the MTU plus one: an oversize datagram shows as longer than the MTU
    # -- receiving
    _arena: memoryview
    _arena_limit: int
    _arena_gro_limit: int
    _batch: Any  # _mmsg.RecvBatch, or None (no recvmmsg)
    # (RecvBatch's recv, view, lens, stride, len_at, slot_size, slots, sources): one read per poll
    _mmsg_parts: tuple[Any, Any, Any, int, int, int, int, Any]
    _gro: bool
    _pending: list[bytes]  # a GRO read's datagrams beyond the budget, delivered first next time
    _pending_from: list[Any]
    _ready: tuple[bool, bool] | None  # set by wait() (or readable()), used once by poll_recv
    _lone: bool  # set by a busy wait that saw its input arrive: read one datagram
    _spin_reads: bool  # a busy device whose sockets are not in the poller: its wait spins reading them
    _hot: int  # the channel whose socket such a spin reads on every turn (the last datagram's)
    _caught: Any  # (data, source) such a spin read, or None: poll_recv takes it first
    # -- sending
    _gso: bool
    _gso_mode: str
    _gso_failures: int
    _gso_cmsg: dict[int, list[tuple[int, int, bytes]]]  # UDP_SEGMENT's control message per size
    # -- waiting
    _busy_poll: bool
    _poller: Any  # select.epoll (select.poll off Linux)
    _poll: Any  # its bound poll (a busy wait calls it per look)
    _epoll: bool  # _poller is an epoll: its zero-timeout look takes maxevents
    _poll_scale: float
    _select_fds: list[int] | None
    _timer: Any  # _timer.DeadlineTimer, or None
    _wake_r: int
    _wake_w: int
    # -- counters (stats())
    tx_datagrams: int
    tx_bytes: int
    tx_pushbacks: int
    tx_errors: int
    tx_gso_sends: int
    tx_unreachable: int
    gso_fallbacks: int
    rx_datagrams: int
    rx_bytes: int
    rx_priority: int
    rx_errors: int
    rx_oversize: int
    rx_gro_reads: int
    icmp_errors: int
    # -- what the failure paths remember
    port_unreachable: list[Any]  # destinations ICMP said closed (path_errors takes them)
    last_send_error: str
    _warned: set[Any]  # destinations whose unreachability was logged

    def _bound_text(self) -> str:
        host, port = self.local_sockaddrs[0][0], self.local_sockaddrs[0][1]
        return f"[{host}]:{port}" if self.family == socket.AF_INET6 else f"{host}:{port}"


def nbytes(data: Any) -> int:
    """Length of a datagram given as one buffer or as a list of buffers (gathered)."""
    return len(data) if type(data) is not list else sum(map(len, data))
