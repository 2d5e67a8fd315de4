"""Reference: aioquic on loopback, used the way its users use it.

The ``aioquic.asyncio`` API (``serve``/``connect``, stream readers and writers) with a
self-signed EC certificate made at run time with ``cryptography`` and the client not
verifying it.  aioquic's defaults otherwise (flow-control windows, Reno), except the datagram
size, which is set to the size compared (1472 B or 8972 B).

* Bulk: one stream per trial on one connection; the client writes the whole trial's bytes and
  EOF, the server reads to EOF and answers with the count; goodput is bytes over the time to
  that answer.  The client's CPU time per full datagram is reported beside it.
* Echo: 64 B written on one stream and read back, repeated; a trial's figure is its median
  (mean and p99 kept beside it).

Skipped, with the reason, where aioquic is not installed.
"""

from __future__ import annotations

import datetime
import importlib.util
import ipaddress
import time
from typing import Any

from .harness import LOOPBACK_V4, Result, Skip, add_samples, loopback, measured, rtt_extras, run_pair, wait_msg
from .profiles import Profile

SECTION = "quic"
ALPN = ["btl-bench"]


def available() -> str | None:
    """None if aioquic can be used, else why not."""
    if importlib.util.find_spec("aioquic") is None:
        return "aioquic not installed (pip install 'btlcore[bench]')"
    return None


def version() -> str:
    try:
        import importlib.metadata
        return importlib.metadata.version("aioquic")
    except Exception:
        return "?"


def self_signed() -> tuple[Any, Any]:
    """A throw-away certificate for localhost / 127.0.0.1 / ::1, valid for a day."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    san = x509.SubjectAlternativeName([
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(san, critical=False)
            .sign(key, hashes.SHA256()))
    return cert, key


def quic_server(ctl: Any, mode: str, datagram: int, host: str = LOOPBACK_V4) -> None:
    import asyncio

    from aioquic.asyncio.server import serve
    from aioquic.quic.configuration import QuicConfiguration

    cfg = QuicConfiguration(is_client=False, alpn_protocols=ALPN, max_datagram_size=datagram)
    cfg.certificate, cfg.private_key = self_signed()

    async def bulk(reader: Any, writer: Any) -> None:
        total = 0
        while True:
            data = await reader.read(1 << 20)
            if not data:
                break
            total += len(data)
        writer.write(total.to_bytes(8, "big"))
        writer.write_eof()

    async def echo(reader: Any, writer: Any) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)

    handler = bulk if mode == "bulk" else echo

    def on_stream(reader: Any, writer: Any) -> None:
        asyncio.ensure_future(handler(reader, writer))

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = loop.run_until_complete(
        serve(loopback(host), 0, configuration=cfg, stream_handler=on_stream))
    transport = server._transport  # set once serve() has bound the socket; no public accessor
    assert transport is not None
    ctl.send(transport.get_extra_info("sockname")[1])
    loop.add_reader(ctl.fileno(), loop.stop)  # any message (or EOF) from the client stops us
    loop.run_forever()
    server.close()


def quic_client(ctl: Any, mode: str, datagram: int, nbytes: int, iters: int, trials: int, warmup: int,
                timeout: float, host: str = LOOPBACK_V4) -> dict[str, Any]:
    import asyncio
    import ssl

    from aioquic.asyncio.client import connect
    from aioquic.quic.configuration import QuicConfiguration

    port = wait_msg(ctl)
    cfg = QuicConfiguration(is_client=True, alpn_protocols=ALPN, max_datagram_size=datagram,
                            verify_mode=ssl.CERT_NONE, server_name="localhost")
    pc = time.perf_counter
    values: list[float] = []
    cpu: list[float] = []
    echo: dict[str, list[float]] = {"median": [], "mean": [], "p99": []}

    async def bulk_trial(proto: Any, payload: bytes) -> tuple[float, float]:
        reader, writer = await proto.create_stream()
        c0, t0 = time.process_time(), pc()
        writer.write(payload)
        writer.write_eof()
        answer = await reader.read()
        dt, dc = pc() - t0, time.process_time() - c0
        got = int.from_bytes(answer, "big")
        if got != len(payload):
            raise RuntimeError(f"aioquic bulk: server counted {got} B of {len(payload)} B")
        return len(payload) / dt, dc / (len(payload) / datagram)

    async def echo_trial(proto: Any, reader: Any, writer: Any, payload: bytes) -> list[float]:
        samples = []
        for _ in range(iters):
            t0 = pc()
            writer.write(payload)
            back = await reader.readexactly(len(payload))
            samples.append(pc() - t0)
            if len(back) != len(payload):
                raise RuntimeError("short echo")
        return samples

    async def main() -> None:
        async with connect(loopback(host), port, configuration=cfg) as proto:
            if mode == "bulk":
                payload = bytes(nbytes)
                for i in range(warmup + trials):
                    gput, cpu_dg = await asyncio.wait_for(bulk_trial(proto, payload), timeout)
                    if i >= warmup:
                        values.append(gput)
                        cpu.append(cpu_dg)
            else:
                reader, writer = await proto.create_stream()
                payload = bytes(64)
                for i in range(warmup + trials):
                    v = await asyncio.wait_for(echo_trial(proto, reader, writer, payload), timeout)
                    if i >= warmup:
                        add_samples(echo, v)
                writer.write_eof()

    asyncio.run(main())
    ctl.send("stop")
    return {"values": values, "cpu_per_datagram": cpu, **echo}


def _run(profile: Profile, mode: str, datagram: int, nbytes: int, host: str) -> dict[str, Any]:
    why = available()
    if why:
        raise Skip(why)
    r: dict[str, Any]  # quic_client's return value
    _, r = run_pair(quic_server, quic_client, server_kw={"mode": mode, "datagram": datagram, "host": host},
                    client_kw={"mode": mode, "datagram": datagram, "nbytes": nbytes,
                               "iters": profile.quic_echo_iters, "trials": profile.trials,
                               "warmup": profile.warmup, "timeout": profile.deadline / 2, "host": host},
                    deadline=profile.deadline)
    return r


def bulk(profile: Profile, datagram: int, host: str = LOOPBACK_V4) -> Result:
    nbytes = profile.quic_bulk_bytes.get(datagram, 4 << 20)
    r = _run(profile, "bulk", datagram, nbytes, host)
    cpu = sorted(r["cpu_per_datagram"])
    return measured(f"ref.quic_bulk.{datagram}", SECTION,
                    f"aioquic {version()} one-stream bulk, {datagram} B datagrams", "B/s", r["values"],
                    datagram=datagram, bytes_per_trial=nbytes, cpu_per_datagram=cpu[len(cpu) // 2])


def echo(profile: Profile, host: str = LOOPBACK_V4) -> Result:
    r = _run(profile, "echo", 1472, 0, host)
    return measured("ref.quic_echo.64", SECTION, f"aioquic {version()} 64 B echo", "s", r["median"],
                    better="lower", iters=profile.quic_echo_iters, **rtt_extras(r))
