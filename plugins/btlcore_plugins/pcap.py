"""Trace a real backend's traffic to a pcap file that tshark, Wireshark and scapy read.

usnic's traffic was invisible to OS capture tools; this plugin writes every datagram a
transport sends or receives, wrapped as Ethernet / IPv4 / UDP on port
:data:`btlcore.wire.PCAP_UDP_PORT` so that the btlcore dissectors apply (``btl wireshark``'s
for Wireshark and tshark, ``import btlcore_sim.scapy`` for scapy).  Sent frames go
10.0.0.1 -> 10.0.0.2, received ones the other way.
Timestamps are the wall clock.  Raw bytes, no scapy object per frame::

    from btlcore_plugins.pcap import PcapTracer
    t = btlcore.open("udp", plugins=[PcapTracer("run.pcap")])
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

from btlcore.device import Channel, hookimpl
from btlcore.protocol.wire import PCAP_UDP_PORT

_GLOBAL = struct.Struct("<IHHiIII")
_RECORD = struct.Struct("<IIII")
_IP_UDP = struct.Struct("!BBHHHBBH4s4sHHHH")
_LOCAL = bytes((10, 0, 0, 1))
_REMOTE = bytes((10, 0, 0, 2))
_MAC_LOCAL = b"\x02\x00\x00\x00\x00\x01"
_MAC_REMOTE = b"\x02\x00\x00\x00\x00\x02"
LINKTYPE_ETHERNET = 1
SNAPLEN = 262144


def _ip_checksum(header: bytes) -> int:
    total: int = sum(struct.unpack("!10H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


class PcapTracer:
    """A tool plugin writing a classic pcap (microsecond timestamps)."""

    def __init__(self, path: str | None = None, clock: Callable[[], float] = time.time) -> None:
        # BTL_PLUGINS=pcap: the file is $BTL_PCAP, or btlcore-<pid>.pcap
        path = path or os.environ.get("BTL_PCAP") or f"btlcore-{os.getpid()}.pcap"
        self.path = path
        self._clock = clock
        self._file = open(path, "wb")  # noqa: SIM115 - closed with the transport
        self._file.write(_GLOBAL.pack(0xA1B2C3D4, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET))
        self.frames = 0

    def _write(self, data: bytes, src: bytes, dst: bytes, smac: bytes, dmac: bytes) -> None:
        n = len(data)
        ip = bytearray(_IP_UDP.pack(0x45, 0, 28 + n, self.frames & 0xFFFF, 0x4000, 64, 17, 0,
                                    src, dst, PCAP_UDP_PORT, PCAP_UDP_PORT, 8 + n, 0))
        struct.pack_into("!H", ip, 10, _ip_checksum(bytes(ip[:20])))
        frame_len = 14 + 28 + n
        t = self._clock()
        sec = int(t)
        self._file.write(_RECORD.pack(sec, int((t - sec) * 1e6), frame_len, frame_len))
        self._file.write(dmac + smac + b"\x08\x00")
        self._file.write(ip)
        self._file.write(data)
        self.frames += 1

    @hookimpl
    def btl_frame_sent(self, transport: Any, channel: Channel, data: bytes) -> None:
        self._write(data, _LOCAL, _REMOTE, _MAC_LOCAL, _MAC_REMOTE)

    @hookimpl
    def btl_frame_received(self, transport: Any, data: bytes) -> None:
        self._write(data, _REMOTE, _LOCAL, _MAC_REMOTE, _MAC_LOCAL)

    @hookimpl
    def btl_transport_closed(self, transport: Any, stats: Mapping[str, Any]) -> None:
        self.close()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
