"""``import btlcore_sim.scapy``: rdpcap shows btlcore layers on the simulator's port and, by
the heuristic, on any UDP port; the simulator itself never imports scapy."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from btlcore import captures
from btlcore.protocol import wire

from capkit import PORT_A, PORT_B, lossy_transfer, not_btl, samples, write_pcap

scapy_all = pytest.importorskip("scapy.all")


@pytest.fixture
def bound() -> Iterator[object]:
    import btlcore_sim.scapy as btl_scapy

    btl_scapy.bind()
    yield btl_scapy
    btl_scapy.unbind()


def test_the_simulator_backend_imports_no_scapy() -> None:
    """Opening the sim backend, running a transfer with a pcap and importing every simulator
    module but the two scapy ones leaves scapy unloaded (it costs a second to import)."""
    code = """
import sys, tempfile, os, pkgutil, importlib
import btlcore, btlcore_sim
for m in pkgutil.iter_modules(btlcore_sim.__path__):
    if m.name not in ("layers", "scapy"):
        importlib.import_module("btlcore_sim." + m.name)
d = tempfile.mkdtemp()
fabric = btlcore_sim.Fabric(seed=1, pcap=os.path.join(d, "x.pcapng"))
a = btlcore.open("sim", fabric=fabric, name="a"); b = btlcore.open("sim", fabric=fabric, name="b")
got = []
b.on(1, lambda p, t, d: got.append(d))
a.send(a.connect(b.address), 1, b"x" * 20000)
btlcore.run_until([a, b], lambda: got, timeout=5)
a.close(); b.close(); fabric.close()
from btlcore import captures
assert len(list(captures.read(os.path.join(d, "x.pcapng")))) > 3
print(sorted(m for m in sys.modules if m == "scapy" or m.startswith("scapy.")))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
    # and the documented import does load it (so the check above can fail)
    code2 = "import sys, btlcore_sim.scapy; print('scapy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code2], capture_output=True, text=True, timeout=120,
                          check=True).stdout.strip() == "True"


def _ports_capture(path: Path) -> list[bytes]:
    payloads = [raw for _, raw in samples()] + not_btl()
    write_pcap(path, [(i * 1e-3, "192.0.2.1", PORT_A, "192.0.2.2", PORT_B, raw) for i, raw in enumerate(payloads)])
    return payloads


def test_rdpcap_shows_btl_on_any_port_after_the_import(tmp_path: Path, bound: object) -> None:
    from btlcore_sim.scapy import BTL, BTLAck, BTLHello, BTLVersion, fields

    path = tmp_path / "ports.pcap"
    payloads = _ports_capture(path)
    packets = scapy_all.rdpcap(str(path))
    assert len(packets) == len(payloads)
    for pkt, raw in zip(packets, payloads, strict=True):
        if not captures.looks_like_btl(raw):
            assert BTL not in pkt and BTLVersion not in pkt and scapy_all.Raw in pkt
            continue
        if raw[0] == 0:
            assert fields(pkt)["versions"] == (2, 1)
            continue
        got = fields(pkt)
        dg = wire.decode(raw, (1, 2))
        assert (got["version"], got["type"], got["flags"], got["seq"], got["ack"], got["tag"], got["msg_id"]) == \
            (dg.version, dg.type, dg.flags, dg.seq, dg.ack, dg.tag, dg.msg_id)
        if dg.type == wire.T_ACK:
            assert got["ranges"] == [tuple(r) for r in wire.parse_ack_payload(dg.payload)[1]]
            assert BTLAck in pkt
        if dg.type == wire.T_HELLO and dg.version == 2:
            assert pkt[BTLHello].addr_len == 6 and got["hello"].params.window_bytes == 1 << 33


def test_without_the_binding_other_ports_stay_raw(tmp_path: Path, bound: object) -> None:
    import btlcore_sim.scapy as btl_scapy

    btl_scapy.unbind()
    try:
        path = tmp_path / "ports.pcap"
        _ports_capture(path)
        assert not any(pkt.haslayer(btl_scapy.BTL) for pkt in scapy_all.rdpcap(str(path)))
    finally:
        btl_scapy.bind()
    assert all(pkt.haslayer(btl_scapy.BTL) or pkt.haslayer(btl_scapy.BTLVersion)
               for pkt in scapy_all.rdpcap(str(path))[: len(samples())])


def test_rdpcap_of_a_simulator_capture(tmp_path: Path, bound: object) -> None:
    from btlcore_sim.scapy import BTL

    path = tmp_path / "sim.pcapng"
    lossy_transfer(path, messages=10)
    packets = scapy_all.rdpcap(str(path))
    decoded = list(captures.read(path))
    assert len(packets) == len(decoded) > 10
    assert [p[BTL].seq for p in packets] == [c.datagram.seq for c in decoded]
    assert [p.sniffed_on == "sim-dropped" for p in packets] == [c.dropped for c in decoded]
