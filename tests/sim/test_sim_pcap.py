"""The fabric's pcapng capture, read back by scapy (and tshark when installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from btlcore.device import Channel
from btlcore.protocol import wire
from btlcore_sim import Fabric, LinkModel

from simkit import Pair, frame  # type: ignore[import-not-found]

scapy_all = pytest.importorskip("scapy.all")
layers = pytest.importorskip("btlcore_sim.layers")


def _scenario(path: Path, seed: int = 7) -> Fabric:
    """Data both ways over a lossy, duplicating, corrupting link, plus ACKs and a HELLO."""
    fabric = Fabric(seed=seed, pcap=path,
                    default=LinkModel(delay=1e-4, jitter=2e-5, loss=0.2, duplicate=0.1, corrupt=0.1))
    pair = Pair(fabric)
    for s in range(100):
        pair.a.post_send(Channel.DATA, pair.ab, frame(s, 200))
        body = wire.ack_payload(32, [(2, 3), (9, 1)])
        pair.b.post_send(Channel.PRIORITY, pair.ba,
                         wire.Datagram(wire.T_ACK, ack=s, payload=body).encode())
        fabric.run(fabric.now + 1e-4)
        pair.a.poll_recv(1000)
        pair.b.poll_recv(1000)
    hello = wire.Hello(0x1234, 5, 77, 0, 4096, pair.a.local_address()).encode()
    pair.a.post_send(Channel.PRIORITY, pair.ab, wire.Datagram(wire.T_HELLO, payload=hello).encode())
    fabric.run(1.0)
    fabric.close()
    return fabric


def test_scapy_reads_the_capture_and_dissects_btlcore(tmp_path: Path) -> None:
    path = tmp_path / "cap.pcapng"
    fabric = _scenario(path)
    totals = fabric.totals()
    packets = scapy_all.rdpcap(str(path))
    delivered = [p for p in packets if p.sniffed_on == "sim-delivered"]
    dropped = [p for p in packets if p.sniffed_on == "sim-dropped"]
    assert len(delivered) == totals["delivered"]
    assert len(dropped) == totals["dropped"] > 0
    assert len(packets) == len(delivered) + len(dropped)
    # every drop says why; every delivered copy that was altered says how
    for p in dropped:
        (comment,) = p.comments
        assert comment.startswith(b"dropped: loss (")
    notes = [p.comments[0] for p in delivered if p.comments]
    assert sum(1 for c in notes if c.startswith(b"duplicate")) == totals["duplicated"]
    assert sum(1 for c in notes if b"corrupted bit" in c) == totals["corrupted"]
    # timestamps are virtual time, never decreasing, at nanosecond resolution
    times = [float(p.time) for p in packets]
    assert times == sorted(times) and 0 < times[-1] < 0.1
    kinds = set()
    for p in packets:
        assert p.haslayer(scapy_all.Ether) and p.haslayer(scapy_all.IP) and p.haslayer(scapy_all.UDP)
        ip = p[scapy_all.IP]
        assert scapy_all.checksum(bytes(ip)[:20]) == 0  # a valid IPv4 header checksum
        assert p[scapy_all.UDP].dport == wire.PCAP_UDP_PORT
        assert ip.len == len(ip)
        if b"corrupted" in (p.comments[0] if p.comments else b""):
            continue  # the flipped bit may be anywhere, the version byte included
        btl = p[layers.BTL]
        raw = bytes(btl)
        assert wire.crc_ok(raw)
        got = layers.fields(btl)
        dg = wire.decode(raw)
        for name in ("type", "seq", "ack", "crc", "msg_id", "payload"):
            assert got[name] == getattr(dg, name)
        kinds.add(btl.type)
        if btl.type == wire.T_ACK:
            assert got["window"] == 32 and got["ranges"] == [(2, 3), (9, 1)]
        if btl.type == wire.T_HELLO:
            assert got["hello"].incarnation == 0x1234
            assert (p[scapy_all.Ether].src, p[scapy_all.IP].src) == ("02:00:00:00:00:01", "10.0.0.1")
    assert kinds == {wire.T_DATA, wire.T_ACK, wire.T_HELLO}


def test_pcap_is_off_the_direct_path_and_can_be_opened_later(tmp_path: Path) -> None:
    fabric = Fabric(seed=1)
    pair = Pair(fabric)
    assert pair.ab.ideal
    pair.a.post_send(Channel.DATA, pair.ab, frame(1))
    fabric.open_pcap(tmp_path / "late.pcapng")
    assert not pair.ab.ideal
    pair.a.post_send(Channel.DATA, pair.ab, frame(2))
    fabric.close_pcap()
    assert pair.ab.ideal
    packets = scapy_all.rdpcap(str(tmp_path / "late.pcapng"))
    assert [p[layers.BTL].seq for p in packets] == [2]


def test_tshark_reads_the_capture(tmp_path: Path) -> None:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark is not installed (apt-get install -y tshark)")
    path = tmp_path / "cap.pcapng"
    fabric = _scenario(path)
    totals = fabric.totals()
    out = subprocess.run(
        [tshark, "-r", str(path), "-o", "ip.check_checksum:TRUE", "-T", "fields",
         "-E", "separator=|", "-e", "frame.interface_name", "-e", "frame.comment",
         "-e", "ip.checksum.status", "-e", "udp.dstport", "-e", "udp.length"],
        capture_output=True, text=True, timeout=120, check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}).stdout
    rows = [line.split("|") for line in out.splitlines() if line]
    assert len(rows) == totals["delivered"] + totals["dropped"]
    assert sum(1 for r in rows if r[0] == "sim-dropped") == totals["dropped"]
    assert all(r[1].startswith("dropped: ") for r in rows if r[0] == "sim-dropped")
    assert {r[2] for r in rows} == {"1"}  # 1: good IPv4 header checksum
    assert {r[3] for r in rows} == {str(wire.PCAP_UDP_PORT)}
