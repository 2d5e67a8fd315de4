"""Who this node is in this life: the seed of its randomness and its incarnation number.

A peer tells a restart from a late packet of an older life by the incarnation in every
datagram (see :func:`btlcore.protocol.handshake.stale_incarnation`), so incarnations must be
ordered: on a real clock they count the wall time; on a virtual-time device (the simulator)
they count the device's openings, so a whole simulated run is reproducible from one seed.
"""

from __future__ import annotations

import hashlib
import os
import random
import time

from .device import Capabilities

_last_incarnation = 0
_virtual_lives = 1000  # openings of virtual-time devices without an ``instance`` of their own


def make_incarnation(clock_seconds: float) -> int:
    """This life's incarnation number: the wall clock in 1/1024 s on 32 bits (wrapping every
    48 days), strictly increasing within the process; never 0.  Being ordered lets a peer
    tell a late HELLO of an older life from a restart."""
    global _last_incarnation
    value = int(clock_seconds * 1024) & 0xFFFFFFFF
    if _last_incarnation and 0 <= (_last_incarnation - value) & 0xFFFFFFFF < 1 << 31:
        value = (_last_incarnation + 1) & 0xFFFFFFFF
    _last_incarnation = value = value or 1
    return value


def this_life(caps: Capabilities, address: bytes, seed: int | None) -> tuple[int, random.Random, int]:
    """``(seed, rng, incarnation)`` for a transport opening on a device with ``caps`` at
    ``address``.  Without a ``seed`` of the caller's, a device's declared seed (the
    simulator's) gives each node its own reproducible one; else the OS's randomness."""
    if seed is None:  # a device may declare a seed of its own (the simulator)
        seed = caps.seed
        if seed is not None:  # virtual-time devices: reproducible, distinct per node
            seed = int.from_bytes(hashlib.sha256(repr((seed, address)).encode()).digest()[:8], "big")
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "big")
    rng = random.Random(seed)
    if caps.virtual_time:
        # a simulated node's lives are ordered by its NIC's opening on the fabric
        instance = caps.instance
        if instance is None:  # a virtual-time device that does not number its openings
            global _virtual_lives
            _virtual_lives += 1
            instance = _virtual_lives
        incarnation = ((instance + 1) << 12 | rng.randrange(1 << 12)) & 0xFFFFFFFF
    else:
        incarnation = make_incarnation(time.time())
    return seed, rng, incarnation
