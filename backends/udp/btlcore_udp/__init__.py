"""The UDP backend: btlcore over non-blocking UDP sockets, IPv4 or IPv6.

Open it by name: ``btlcore.registry.open_device("udp", {"bind": "127.0.0.1:0"})``.

* Two sockets per device, one per channel (priority, data), as usnic had two QPs: ACKs wait
  neither behind bulk data in the kernel's receive buffer nor in ``poll_recv``.
* The address (``local_address``) is 12 bytes for IPv4, 28 for IPv6: magic, version,
  family, both ports, IP (and scope) (see ``_address``).  The data socket takes the priority
  socket's PORT + 1, ephemeral ports too, so ``HOST:PORT`` names a device.
* Bound to 127.0.0.1 unless option ``bind`` says otherwise; a wildcard advertises an address
  of this host (``_route``); ``connect`` to a peer the bound address cannot reach raises
  :class:`~btlcore.errors.AddressUnreachable` naming both, as does ``connect`` from a
  ``[::]``-bound device advertising IPv6 to an IPv4 peer, which could not answer it
  (``check_connect``; option ``advertise=::ffff:a.b.c.d`` serves both families).
* Receive buffers live in anonymous mmaps (``_lazy``): a device costs about 0.1 MB until
  traffic fills them.
* The MTU is the bound interface's, less IP and UDP headers (65507 on loopback), or the
  ``mtu`` option.  Larger sends raise ``ValueError``; larger arrivals are dropped and counted.
* Receiving: ``recvmmsg`` through ctypes (many datagrams per system call), or a
  ``recv_into`` loop; optionally UDP GRO on the data socket.  Sending: ``sendto``; with
  ``IP_RECVERR`` a full queue on the way out returns ENOBUFS, which ``post_send`` reports as
  back-pressure (False) rather than losing the datagram.
* Options (``OPTIONS`` lists them with their allowed values): bind or host/port/data_port,
  advertise, mtu, rcvbuf, sndbuf, busy_poll, gso, gro, recverr, recvmmsg; also as
  ``BTL_UDP_<NAME>`` environment variables, which explicit options override.
* Beyond the Device hooks: ``device.post_send_batch(channel, dest, datagrams) -> int`` (UDP
  GSO for runs of equal-size datagrams; returns how many were taken),
  ``device.post_send_many([(channel, dest, data), ...]) -> int`` (the same for a driver's
  whole flush) and ``device.stats()``.
"""

from ._device import UdpDevice
from ._options import ALLOWED as OPTIONS
from ._options import UdpOptions

__all__ = ["OPTIONS", "UdpDevice", "UdpOptions"]
