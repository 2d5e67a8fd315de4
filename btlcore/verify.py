"""Verified transfers: the framing ``btl transfer`` and ``btl serve`` agree on.

Every data message starts with its index and the CRC32C of its body, so the receiver can
tell, without trusting the transport, that each message arrived exactly once, intact, and
(in ordered mode) in order.  A message shorter than that frame (1 to 7 bytes) is the low
bytes of its index, little-endian: an ordered run checks each against the index due; an
unordered run can only count them.  A FIN message closes a run; the receiver answers with a REPORT.

Tags::

    TAG_DATA  index u32, crc32c u32, body (or, under 8 bytes, the index's low bytes)
    TAG_FIN   JSON {"messages": N, "ordered": bool, "file": {...} or null}
    TAG_REPORT JSON {"messages_delivered", "bytes_delivered", "verified", "errors", ...}
    TAG_FILE  a file's bytes in order (messages of FILE_CHUNK bytes); TAG_FIN names it
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from .protocol.wire import crc32c

TAG_DATA = 1
TAG_FIN = 2
TAG_REPORT = 3
TAG_FILE = 4
FRAME = struct.Struct("!II")
FILE_CHUNK = 1 << 20
MAX_ERRORS = 20
POOL = 1 << 22
"""Bytes of seeded random data drawn once per run; each body is a slice of it (twice over, so
any offset has a whole pool after it) at a seeded random offset, repeated for bodies longer
than the pool.  Drawing every body afresh (``Random.randbytes``, a big-integer round trip)
cost about 3 ms a MiB: a quarter of ``btl transfer``'s CPU at 1 Gb/s, more than the
transport's own.  Bodies still differ from one another (their offsets do) and look random,
so a chunk of one message landing in another fails its CRC32C."""


def short_message(index: int, size: int) -> bytes:
    """A message of ``size`` < 8 bytes: its index's low bytes, little-endian."""
    return (index & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")[:size]


def _body(pool: bytes, offset: int, n: int) -> bytes:
    """``n`` bytes of the doubled ``pool`` from ``offset`` on, the pool repeated past its end."""
    if n <= POOL:
        return pool[offset:offset + n]
    return (pool[offset:offset + POOL] * (n // POOL + 1))[:n]


def make_messages(seed: int, count: int, size_min: int, size_max: int) -> Iterator[bytes]:
    """``count`` framed messages with seeded random sizes and bodies (1 byte and up)."""
    rng = random.Random(seed)
    pool = b""
    for index in range(count):
        size = rng.randint(size_min, size_max)
        if size < FRAME.size:
            yield short_message(index, size)
            continue
        if not pool:  # (drawn at the first framed message: a run of short ones needs none)
            half = rng.randbytes(POOL)
            pool = half + half
        body = _body(pool, rng.randrange(POOL), size - FRAME.size)
        yield FRAME.pack(index, crc32c(body)) + body


@attrs.define
class Verifier:
    """The receiving side of a verified transfer."""

    ordered: bool = True
    delivered: int = 0
    bytes_delivered: int = 0
    seen: set[int] = attrs.Factory(set)
    next_index: int = 0
    errors: list[str] = attrs.Factory(list)
    file_hash: Any = None
    file_bytes: int = 0
    file_out: Any = None
    short_unordered: int = 0  # messages under the frame's size in an unordered run: counted only

    def _error(self, text: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(text)

    def on_data(self, data: bytes) -> None:
        self.delivered += 1
        self.bytes_delivered += len(data)
        if len(data) < FRAME.size:
            self._on_short(data)
            return
        index, crc = FRAME.unpack_from(data)
        if crc32c(memoryview(data)[FRAME.size:]) != crc:
            self._error(f"message {index} is corrupted (CRC32C mismatch)")
        if index in self.seen:
            self._error(f"message {index} arrived twice")
        self.seen.add(index)
        if self.ordered and index != self.next_index:
            self._error(f"message {index} arrived where {self.next_index} was due")
        self.next_index = index + 1

    def _on_short(self, data: bytes) -> None:
        if not data:
            self._error("an empty message arrived (the smallest sent is 1 byte)")
            return
        if not self.ordered:
            self.short_unordered += 1
            return
        index = self.next_index
        if bytes(data) != short_message(index, len(data)):
            self._error(f"message of {len(data)} bytes {bytes(data).hex()} arrived where {index} was due")
        if index in self.seen:
            self._error(f"message {index} arrived twice")
        self.seen.add(index)
        self.next_index = index + 1

    def on_file(self, data: bytes) -> None:
        if self.file_hash is None:
            self.file_hash = hashlib.sha256()
        self.file_hash.update(data)
        self.delivered += 1
        self.file_bytes += len(data)
        self.bytes_delivered += len(data)
        if self.file_out is not None:
            self.file_out.write(data)

    def report(self, fin: dict[str, Any], reset: bool = True) -> dict[str, Any]:
        """Judge the run the FIN describes; reset for the next one (unless ``reset`` is
        False: a look at the run so far, which a later FIN still judges)."""
        expected = int(fin.get("messages", 0))
        errors = list(self.errors)
        if self.short_unordered:
            count = len(self.seen) + self.short_unordered
            extra = sorted(self.seen - set(range(expected)))
            if count != expected:
                errors.append(f"{count} messages delivered where {expected} were sent")
            if extra:
                errors.append(f"{len(extra)} unexpected message indexes (first {extra[:5]})")
        elif self.seen != set(range(expected)):
            missing = sorted(set(range(expected)) - self.seen)
            extra = sorted(self.seen - set(range(expected)))
            if missing:
                errors.append(f"{len(missing)} messages missing (first {missing[:5]})")
            if extra:
                errors.append(f"{len(extra)} unexpected message indexes (first {extra[:5]})")
        file_info = fin.get("file")
        result: dict[str, Any] = {
            "messages_delivered": self.delivered,
            "bytes_delivered": self.bytes_delivered,
        }
        if file_info:
            digest = self.file_hash.hexdigest() if self.file_hash else hashlib.sha256().hexdigest()
            result["file"] = {"name": file_info.get("name"), "size": self.file_bytes, "sha256": digest}
            if digest != file_info.get("sha256") or self.file_bytes != file_info.get("size"):
                errors.append(f"file {file_info.get('name')!r} differs: {self.file_bytes} bytes, "
                              f"sha256 {digest} (sent {file_info.get('size')} bytes, "
                              f"{file_info.get('sha256')})")
        result["verified"] = not errors
        result["errors"] = errors[:MAX_ERRORS]
        if reset:
            self.__init__(ordered=self.ordered, file_out=None)  # type: ignore[misc]
        return result


def file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(FILE_CHUNK):
            yield chunk


def file_meta(path: Path) -> dict[str, Any]:
    h = hashlib.sha256()
    size = 0
    for chunk in file_chunks(path):
        h.update(chunk)
        size += len(chunk)
    return {"name": path.name, "size": size, "sha256": h.hexdigest()}


def encode_json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True).encode()


def decode_json(data: bytes) -> dict[str, Any]:
    value = json.loads(bytes(data).decode())
    if not isinstance(value, dict):
        raise ValueError("expected a JSON object")
    return value
