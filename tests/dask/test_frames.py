"""The Dask comm layer's framing (btlcore/dask/frames.py): chunks cut and joined, sans I/O."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from btlcore.dask import frames as fr


def _roundtrip(parts: list[bytes], chunk: int) -> tuple[list[bytes], list[bytes]]:
    out = fr.Outgoing(parts, comm_id=7, opener=True, chunk=chunk)
    chunks = []
    while not out.done:
        size = out.next_size()
        c = out.next_chunk()
        assert len(c) == size <= max(chunk, len(c))
        chunks.append(c)
    kind, flags, cid = fr.parse_header(chunks[0])
    assert (kind, cid) == (fr.DATA, 7) and flags & fr.FIRST and flags & fr.OPENER
    inc = fr.Incoming(chunks[0])
    inc.feed(inc.first_payload())
    for c in chunks[1:]:
        kind, flags, _ = fr.parse_header(c)
        assert not flags & fr.FIRST
        inc.feed(memoryview(c)[fr.HEADER.size:])
    assert fr.parse_header(chunks[-1])[1] & fr.LAST
    assert all(not fr.parse_header(c)[1] & fr.LAST for c in chunks[:-1])
    assert inc.complete
    return [bytes(f) for f in inc.frames()], chunks


@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=6), st.integers(64, 5000))
@settings(max_examples=200, deadline=None)
def test_any_frames_any_chunk_size_come_back_whole(parts: list[bytes], chunk: int) -> None:
    back, chunks = _roundtrip(parts, chunk)
    assert back == parts
    assert all(len(c) <= max(chunk, fr.HEADER.size + 4 + 8 * len(parts) + 1) for c in chunks)


def test_a_large_frame_is_split_and_joined_and_small_ones_are_views() -> None:
    big = os.urandom(3 * 1000 + 17)
    back, chunks = _roundtrip([b"head", big, b"", b"tail"], chunk=1000)
    assert back == [b"head", big, b"", b"tail"]
    assert len(chunks) == 4
    inc = fr.Incoming(fr.Outgoing([b"abc", b"defg"], 1, False).next_chunk())
    inc.feed(inc.first_payload())
    assert [type(f) for f in inc.frames()] == [memoryview, memoryview]


def test_memoryviews_of_other_formats_are_sent_as_bytes() -> None:
    import array

    a = array.array("i", range(100))
    back, _ = _roundtrip([memoryview(a)], chunk=128)
    assert back == [a.tobytes()]


def test_bad_messages_raise_framing_errors() -> None:
    with pytest.raises(fr.FramingError, match="shorter"):
        fr.parse_header(b"\x04\x00")
    with pytest.raises(fr.FramingError, match="kind 99"):
        fr.parse_header(fr.HEADER.pack(99, 0, 0, 1))
    with pytest.raises(fr.FramingError, match="frame count"):
        fr.Incoming(fr.HEADER.pack(fr.DATA, fr.FIRST, 0, 1))
    with pytest.raises(fr.FramingError, match="lengths"):
        fr.Incoming(fr.HEADER.pack(fr.DATA, fr.FIRST, 0, 1) + b"\x00\x00\x00\x03")
    inc = fr.Incoming(fr.Outgoing([b"ab"], 1, False).next_chunk())
    with pytest.raises(fr.FramingError, match="past"):
        inc.feed(memoryview(b"abc"))


def test_control_messages_carry_kind_id_and_opener() -> None:
    msg = fr.control(fr.REFUSE, 12345, opener=False, payload=b"why")
    assert fr.parse_header(msg) == (fr.REFUSE, 0, 12345) and msg.endswith(b"why")
    assert fr.parse_header(fr.control(fr.OPEN, 1, opener=True))[1] == fr.OPENER


def test_a_small_message_in_one_chunk_is_what_outgoing_cuts() -> None:
    parts = [b"head", memoryview(b"body bytes"), bytearray(b"x" * 100), b""]
    whole = fr.single_chunk(parts, 9, False, chunk=1 << 20)
    assert whole == fr.Outgoing(parts, 9, False).next_chunk()
    assert fr.single_chunk(parts, 9, False, chunk=64) is None  # too big for one chunk
    import array

    assert fr.single_chunk([memoryview(array.array("i", [1]))], 9, False, 1 << 20) is None


def test_a_rendezvous_lands_in_views_of_one_buffer_back_to_back() -> None:
    """Dask joins the shards of a frame it split without a copy only when they are adjacent
    views of one buffer (``merge_memoryviews``), as the tcp comm reads them."""
    distributed_utils = pytest.importorskip("distributed.protocol.utils")
    frames = [b"head", b"x" * 5000, b"", b"y" * 3000, b"z"]
    out = fr.Outgoing(frames, 3, True, chunk=1000, rndv=100)
    assert out.rndv
    allocated: list[int] = []

    def alloc(n: int) -> bytearray:
        allocated.append(n)
        return bytearray(n)

    buffers = fr.Incoming(out.next_chunk()).rndv_buffers(alloc)
    assert allocated == [sum(map(len, frames))]  # one allocation for the whole message
    assert [len(b) for b in buffers] == [len(f) for f in frames]
    for buf, data in zip(buffers, frames, strict=True):  # each is writable (puts fill it)
        buf[:] = data
    joined = distributed_utils.merge_memoryviews(buffers[1:4])  # raises unless adjacent views of one
    assert bytes(joined) == frames[1] + frames[3]
