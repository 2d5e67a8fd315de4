"""btlcore's protocol core, sans I/O: bytes and ``now`` in, datagrams and deadlines out.

Where things happen, one concept a module.  :class:`~.engine.Engine` composes its parts: it
builds the shared :class:`~.state.EngineState` and one object per part over it
(``Packetizer``, ``Recovery``, ``Handshake``, ``Versions``, ``Receiver``: none inherits another), hands
each the bound methods of the parts it calls, and adds the public methods:

==================  ============================================================================
module              what it owns
==================  ============================================================================
``engine``          the facade: ``connect/send/expose/close``, ``receive_datagram(s)``,
                    ``datagrams_to_send``, ``next_deadline``, ``handle_timer``, ``take_events``;
                    builds the parts and wires them
``state``           what the parts share: configuration, peers, work lists, timer heaps, events
``packetizer``      **a message becomes datagrams**: ``_cut_segments`` (chunks, channel, header,
                    CRC), the ACK point stamped on every segment, standalone ACKs and HELLOs
``receive``         **a datagram becomes a message**: the one receive path
                    (``receive_datagrams``: in-order first, then ``_on_segment`` -- reassembly,
                    puts, put statuses, ordered delivery, ACK debt)
``recovery``        **a loss is noticed**: ACKs (``on_ack``), RTT and the retransmit timer,
                    fast retransmit (``detect_losses``), timeouts and peer death
                    (``handle_timer``), the timers' heaps (``next_deadline``)
``rtt``             the RTT estimator and the retransmit timeout (RFC 6298, with backoff)
``tlp``             the tail-loss probe (RFC 8985): a lost tail found in two round trips
``undo``            spurious retransmissions detected, and their window decrease undone
``delivery``        delivery-rate samples for algorithms that take them (``sampled``: the
                    recovery that feeds them)
``pacing``          sends released no faster than ``Peer.pacing_rate`` (a token bucket)
``lifecycle``       liveness (death rule, keepalive, zero-window probe) and CLOSE
``congestion/``     the window's size, behind an interface; ``bbr`` is the default
``handshake``       HELLO / HELLO_ACK, connection ids, incarnations, restarts and resets; the
                    peer's transport parameters (its limits) obeyed; replies to the source
``versions``        version negotiation: VERSION replies out (rate-limited) and in
                    (``VersionMismatch``)
``peers``           per-peer state, and the connection state machine (``TRANSITIONS``)
``events``          what the driver is told: ``MessageReceived``, ``SendCompleted``, ...
``wire``            the one codec of the wire format (``docs/protocol.md`` is its prose twin)
``window``          receive window, SACK scoreboard, sequence arithmetic
``timers``          a heap of deadlines with lazy invalidation
``stats``           the counters
==================  ============================================================================

A progress pass sends, in this order (usnic's): retransmissions (at most
``max_resends_per_pass``), new segments (round robin over peers, ``send_credits`` each),
standalone ACKs that are due, then handshakes.
"""

from .engine import Engine
from .events import (
    Event,
    MessageReceived,
    PeerFailed,
    PeerRestarted,
    PeerWritable,
    PutLanded,
    PutRefused,
    SendCompleted,
)
from .peers import InvalidTransition, Peer, PeerEvent, PeerState

__all__ = [
    "Engine", "Event", "InvalidTransition", "MessageReceived", "Peer", "PeerEvent", "PeerFailed",
    "PeerRestarted", "PeerState", "PeerWritable", "PutLanded", "PutRefused", "SendCompleted",
]
