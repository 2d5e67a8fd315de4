"""Window auto-tuning: the window in use grows to cover the path's bandwidth-delay product,
within the windows and the memory budgets, never past them.

Three bounds on what is in flight to a peer, in segments:

* the **receive window** it advertises (its ``window``, less what its application has not
  taken of its ``recv_buffer``: protocol.md 6.5);
* the **send window** (``Peer.window_cap``, :func:`send_window`): the peer's byte window (its
  ``recv_buffer``, told in its handshake as ``TP_WINDOW_BYTES``) in our largest chunks, and
  our own ``window``.  What it lets us send comes out of messages our ``send_buffer``
  already holds: no claim of the peer's makes this end hold more;
* the **congestion window's cap** (``Peer.cwnd_cap``): ``cwnd_max``.  At its default it is
  where the window starts, not a bound: once per round trip that the congestion window sits
  at the cap, the cap grows to :data:`GROWTH` x the measured delivery rate x min RTT
  (:func:`grow`), up to the send window.  A path with no queue doubles it per round trip;
  one whose round trip shows a queue (the flight is more than the path holds) leaves it.

A ``cwnd_max`` other than the default is the user's bound and is kept as it is (as setting
``SO_RCVBUF`` turns Linux's buffer auto-tuning off).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from ..config import Config
    from .peers import Peer

GROWTH = 2.0  # the cap is this many measured BDPs (room for a probe and for ACK batches)


def tunes_cwnd(cfg: Config) -> bool:
    """``cwnd_max`` is at its default: the cap grows with the measured BDP (read once per
    engine, never per packet)."""
    return bool(cfg.cwnd_max == attrs.fields_dict(type(cfg))["cwnd_max"].default)


def send_window(cfg: Config, chunk: int, window_bytes: int) -> int:
    """Segments of ``chunk`` payload bytes we may have in flight to a peer whose byte window
    is ``window_bytes`` (0: it sent none): within it, never under one segment (so any
    message still goes), and within our ``window``."""
    if not window_bytes:
        return cfg.window
    return min(cfg.window, max(1, window_bytes // chunk))


def initial_cap(cfg: Config, cwnd_max: float, peer: Peer) -> float:
    """The congestion window's cap once the peer's limits are known: the algorithm's
    ``cwnd_max``; at its default, no more than the send window (where :func:`grow` may
    take it)."""
    return min(cwnd_max, peer.window_cap) if tunes_cwnd(cfg) else cwnd_max


def grow(peer: Peer, now: float) -> None:
    """The congestion window sits at its cap (the caller checked, once per ACK that moved
    the ACK point): once per round trip, raise the cap to :data:`GROWTH` x the path's
    bandwidth-delay product as measured -- the delivery rate times the min RTT, the rate
    being the window over the smoothed RTT (what an ACK-clocked flight delivers) or the
    algorithm's last rate sample, whichever is more -- up to the send window."""
    if now < peer.tune_at:
        return
    t = peer.timer
    srtt, min_rtt = t.srtt, t.min_rtt
    if not srtt or not min_rtt:
        return
    peer.tune_at = now + srtt
    bdp = peer.cwnd * min_rtt / srtt  # (an ACK-clocked flight: a window per smoothed RTT)
    n = len(peer.unacked) - len(peer.resend)
    if peer.delivery_rate and peer.inflight_bytes and n > 0:  # (an algorithm's rate samples)
        sampled = peer.delivery_rate * min_rtt * n / peer.inflight_bytes  # (in segments as sent)
        if sampled > bdp:
            bdp = sampled
    want = GROWTH * bdp
    if want > peer.cwnd_cap:
        peer.cwnd_cap = want if want < peer.window_cap else float(peer.window_cap)
