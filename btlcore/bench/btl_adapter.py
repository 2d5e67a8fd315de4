"""Every call the benchmarks make into btlcore, in one place.

Written against the planned public API; if that API shifts, fix it here and nothing else::

    t = btlcore.open("udp", config=btlcore.Config(...), bind="127.0.0.1:0")
    t.address -> bytes;  peer = t.connect(addr);  t.send(peer, tag, data, callback=None)
    t.on(tag, handler(peer, tag, data));  t.progress(timeout=0.0);  t.close();  t.stats()
    btlcore.run_until(transports, predicate, timeout)
    from btlcore_sim import Fabric, LinkModel
    fab = Fabric(seed=1, link=LinkModel(loss=0.01, delay=0.001, rate_mbps=1000))
    t = btlcore.open("sim", fabric=fab)

Until a piece exists, :func:`require` raises :class:`~btlcore.bench.harness.Skip` with the reason
"btlcore <x> not available yet", and the measurement using it is reported as skipped.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .harness import LOOPBACK_V4, BenchError, Skip, loopback

#: what each piece needs: (modules to import, attributes of btlcore that must exist)
PIECES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "transport": (("btlcore.transport",), ("open", "Config")),
    "UDP backend": (("btlcore.transport", "btlcore_udp.plugin"), ("open",)),
    "simulator": (("btlcore.transport", "btlcore_sim"), ("open", "run_until")),
}


def missing(piece: str) -> str | None:
    """None if ``piece`` of btlcore can be used, else the reason it cannot."""
    mods, attrs_needed = PIECES[piece]
    try:
        for m in mods:
            importlib.import_module(m)
        btlcore = importlib.import_module("btlcore")
    except Exception as exc:  # a module half-written by someone else must not crash the run
        return f"btlcore {piece} not available yet ({type(exc).__name__}: {exc})"
    absent = [a for a in attrs_needed if not hasattr(btlcore, a)]
    if piece == "simulator" and not absent:
        sim = importlib.import_module("btlcore_sim")
        absent = [f"backends.sim.{a}" for a in ("Fabric", "LinkModel") if not hasattr(sim, a)]
    if absent:
        return f"btlcore {piece} not available yet (no btlcore.{', btlcore.'.join(absent)})"
    return None


def require(*pieces: str) -> None:
    for p in pieces:
        why = missing(p)
        if why:
            raise Skip(why)


def availability() -> dict[str, str | None]:
    return {p: missing(p) for p in PIECES}


def _btl() -> Any:
    return importlib.import_module("btlcore")


# -- transports -----------------------------------------------------------------------------

_seq = [0]


def _seed() -> int:
    # btlcore.open passes seed=None to the device unless given one, which both the udp and
    # the sim devices refuse; give each transport a distinct, reproducible seed.
    _seq[0] += 1
    return 1000 + _seq[0]


def config(**params: Any) -> Any:
    return _btl().Config(**params)


def open_udp(host: str = LOOPBACK_V4, *, busy_poll: bool = False, **params: Any) -> Any:
    """A UDP transport bound to an ephemeral loopback port; ``params`` go to Config.

    ``busy_poll``: the device spins on a zero-timeout poll instead of sleeping in epoll, so
    ``progress(timeout)`` busy-polls."""
    loopback(host)
    bind = f"[{host}]:0" if ":" in host else f"{host}:0"
    return _btl().open("udp", config=config(**params), bind=bind, busy_poll=busy_poll, seed=_seed())


def open_sim(fab: Any, name: str | None = None, **params: Any) -> Any:
    opts: dict[str, Any] = {"fabric": fab}
    if name is not None:
        opts["name"] = name
    return _btl().open("sim", config=config(**params), seed=_seed(), **opts)


def address(t: Any) -> bytes:
    return bytes(t.address)


def connect(t: Any, addr: bytes) -> Any:
    return t.connect(addr)


def send(t: Any, peer: Any, tag: int, data: Any,
         callback: Callable[[BaseException | None], None] | None = None) -> None:
    t.send(peer, tag, data, callback=callback)


def send_waiting(transports: Iterable[Any], t: Any, peer: Any, tag: int, data: Any,
                 callback: Callable[[BaseException | None], None] | None, timeout: float) -> None:
    """A send that waits for room in the peer's send buffer (back-pressure: ``WouldBlock``,
    in trees that have it) by progressing ``transports``; BenchError if none came."""
    blocked = getattr(_btl(), "WouldBlock", None)
    if blocked is None:
        send(t, peer, tag, data, callback)
        return

    limit, size = t.config.send_buffer, len(data)

    def attempt() -> bool:
        queued = peer.send_queued  # (a cheap look first: no exception per pass while it is full)
        if queued and queued + size > limit:
            return False
        try:
            t.send(peer, tag, data, callback=callback)
        except blocked:
            return False
        return True

    if not attempt() and not run_until(transports, attempt, timeout):
        raise BenchError(f"no room in the send buffer within {timeout:g} s")


def on(t: Any, tag: int, handler: Callable[[Any, int, Any], None]) -> None:
    t.on(tag, handler)


def progress(t: Any, timeout: float = 0.0) -> Any:
    return t.progress(timeout=timeout)


def close(t: Any) -> None:
    t.close()


def stats(t: Any) -> dict[str, float]:
    s = t.stats()
    if hasattr(s, "as_dict"):
        s = s.as_dict()
    return dict(s)


def run_until(transports: Iterable[Any], predicate: Callable[[], bool], timeout: float,
              wall: float | None = None) -> bool:
    """Progress until ``predicate()``; False (not an exception) if ``timeout`` (the transports'
    clock: virtual on the simulator) passed first.  ``wall`` bounds the real time too: past it,
    BenchError (a simulation that stops advancing virtual time would otherwise spin forever)."""
    if wall is not None:
        end = time.monotonic() + wall
        inner = predicate

        def predicate() -> bool:
            if inner():
                return True
            if time.monotonic() > end:
                raise BenchError(f"no completion within {wall:g} s of real time "
                                 f"(virtual timeout {timeout:g} s)")
            return False
    try:
        return bool(_btl().run_until(list(transports), predicate, timeout))
    except TimeoutError:
        return False


def delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0) for k, v in after.items() if isinstance(v, (int, float))}


def data_segments(s: Mapping[str, float]) -> float:
    """Data segments transmitted (first sends and resends), from a sender's counters.

    usnic counts a fragment or chunk once, when it is first sent, and its resends apart; if
    those counters are absent, total sends less standalone ACKs and handshakes."""
    frag = s.get("num_frag_sends", 0) + s.get("num_chunk_sends", 0)
    if frag:
        return frag + s.get("num_resends", 0)
    return s.get("num_total_sends", 0) - s.get("num_ack_sends", 0) - s.get("num_hello_sends", 0)


def data_received(s: Mapping[str, float]) -> float:
    frag = s.get("num_frag_recvs", 0) + s.get("num_chunk_recvs", 0)
    if frag:
        return frag
    return s.get("num_total_recvs", 0) - s.get("num_ack_recvs", 0) - s.get("num_hello_recvs", 0)


# -- the simulator --------------------------------------------------------------------------

def _sim() -> Any:
    return importlib.import_module("btlcore_sim")


def fabric(*, seed: int = 1, loss: float = 0.0, delay: float = 0.001, rate_mbps: float = 1000.0,
           burst: float | None = None, integrity: bool = False) -> Any:
    """A simulated fabric with one link model for every direction.

    ``burst``: mean length of a loss burst (Gilbert-Elliott, every frame lost in the bad
    state); ``loss`` is then the long-run loss rate.  ``integrity``: a fabric that promises
    never to corrupt a frame, so that the transports leave out their CRC (as on verbs)."""
    sim = _sim()
    if burst is None:
        link = sim.LinkModel(loss=loss, delay=delay, rate_mbps=rate_mbps)
    else:
        link = sim.LinkModel(burst=(loss, burst), delay=delay, rate_mbps=rate_mbps)
    # 20 us of interrupt coalescing, as `btl transfer` uses: a real NIC's rx-usecs
    if integrity:
        return sim.Fabric(seed=seed, default=link, coalesce=20e-6, integrity=True)
    return sim.Fabric(seed=seed, default=link, coalesce=20e-6)


def crc_on(t: Any) -> bool | None:
    """Whether the transport puts a CRC32C on its datagrams (None if it does not say)."""
    return getattr(getattr(t, "engine", None), "crc", None)


def sim_now(fab: Any, t: Any = None) -> float:
    """The fabric's virtual time, in seconds."""
    v = getattr(fab, "now", None)
    if v is not None:
        return float(v() if callable(v) else v)
    if t is not None:
        return float(t.now())
    raise Skip("btlcore simulator has no virtual clock accessor (fabric.now) yet")


def link_losses(fab: Any, src: str, dst: str) -> tuple[float, float] | None:
    """(frames offered, frames lost to the loss model) on the ``src -> dst`` direction, or
    None if the fabric does not count them."""
    try:
        st = fab.stats()[f"{src}->{dst}"]
    except Exception:
        return None
    drops = st.get("drops", {})
    return float(st.get("offered", 0)), float(drops.get("loss", 0) + drops.get("burst", 0))


def prime_links(fab: Any, pairs: Iterable[tuple[str, str]]) -> bool:
    """Make the fabric's link objects for ``pairs`` of NIC names (both directions) now, so that
    a memory measurement taken afterwards counts the transports' peers, not the simulator's
    links.  False if the fabric cannot."""
    try:
        for a, b in pairs:
            na, nb = fab.node(a), fab.node(b)
            fab.link(na, nb)
            fab.link(nb, na)
    except Exception:
        return False
    return True


def peer_count(t: Any) -> int | None:
    for name in ("peers", "_peers"):
        v = getattr(t, name, None)
        if v is not None:
            try:
                return len(v)
            except TypeError:
                continue
    return None
