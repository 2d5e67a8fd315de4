"""Put outcomes through a Transport on the simulated fabric, with loss and duplication: each
put's callback fires once, None if it landed, PutError if refused; statuses are never
messages."""

from __future__ import annotations

import btlcore
from btlcore_sim import Fabric, LinkModel


def test_put_outcomes_over_a_lossy_duplicating_fabric() -> None:
    fabric = Fabric(seed=5, default=LinkModel(loss=0.15, duplicate=0.3, delay=1e-4))
    a = btlcore.open("sim", fabric=fabric, name="a")
    b = btlcore.open("sim", fabric=fabric, name="b")
    try:
        region = bytearray(30000)
        key = b.expose(region)
        landed, refused, messages_a = [], [], []
        b.on_put(lambda peer, k, off, n: landed.append((k, off, n)),
                 on_error=lambda peer, k, off, n: refused.append((k, off, n)))
        for tag in (0, 1, 9):
            a.on(tag, lambda peer, t, d: messages_a.append((t, bytes(d))))
        peer = a.connect(b.address)
        done: dict[int, list] = {}
        cases = [(key, 0, b"a" * 100), (key, 1000, b"b" * 9000), (key + 7, 0, b"c" * 10),
                 (key + 7, 0, b"d" * 6000), (key, 29990, b"e" * 20), (key, 25000, b"f" * 8000),
                 (key, 20000, b"g" * 3000)]
        for i, (k, off, blob) in enumerate(cases):
            done[i] = []
            a.put(peer, k, off, blob, done[i].append)
        btlcore.run_until([a, b], lambda: all(done.values()), timeout=30)
        assert a.flush() and b.flush()
        assert all(len(v) == 1 for v in done.values()), done
        ok = [i for i, v in done.items() if v == [None]]
        assert ok == [0, 1, 6]
        reasons = {i: v[0].reason for i, v in done.items() if i not in ok}
        assert all(isinstance(done[i][0], btlcore.PutError) for i in reasons)
        assert reasons == {2: "unknown key", 3: "unknown key", 4: "out of bounds", 5: "out of bounds"}
        assert region[0:100] == b"a" * 100 and region[1000:10000] == b"b" * 9000
        assert region[20000:23000] == b"g" * 3000
        assert sorted(landed) == [(key, 0, 100), (key, 1000, 9000), (key, 20000, 3000)]
        assert len(refused) == 4
        assert messages_a == [] and a.recv(timeout=0) is None  # statuses are no messages
        st = a.stats()
        assert st["num_put_status_recvs"] == 7 == b.stats()["num_put_status_sends"]
        assert st["num_puts_refused"] == 4
        assert fabric.totals()["duplicated"] > 0
    finally:
        a.close()
        b.close()
