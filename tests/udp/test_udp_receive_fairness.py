"""A flood on the priority socket does not starve the data socket: ``poll_recv`` reads the
priority socket first, but while data waits it keeps a quarter of the budget for it (issue
#11's 10^6-datagram fuzz run: every retransmission of the live peer's data was dropped in
the kernel behind a flooded priority socket, until the peer was declared dead)."""

from __future__ import annotations

import socket

import pytest

from btlcore.registry import open_device

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("recvmmsg", [True, False])
def test_a_flooded_priority_socket_leaves_room_for_data(recvmmsg: bool) -> None:
    dev = open_device("udp", {"bind": "127.0.0.1:0", "recvmmsg": recvmmsg, "rcvbuf": "4M"})
    flood = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        prio, data = dev.device.local_sockaddrs[:2]
        for i in range(1000):
            flood.sendto(b"p%04d" % i, prio[:2])
        for i in range(10):
            flood.sendto(b"d%04d" % i, data[:2])
        dev.wait(None)
        got = [bytes(d) for d in dev.poll_recv_from(256)[0]]
        prios = [d for d in got if d.startswith(b"p")]
        datas = [d for d in got if d.startswith(b"d")]
        assert len(got) == 202 and len(prios) == 192 and len(datas) == 10, (len(prios), len(datas))
        assert got[:192] == prios  # (priority first, in order)
        # with no data waiting, the priority socket gets the whole budget
        got = [bytes(d) for d in dev.poll_recv_from(256)[0]]
        assert len(got) == 256 and all(d.startswith(b"p") for d in got)
    finally:
        flood.close()
        dev.close()
