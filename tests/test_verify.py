"""The verified-transfer framing's messages: seeded, each body its own, every fault caught."""

from __future__ import annotations

from btlcore.verify import FRAME, POOL, Verifier, make_messages


def test_the_same_seed_gives_the_same_messages_and_another_seed_others() -> None:
    a = list(make_messages(7, 50, 1, 5000))
    assert a == list(make_messages(7, 50, 1, 5000))
    assert a != list(make_messages(8, 50, 1, 5000))
    assert all(1 <= len(m) <= 5000 for m in a)


def test_bodies_differ_and_all_verify_including_those_longer_than_the_pool() -> None:
    small = list(make_messages(3, 40, 64, 4096))
    assert len({m[FRAME.size:] for m in small}) == 40  # (one pool, 40 seeded offsets: no two alike)
    large = list(make_messages(4, 2, POOL + 5, 2 * POOL + 3))
    assert all(POOL + 5 <= len(m) <= 2 * POOL + 3 for m in large)
    for run in (small, large):
        v = Verifier()
        for m in run:
            v.on_data(m)
        assert v.errors == [] and v.delivered == len(run)


def test_a_chunk_of_one_message_inside_another_fails_its_crc() -> None:
    a, b = list(make_messages(5, 2, 20000, 20000))
    mixed = a[:8192] + b[8192:16384] + a[16384:]  # a transport that put b's chunk in a
    v = Verifier()
    v.on_data(mixed)
    assert v.errors == ["message 0 is corrupted (CRC32C mismatch)"]
