"""The bytes of the Dask comm layer inside btlcore messages (sans-I/O: no loop, no transport).

Many Dask comms share one btlcore peer, all on one tag (:data:`TAG`): every btlcore message
begins with a :data:`HEADER` naming what it is and which comm it belongs to::

    off size field
     0   1   kind      OPEN, ACCEPT, REFUSE, DATA, CLOSE
     1   1   flags     OPENER (the sender opened this comm), FIRST, LAST (of a Dask message)
     2   2   reserved  0
     4   4   comm id   chosen by the side that opened the comm

A comm id is the opener's: ``(id, opened by whom)`` names a comm on a peer, so both ends may
open comms on one peer without agreeing on ids.

A Dask message (a list of frames, as ``distributed.protocol.dumps`` makes them) travels as
DATA chunks of at most ``chunk`` bytes each: the first carries the frame count and lengths
(the *prelude*), the frames' bytes follow back to back across chunks, and the last chunk is
flagged LAST.  Cutting messages into chunks lets the sender interleave the chunks of several
comms, so a 1 GB frame on one comm never holds up the heartbeat of another.

A message larger than ``rndv`` bytes goes by *rendezvous* instead, so that its bytes are
copied once on each side (as a kernel TCP stack does) rather than three times: its first
DATA chunk (flagged RNDV) carries the prelude alone; the receiver allocates each frame's
buffer, exposes it for btlcore puts and answers READY with the regions' keys (u32 each, one
per non-empty frame); the sender then puts the frames' bytes there, ``chunk`` bytes a put,
straight from the sender's buffers into the receiver's (no reassembly, no gathering copy),
and the message is complete when every byte has landed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

#: the btlcore tag every message of this layer travels on ("DA" "5C")
TAG = 0xDA5C
#: the version OPEN carries; a listener refuses another
VERSION = 1

OPEN, ACCEPT, REFUSE, DATA, CLOSE, READY = 1, 2, 3, 4, 5, 6
KINDS = {OPEN: "OPEN", ACCEPT: "ACCEPT", REFUSE: "REFUSE", DATA: "DATA", CLOSE: "CLOSE", READY: "READY"}
OPENER, FIRST, LAST, RNDV = 1, 2, 4, 8

HEADER = struct.Struct("!BBHI")
_COUNT = struct.Struct("!I")
_LENGTH = struct.Struct("!Q")
_KEY = struct.Struct("!I")
#: default chunk size: large enough that per-message costs vanish, small enough to interleave
CHUNK = 1 << 20
#: messages larger than this go by rendezvous (puts into the receiver's buffers)
RNDV_MIN = 1 << 20
MAX_FRAMES = 1 << 20


class FramingError(ValueError):
    """A btlcore message this layer cannot parse (a peer of another version, or damage)."""


def control(kind: int, comm_id: int, opener: bool, payload: bytes = b"") -> bytes:
    """An OPEN, ACCEPT, REFUSE or CLOSE message."""
    return HEADER.pack(kind, OPENER if opener else 0, 0, comm_id) + payload


def parse_header(data: Any) -> tuple[int, int, int]:
    """-> (kind, flags, comm id) of a received message; FramingError if it has none."""
    if len(data) < HEADER.size:
        raise FramingError(f"btl dask message of {len(data)} bytes is shorter than its {HEADER.size}-byte header")
    kind, flags, _reserved, comm_id = HEADER.unpack_from(data)
    if kind not in KINDS:
        raise FramingError(f"btl dask message kind {kind} is unknown (known: {sorted(KINDS)})")
    return kind, flags, comm_id


def single_chunk(frames: Sequence[Any], comm_id: int, opener: bool, chunk: int) -> bytes | None:
    """A whole message as its one DATA chunk (FIRST and LAST), or None if it needs more than
    ``chunk`` bytes: the common small message without the :class:`Outgoing` machinery."""
    lengths = [f.nbytes if type(f) is memoryview else len(f) for f in frames]
    size = HEADER.size + _COUNT.size + _LENGTH.size * len(frames) + sum(lengths)
    if size > chunk or any(type(f) is memoryview and (f.format != "B" or f.ndim != 1) for f in frames):
        return None
    flags = FIRST | LAST | (OPENER if opener else 0)
    return b"".join([HEADER.pack(DATA, flags, 0, comm_id), _COUNT.pack(len(frames)),
                     *(_LENGTH.pack(n) for n in lengths), *frames])


def ready_message(comm_id: int, opener: bool, keys: Sequence[int]) -> bytes:
    """READY: the receiver's regions for a rendezvous message, one key per non-empty frame."""
    return control(READY, comm_id, opener, b"".join(_KEY.pack(k) for k in keys))


def parse_keys(data: Any) -> list[int]:
    body = memoryview(data)[HEADER.size:]
    if body.nbytes % _KEY.size:
        raise FramingError(f"READY carries {body.nbytes} bytes, not a whole number of {_KEY.size}-byte keys")
    return [_KEY.unpack_from(body, k)[0] for k in range(0, body.nbytes, _KEY.size)]


class Outgoing:
    """One Dask message on its way out, cut into DATA chunks on demand (:meth:`next_chunk`),
    so that a 1 GB message is never copied whole: each chunk copies its own slice."""

    __slots__ = ("_head", "_frames", "_prelude", "_index", "_offset", "_left", "_built", "chunk", "nbytes",
                 "started", "rndv", "waiting", "_keys")

    def __init__(self, frames: Sequence[Any], comm_id: int, opener: bool, chunk: int = CHUNK,
                 rndv: int | None = None) -> None:
        views = [f if type(f) is memoryview and f.format == "B" and f.ndim == 1 else memoryview(f).cast("B")
                 for f in frames]
        lengths = [v.nbytes for v in views]
        self._frames = views
        self._prelude = _COUNT.pack(len(views)) + b"".join(_LENGTH.pack(n) for n in lengths)
        self._head = (comm_id, OPENER if opener else 0)
        self._index = 0
        self._offset = 0
        self._left = sum(lengths)
        self.chunk = max(chunk, HEADER.size + len(self._prelude) + 1)
        self.nbytes = self._left
        self.started = False
        self._built: bytes | None = None
        #: by rendezvous: after the prelude, waiting for READY, then puts (:meth:`peek_put`)
        self.rndv = rndv is not None and self.nbytes > rndv
        self.waiting = False
        self._keys: list[int] = []

    @property
    def done(self) -> bool:
        return self.started and self._left == 0 and self._built is None and not self.waiting

    @property
    def putting(self) -> bool:
        """The prelude went and READY came: what is left goes as puts."""
        return self.rndv and self.started and self._built is None and not self.waiting

    def ready(self, keys: Sequence[int]) -> None:
        """READY named the receiver's regions: one key per non-empty frame, in order."""
        want = sum(1 for f in self._frames if f.nbytes)
        if not self.waiting or len(keys) != want:
            raise FramingError(f"READY with {len(keys)} keys for a message of {want} non-empty frames"
                               if self.waiting else "READY for a message not waiting for one")
        it = iter(keys)
        self._keys = [next(it) if f.nbytes else 0 for f in self._frames]
        self.waiting = False

    def peek_put(self) -> tuple[int, int, memoryview]:
        """The next put: (region key, offset in it, bytes), at most ``chunk`` bytes."""
        frames, i, off = self._frames, self._index, self._offset
        while frames[i].nbytes == off:  # (empty frames, and a frame just finished)
            i, off = i + 1, 0
        self._index, self._offset = i, off
        take = min(self.chunk, frames[i].nbytes - off)
        return self._keys[i], off, frames[i][off:off + take]

    def pop_put(self, size: int) -> None:
        self._offset += size
        self._left -= size

    def next_size(self) -> int:
        """The size of the chunk :meth:`peek` would return (for the scheduler)."""
        if self._built is not None:
            return len(self._built)
        if self.rndv:
            return HEADER.size + len(self._prelude) if not self.started else min(self.chunk, self._left)
        fixed = HEADER.size + (0 if self.started else len(self._prelude))
        return fixed + min(self._left, self.chunk - fixed)

    def peek(self) -> bytes:
        """The next DATA chunk, built once and kept until :meth:`pop` (a send refused for
        room retries the same bytes)."""
        if self._built is None:
            self._built = self._cut()
        return self._built

    def pop(self) -> None:
        """The chunk :meth:`peek` returned was accepted: move on (a rendezvous prelude: wait
        for READY)."""
        if self.rndv and self._built is not None:
            self.waiting = True
        self._built = None

    def next_chunk(self) -> bytes:
        """:meth:`peek` and :meth:`pop` at once."""
        chunk = self.peek()
        self.pop()
        return chunk

    def _cut(self) -> bytes:
        comm_id, flags = self._head
        if self.rndv:  # the prelude alone: the bytes follow as puts once READY names the regions
            self.started = True
            return HEADER.pack(DATA, flags | FIRST | RNDV, 0, comm_id) + self._prelude
        parts: list[Any] = [b""]
        room = self.chunk - HEADER.size
        if not self.started:
            flags |= FIRST
            parts.append(self._prelude)
            room -= len(self._prelude)
            self.started = True
        frames, i, off = self._frames, self._index, self._offset
        while room > 0 and i < len(frames):
            frame = frames[i]
            take = min(room, frame.nbytes - off)
            if take:
                parts.append(frame[off:off + take])
                room -= take
                off += take
                self._left -= take
            if off == frame.nbytes:
                i, off = i + 1, 0
        # zero-length frames at the end are consumed too, so LAST is exact
        while i < len(frames) and frames[i].nbytes == 0:
            i += 1
        self._index, self._offset = i, off
        if self._left == 0:
            flags |= LAST
        parts[0] = HEADER.pack(DATA, flags, 0, comm_id)
        return b"".join(parts)


class Incoming:
    """One Dask message being put back together from its DATA chunks.  A frame that lies
    whole inside one chunk is a view of it (no copy); one that spans chunks is gathered into
    a ``bytearray`` of its length."""

    __slots__ = ("_lengths", "_frames", "_buf", "_offset", "_view")

    def __init__(self, chunk: Any) -> None:
        view = memoryview(chunk)[HEADER.size:]
        if view.nbytes < _COUNT.size:
            raise FramingError("first DATA chunk has no frame count")
        (count,) = _COUNT.unpack_from(view)
        if count > MAX_FRAMES:
            raise FramingError(f"a message of {count} frames (at most {MAX_FRAMES})")
        end = _COUNT.size + count * _LENGTH.size
        if view.nbytes < end:
            raise FramingError(f"first DATA chunk too short for the lengths of its {count} frames")
        self._lengths = [_LENGTH.unpack_from(view, _COUNT.size + k * _LENGTH.size)[0] for k in range(count)]
        self._frames: list[Any] = []
        self._buf: bytearray | None = None
        self._offset = 0
        self._view = view[end:]

    def rndv_buffers(self, alloc: Callable[[int], Any] = bytearray) -> list[Any]:
        """For a rendezvous message: a writable buffer per frame, which the puts fill: views,
        back to back, of one ``alloc(total)`` (one that is not zero-filled saves touching
        every page twice), as the tcp comm reads a message.  Dask joins the shards of a
        frame it split (``frame_split_size``) without a copy only when they are views of one
        buffer, adjacent; separate buffers cost a copy of the whole frame."""
        whole = memoryview(alloc(sum(self._lengths))).cast("B")
        frames: list[Any] = []
        pos = 0
        for n in self._lengths:
            frames.append(whole[pos:pos + n])
            pos += n
        self._frames = frames
        return frames

    def first_payload(self) -> memoryview:
        """The frame bytes the first chunk carried (feed them with :meth:`feed`)."""
        return self._view

    @property
    def complete(self) -> bool:
        return len(self._frames) == len(self._lengths)

    def feed(self, payload: memoryview) -> None:
        """Take the frame bytes of one chunk (the chunk without its header)."""
        lengths, frames = self._lengths, self._frames
        pos, size = 0, payload.nbytes
        while len(frames) < len(lengths):
            want = lengths[len(frames)]
            if self._buf is None:
                if want == 0:
                    frames.append(b"")
                    continue
                if pos == size:
                    return
                if size - pos >= want:  # whole inside this chunk: a view, no copy
                    frames.append(payload[pos:pos + want])
                    pos += want
                    continue
                self._buf, self._offset = bytearray(want), 0
            if pos == size:
                return
            take = min(want - self._offset, size - pos)
            self._buf[self._offset:self._offset + take] = payload[pos:pos + take]
            self._offset += take
            pos += take
            if self._offset == want:
                frames.append(self._buf)
                self._buf = None
        if pos != size:
            raise FramingError(f"DATA chunk carries {size - pos} bytes past its message's frames")

    def frames(self) -> list[Any]:
        return self._frames
