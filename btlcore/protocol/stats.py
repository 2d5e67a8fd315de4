"""Statistics counters: usnic's names, per peer and per transport, as a line and as JSON.

Peer counters live on each peer (one attribute increment on the hot path); the transport's
figures are the sum over its peers plus the counters that belong to no peer (datagrams with
an unknown connection id, CRC failures, malformed datagrams)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

import attr
import attrs

from .events import MessageReceived

if TYPE_CHECKING:
    from .peers import Peer


def _repr(counters: Any, names: tuple[str, ...]) -> str:
    """What attrs' ``__repr__`` gives: ``Name(field=value, ...)``."""
    return f"{type(counters).__name__}({', '.join(f'{n}={getattr(counters, n)!r}' for n in names)})"


def _eq(a: Any, b: object, names: tuple[str, ...]) -> Any:
    """What attrs' ``__eq__`` gives: equal fields, the same class (else NotImplemented)."""
    if type(b) is not type(a):
        return NotImplemented
    return all(getattr(a, n) == getattr(b, n) for n in names)


# The counter classes are attrs classes spelled ``attr.s(auto_attribs=True, ...)``, the form mypyc
# compiles into a native class (``attrs.define`` would leave it a Python class, each increment
# on the hot path a dict lookup and a generic add); as ``attrs.define`` made them: slotted,
# keyword ``__init__``, ``attrs.fields``/``asdict``, equal by fields, unhashable.  ``__repr__``
# and ``__eq__`` are written out: a slotted attrs class is a new class, whose generated methods
# mypyc does not carry over to the native one.
@attr.s(auto_attribs=True, slots=True, weakref_slot=True, repr=False, eq=False)
class PeerCounters:
    """One peer's counters (see ``docs/api.md`` for what each counts)."""

    num_total_sends: int = 0
    num_resends: int = 0
    num_timeout_retrans: int = 0
    num_fast_retrans: int = 0
    num_spurious_retrans: int = 0
    num_undos: int = 0
    num_tail_probes: int = 0
    num_chunk_sends: int = 0
    num_frag_sends: int = 0
    num_ack_sends: int = 0
    num_hello_sends: int = 0
    num_total_recvs: int = 0
    num_dup_recvs: int = 0
    num_oow_low_recvs: int = 0
    num_oow_high_recvs: int = 0
    num_frag_recvs: int = 0
    num_chunk_recvs: int = 0
    num_badfrag_recvs: int = 0
    num_ack_recvs: int = 0
    num_old_dup_acks: int = 0
    num_dup_acks: int = 0
    num_hello_recvs: int = 0
    num_stale_recvs: int = 0
    num_reassembly_drops: int = 0
    num_rx_budget_drops: int = 0
    num_put_errors: int = 0
    num_put_status_sends: int = 0
    num_put_status_recvs: int = 0
    num_puts_refused: int = 0
    num_msgs_sent: int = 0
    num_msgs_completed: int = 0
    num_msgs_delivered: int = 0
    num_puts_delivered: int = 0
    num_bytes_sent: int = 0
    num_bytes_delivered: int = 0
    num_send_errors: int = 0
    num_source_drops: int = 0
    num_send_blocks: int = 0
    max_send_window: int = 0
    max_recv_window: int = 0

    def as_dict(self) -> dict[str, int]:
        return attrs.asdict(self)

    def __repr__(self) -> str:
        return _repr(self, PEER_COUNTERS)

    def __eq__(self, other: object) -> Any:
        return _eq(self, other, PEER_COUNTERS)


@attr.s(auto_attribs=True, slots=True, weakref_slot=True, repr=False, eq=False)
class ModuleCounters:
    """Counters that belong to the transport rather than to one peer."""

    num_unk_recvs: int = 0
    num_refused_peers: int = 0
    num_crc_errors: int = 0
    num_malformed_recvs: int = 0
    num_send_pushbacks: int = 0
    num_peer_failures: int = 0
    num_peer_restarts: int = 0
    num_notice_sends: int = 0
    num_challenge_sends: int = 0
    num_forged_drops: int = 0
    num_replies_limited: int = 0
    num_icmp_errors: int = 0
    num_rx_memory_drops: int = 0

    def __repr__(self) -> str:
        return _repr(self, MODULE_COUNTERS)

    def __eq__(self, other: object) -> Any:
        return _eq(self, other, MODULE_COUNTERS)


#: counters summed over peers; ``max_*`` ones are high-water marks (max, not sum)
PEER_COUNTERS: Final = tuple(f.name for f in attrs.fields(PeerCounters))
MODULE_COUNTERS: Final = tuple(f.name for f in attrs.fields(ModuleCounters))


def aggregate(module: ModuleCounters, peers: Iterable[PeerCounters]) -> dict[str, int]:
    """The transport's totals: peer counters summed (high-water marks maxed) plus its own."""
    total = dict.fromkeys(PEER_COUNTERS, 0)
    for pc in peers:
        for name in PEER_COUNTERS:
            value = getattr(pc, name)
            if name.startswith("max_"):
                if value > total[name]:
                    total[name] = value
            else:
                total[name] += value
    total.update(attrs.asdict(module))
    return total


def path_state(peer: Peer) -> dict[str, float | None]:
    """What the sender knows of the path to ``peer`` now: the RTT estimator's ``srtt``,
    ``rttvar``, ``min_rtt`` and ``rto`` (seconds; None before a sample), the congestion window
    ``cwnd`` and ``ssthresh`` (segments; None: unbounded), ``pacing_rate`` and the last valid
    ``delivery_rate`` (bytes/s; 0.0: unpaced, or an algorithm that takes no rate samples),
    ``bytes_in_flight`` (datagram bytes sent, neither acknowledged nor declared lost); and
    of the receiver, ``bytes_held``: message bytes from the peer that arrived but are not yet
    delivered (chunks in reassembly, and in ordered mode whole messages waiting for an earlier
    one).  Read on demand (the sums walk the unacknowledged segments and the waiting
    messages): not for a hot loop."""
    t = peer.timer
    in_flight = 0
    for seg in peer.unacked.values():
        if not seg.lost:
            buf = seg.buf
            in_flight += sum(len(part) for part in buf) if type(buf) is list else len(buf)
    return {
        "srtt": t.srtt, "rttvar": t.rttvar if t.srtt is not None else None, "min_rtt": t.min_rtt,
        "rto": t.rto, "cwnd": None if math.isinf(peer.cwnd) else peer.cwnd,
        "ssthresh": None if math.isinf(peer.ssthresh) else peer.ssthresh,
        "pacing_rate": peer.pacing_rate, "delivery_rate": peer.delivery_rate,
        "bytes_in_flight": in_flight,
        "bytes_held": sum(ras.received for ras in peer.reassembly.values())
        + sum(len(ev.data) for ev in peer.ready.values() if type(ev) is MessageReceived),
    }


def stats_line(label: str, counters: dict[str, Any]) -> str:
    """A usnic-style one-line summary (what usnic printed every N seconds and at finalize)."""
    c = counters
    return (
        f"{label}: S/s {c['num_total_sends']} ({c['num_resends']} resends: "
        f"{c['num_timeout_retrans']} timeout, {c['num_fast_retrans']} fast), "
        f"A/s {c['num_ack_sends']}, "
        f"R/r {c['num_total_recvs']} (dup {c['num_dup_recvs']}, oow low "
        f"{c['num_oow_low_recvs']}/high {c['num_oow_high_recvs']}, unk {c['num_unk_recvs']}, "
        f"crc {c['num_crc_errors']}, malformed {c['num_malformed_recvs']}), "
        f"ACK r {c['num_ack_recvs']} (dup {c['num_dup_acks']}, old {c['num_old_dup_acks']}), "
        f"msgs {c['num_msgs_sent']} sent/{c['num_msgs_completed']} acked/"
        f"{c['num_msgs_delivered']} delivered, "
        f"win hw send {c['max_send_window']} recv {c['max_recv_window']}"
    )


def stats_json(counters: dict[str, Any], **extra: Any) -> str:
    return json.dumps({**extra, **counters}, sort_keys=True)
