"""Engines joined by a scriptable in-memory link on a virtual clock (no device at all): the
sans-I/O core tested on its own, as aioquic's tests drive two connections by hand.  A public
testing API: a user's or a backend's tests drive two engines like this::

    from btlcore import Config
    from btlcore.testing.enginepair import EnginePair

    p = EnginePair(Config(), seed=1)          # engines p.a, p.b at addresses b"A", b"B"
    p.handshake()                             # run until both are established
    p.faults.drop(src=0, dst=1, nth=1)        # lose the next datagram from a to b
    p.send(0, 1, 7, b"hello", key="m")        # a sends tag 7 to b; its completion goes to "m"
    p.run(lambda: p.completions.get("m"))     # step virtual time until the predicate holds
    assert p.delivered[1] == [(b"A", 7, b"hello")] and p.completions["m"] == [None]

Each step hands every engine what arrived (``receive_datagram`` or, with
``batch_receive=True``, ``receive_datagrams``), each datagram with its source: the sender's
address, which the engines' ``reply_dest`` takes as a dest as it is (``resolve`` is the
identity), so handshake and VERSION replies go back to the sender; runs its due timers
(``next_deadline`` / ``handle_timer``), takes its events (``take_events``: deliveries into ``delivered``,
completions into ``completions``, the rest into ``other_events``; all into ``timeline``) and
sends what it wants sent (``datagrams_to_send``), logging every datagram in ``log``.

:class:`EngineNet` joins any number of engines (addresses ``b"A"``, ``b"B"``, ``b"C"``...);
:class:`EnginePair` is the two-engine case with ``a`` and ``b``.  Every datagram an engine
wants sent goes through the *fate* hooks (``net.hooks``, first non-None answer wins) and then
lands after ``delay`` seconds of virtual time.  A fate is one of::

    DELIVER                     deliver after ``delay``
    DROP                        lose it
    ("dup", n)                  deliver it n + 1 times
    ("delay", extra)            deliver after ``delay + extra``
    ("corrupt", bit)            flip bit number ``bit`` (mod the datagram's length in bits)
    ("replace", data)           deliver ``data`` instead (a datagram rewritten on the link)

Hooks are ``hook(src, dst, data, k) -> fate | None`` where ``src``/``dst`` are engine indices
and ``k`` counts datagrams from ``src`` to ``dst`` (from 0).

Scripted faults use the words of :mod:`btlcore.faults`, as on the simulator and on a real
backend: ``net.faults`` (judged after the hooks; ``src``, ``dst`` and ``peer`` name engines
by address or index)::

    p.faults.drop(src=0, dst=1, type="DATA", nth=2)   # a's second DATA to b
    p.faults.reorder(after=2, src=b"A", nth=1)        # a's next datagram, behind two more

The old helpers (:meth:`drop_nth`, :meth:`drop_where`, :meth:`silence`) still work,
deprecated.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import Any

from btlcore import Config
from btlcore.errors import BtlDeprecationWarning
from btlcore.faults import Faults, Rule
from btlcore.protocol.engine import Engine
from btlcore.protocol.events import Event, MessageReceived, SendCompleted
from btlcore.protocol.peers import PeerState
from btlcore.protocol.wire import Datagram, MalformedDatagram, decode

DELIVER = "deliver"
DROP = "drop"
Fate = Any
Hook = Callable[[int, int, bytes, int], Fate]


def safe_decode(data: bytes) -> Datagram | None:
    try:
        return decode(data)
    except MalformedDatagram:
        return None


class EngineNet:
    """``n`` engines, every pair joined by a link of ``delay`` seconds, on virtual time."""

    def __init__(self, n: int = 2, config: Config | None = None, *, configs: list[Config] | None = None,
                 mtu: int = 1500, priority_mtu: int = 768, seed: int = 1, delay: float = 0.001,
                 crc: bool = True, max_steps: int = 200_000, budget: int = 1 << 30,
                 reuse_rx_buffer: bool = False, batch_receive: bool = False) -> None:
        self.now = 0.0
        # hand each engine what landed in one step as one Engine.receive_datagrams batch
        self.batch_receive = batch_receive
        # hand datagrams over as memoryviews of one buffer that is scribbled over after each
        # receive (as a device reusing its receive buffers does): the engine must copy
        self.reuse_rx_buffer = reuse_rx_buffer
        self._rx = bytearray(65536)
        self.budget = budget  # datagrams per send pass and engine (device back-pressure)
        self.delay = delay
        self.seed = seed
        self.mtu = mtu
        self.priority_mtu = priority_mtu
        self.crc = crc
        self.max_steps = max_steps
        self.hooks: list[Hook] = []
        self.faults = Faults(seed)
        """Scripted faults in the words of :mod:`btlcore.faults` (judged after ``hooks``)."""
        self._held: list[list[Any]] = []  # reordered: [datagrams still to pass, src, dst, data]
        self.configs = configs or [config or Config()] * n
        self.engines: list[Engine] = [self._make(i, seed + i) for i in range(n)]
        self.addresses = [e.address for e in self.engines]
        self.sent_count: dict[tuple[int, int], int] = {}
        self.log: list[tuple[float, int, int, bytes]] = []  # (time, src, dst, datagram as sent)
        self.batches: list[tuple[float, int, list[bytes]]] = []  # one per non-empty send pass
        self.arrivals: list[tuple[float, int, int, bytes]] = []  # (time, src, dst, as received)
        self._flight: list[tuple[float, float, int, int, bytes]] = []
        self._n = 0
        self.delivered: list[list[tuple[bytes, int, bytes]]] = [[] for _ in range(n)]
        self.completions: dict[Any, list[BaseException | None]] = {}
        self.other_events: list[list[Event]] = [[] for _ in range(n)]
        self.timeline: list[tuple[float, int, Event]] = []  # every event, in order
        self.steps = 0

    def _make(self, i: int, seed: int) -> Engine:
        # incarnations are ordered, as a Transport makes them from the clock: later lives
        # of a node get larger numbers
        self._lives = getattr(self, "_lives", 0) + 1
        # a datagram's source is its sender's address (a dest as it is: resolve is the identity)
        return Engine(self.configs[i], address=bytes([65 + i]), resolve=lambda addr: bytes(addr),
                      data_mtu=self.mtu, priority_mtu=self.priority_mtu, crc=self.crc,
                      rng=random.Random(seed), now=self.now,
                      incarnation=self._lives << 10,  # lives a "second" apart (1024 units)
                      reply_dest=lambda source: bytes(source))

    # ------------------------------------------------------------------ helpers

    def restart(self, i: int, seed: int | None = None) -> Engine:
        """Replace engine ``i`` with a fresh one at the same address (a new incarnation)."""
        eng = self._make(i, seed if seed is not None else self.seed + 1000 + i)
        self.engines[i] = eng
        return eng

    def cb(self, key: Any) -> Callable[[BaseException | None], None]:
        """A completion callback recording into ``self.completions[key]``."""
        self.completions.setdefault(key, [])

        def callback(exc: BaseException | None) -> None:
            self.completions[key].append(exc)
        return callback

    def index(self, address: bytes) -> int:
        return self.addresses.index(bytes(address))

    def peer(self, i: int, j: int) -> Any:
        """Engine i's peer object for engine j (None if it has none)."""
        return self.engines[i].peers_by_addr.get(self.addresses[j])

    def connect(self, i: int, j: int) -> Any:
        return self.engines[i].connect(self.addresses[j], self.now)

    def send(self, i: int, j: int, tag: int, data: bytes, key: Any = None, **kw: Any) -> Any:
        peer = self.engines[i].connect(self.addresses[j], self.now)
        return self.engines[i].send(peer, tag, data, self.cb(key) if key is not None else None,
                                    self.now, **kw)

    def established(self, i: int, j: int) -> bool:
        p, q = self.peer(i, j), self.peer(j, i)
        return (p is not None and q is not None and p.state is PeerState.ESTABLISHED
                and q.state is PeerState.ESTABLISHED)

    def handshake(self, i: int = 0, j: int = 1) -> float:
        self.connect(i, j)
        t = self.run(lambda: self.established(i, j), max_time=self.now + 5)
        self.run_idle()
        return t

    def run_idle(self, max_time: float | None = None) -> float:
        """Run until nothing is in flight and no engine has a timer due before ``max_time``
        (default: now + 1 s)."""
        limit = self.now + 1.0 if max_time is None else max_time
        while self.steps < self.max_steps:
            timers = [t for e in self.engines if (t := e.next_deadline()) is not None]
            if not self._flight and (not timers or min(timers) > limit):
                return self.now
            if not self.step():
                return self.now
        raise AssertionError("step limit reached (livelock?)")

    def add_hook(self, hook: Hook) -> Hook:
        self.hooks.append(hook)
        return hook

    def drop_nth(self, src: int, dst: int, n: int) -> None:
        """Drop the n-th (from 0) datagram sent from ``src`` to ``dst`` (deprecated:
        ``faults.drop(src=src, dst=dst, nth=n + 1)``)."""
        _deprecated("drop_nth(src, dst, n)", "faults.drop(src=src, dst=dst, nth=n + 1)")
        self.add_hook(lambda s, d, data, k: DROP if (s, d, k) == (src, dst, n) else None)

    def drop_where(self, pred: Callable[[Datagram], bool], count: int | None = None,
                   src: int | None = None) -> list[Datagram]:
        """Drop datagrams whose decoded form satisfies ``pred`` (at most ``count`` of them);
        returns the list of what was dropped (deprecated: ``faults.drop(where=pred, ...)``)."""
        _deprecated("drop_where(pred, count, src)", "faults.drop(where=pred, count=count, src=src)")
        dropped: list[Datagram] = []

        def hook(s: int, d: int, data: bytes, k: int) -> Fate:
            if src is not None and s != src:
                return None
            if count is not None and len(dropped) >= count:
                return None
            dg = safe_decode(data)
            if dg is not None and pred(dg):
                dropped.append(dg)
                return DROP
            return None
        self.add_hook(hook)
        return dropped

    def silence(self, i: int) -> None:
        """Engine ``i`` goes silent: nothing it sends arrives, nothing reaches it
        (deprecated: ``faults.partition(now, None, [i])``)."""
        _deprecated("silence(i)", "faults.partition(now, None, [i])")
        self.add_hook(lambda s, d, data, k: DROP if i in (s, d) else None)

    def sent(self, src: int | None = None, type: int | None = None) -> list[tuple[float, Datagram]]:
        """(time, decoded datagram) of what was sent, filtered."""
        out = []
        for t, s, _d, data in self.log:
            if src is not None and s != src:
                continue
            dg = safe_decode(data)
            if dg is not None and (type is None or dg.type == type):
                out.append((t, dg))
        return out

    # ------------------------------------------------------------------ the loop

    def _collect(self) -> None:
        for i, eng in enumerate(self.engines):
            for ev in eng.take_events():
                self.timeline.append((self.now, i, ev))
                if type(ev) is MessageReceived:
                    self.delivered[i].append((ev.peer.address, ev.tag, bytes(ev.data)))
                elif type(ev) is SendCompleted:
                    if ev.callback is not None:
                        ev.callback(ev.error)
                else:
                    self.other_events[i].append(ev)

    def _fate(self, src: int, dst: int, data: bytes, k: int) -> Fate:
        fate = None
        for hook in self.hooks:
            fate = hook(src, dst, data, k)
            if fate is not None:
                break
        if self.faults.rules:  # (counted by the rules even when a hook decided)
            rule = self.faults.judge(self.faults.rules, self.now, self.addresses[src], self.addresses[dst],
                                     data, self._keys_of, taken=fate is not None)
            if rule is not None:
                return self._rule_fate(rule, data)
        return DELIVER if fate is None else fate

    def _keys_of(self, refs: tuple[Any, ...]) -> frozenset[bytes]:
        """Engines named by address or index, as addresses."""
        return frozenset(self.addresses[r] if isinstance(r, int) else bytes(r) for r in refs)

    def _rule_fate(self, rule: Rule, data: bytes) -> Fate:
        """A fault rule's action as a fate."""
        action = rule.action
        if action == "drop":
            return DROP
        if action == "duplicate":
            return ("dup", rule.arg)
        if action == "delay":
            return ("delay", rule.arg)
        if action == "corrupt":
            return ("replace", self.faults.flip(rule, data)[0])
        return ("hold", rule.arg)

    def _post(self, src: int, dest: Any, data: bytes) -> None:
        dst = self.index(dest)
        k = self.sent_count.get((src, dst), 0)
        self.sent_count[src, dst] = k + 1
        self.log.append((self.now, src, dst, data))
        fate = self._fate(src, dst, data, k)
        copies, when = 1, self.now + self.delay
        if self._held:
            self._pass_held(src, dst, when)
        if fate == DROP:
            return
        if isinstance(fate, tuple) and fate[0] == "hold":
            self._held.append([fate[1], src, dst, data])
            return
        if isinstance(fate, tuple):
            if fate[0] == "dup":
                copies += fate[1]
            elif fate[0] == "delay":
                when += fate[1]
            elif fate[0] == "corrupt":
                b = bytearray(data)
                bit = fate[1] % (len(b) * 8)
                b[bit // 8] ^= 1 << (bit % 8)
                data = bytes(b)
            elif fate[0] == "replace":
                data = bytes(fate[1])
        for _ in range(copies):
            self._n += 1
            heapq.heappush(self._flight, (when, self._n, src, dst, data))

    def _pass_held(self, src: int, dst: int, when: float) -> None:
        """One more datagram goes ``src -> dst``: reordered ones that waited for it land
        right behind it."""
        for entry in list(self._held):
            if (entry[1], entry[2]) == (src, dst):
                entry[0] -= 1
                if entry[0] <= 0:
                    self._held.remove(entry)
                    # right behind the datagram about to be queued (serial _n + 1)
                    heapq.heappush(self._flight, (when, self._n + 1.5, src, dst, entry[3]))

    def advance(self, t: float) -> None:
        """Let virtual time run to exactly ``t`` (events up to ``t`` happen)."""
        while self.now < t:
            if self.steps > self.max_steps:
                raise AssertionError(f"step limit reached at t={self.now!r} (livelock?)")
            if not self.step(cap=t):
                self.now = t

    def step(self, cap: float | None = None) -> bool:
        """One round: run due timers, send what is due, deliver what landed, advance time
        (not beyond ``cap``).  False when nothing at all is left to happen."""
        self.steps += 1
        for src, eng in enumerate(self.engines):
            t = eng.next_deadline()
            if t is not None and t <= self.now:
                eng.handle_timer(self.now)
            out = eng.datagrams_to_send(self.now, self.budget)
            if out:
                batch = []
                for _ch, dest, buf in out:
                    data = b"".join(buf) if type(buf) is list else bytes(buf)  # gathered: [header, payload]
                    batch.append(data)
                    self._post(src, dest, data)
                self.batches.append((self.now, src, batch))
        self._collect()
        nexts = [f[0] for f in self._flight[:1]]
        for eng in self.engines:
            t = eng.next_deadline()
            if t is not None:
                nexts.append(max(t, self.now))
        if not nexts:
            return False
        target = min(nexts)
        if cap is not None and target > cap:
            target = cap
        self.now = max(self.now, target)
        batches: dict[int, tuple[list[bytes], list[bytes]]] = {}
        while self._flight and self._flight[0][0] <= self.now:
            _t, _n, src, dst, data = heapq.heappop(self._flight)
            self.arrivals.append((self.now, src, dst, data))
            source = self.addresses[src]  # where it came from (what a device reports)
            if self.batch_receive:
                batch, sources = batches.setdefault(dst, ([], []))
                batch.append(data)
                sources.append(source)
            elif self.reuse_rx_buffer:
                self._rx[:len(data)] = data
                self.engines[dst].receive_datagram(memoryview(self._rx)[:len(data)], source, self.now)
                self._rx[:len(data)] = b"\xa5" * len(data)
            else:
                self.engines[dst].receive_datagram(data, source, self.now)
        for dst, (batch, sources) in batches.items():
            self.engines[dst].receive_datagrams(batch, self.now, sources)
        self._collect()
        return True

    def run(self, until: Callable[[], bool] | None = None, max_time: float = 60.0) -> float:
        start_steps = self.steps
        while self.now < max_time:
            if until is not None and until():
                return self.now
            if not self.step():
                break
            if self.steps - start_steps > self.max_steps:
                raise AssertionError(f"step limit reached at t={self.now!r} (livelock?)")
        if until is not None and not until():
            raise AssertionError(f"condition not reached by t={self.now:.3f}")
        return self.now


def _deprecated(old: str, new: str) -> None:
    import warnings

    warnings.warn(f"EngineNet.{old} is deprecated: use net.{new} (btlcore.faults)", BtlDeprecationWarning,
                  stacklevel=3)


class EnginePair(EngineNet):
    """Engines ``a`` (index 0, address b"A") and ``b`` (index 1, address b"B")."""

    def __init__(self, config: Config | None = None, *, config_b: Config | None = None,
                 **kw: Any) -> None:
        cfg_a = config or Config()
        super().__init__(2, configs=[cfg_a, config_b or cfg_a], **kw)

    @property
    def a(self) -> Engine:
        return self.engines[0]

    @property
    def b(self) -> Engine:
        return self.engines[1]

    @property
    def pa(self) -> Any:
        """a's peer object for b."""
        return self.peer(0, 1)

    @property
    def pb(self) -> Any:
        """b's peer object for a."""
        return self.peer(1, 0)
