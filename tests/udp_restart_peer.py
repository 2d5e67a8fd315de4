"""A btlcore udp peer that says when its life heard its first datagram, for the restart test.

    python tests/udp_restart_peer.py PORT

Opens udp on 127.0.0.1:PORT (data PORT+1), prints its address (hex), then echoes every tag-1
message back as tag 2, and prints ``{"first_rx": T}`` (T: ``time.time()``) once, when the
first datagram of any kind has been taken in (delivered, or dropped and counted: a datagram
for a connection this life never had).  Runs until killed."""

from __future__ import annotations

import json
import sys
import time

import btlcore


def main() -> None:
    port = int(sys.argv[1])
    t = btlcore.open("udp", config=btlcore.Config(peer_timeout=30.0), host="127.0.0.1", port=port)
    print(t.address.hex(), flush=True)
    t.on(1, lambda peer, tag, data: t.send(peer, 2, data))
    heard = False
    while True:
        t.progress(timeout=0.002)
        if not heard:
            s = t.engine.stats()
            if s["num_total_recvs"] + s["num_unk_recvs"] + s["num_hello_recvs"] > 0:
                heard = True
                print(json.dumps({"first_rx": time.time()}), flush=True)


if __name__ == "__main__":
    main()
