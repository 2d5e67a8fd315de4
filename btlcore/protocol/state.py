"""What an engine's parts share: its configuration, its peers, its work lists, its timers
and its events.

:class:`EngineState` is one plain slotted object, built once by
:class:`btlcore.protocol.engine.Engine` and handed to each part (packetizer, recovery,
handshake, receiver).  Its containers (the peer tables, the work lists, the heaps, the
events list, the regions) are created here and never rebound: a part copies the references
it uses into its own slots once, so that its hot paths keep one attribute lookup.  Its
mutable scalars (``now``, ``closed``, ``gather_min``, ``next_region``) live only here and are
read through the state (``self._state.now``), never copied.  The work lists are
insertion-ordered sets (dict keys) of the peers with something to do, so that a pass visits
only those.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Final

from ..config import Config
from . import congestion
from .congestion import CongestionControl
from .delivery import DeliverySampler
from .events import Event
from .pacing import Pacer
from .peers import Peer
from .stats import ModuleCounters
from .timers import DeadlineHeap
from .wire import (
    ACK_BODY,
    CHUNK_LEN,
    HEADER_LEN,
    MAX_SACK_RANGES,
    PUT_LEN,
    SACK_RANGE,
)

PRIORITY: Final = 0  # channel numbers (btlcore.device.Channel)
DATA: Final = 1


class EngineState:
    """The state shared by every part of the engine (see the module docstring)."""

    __slots__ = (
        "config", "address", "resolve", "rng", "incarnation", "data_mtu", "priority_mtu",
        "priority_limit", "crc", "ack_channel", "max_sack", "granularity", "ack_frequency",
        "ack_delay", "cc", "cwnd_max", "sampler", "pacer", "single_cap", "chunk_cap", "gather_min", "prefixes",
        "peers_by_addr", "peers_by_conn", "counters", "events", "regions", "next_region",
        "closed", "now", "resending", "probing", "sending", "acking", "hello", "timed", "touched",
        "deadlines", "actions", "control", "quarantine", "rx_held",
        "reply_dest", "replies",
    )

    def __init__(
        self,
        config: Config,
        *,
        address: bytes,
        resolve: Callable[[bytes], Any],
        data_mtu: int,
        priority_mtu: int,
        crc: bool,
        rng: random.Random,
        now: float,
        incarnation: int | None = None,
        reply_dest: Callable[[Any], Any] | None = None,
        wrap_cc: Callable[[CongestionControl], CongestionControl] | None = None,
    ) -> None:
        self.config = config
        # a datagram's observed source -> a dest to answer it at (the device's
        # btl_device_reply_dest); None: the device cannot, replies go to resolved addresses
        self.reply_dest = reply_dest
        # replies owed to no peer (VERSION replies): (channel, dest, datagram), sent by the
        # next datagrams_to_send
        self.replies: list[tuple[int, Any, bytes]] = []
        self.address = address
        self.resolve = resolve
        self.rng = rng
        # Incarnations are ordered (see stale_incarnation): the driver passes one made from
        # the wall clock (Transport does), so that a late HELLO of an older life is told
        # from a restart; a bare engine draws a random one.
        self.incarnation = incarnation if incarnation else rng.randrange(1, 1 << 32)
        self.data_mtu = min(data_mtu, config.mtu) if config.mtu else data_mtu
        self.priority_mtu = min(priority_mtu, self.data_mtu)
        self.priority_limit = min(config.priority_limit, self.priority_mtu)
        if self.data_mtu < HEADER_LEN + CHUNK_LEN + PUT_LEN + 1:
            raise ValueError(f"device MTU {self.data_mtu} is too small for btlcore's headers")
        self.crc = crc  # we require a CRC32C on everything we receive (and so send one)
        self.ack_channel = PRIORITY if self.priority_limit else DATA
        self.max_sack = max(0, min(MAX_SACK_RANGES,
                                   ((self.priority_mtu if self.priority_limit else self.data_mtu)
                                    - HEADER_LEN - ACK_BODY.size) // SACK_RANGE.size))
        self.granularity = 1e-6 if not config.ack_delay else config.ack_delay
        self.ack_frequency = config.ack_frequency
        self.ack_delay = config.ack_delay
        self.cc, self.cwnd_max, self.sampler = self._congestion(config, wrap_cc)
        self.single_cap = self.data_mtu - HEADER_LEN  # payload of an unchunked message
        self.chunk_cap = self.data_mtu - HEADER_LEN - CHUNK_LEN
        self.gather_min: int | None = None  # chunk size from which payloads stay uncopied
        # a data header's first 12 bytes and their CRC32C, by remote_conn << 8 | flags: the
        # same for every segment to a peer (incarnation is ours), so packed once, not per pass
        self.prefixes: dict[int, tuple[bytes, int]] = {}
        self.peers_by_addr: dict[bytes, Peer] = {}
        self.peers_by_conn: dict[int, Peer] = {}
        self.counters = ModuleCounters()
        self.events: list[Event] = []
        self.regions: dict[int, memoryview] = {}
        self.next_region = 1
        self.closed = False
        self.now = now
        # the peers with something to do, as insertion-ordered sets (dict keys)
        self.resending: dict[Peer, None] = {}
        self.probing: dict[Peer, None] = {}  # (in resending too: a timeout's probe of new data, timeout.py)
        self.sending: dict[Peer, None] = {}
        self.acking: dict[Peer, None] = {}
        self.hello: dict[Peer, None] = {}
        # timers (see Recovery.refresh_timers): peers whose timer inputs changed, to be
        # (re)timed -- timed if the change may give them a deadline, touched otherwise
        # (counted only if they are timed already) -- and the heaps of their times
        self.timed: dict[Peer, None] = {}
        self.touched: dict[Peer, None] = {}
        self.deadlines: DeadlineHeap[Peer] = DeadlineHeap()  # what next_deadline() reports
        self.pacer = Pacer(self.data_mtu, self.timed, self.deadlines)  # (peers with a pacing_rate)
        self.actions: DeadlineHeap[Peer] = DeadlineHeap()  # when handle_timer() acts on one
        # lifecycle (lifecycle.py): the peers owed a PING, CLOSE or CLOSE_ACK, and the
        # connection ids of closed connections, kept out of use until the time they map to
        # (late datagrams of an old connection are never taken for a new one's)
        self.control: dict[Peer, None] = {}
        self.quarantine: dict[int, float] = {}
        # bytes every peer's reassemblies hold together (bounded by config.reassembly_limit)
        self.rx_held = 0

    @staticmethod
    def _congestion(config: Config, wrap_cc: Callable[[CongestionControl], CongestionControl] | None
                    ) -> tuple[CongestionControl, float, DeliverySampler | None]:
        """The congestion control, by name (resolved once); wrap_cc: a tracer's seam
        (btlcore.trace), given only when tracing, so that the parts bind the observed one from
        the start.  Its window cap, and delivery-rate samples if it takes them (its optional
        on_rate_sample; None: nothing sampled)."""
        cc: CongestionControl = congestion.load(config.cc)(config)
        if wrap_cc is not None:
            cc = wrap_cc(cc)
        on_rate_sample = getattr(cc, "on_rate_sample", None)
        return cc, cc.cwnd_max, DeliverySampler(on_rate_sample) if on_rate_sample is not None else None

    def drop_reassembly(self, peer: Peer) -> None:
        """Forget ``peer``'s messages in reassembly and give back the bytes they held."""
        self.rx_held -= peer.rx_held
        peer.rx_held = 0
        peer.reassembly.clear()

    def unschedule(self, peer: Peer) -> None:
        """Take ``peer`` off every work list and timer (it failed, is reset, or is forgotten)."""
        for table in (self.resending, self.probing, self.sending, self.acking, self.hello, self.timed, self.touched,
                      self.control):
            table.pop(peer, None)
        peer.timed = peer.pace_wait = False
        self.deadlines.discard(peer)
        self.actions.discard(peer)
