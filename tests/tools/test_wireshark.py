"""The shipped Wireshark dissector (btlcore/wireshark/btl.lua) read by Debian's tshark:
every field of every frame of a lossy simulated transfer equals what the sender put on the
wire, on the simulator's port and, through the heuristic, on other UDP ports (a real udp
backend's datagrams too); and ``btl wireshark --path/--install``.

Skipped, saying so, where tshark is not installed (scripts/test.sh installs it as root)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import btlcore
from btlcore import captures, wireshark
from btlcore.protocol import wire

from capkit import PORT_A, PORT_B, lossy_transfer, not_btl, samples, udp_transfer, write_pcap

TSHARK = shutil.which("tshark")
needs_tshark = pytest.mark.skipif(
    TSHARK is None, reason="tshark is not installed (scripts/test.sh installs Debian's tshark as "
                           "root): the Wireshark dissector is NOT tested here")

FIELDS = ("frame.number", "btl.version", "btl.type", "btl.flags", "btl.dst_conn", "btl.src_incarnation",
          "btl.seq", "btl.ack", "btl.tag", "btl.payload_len", "btl.chunk.msg_id", "btl.chunk.offset",
          "btl.sack.left", "btl.sack.right", "btl.crc.bad", "udp.srcport")


#: tshark's home while testing: no personal plugin (a btl.lua installed there would load twice)
CLEAN_HOME = tempfile.mkdtemp(prefix="btl-tshark-home-")


def clean_env() -> dict[str, str]:
    return {**os.environ, "HOME": CLEAN_HOME}


def tshark(capture: Path, fields: tuple[str, ...] = FIELDS, lua: bool = True,
           env: dict[str, str] | None = None) -> list[dict[str, str]]:
    """One dict per frame: field -> tshark's text (occurrences joined with ',')."""
    assert TSHARK is not None
    env = env or clean_env()
    cmd = [TSHARK, "-n", "-r", str(capture), "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,"]
    if lua:
        cmd[1:1] = ["-X", f"lua_script:{wireshark.path()}"]
    for name in fields:
        cmd += ["-e", name]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True, env=env)
    return [dict(zip(fields, line.split("\t"), strict=True)) for line in out.stdout.splitlines()]


def expected(dg: wire.Datagram) -> dict[str, str]:
    """What the dissector must show for ``dg``, as tshark prints it."""
    exp = {"btl.version": str(dg.version), "btl.type": str(dg.type), "btl.flags": f"0x{dg.flags:02x}",
           "btl.dst_conn": str(dg.dst_conn), "btl.src_incarnation": f"0x{dg.src_incarnation:08x}",
           "btl.seq": str(dg.seq), "btl.ack": str(dg.ack), "btl.tag": str(dg.tag),
           "btl.payload_len": str(len(dg.payload)),
           "btl.chunk.msg_id": "" if dg.msg_id is None else str(dg.msg_id),
           "btl.chunk.offset": "" if dg.offset is None else str(dg.offset),
           "btl.crc.bad": "0" if dg.flags & wire.F_CRC else ""}
    left = right = ""
    if dg.type == wire.T_ACK:
        _, ranges, _, _ = wire.parse_ack_payload(dg.payload)
        left = ",".join(str(dg.ack + s) for s, _ in ranges)
        right = ",".join(str(dg.ack + s + n - 1) for s, n in ranges)
    exp["btl.sack.left"], exp["btl.sack.right"] = left, right
    return exp


def check_frames(rows: list[dict[str, str]], datagrams: list[wire.Datagram]) -> None:
    assert len(rows) == len(datagrams)
    for row, dg in zip(rows, datagrams, strict=True):
        want = expected(dg)
        got = {k: row[k] for k in want}
        assert got == want, f"frame {row['frame.number']}"


@pytest.fixture(scope="module")
def sim_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ws") / "lossy.pcapng"
    fabric = lossy_transfer(path)
    assert fabric.totals()["dropped"] > 0
    return path


@needs_tshark
def test_tshark_decodes_a_lossy_simulator_capture(sim_capture: Path) -> None:
    datagrams = [c.datagram for c in captures.read(sim_capture)]
    rows = tshark(sim_capture)
    check_frames(rows, datagrams)
    types = {int(r["btl.type"]) for r in rows}
    assert {wire.T_HELLO, wire.T_HELLO_ACK, wire.T_DATA, wire.T_ACK, wire.T_CLOSE} <= types
    assert any(r["btl.sack.left"] for r in rows), "a lossy run has SACK blocks"
    # filterable: a display filter on a btl field selects exactly the matching frames
    assert TSHARK is not None
    data = subprocess.run([TSHARK, "-n", "-X", f"lua_script:{wireshark.path()}", "-r", str(sim_capture),
                           "-Y", f"btl.type == {wire.T_DATA} && btl.flags.chunk == 1", "-T", "fields",
                           "-e", "btl.chunk.msg_id"], capture_output=True, text=True, timeout=300, check=True,
                          env=clean_env())
    chunked = [d for d in datagrams if d.type == wire.T_DATA and d.msg_id is not None]
    assert data.stdout.split() == [str(d.msg_id) for d in chunked] and chunked


@needs_tshark
def test_retransmissions_are_marked(sim_capture: Path) -> None:
    """btl.analysis.retransmission (present on retransmissions only, as tcp.analysis's): a DATA
    segment whose seq its flow carried before (in file order), with btl.analysis.first_frame
    pointing at the first; the same in two passes."""
    seen: dict[tuple[str, str, int], dict[int, int]] = {}
    want = []
    for n, c in enumerate(captures.read(sim_capture), 1):
        dg = c.datagram
        if dg.type != wire.T_DATA:
            want.append(("", ""))
            continue
        flow = seen.setdefault((c.src, c.dst, dg.dst_conn), {})
        want.append(("1", str(flow[dg.seq])) if dg.seq in flow else ("", ""))
        flow.setdefault(dg.seq, n)
    assert sum(1 for r, _ in want if r == "1") > 5
    fields = ("btl.analysis.retransmission", "btl.analysis.first_frame")
    assert [(r[fields[0]], r[fields[1]]) for r in tshark(sim_capture, fields)] == want
    assert TSHARK is not None
    two_pass = subprocess.run([TSHARK, "-n", "-2", "-X", f"lua_script:{wireshark.path()}", "-r", str(sim_capture),
                               "-Y", "btl.analysis.retransmission", "-T", "fields", "-e", "frame.number"],
                              capture_output=True, text=True, timeout=300, check=True, env=clean_env()).stdout.split()
    assert two_pass == [str(n) for n, (r, _) in enumerate(want, 1) if r == "1"]


@needs_tshark
def test_without_the_dissector_tshark_sees_only_udp(sim_capture: Path) -> None:
    """(What the issue starts from; proves the assertions above come from btl.lua.)"""
    assert TSHARK is not None
    out = subprocess.run([TSHARK, "-n", "-r", str(sim_capture), "-T", "fields", "-e", "_ws.col.Protocol"],
                         capture_output=True, text=True, timeout=300, check=True, env=clean_env()).stdout.split()
    assert out and "BTL" not in out


@needs_tshark
def test_heuristic_decodes_udp_on_other_ports_of_both_versions(tmp_path: Path, sim_capture: Path) -> None:
    """The simulator's datagrams moved to ports 47011/47012, every type of both versions,
    and UDP that is not btlcore (left alone)."""
    frames: list[tuple[float, str, int, str, int, bytes]] = []
    datagrams: list[wire.Datagram] = []
    for i, (_, raw) in enumerate(samples()):
        frames.append((i * 1e-3, "192.0.2.1", PORT_A, "192.0.2.2", PORT_B, raw))
    for c in captures.read(sim_capture):
        if not c.dropped:
            frames.append((1 + c.time, "192.0.2.1", PORT_A, "192.0.2.2", PORT_B, c.datagram.encode(with_crc=True)))
    for junk in not_btl():
        frames.append((9.0, "192.0.2.3", PORT_A, "192.0.2.4", PORT_B, junk))
    path = tmp_path / "ports.pcap"
    write_pcap(path, frames)
    rows = tshark(path)
    decodable = [f for f in frames if captures.looks_like_btl(f[5])]
    datagrams = [wire.decode(f[5], (1, 2)) for f in decodable if f[5][0] != 0]
    btl_rows = [r for r in rows if r["btl.type"]]
    assert len(btl_rows) == len(decodable) and len(rows) == len(frames)
    check_frames([r for r in btl_rows if r["btl.version"] != "0"], datagrams)
    assert all(not r["btl.type"] for r in rows[-len(not_btl()):]), "non-btlcore UDP must stay UDP"
    assert {r["udp.srcport"] for r in btl_rows} == {str(PORT_A)}


@needs_tshark
def test_a_capture_cut_short_still_decodes_its_headers(tmp_path: Path, sim_capture: Path) -> None:
    """tcpdump -s 100 on another port: the heuristic checks the lengths against the real
    datagram size, and the header of every datagram is shown."""
    frames = [(c.time, "192.0.2.1", PORT_A, "192.0.2.2", PORT_B, c.datagram.encode())
              for c in captures.read(sim_capture) if not c.dropped]
    path = tmp_path / "short.pcap"
    write_pcap(path, frames, snaplen=100)
    rows = tshark(path, ("btl.type", "btl.seq", "btl.ack", "_ws.col.Info"))
    assert [(r["btl.type"], r["btl.seq"], r["btl.ack"]) for r in rows] == \
        [(str(d.type), str(d.seq), str(d.ack)) for d in (wire.decode(f[5]) for f in frames)]
    long = [r for r, f in zip(rows, frames, strict=True) if len(f[5]) > 100 - 42]
    assert long and all("[truncated capture]" in r["_ws.col.Info"] for r in long)


@needs_tshark
def test_bodies_of_every_type(tmp_path: Path) -> None:
    path = tmp_path / "kinds.pcap"
    kinds = samples()
    write_pcap(path, [(i * 1e-3, "192.0.2.1", PORT_A, "192.0.2.2", PORT_B, raw) for i, (_, raw) in enumerate(kinds)])
    fields = ("btl.type", "btl.version", "btl.put.key", "btl.put.offset", "btl.put_status.seq",
              "btl.put_status.status", "btl.ack.window", "btl.ack.delay", "btl.ack.flags.duplicate",
              "btl.sack.start", "btl.sack.length", "btl.hello.conn_id", "btl.hello.isn", "btl.hello.address",
              "btl.tp.max_datagram_size", "btl.tp.max_message_size", "btl.tp.peer_timeout_ms",
              "btl.tp.window_bytes", "btl.close.reason", "btl.close.conn_id", "btl.notice.echo_digest",
              "btl.notice.echo_type", "btl.nonce", "btl.version_reply.version", "btl.version_reply.echo_dst_conn",
              "btl.crc.good")
    rows = dict(zip([name for name, _ in kinds], tshark(path, fields), strict=True))
    assert rows["chunk+put"]["btl.put.key"] == "4" and rows["chunk+put"]["btl.put.offset"] == str(1 << 40)
    assert (rows["put status"]["btl.put_status.seq"], rows["put status"]["btl.put_status.status"]) == ("5001", "2")
    ack = rows["ack"]
    assert (ack["btl.ack.window"], ack["btl.ack.delay"], ack["btl.ack.flags.duplicate"]) == ("300", "125", "1")
    assert (ack["btl.sack.start"], ack["btl.sack.length"]) == ("2,9", "3,1")
    hello = rows["hello"]
    assert (hello["btl.hello.conn_id"], hello["btl.hello.isn"]) == ("17", "1000")
    assert hello["btl.hello.address"] == "7f0000011b58"
    assert (hello["btl.tp.max_datagram_size"], hello["btl.tp.max_message_size"], hello["btl.tp.peer_timeout_ms"],
            hello["btl.tp.window_bytes"]) == ("1472", str(1 << 20), "3000", str(1 << 33))
    assert rows["v1 hello"]["btl.version"] == "1" and rows["v1 hello"]["btl.tp.max_datagram_size"] == ""
    assert rows["v1 hello"]["btl.hello.address"] == "0102"
    assert (rows["close"]["btl.close.reason"], rows["close"]["btl.close.conn_id"]) == (str(wire.CR_DISCONNECT), "41")
    assert rows["close_ack"]["btl.type"] == str(wire.T_CLOSE_ACK)
    assert (rows["notice"]["btl.notice.echo_digest"], rows["notice"]["btl.notice.echo_type"]) == ("0xdeadbeef", "1")
    assert rows["challenge"]["btl.nonce"] == rows["response"]["btl.nonce"] == "0x0102030405060708"
    assert rows["ping"]["btl.type"] == str(wire.T_PING)
    version = rows["version"]
    assert (version["btl.version_reply.version"], version["btl.version_reply.echo_dst_conn"]) == ("2,1", "17")
    assert all(r["btl.crc.good"] == "1" for name, r in rows.items() if name != "version")


@needs_tshark
def test_a_bad_crc_is_flagged(tmp_path: Path) -> None:
    raw = bytearray(samples()[0][1])
    raw[-1] ^= 0x40  # one payload bit flipped: still consistent, so the heuristic takes it
    path = tmp_path / "bad.pcap"
    write_pcap(path, [(0.0, "192.0.2.1", PORT_A, "192.0.2.2", PORT_B, bytes(raw))])
    (row,) = tshark(path, ("btl.seq", "btl.crc.good", "btl.crc.bad"))
    assert row == {"btl.seq": "5000", "btl.crc.good": "0", "btl.crc.bad": "1"}


@needs_tshark
def test_real_udp_backend_datagrams_on_its_own_ports(tmp_path: Path) -> None:
    """Datagrams a udp transport really sent (seen by a frame hook), written with the
    transports' real ephemeral ports: decoded by the heuristic, field for field."""
    frames = udp_transfer()
    path = tmp_path / "udp.pcap"
    write_pcap(path, frames)
    rows = tshark(path)
    check_frames(rows, [wire.decode(f[5], (1, 2)) for f in frames])
    ports = {str(f[2]) for f in frames}
    assert [r["udp.srcport"] for r in rows] == [str(f[2]) for f in frames] and len(ports) >= 2
    assert str(wire.PCAP_UDP_PORT) not in ports


def test_btl_wireshark_path_prints_the_shipped_file() -> None:
    out = subprocess.run([sys.executable, "-m", "btlcore.cli", "wireshark", "--path"], capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip()
    assert Path(out) == wireshark.path() and Path(out).is_file()
    assert 'Proto("btl"' in Path(out).read_text()


def test_btl_wireshark_install_without_tshark_goes_to_local_lib(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "PATH": str(tmp_path / "nobin")}
    out = subprocess.run([sys.executable, "-m", "btlcore.cli", "wireshark", "--install"], capture_output=True,
                         text=True, timeout=120, check=True, env=env).stdout
    target = tmp_path / ".local" / "lib" / "wireshark" / "plugins" / "btl.lua"
    assert str(target) in out and target.read_bytes() == wireshark.path().read_bytes()


def test_btl_wireshark_install_into_a_folder(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "btlcore.cli", "wireshark", "--install", "--dest",
                          str(tmp_path / "p")], capture_output=True, text=True, timeout=120, check=True).stdout
    assert (tmp_path / "p" / "btl.lua").read_bytes() == wireshark.path().read_bytes() and "installed" in out
    bad = subprocess.run([sys.executable, "-m", "btlcore.cli", "wireshark", "--dest", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--dest goes with --install" in bad.stderr


@needs_tshark
def test_installed_dissector_is_loaded_by_tshark(tmp_path: Path, sim_capture: Path) -> None:
    """--install puts it where tshark looks (as tshark reports it): tshark then decodes
    without -X."""
    env = {**os.environ, "HOME": str(tmp_path)}
    subprocess.run([sys.executable, "-m", "btlcore.cli", "wireshark", "--install"], check=True, env=env,
                   capture_output=True, timeout=120)
    rows = tshark(sim_capture, ("btl.seq",), lua=False, env=env)
    datagrams = [c.datagram for c in captures.read(sim_capture)]
    assert [r["btl.seq"] for r in rows] == [str(d.seq) for d in datagrams]


@needs_tshark
def test_a_live_capture_of_the_udp_backend(tmp_path: Path) -> None:
    """dumpcap on the loopback while two udp transports exchange messages (their batched,
    GSO-capable send path untouched: the trace, not a frame hook, says what was sent): every
    datagram of the capture is decoded, and they are exactly those the trace lists."""
    dumpcap = shutil.which("dumpcap")
    if dumpcap is None:
        pytest.skip("dumpcap (Wireshark's capture tool) is not installed: no live capture")
    trace, capture = tmp_path / "live.jsonl", tmp_path / "live.pcapng"
    a = btlcore.open("udp", bind="127.0.0.1:0", trace=str(trace))
    b = btlcore.open("udp", bind="127.0.0.1:0", trace=str(trace))
    try:
        ports = sorted({int.from_bytes(t.address[i:i + 2], "big") for t in (a, b) for i in (4, 6)})
        bpf = "udp and (" + " or ".join(f"port {p}" for p in ports) + ")"
        cap = subprocess.Popen([dumpcap, "-q", "-i", "lo", "-f", bpf, "-w", str(capture)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not capture.exists() or capture.stat().st_size == 0:
            if cap.poll() is not None or time.monotonic() > deadline:
                cap.kill()
                pytest.skip(f"cannot capture on lo here: {cap.stderr.read() if cap.stderr else ''}".strip())
            time.sleep(0.05)
        time.sleep(0.5)  # (the filter is compiled and attached once the file has its header)
        got: list[bytes] = []
        b.on(5, lambda p, t, d: got.append(bytes(d)))
        peer = a.connect(b.address)
        for i in range(30):
            a.send(peer, 5, bytes([i]) * (100 + 2000 * i))
        btlcore.run_until([a, b], lambda: len(got) == 30, timeout=30)
    finally:
        a.close()
        b.close()
    time.sleep(0.5)
    cap.send_signal(signal.SIGINT)
    cap.wait(timeout=30)
    rows = tshark(capture, ("btl.type", "btl.seq", "btl.ack", "udp.length"))
    assert rows and all(r["btl.type"] for r in rows), "every datagram on these ports is btlcore's"
    import json

    sent = [json.loads(line) for line in trace.read_text().splitlines()]
    sent = [e for e in sent if e["event"] == "packet_sent"]
    names = {v: k for k, v in wire.TYPE_NAMES.items()}
    want = sorted((names[e["type"]], e.get("seq", 0), e.get("ack", 0)) for e in sent)
    assert sorted((int(r["btl.type"]), int(r["btl.seq"]), int(r["btl.ack"])) for r in rows) == want
