"""Every tunable of the protocol, in one validated attrs class.

Set them from code (``Config(window=1024)``), from the environment (``BTL_WINDOW=1024``, as
Open MPI's MCA parameters are set), or from the command line (``btl ... --set window=1024``).
A bad value raises :class:`~btlcore.errors.ConfigError` naming the parameter and what is
allowed.  Times are in seconds.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from .errors import BtlDeprecationWarning, ConfigError

ENV_PREFIX = "BTL_"
#: ``BTL_`` variables that are not protocol parameters: backend choice, seed, and anything
#: under a backend's own prefix (``BTL_SIM_...``, ``BTL_UDP_...``, ``BTL_VERBS_...``).
RESERVED_ENV = ("BTL_BACKEND", "BTL_SEED", "BTL_PLUGINS", "BTL_PCAP", "BTL_TRACE", "BTL_PURE")
RESERVED_ENV_PREFIXES = ("BTL_SIM_", "BTL_UDP_", "BTL_VERBS_", "BTL_TEST_")


def _param(default: Any, doc: str, *, lo: float | None = None, hi: float | None = None,
           choices: tuple[str, ...] | None = None) -> Any:
    """An attrs field whose metadata carries its documentation and its allowed values."""
    return attrs.field(default=default, metadata={"doc": doc, "lo": lo, "hi": hi, "choices": choices})


def _allowed(field: attrs.Attribute[Any]) -> str:
    md = field.metadata
    if md.get("choices"):
        return "one of " + ", ".join(md["choices"])
    if field.type in ("bool", bool):
        return "true or false"
    if field.type in ("str", str):
        return "a name"
    is_int = field.type in ("int", int)
    kind = "an integer" if is_int else "a number"
    lo, hi = md.get("lo"), md.get("hi")
    fmt: Callable[[float], str] = (lambda v: str(int(v))) if is_int else (lambda v: f"{v:g}")
    if lo is not None and hi is not None:
        return f"{kind} from {fmt(lo)} to {fmt(hi)}"
    if lo is not None:
        return f"{kind} >= {fmt(lo)}"
    return kind


def _fail(field: attrs.Attribute[Any], value: Any) -> ConfigError:
    return ConfigError(
        f"bad value {value!r} for parameter {field.name!r} ({ENV_PREFIX}{field.name.upper()}): "
        f"allowed is {_allowed(field)}"
    )


def _validate(inst: Config, field: attrs.Attribute[Any], value: Any) -> None:
    md = field.metadata
    if field.type in ("bool", bool):
        if not isinstance(value, bool):
            raise _fail(field, value)
        return
    if md.get("choices"):
        if value not in md["choices"]:
            raise _fail(field, value)
        return
    if field.type in ("str", str):
        if not isinstance(value, str) or not value:
            raise _fail(field, value)
        return
    if field.type in ("int", int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if not ok:
        raise _fail(field, value)
    if (md.get("lo") is not None and value < md["lo"]) or (md.get("hi") is not None and value > md["hi"]):
        raise _fail(field, value)


@attrs.define(slots=True, frozen=True, field_transformer=lambda cls, fields: [
    f.evolve(validator=_validate) for f in fields])
class Config:
    """The protocol's tunables.  Defaults follow usnic where it had one (window 4096,
    priority limit 768 B, 16 resends per pass, 5 ms fixed timeout) and the stronger peers
    where it did not (adaptive RTO, retry limit, peer timeout)."""

    window: int = _param(4096, "send and receive window, in segments", lo=8, hi=1 << 20)
    ordered: bool = _param(True, "deliver each peer's messages in send order (false: as they complete, like usnic and SRD)")
    mtu: int = _param(0, "largest datagram to send, bytes; 0 takes the device's MTU", lo=0, hi=65507)
    priority_limit: int = _param(768, "datagrams up to this size (bytes) go on the priority channel; 0 disables it", lo=0, hi=65507)
    max_message_size: int = _param(64 << 20, "largest message accepted for send or reassembly, bytes", lo=1, hi=(1 << 32) - 1)
    max_reassemblies: int = _param(2048, "concurrent chunked messages in reassembly per peer", lo=1, hi=1 << 20)
    send_buffer: int = _param(16 << 20, "per-peer send buffer, bytes: messages accepted and not yet completed (unsent or unacknowledged); a send that does not fit raises WouldBlock, unless the buffer is empty", lo=1, hi=1 << 40)
    recv_buffer: int = _param(16 << 20, "per-peer receive budget, bytes: data delivered but not yet taken by recv() shrinks the advertised window (to zero at this much), and out-of-order reassembly beyond it is dropped", lo=1, hi=1 << 40)
    reassembly_limit: int = _param(1 << 30, "bytes all peers' reassemblies may hold together (never less than max_message_size); a chunk beyond it is dropped and counted", lo=1, hi=1 << 46)
    ack_delay: float = _param(200e-6, "delay before a standalone ACK, seconds", lo=0.0, hi=1.0)
    ack_frequency: int = _param(8, "send a standalone ACK at once after this many unacknowledged segments", lo=1, hi=1 << 16)
    fast_retransmit_threshold: int = _param(3, "a segment is declared lost once this many later transmissions were ACKed", lo=1, hi=1024)
    rto_mode: str = _param("adaptive", "retransmit timeout: adaptive (RTT-based, backoff) or fixed (usnic's retrans_timeout)", choices=("adaptive", "fixed"))
    rto_initial: float = _param(1.0, "retransmit timeout before any RTT sample, seconds (RFC 6298's 1 s: an initial RTT of a third of it, 333 ms, as RFC 9002); the handshake's RTT sample usually replaces it at once", lo=1e-6, hi=60.0)
    rto_min: float = _param(0.005, "lower bound of the adaptive retransmit timeout, seconds (usnic's later fixed timeout; lower fires spuriously when a busy host deschedules its peer)", lo=1e-6, hi=60.0)
    rto_max: float = _param(1.0, "upper bound of the retransmit timeout after backoff, seconds", lo=1e-6, hi=600.0)
    tlp: bool = _param(True, "send a tail-loss probe (RFC 8985) when nothing is heard for two round trips after the last send: a lost tail is found without waiting for the retransmit timeout")
    retrans_timeout: float = _param(0.005, "the fixed retransmit timeout (rto_mode=fixed), seconds", lo=1e-6, hi=60.0)
    max_resends_per_pass: int = _param(16, "cap on retransmissions per progress pass (usnic's storm fix)", lo=1, hi=1 << 20)
    max_retries: int = _param(20, "deprecated, no effect: liveness is peer_timeout's alone (setting it warns)", lo=1, hi=1 << 20)
    peer_timeout: float = _param(10.0, "a peer heard nothing at all from for this long is declared dead, seconds (the smaller of the two ends' wins)", lo=1e-3, hi=86400.0)
    keepalive: bool = _param(True, "send a PING after a third of peer_timeout of silence, so that a live idle peer stays up")
    close_timeout: float = _param(1.0, "longest close() or disconnect() resends CLOSE awaiting its acknowledgement, seconds (at most 8 retransmit timeouts)", lo=0.0, hi=60.0)
    handshake_timeout: float = _param(10.0, "give up on a peer that never answers the handshake, seconds", lo=1e-3, hi=86400.0)
    handshake_interval: float = _param(0.01, "first HELLO retry interval (doubles per retry), seconds", lo=1e-6, hi=60.0)
    send_credits: int = _param(64, "new segments one peer may send per progress pass (fairness between peers)", lo=1, hi=1 << 20)
    recv_budget: int = _param(256, "datagrams taken from the device per progress pass", lo=1, hi=1 << 20)
    flush_timeout: float = _param(5.0, "how long close() waits for outstanding ACKs, seconds", lo=0.0, hi=86400.0)
    crc: str = _param("auto", "end-to-end CRC32C: auto (when the device does not guarantee integrity), on, off", choices=("auto", "on", "off"))
    accept_peers: bool = _param(True, "accept handshakes from peers this side did not connect to")
    max_peers: int = _param(65536, "most peers a handshake from an unknown address may bring the peer table to (connect() is not limited)", lo=1, hi=1 << 30)
    cwnd_max: int = _param(1024, "congestion window cap in segments, under every algorithm; at the default, where the window starts: it grows to cover the measured bandwidth-delay product, within the send window and the peer's recv_buffer (window auto-tuning); any other value is kept as a bound; 0 (deprecated) is an alias of cc=none", lo=0, hi=1 << 20)
    cwnd_initial: int = _param(32, "congestion window at start and after persistent congestion (three timeouts in a row), segments", lo=2, hi=1 << 20)
    cc: str = _param("bbr", "congestion control algorithm, by name (entry-point group btlcore.congestion): bbr (the default), aimd, cubic, none (a fixed window of cwnd_max, paced), or a third party's")
    stats_interval: float = _param(0.0, "print the stats line every this many seconds of progress; 0 never", lo=0.0, hi=86400.0)

    def __attrs_post_init__(self) -> None:
        if self.max_retries != 20:
            warnings.warn("Config.max_retries is deprecated and has no effect: a peer is declared "
                          "dead only when nothing was heard from it for peer_timeout",
                          BtlDeprecationWarning, stacklevel=3)
        if self.cwnd_max == 0:
            self._cwnd_max_alias()
        if self.rto_min > self.rto_max:
            raise ConfigError(
                f"parameter 'rto_min' ({self.rto_min}) must not exceed 'rto_max' ({self.rto_max})")
        if 0 < self.mtu < 128:
            raise ConfigError(f"bad value {self.mtu!r} for parameter 'mtu' (BTL_MTU): "
                              "allowed is 0 or an integer from 128 to 65507")

    def _cwnd_max_alias(self) -> None:
        """``cwnd_max=0``, the last release's "no congestion control", is ``cc=none`` now."""
        warnings.warn("Config(cwnd_max=0) is deprecated: use cc=none (a fixed window, paced at the "
                      "measured delivery rate)", BtlDeprecationWarning, stacklevel=4)
        default = attrs.fields(Config).cc.default
        if self.cc not in (default, "none"):
            raise ConfigError(f"parameter 'cwnd_max' is 0, the deprecated alias of cc=none, but 'cc' "
                              f"is {self.cc!r}: set cc=none, or a cwnd_max from 1")
        object.__setattr__(self, "cc", "none")  # (frozen: set once, while being built)

    # -- building from strings ----------------------------------------------------------

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in attrs.fields(cls)]

    @classmethod
    def describe(cls) -> list[tuple[str, Any, str, str]]:
        """(name, default, allowed, doc) for every parameter: for --help and docs."""
        return [(f.name, f.default, _allowed(f), f.metadata["doc"]) for f in attrs.fields(cls)]

    @classmethod
    def parse_value(cls, name: str, text: str) -> Any:
        """Convert the string ``text`` to parameter ``name``'s type (not yet range-checked)."""
        fields = attrs.fields_dict(cls)
        if name not in fields:
            raise ConfigError(f"unknown parameter {name!r}; known parameters: {', '.join(cls.names())}")
        field = fields[name]
        text = text.strip()
        try:
            if field.type in ("bool", bool):
                low = text.lower()
                if low in ("1", "true", "yes", "on"):
                    return True
                if low in ("0", "false", "no", "off"):
                    return False
                raise ValueError
            if field.type in ("int", int):
                return int(text, 0)
            if field.type in ("float", float):
                return float(text)
            return text
        except ValueError:
            raise _fail(field, text) from None

    @classmethod
    def from_strings(cls, pairs: Iterable[tuple[str, str]], base: Config | None = None) -> Config:
        changes = {name: cls.parse_value(name, text) for name, text in pairs}
        return attrs.evolve(base or cls(), **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, base: Config | None = None) -> Config:
        """Apply every ``BTL_<NAME>`` variable that names a parameter.  A ``BTL_`` variable
        that names none is an error too: a typo must not pass silently."""
        environ = os.environ if environ is None else environ
        known = set(cls.names())
        pairs = []
        for key, value in environ.items():
            if not key.startswith(ENV_PREFIX) or key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIXES):
                continue
            name = key[len(ENV_PREFIX):].lower()
            if name not in known:
                raise ConfigError(
                    f"unknown environment variable {key}; known parameters: "
                    + ", ".join(ENV_PREFIX + n.upper() for n in sorted(known)))
            pairs.append((name, value))
        return cls.from_strings(pairs, base)

    @classmethod
    def build(cls, overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Config:
        """Defaults, then the environment, then explicit overrides (code or CLI) on top."""
        cfg = cls.from_env(environ)
        if overrides:
            unknown = set(overrides) - set(cls.names())
            if unknown:
                raise ConfigError(
                    f"unknown parameter {sorted(unknown)[0]!r}; known parameters: {', '.join(cls.names())}")
            cfg = attrs.evolve(cfg, **overrides)
        return cfg
