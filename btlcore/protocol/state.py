"""What an engine holds: its configuration, its peers, its work lists and its events.

:class:`EngineState` builds that state; each facet of the engine (packetizer, recovery,
handshake, receive) is a class on top of it, and :class:`btlcore.protocol.engine.Engine`
joins them.  The work lists are insertion-ordered sets (dict keys) of the peers with
something to do, so that a pass visits only those.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from ..config import Config
from . import congestion
from .congestion import CongestionControl
from .events import Event
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

PRIORITY = 0  # channel numbers (btlcore.device.Channel)
DATA = 1


class EngineState:
    """The state shared by every part of the engine (see the module docstring)."""

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
    ) -> None:
        self.config = config
        self.address = address
        self._resolve = resolve
        self._rng = rng
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
        self._ack_channel = PRIORITY if self.priority_limit else DATA
        self._max_sack = max(0, min(MAX_SACK_RANGES,
                                    ((self.priority_mtu if self.priority_limit else self.data_mtu)
                                     - HEADER_LEN - ACK_BODY.size) // SACK_RANGE.size))
        self._granularity = 1e-6 if not config.ack_delay else config.ack_delay
        self._ack_frequency = config.ack_frequency
        self._ack_delay = config.ack_delay
        # congestion control, by name (resolved once); its per-ACK call bound once
        self._cc: CongestionControl = congestion.load(config.cc)(config)
        self._cc_on_ack = self._cc.on_ack
        self._cwnd_max: float = self._cc.cwnd_max
        self._single_cap = self.data_mtu - HEADER_LEN  # payload of an unchunked message
        self._chunk_cap = self.data_mtu - HEADER_LEN - CHUNK_LEN
        self._gather_min: int | None = None  # chunk size from which payloads stay uncopied
        # a data header's first 12 bytes and their CRC32C, by remote_conn << 8 | flags: the
        # same for every segment to a peer (incarnation is ours), so packed once, not per pass
        self._prefixes: dict[int, tuple[bytes, int]] = {}
        self.peers_by_addr: dict[bytes, Peer] = {}
        self.peers_by_conn: dict[int, Peer] = {}
        self.counters = ModuleCounters()
        self.events: list[Event] = []
        self.regions: dict[int, memoryview] = {}
        self._next_region = 1
        self.closed = False
        self._now = now
        # the peers with something to do, as insertion-ordered sets (dict keys)
        self._resending: dict[Peer, None] = {}
        self._sending: dict[Peer, None] = {}
        self._acking: dict[Peer, None] = {}
        self._hello: dict[Peer, None] = {}
        # timers (see Recovery._refresh_timers): peers whose timer inputs changed, to be
        # (re)timed -- _timed if the change may give them a deadline, _touched otherwise
        # (counted only if they are timed already) -- and the heaps of their times
        self._timed: dict[Peer, None] = {}
        self._touched: dict[Peer, None] = {}
        self._deadlines: DeadlineHeap[Peer] = DeadlineHeap()  # what next_deadline() reports
        self._actions: DeadlineHeap[Peer] = DeadlineHeap()  # when handle_timer() acts on one
        self._timed_order = 0  # peers are served in the order they became timed

    def _unschedule(self, peer: Peer) -> None:
        """Take ``peer`` off every work list and timer (it failed, is reset, or is forgotten)."""
        for table in (self._resending, self._sending, self._acking, self._hello, self._timed, self._touched):
            table.pop(peer, None)
        peer.timed = False
        self._deadlines.discard(peer)
        self._actions.discard(peer)
