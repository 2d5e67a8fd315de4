"""The UDP device: two non-blocking UDP sockets, one per channel.

Why two sockets rather than one socket and a channel byte: they are usnic's two QPs.  Each
has its own kernel receive buffer, so a flood of bulk data filling the data socket's buffer
never drops an ACK queued on the priority socket, and ``poll_recv`` drains the priority
socket first, so ACKs are seen before the data that arrived with them.  The cost is a second
port, which the address carries.

The per-packet functions (``post_send``, ``post_send_batch``, ``poll_recv``) are written as
plain functions taking the device first and installed both as the device's methods and, in
``plugin.py``, as the hook implementations, so that the core's direct calls go straight into
them with no wrapper in between (a wrapper is another 0.1 us per datagram).  Where each
part lives: ``_sockets`` (binding, socket options), ``_send`` (the send paths),
``_receive`` (the receive loops), ``_errors`` (send and ICMP errors), ``_wait`` (wait,
wake); this module holds the device and the rest of the Device interface.

Receiving, three ways, each datagram returned as a memoryview valid until the next
``poll_recv``; a datagram longer than the MTU is dropped and counted, never delivered:

* ``recvmmsg`` through ctypes (``_mmsg``; the default where libc has it): up to 256
  datagrams per system call into fixed slots.  About a third cheaper per datagram than
* a ``recv_into`` loop (``recvmmsg=off``), packing datagrams back to back in one arena;
* with ``gro=true``, the data socket has UDP_GRO: a run the peer sent with GSO arrives glued
  in one ``recvmsg_into`` and is cut at the size the kernel reports, for a quarter of the
  cost; but each datagram that is not glued costs twice as much as with ``recv_into``.

Whichever way, a datagram that arrived while a busy-poll wait spun (a round trip's) is read
by one ``recvfrom``: the batch's ctypes call and its senders cost about a microsecond more
for one datagram, and a loop's second read would only find the socket empty.  With
``busy_poll=true`` (and GRO off) the sockets are out of the epoll set and the wait spins on
that ``recvfrom`` itself (``_wait.spin``): the read that finds the datagram is the read of
it, and an arriving datagram runs no epoll callback in its sender's ``sendto``.  Event loops
watch ``fds()`` with their own poller, which this does not touch.

Sending: ``sendto`` on the channel's socket.  ``post_send_batch`` sends runs of equal-size
datagrams to one destination as one ``sendmsg`` with UDP GSO (``UDP_SEGMENT``, given per call
as a control message, so single sends are never segmented); the kernel splits it into
datagrams, at a fraction of the per-datagram cost.  ``IP_RECVERR`` (option ``recverr``, on
by default) makes a full queue on the way out (a rate-limited qdisc) fail the send with
ENOBUFS, which ``post_send`` reports as back-pressure, instead of dropping it silently; the
ICMP errors it also reports (a peer's closed port) are read and counted, never raised.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

from btlcore.device import Capabilities, Channel, ChannelInfo
from btlcore.errors import AddressUnreachable, ConfigError

from . import _address, _heap, _mmsg, _mtu, _receive, _route, _send, _sockets, _wait
from ._errors import REACH_CACHE
from ._lazy import lazy_buffer
from ._options import MAX_PAYLOAD, UdpOptions
from ._receive import ARENA_BYTES, GRO_BUFFER
from ._state import UdpState


class UdpDevice(UdpState):
    """One UDP device: a priority socket and a data socket bound to one IP.  The fields its
    per-datagram paths use are declared on :class:`._state.UdpState` (a native class where
    mypyc built it); the rest are ordinary attributes."""

    def __init__(self, opts: UdpOptions) -> None:
        if opts.recvmmsg == "on" and not _mmsg.available():
            raise ConfigError("udp option 'recvmmsg' is 'on' but libc has no recvmmsg; allowed "
                              "is one of auto, on, off")
        self.options = opts
        self.closed = False
        self._keep_heap = _heap.keep_heap() if opts.keep_heap else False
        family = opts.family
        self.family = family
        self._max_payload = MAX_PAYLOAD[family]
        socks = _sockets.bind_sockets(opts)
        self.rcvbuf_granted, self.sndbuf_granted, has_gso = _sockets.configure(socks, opts)
        self._socks = (socks[0], socks[1])
        self._prio_sock = socks[0]
        self._prio_fd = socks[0].fileno()
        self._data_fd = socks[1].fileno()
        self._ready = None  # set by wait(), used once by poll_recv
        self._lone = False  # set by a busy wait that saw its input arrive: read one datagram
        self._sendto = (socks[0].sendto, socks[1].sendto)
        self._recv_from = (socks[0].recvfrom, socks[1].recvfrom)
        self._data_sock = socks[1]
        self._gro = opts.gro
        self._pending = []
        self._pending_from = []
        self._gso = has_gso and opts.gso != "off"
        self._gso_mode = opts.gso
        self._gso_failures = 0
        self._gso_cmsg = {}
        self.local_sockaddrs = tuple(s.getsockname() for s in socks)
        self.wildcard = _sockets.is_wildcard(opts.host)
        # Bound to a loopback address, the device reaches only this host's loopback (resolve
        # refuses every other destination), whose frames are memory copies: nothing on the
        # way can corrupt them, as kernel TCP trusts loopback too.  So it reports integrity
        # and btlcore leaves out its CRC32C (crc=on keeps it; a faults plan that may corrupt
        # reports no integrity, btlcore/interpose.py)
        self.loopback = _sockets.is_loopback(opts.host)
        if opts.mtu:
            self.mtu, self.mtu_source = opts.mtu, "option mtu"
        else:  # a wildcard's sends leave by the advertised address's interface
            self.mtu, self.mtu_source = _mtu.detect(family, opts.advertise if self.wildcard else opts.host)
        self._mtus = [self.mtu, self.mtu]  # per channel; create_channel may lower them
        # A wildcard-bound device hears peers on every interface, loopback's 64 KiB datagrams
        # included: it takes whatever arrives (the buffers cost memory only where written)
        self._recv_mtu = self._max_payload if self.wildcard and not opts.mtu else self.mtu
        self._recv_size = self._recv_mtu + 1  # one byte more, to see (and drop) oversize datagrams
        arena_len = max(ARENA_BYTES, 8 * max(self._recv_size, GRO_BUFFER))
        self._arena = memoryview(lazy_buffer(arena_len))  # pages only where datagrams land
        self._arena_limit = arena_len - self._recv_size
        self._arena_gro_limit = arena_len - GRO_BUFFER
        use_mmsg = opts.recvmmsg == "on" or (opts.recvmmsg == "auto" and _mmsg.available())
        self._batch = _mmsg.RecvBatch(self._recv_size, family=family) if use_mmsg else None
        if self._batch is not None:  # unpacked in one go per read (fewer lookups per datagram)
            b = self._batch
            self._mmsg_parts = (b.recv, b.view, b._lens, b._stride, b._len_at, b.slot_size, b.slots,
                                b.sources)
        scope = self.local_sockaddrs[0][3] if family == socket.AF_INET6 else 0
        self._address = _address.encode(family, opts.advertise, self.local_sockaddrs[0][1],
                                         self.local_sockaddrs[1][1], scope)
        self._busy_poll = opts.busy_poll
        self._reach: dict[tuple[str, int], str | None] = {}  # resolve's answers, per (ip, scope)
        self._warned = set()  # destinations whose unreachability was logged
        (self._wake_r, self._wake_w, self._poller, self._poll_scale,
         self._select_fds, self._timer) = _wait.open_waiting(socks)
        self._epoll = _wait.is_epoll(self._poller)
        self._poll = self._poller.poll
        # a busy device without GRO spins reading its sockets (_wait.spin): out of the epoll
        # set, a datagram's arrival costs the sender no wake-up callback
        self._spin_reads = self._busy_poll and self._epoll and not self._gro
        self._hot = 0  # (a round trip's tiny messages come by the priority socket)
        self._caught = None
        if self._spin_reads:
            for sock in socks:
                self._poller.unregister(sock.fileno())
        self.tx_datagrams = self.tx_bytes = self.tx_pushbacks = self.tx_errors = 0
        self.tx_gso_sends = self.gso_fallbacks = 0
        self.rx_datagrams = self.rx_bytes = self.rx_priority = self.rx_errors = self.rx_oversize = 0
        self.rx_gro_reads = self.icmp_errors = 0
        self.port_unreachable = []  # destinations ICMP said closed (path_errors takes them)
        self.tx_unreachable = 0
        self.last_send_error = ""

    # -- the send, receive and wait paths (_send, _receive, _wait: compiled where mypyc
    # built them, and a compiled function does not bind as a method; the core calls them
    # directly) ------------------------------------------------------------------------

    def post_send(self, channel: int, dest: Any, data: Any) -> bool:
        return _send.post_send(self, channel, dest, data)

    def post_send_batch(self, channel: int, dest: Any, datagrams: Sequence[Any]) -> int:
        return _send.post_send_batch(self, channel, dest, datagrams)

    def post_send_many(self, items: Sequence[tuple[Any, Any, Any]]) -> int:
        return _send.post_send_many(self, items)

    def poll_recv(self, budget: int) -> list[Any]:
        return _receive.poll_recv(self, budget)

    def poll_recv_from(self, budget: int) -> tuple[list[Any], list[Any]]:
        return _receive.poll_recv_from(self, budget)

    def wait(self, deadline: float | None) -> None:
        _wait.wait(self, deadline)

    def wake(self) -> None:
        _wait.wake(self)

    def _readiness(self, events: Any) -> tuple[bool, bool]:
        return _wait.readiness(self, events)

    def _drain_wake(self) -> None:
        _wait.drain_wake(self)

    # -- the rest of the Device interface ---------------------------------------------

    def capabilities(self) -> Capabilities:
        return Capabilities(
            mtu=self.mtu,
            max_inline=0,
            send_queue_depth=max(1, self.sndbuf_granted[1] // self.mtu),
            recv_queue_depth=max(1, self.rcvbuf_granted[1] // self.mtu),
            integrity=self.loopback,
            virtual_time=False,
            reports_source=True,
            # post_send and post_send_many take a datagram as a list of buffers (sendmsg
            # gathers them), so the engine need not copy a bulk payload into its segment
            gather_sends=True,
            # sendto completes synchronously: poll_completions has nothing to report
            sends_complete_at_once=True,
            # wait() returns at once when a socket is readable, so the transport may wait
            # before it reads (a read of an empty socket is a wasted system call)
            wait_wakes_on_input=True,
        )

    def create_channel(self, channel: Channel, mtu: int) -> ChannelInfo:
        channel = Channel(channel)
        granted = self.mtu if mtu <= 0 else min(mtu, self.mtu)
        self._mtus[channel] = granted
        caps = self.capabilities()
        return ChannelInfo(channel, granted, caps.send_queue_depth, caps.recv_queue_depth)

    def poll_completions(self) -> int:
        return 0  # sendto completes synchronously

    def local_address(self) -> bytes:
        return self._address

    def resolve(self, address: bytes) -> _address.Handle:
        """The destination handle of a peer's address.  An IPv4 address on a dual-stack
        (``[::]``-bound) device is reached as ``::ffff:a.b.c.d``, and a mapped one on an
        IPv4 device as ``a.b.c.d``.  Raises :class:`~btlcore.errors.AddressUnreachable` (a
        ValueError) naming both addresses when the kernel has no way from the bound address
        to the peer's (a loopback-bound device toward another host): at ``connect()``, not
        as a silent timeout."""
        family, ip, pport, dport, scope = _address.decode(address)
        if family != self.family:
            ip = self._same_family(address, family, ip)
            family = self.family
        reason = self._reach.get((ip, scope), False)
        if reason is False:
            if len(self._reach) >= REACH_CACHE:
                self._reach.clear()
            with _route.namespace_of(self._prio_sock) as inside:
                reason = _route.unreachable(family, self.options.host, ip, scope) if inside else None
            self._reach[(ip, scope)] = reason
        if reason is not None:
            raise AddressUnreachable(f"udp: cannot reach {_address.describe(address)} from "
                                     f"{self._bound_text()} ({reason}); bind a wildcard "
                                     f"(option bind=0.0.0.0:PORT or [::]:PORT) or an address on "
                                     f"the peer's network")
        return _address.to_handle(family, ip, pport, dport, scope)

    def check_connect(self, address: bytes) -> None:
        """Before we connect to ``address``: an IPv4 peer (its address is IPv4, so it is bound
        to IPv4) can answer only an IPv4 address, or an IPv4-mapped one; a dual-stack device
        advertising IPv6 would get no answer at all (the peer drops our HELLO, whose address
        it cannot reach).  AddressUnreachable naming both addresses, at once; then the
        route check of :meth:`resolve`."""
        family, ip, _pport, _dport, scope = _address.decode(address)
        advertised = ipaddress.ip_address(self.options.advertise.split("%")[0])
        if family == socket.AF_INET and self.family == socket.AF_INET6 and self.wildcard \
                and getattr(advertised, "ipv4_mapped", None) is None:
            try:
                mine = _route.source_toward(socket.AF_INET, ip)
                hint = f"option advertise=::ffff:{mine} (this host's IPv4 address toward it) or "
            except OSError:
                hint = ""
            raise AddressUnreachable(
                f"udp: the IPv4 peer {_address.describe(address)} cannot reach this device's "
                f"advertised IPv6 address {_address.describe(self._address)} (bound "
                f"{self._bound_text()}): it would drop our handshake; give {hint}"
                f"bind=0.0.0.0:PORT")
        self.resolve(address)

    def reply_dest(self, source: Any) -> _address.Handle:
        """A handle that reaches ``source`` (a sender's ``(host, port)`` as ``poll_recv_from``
        reports it) on either channel: a reply goes back to the socket it came from."""
        if not isinstance(source, tuple) or len(source) not in (2, 4) \
                or not isinstance(source[0], str) or not isinstance(source[1], int):
            raise ValueError(f"udp: a source is a (host, port) tuple, not {source!r}")
        return (source, source)

    def _same_family(self, address: bytes, family: int, ip: str) -> str:
        """``ip`` (of ``family``, not ours) as our family can send to it, or ValueError."""
        if self.family == socket.AF_INET6 and self.wildcard:
            return f"::ffff:{ip}"  # IPv4 through the dual-stack socket
        mapped = ipaddress.ip_address(ip)
        if self.family == socket.AF_INET and isinstance(mapped, ipaddress.IPv6Address) \
                and mapped.ipv4_mapped is not None:
            return str(mapped.ipv4_mapped)
        mine = "IPv6" if self.family == socket.AF_INET6 else "IPv4"
        theirs = "IPv6" if family == socket.AF_INET6 else "IPv4"
        bind = "[::]:PORT" if family == socket.AF_INET6 else "0.0.0.0:PORT or [::]:PORT"
        raise AddressUnreachable(f"udp: cannot reach {_address.describe(address)} from "
                                 f"{self._bound_text()}: it is {theirs} but this device is bound "
                                 f"to {mine} address {self.options.host}; bind {bind} (option bind)")

    def clock(self) -> Any:
        return time.monotonic

    def readable(self, fd: int) -> None:
        """An event loop's readiness news (``btl_device_readable``), used by the next poll as
        a wait's answer is: only the socket named is read (the other's turn comes with its
        own callback)."""
        self._ready = (fd == self._prio_fd, fd == self._data_fd)
        self._lone = False

    def fds(self) -> list[int]:
        return [] if self.closed else [s.fileno() for s in self._socks]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._poller.close()
        for s in self._socks:
            s.close()
        for fd in {self._wake_r, self._wake_w}:
            os.close(fd)
        if self._timer is not None:
            self._timer.close()

    def stats(self) -> dict[str, Any]:
        """Counters since open, and what the kernel granted."""
        return {
            "tx_datagrams": self.tx_datagrams,
            "tx_bytes": self.tx_bytes,
            "tx_pushbacks": self.tx_pushbacks,
            "tx_errors": self.tx_errors,
            "tx_gso_sends": self.tx_gso_sends,
            "tx_unreachable": self.tx_unreachable,
            "gso_fallbacks": self.gso_fallbacks,
            "rx_datagrams": self.rx_datagrams,
            "rx_bytes": self.rx_bytes,
            "rx_priority": self.rx_priority,
            "rx_errors": self.rx_errors,
            "rx_oversize": self.rx_oversize,
            "rx_gro_reads": self.rx_gro_reads,
            "icmp_errors": self.icmp_errors,
            "mtu": self.mtu,
            "mtu_source": self.mtu_source,
            "gso": self._gso,
            "gro": self._gro,
            "recverr": self.options.recverr,
            "recvmmsg": self._batch is not None,
            "keep_heap": self._keep_heap,
            "busy_poll": self._busy_poll,
            "rcvbuf_requested": self.options.rcvbuf,
            "rcvbuf_granted": self.rcvbuf_granted[1],
            "sndbuf_requested": self.options.sndbuf,
            "sndbuf_granted": self.sndbuf_granted[1],
            "address": _address.describe(self._address),
        }

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"mtu={self.mtu}"
        return f"<UdpDevice {_address.describe(self._address)} {state}>"
