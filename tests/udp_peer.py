"""A btlcore peer in its own process, for the two-process udp tests.

    python tests/udp_peer.py PORT N_SEND SEED

Opens udp on 127.0.0.1:PORT (data PORT+1), prints its address (hex) and flushes, then:
echoes every tag-1 message back as tag 2, connects to the first peer that talks to it and
streams N_SEND seeded messages to it on tag 3, and reports on stdout, one JSON line per
event: {"got": n} every 50 tag-1 messages, {"sent_done": n} when its own stream is acked.
Runs until killed."""

from __future__ import annotations

import json
import random
import sys

import btlcore


def main() -> None:
    port, n_send, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    cfg = btlcore.Config(peer_timeout=2.0)
    t = btlcore.open("udp", config=cfg, host="127.0.0.1", port=port)
    print(t.address.hex(), flush=True)
    state = {"got": 0, "acked": 0, "streaming": False}
    rng = random.Random(seed)

    def on_message(peer, tag, data):
        state["got"] += 1
        t.send(peer, 2, data)  # echo
        if state["got"] % 50 == 0:
            print(json.dumps({"got": state["got"]}), flush=True)
        if not state["streaming"]:
            state["streaming"] = True
            for i in range(n_send):
                body = i.to_bytes(4, "big") + rng.randbytes(rng.randint(0, 40000))
                t.send(peer, 3, body, on_acked)

    def on_acked(exc):
        state["acked"] += 1
        if state["acked"] == n_send:
            print(json.dumps({"sent_done": n_send}), flush=True)

    t.on(1, on_message)
    while True:
        t.progress(timeout=0.05)


if __name__ == "__main__":
    main()
