"""btlcore for scapy users: one import, and ``rdpcap`` shows btlcore layers::

    import btlcore_sim.scapy            # binds the layers (port 7471 and any UDP port)
    from scapy.all import rdpcap
    for pkt in rdpcap("run.pcapng"):
        if btlcore_sim.scapy.BTL in pkt:
            print(pkt[btlcore_sim.scapy.BTL].seq)

Importing it binds :mod:`btlcore_sim.layers` (the scapy twin of ``btlcore.protocol.wire``)
to UDP port :data:`btlcore.protocol.wire.PCAP_UDP_PORT`, as the simulator's captures use,
and to every other UDP port through the heuristic of :func:`btlcore.captures.looks_like_btl`
(the Wireshark dissector's): a UDP payload that scapy would leave as ``Raw`` is dissected as
:class:`BTL` when its version, type, flags and lengths are consistent.  A port scapy already
binds to another protocol keeps it.  :func:`unbind` restores scapy's own UDP guessing.

It is not imported by ``btlcore_sim`` (the simulator never loads scapy: a second to import,
and nothing per frame needs it); import it yourself.  Its layers are :mod:`btlcore_sim.layers`'s,
re-exported here.
"""

from __future__ import annotations

from typing import Any

from scapy.config import conf
from scapy.layers.inet import UDP

from btlcore.captures import looks_like_btl

from .layers import (
    BTL,
    BTLAck,
    BTLChallenge,
    BTLClose,
    BTLHello,
    BTLNotice,
    BTLParam,
    BTLPing,
    BTLPutStatus,
    BTLSackRange,
    BTLVersion,
    dissect,
    fields,
)

__all__ = ["BTL", "BTLAck", "BTLChallenge", "BTLClose", "BTLHello", "BTLNotice", "BTLParam",
           "BTLPing", "BTLPutStatus", "BTLSackRange", "BTLVersion", "bind", "dissect", "fields",
           "unbind"]

#: while ours is installed: (UDP's own guess_payload_class or None, the one it inherited or had)
_plain: list[tuple[Any, Any]] = []


def _guess(self: Any, payload: bytes) -> Any:
    """UDP's payload class: scapy's own choice, unless that is Raw and the payload looks like
    a btlcore datagram."""
    cls = _plain[0][1](self, payload)
    if cls is conf.raw_layer and looks_like_btl(payload):
        return BTL
    return cls


def bind() -> None:
    """Dissect btlcore on any UDP port (done on import; calling it again does nothing)."""
    if not _plain:
        _plain.append((UDP.__dict__.get("guess_payload_class"), UDP.guess_payload_class))
        UDP.guess_payload_class = _guess  # type: ignore[method-assign]


def unbind() -> None:
    """Back to scapy's own UDP guessing (btlcore on port 7471 only, as :mod:`.layers` binds)."""
    if _plain:
        own = _plain.pop()[0]
        if own is None:
            del UDP.guess_payload_class  # (UDP had none of its own: Packet's applies again)
        else:
            UDP.guess_payload_class = own  # type: ignore[method-assign]


bind()
