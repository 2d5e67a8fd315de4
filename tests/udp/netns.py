"""Two "hosts" on one machine: network namespaces joined by a veth pair, with loss and a rate
limit applied by the kernel, for tests that need a real lossy link.

::

    [ns A]  veth-a 10.231.0.1/24, fd00:231::1/64  <==veth==>  veth-b 10.231.0.2/24 ...  [ns B]
            tc tbf rate limit (egress)                         nftables: numgen random
                                                               mod 100 < N drop (input)

The 10.x and fd00: addresses exist only inside these namespaces: no packet to them can leave
the machine, nor even the two namespaces.  Code that opens sockets on them must do so inside
a namespace (``with pair.inside("a"): ...``): a socket keeps the namespace it was created in,
so the test process itself can own devices on both "hosts" at once.

Needs root, ``ip`` and ``tc`` (Debian package iproute2), ``nft`` (nftables) and ``sysctl``
(procps), and a
kernel with veth, nf_tables (numgen) and sch_tbf.  :func:`unavailable` says what is missing,
for ``pytest.skip``.  Every command has a timeout; ``destroy`` is idempotent and also runs at
interpreter exit, so a failed test leaves no namespace behind.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
CMD_TIMEOUT = 20.0
SUBNET4 = "10.231.0"
SUBNET6 = "fd00:231::"
PACKAGES = {"ip": "iproute2", "tc": "iproute2", "nft": "nftables", "sysctl": "procps"}


def _run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, input=input, capture_output=True, text=True, timeout=CMD_TIMEOUT)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python >= 3.12
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def unavailable(need_nft: bool = True, need_tc: bool = False) -> str | None:
    """Why namespace tests cannot run here, or None if they can."""
    if os.name != "posix" or not os.path.exists("/proc/self/ns/net"):
        return "no Linux network namespaces on this system"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    tools = ["ip", "sysctl"] + (["nft"] if need_nft else []) + (["tc"] if need_tc else [])
    for tool in tools:
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (apt-get install {PACKAGES[tool]})"
    probe = f"btlprobe{os.getpid()}"
    try:
        made = _run("ip", "netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"cannot create a network namespace: {made.stderr.strip()}"
        link = _run("ip", "-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1",
                    check=False)
        if link.returncode != 0:
            return f"cannot create a veth pair: {link.stderr.strip()}"
        if need_nft:
            nft = _run("ip", "netns", "exec", probe, "nft", "-f", "-", check=False, input=(
                "table inet t {\n chain c {\n  type filter hook input priority 0;\n"
                "  meta l4proto udp numgen random mod 100 < 1 drop\n }\n}\n"))
            if nft.returncode != 0:
                return f"nftables unusable (kernel without nf_tables/numgen?): {nft.stderr.strip()}"
        if need_tc:
            tc = _run("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "p0", "root", "tbf",
                      "rate", "10mbit", "burst", "64kb", "latency", "50ms", check=False)
            if tc.returncode != 0:
                return f"tc tbf unusable: {tc.stderr.strip()}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot set up namespaces: {exc}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


class NetnsPair:
    """Namespaces ``a`` and ``b`` joined by a veth pair.  Use as a context manager."""

    def __init__(self, tag: str | None = None, mtu: int = 1500) -> None:
        tag = tag or str(os.getpid())
        self.ns = {"a": f"btl{tag}a", "b": f"btl{tag}b"}
        self.dev = {"a": f"btv{tag}a"[:15], "b": f"btv{tag}b"[:15]}
        self.ip4 = {"a": f"{SUBNET4}.1", "b": f"{SUBNET4}.2"}
        self.ip6 = {"a": f"{SUBNET6}1", "b": f"{SUBNET6}2"}
        self.mtu = mtu
        self.created = False
        self.has_ipv6 = True

    # -- life cycle ------------------------------------------------------------------------

    def create(self) -> NetnsPair:
        self.destroy()  # leftovers of a crashed run with the same tag
        self.created = True
        atexit.register(self.destroy)
        a, b = self.ns["a"], self.ns["b"]
        _run("ip", "netns", "add", a)
        _run("ip", "netns", "add", b)
        _run("ip", "link", "add", self.dev["a"], "netns", a, "mtu", str(self.mtu), "type", "veth",
             "peer", "name", self.dev["b"], "netns", b, "mtu", str(self.mtu))
        for side in ("a", "b"):
            ns, dev = self.ns[side], self.dev[side]
            # no duplicate-address detection: addresses are usable at once
            for conf in ("all", "default", dev):
                _run("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{conf}.accept_dad=0")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.ip4[side]}/24", "dev", dev)
            if self.has_ipv6 and _run("ip", "-n", ns, "addr", "add", f"{self.ip6[side]}/64", "dev",
                                      dev, "nodad", check=False).returncode != 0:
                self.has_ipv6 = False  # a kernel without IPv6: IPv6 tests skip
            _run("ip", "-n", ns, "link", "set", dev, "up")
        # static neighbours: no ARP/NDP round trip (nor its queue overflowing) on the first send
        mac = {side: self._mac(side) for side in ("a", "b")}
        for side, peer in (("a", "b"), ("b", "a")):
            for ip in (self.ip4[peer], self.ip6[peer]) if self.has_ipv6 else (self.ip4[peer],):
                _run("ip", "-n", self.ns[side], "neigh", "replace", ip, "lladdr", mac[peer],
                     "dev", self.dev[side], "nud", "permanent")
        return self

    def _mac(self, side: str) -> str:
        out = _run("ip", "-n", self.ns[side], "-o", "link", "show", self.dev[side]).stdout.split()
        return out[out.index("link/ether") + 1]

    def destroy(self) -> None:
        if not self.created:
            existing = _run("ip", "netns", "list", check=False).stdout
            if not any(ns in existing.split() for ns in self.ns.values()):
                return
        for ns in self.ns.values():  # deleting a namespace deletes its end of the veth too
            _run("ip", "netns", "del", ns, check=False)
        self.created = False

    def __enter__(self) -> NetnsPair:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    # -- impairments -----------------------------------------------------------------------

    def set_loss(self, percent: int, side: str = "b", proto: str = "udp") -> None:
        """Drop ``percent`` % of ``proto`` packets arriving in namespace ``side`` (nftables
        ``numgen random mod 100 < N drop`` in the input hook); 0 removes the rule."""
        if not 0 <= percent <= 100:
            raise ValueError(f"loss percent {percent} is not within 0..100")
        ns = self.ns[side]
        _run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", "btlloss", check=False)
        if percent:
            _run("ip", "netns", "exec", ns, "nft", "-f", "-", input=(
                "table inet btlloss {\n"
                "  chain input {\n"
                "    type filter hook input priority 0; policy accept;\n"
                f"    meta l4proto {proto} numgen random mod 100 < {percent} counter drop\n"
                "  }\n"
                "}\n"))

    def loss_counter(self, side: str = "b") -> int:
        """Packets the loss rule dropped so far."""
        out = _run("ip", "netns", "exec", self.ns[side], "nft", "list", "table", "inet", "btlloss",
                   check=False).stdout
        for word, nxt in itertools.pairwise(out.split()):
            if word == "packets":
                return int(nxt)
        return 0

    def set_rate(self, rate: str = "100mbit", side: str = "a", burst: str = "256kb",
                 latency: str = "50ms") -> None:
        """Limit what leaves ``side`` over the veth with a token bucket (tc tbf)."""
        ns, dev = self.ns[side], self.dev[side]
        _run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
             "rate", rate, "burst", burst, "latency", latency)

    def qdisc_stats(self, side: str = "a") -> str:
        return _run("ip", "netns", "exec", self.ns[side], "tc", "-s", "qdisc", "show", "dev",
                    self.dev[side]).stdout

    # -- running things inside ----------------------------------------------------------------

    @contextlib.contextmanager
    def inside(self, side: str) -> Iterator[None]:
        """Switch this thread into namespace ``side`` and back.  Sockets created inside stay
        in that namespace after the block."""
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/run/netns/{self.ns[side]}", os.O_RDONLY)
            try:
                _setns(target)
            finally:
                os.close(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(own)

    def exec_argv(self, side: str, *argv: str) -> list[str]:
        """The command line that runs ``argv`` in namespace ``side``."""
        return ["ip", "netns", "exec", self.ns[side], *argv]
