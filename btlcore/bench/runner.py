"""The entry point of ``btl bench``.

From the CLI::

    from btlcore.bench.runner import main
    sys.exit(main(["--quick", "--json"]))

or from code::

    report = run(quick=True, json=False, sections=None)   # prints the table, returns a dict

``report`` holds ``meta`` (machine, profile, timing), ``results`` (one dict per figure: id,
section, name, unit, values, stats {median,min,max,q1,q3,n}, extra, skipped, error),
``ratios`` (btlcore / reference) and ``targets`` (the goals of issues 6 and 15 with PASS/FAIL/n/a).
Values are in base units: bytes/s, seconds, bytes, 1/s, or plain numbers ("x").
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, TextIO

from . import btl_adapter, btl_scale, btl_sim, btl_udp, harness, ref_quic, ref_tcp, ref_udp, report
from .harness import Result, Skip, failed, machine, skipped
from .profiles import PROFILES, QUICK, Profile

SECTIONS = ("raw_udp", "tcp", "quic", "btl_udp", "btl_sim", "btl_scale")
GROUPS = {"refs": ("raw_udp", "tcp", "quic"), "btl": ("btl_udp", "btl_sim", "btl_scale"), "all": SECTIONS}


@dataclass
class Item:
    """One measurement: the figures it yields (id, name, unit, better) and how to get them."""

    section: str
    specs: list[tuple[str, str, str, str]]
    fn: Callable[[], Result | list[Result]]

    def run(self) -> list[Result]:
        try:
            out = self.fn()
            return out if isinstance(out, list) else [out]
        except Skip as exc:
            return [skipped(i, self.section, n, u, str(exc), better=b) for i, n, u, b in self.specs]
        except Exception as exc:  # one broken measurement must not stop the run
            msg = f"{type(exc).__name__}: {exc}"
            return [failed(i, self.section, n, u, msg, better=b) for i, n, u, b in self.specs]


def alone(piece: str, fn: Callable[..., Any], deadline: float, **kwargs: Any) -> Any:
    """``fn(**kwargs)`` in a pinned child process with a hard deadline: the simulator and
    scale measurements run in one process; this bounds them in real time and keeps their
    heap away from the next one and from the caller."""
    btl_adapter.require(piece)
    return harness.run_alone(fn, kwargs, deadline=deadline)


def plan(p: Profile, host: str = harness.LOOPBACK_V4) -> list[Item]:
    """Every measurement of profile ``p``, in the order they run; ``host`` is the loopback
    address the process pairs use (127.0.0.1 or ::1)."""
    harness.loopback(host)
    items: list[Item] = []

    def add(section: str, specs: list[tuple[str, str, str, str]], fn: Callable[[], Result | list[Result]]) -> None:
        items.append(Item(section, specs, fn))

    modes = ((False, "blocking"), (True, "busy"))

    for s in p.datagram_sizes:
        add("raw_udp", [(f"ref.udp_blast.{s}", f"raw UDP blast, {s} B datagrams", "B/s", "higher")],
            partial(ref_udp.blast, p, s, host))
    for m in p.message_sizes:
        for busy, mode in modes:
            add("raw_udp", [(f"ref.udp_rtt.{m}.{mode}", f"UDP ping-pong {m} B, {mode}", "s", "lower")],
                partial(ref_udp.pingpong, p, m, busy, host))

    add("tcp", [("ref.tcp_stream", "kernel TCP stream, 1 MiB sends", "B/s", "higher")], lambda: ref_tcp.stream(p, host))
    for m in p.message_sizes:
        for busy, mode in modes:
            add("tcp", [(f"ref.tcp_rtt.{m}.{mode}", f"TCP_NODELAY ping-pong {m} B, {mode}", "s", "lower")],
                partial(ref_tcp.pingpong, p, m, busy, host))

    for s in (1472, 8972):
        add("quic", [(f"ref.quic_bulk.{s}", f"aioquic one-stream bulk, {s} B datagrams", "B/s", "higher")],
            partial(ref_quic.bulk, p, s, host))
    add("quic", [("ref.quic_echo.64", "aioquic 64 B echo", "s", "lower")], lambda: ref_quic.echo(p, host))

    for s in p.datagram_sizes:
        add("btl_udp", [(f"btl.udp_bulk.{s}", f"btlcore UDP bulk, 1 MiB messages, {s} B datagrams", "B/s", "higher")],
            partial(btl_udp.bulk, p, s, host))
    for m in p.message_sizes:
        for busy, mode in modes:
            add("btl_udp", [(f"btl.udp_rtt.{m}.{mode}", f"btlcore UDP round trip {m} B, {mode}", "s", "lower")],
                partial(btl_udp.rtt, p, m, busy, host))

    add("btl_sim", [("btl.sim_rate", "simulator, lossless: data segments per wall-second", "1/s", "higher")],
        lambda: alone("simulator", btl_sim.segment_rate, p.deadline, profile=p))
    add("btl_sim", [("btl.sim_rate_integrity",
                     "simulator, lossless, fabric that never corrupts: data segments per wall-second", "1/s",
                     "higher")],
        lambda: alone("simulator", btl_sim.segment_rate, p.deadline, profile=p, integrity=True))
    models: list[tuple[float, float | None]] = [(x, None) for x in p.loss_rates]
    models.append((btl_sim.BURST_LOSS, btl_sim.BURST_LENGTH))
    for loss, burst in models:
        key = f"burst{round(loss * 100)}" if burst else f"random{round(loss * 100)}"
        label = f"{loss:.0%} burst loss" if burst else f"{loss:.0%} random loss"
        specs = [(f"btl.loss.{key}.tx_per_loss", f"{label}: transmissions per lost segment", "x", "lower"),
                 (f"btl.loss.{key}.acks_per_seg", f"{label}: standalone ACKs per data segment", "x", "lower"),
                 (f"btl.loss.{key}.goodput_frac", f"{label}: goodput / link rate", "x", "higher"),
                 (f"btl.loss.{key}.rtts", f"{label}: completion time in RTTs", "x", "lower")]
        add("btl_sim", specs, partial(alone, "simulator", btl_sim.efficiency, p.deadline,
                                      profile=p, loss=loss, burst=burst))

    add("btl_scale", [("btl.mem_per_peer", "memory per idle peer", "B", "lower"),
                      ("btl.mem_per_peer_used", "memory per peer just after use", "B", "lower")],
        lambda: alone("simulator", btl_scale.memory_per_peer, p.deadline, profile=p))
    add("btl_scale", [("btl.udp_transport_mem", "resident memory per udp transport", "B", "lower"),
                      ("btl.udp_transport_open", "time to open a udp transport", "s", "lower")],
        lambda: alone("UDP backend", btl_scale.udp_transport_cost, p.deadline, profile=p, host=host))
    add("btl_scale", [("btl.keepalive_idle_ratio", "progress(0) with 1000 idle peers (keepalive armed) / with 1 peer",
                       "x", "lower")],
        lambda: alone("simulator", btl_scale.keepalive_cost, p.deadline, profile=p))
    for n in p.scale_peers:
        add("btl_scale", [(f"btl.progress_idle.{n}", f"progress(0), nothing to do, {n} idle peers", "s", "lower"),
                          (f"btl.progress_active.{n}", f"one message exchange with 1 active of {n} peers", "s",
                           "lower")],
            partial(alone, "simulator", btl_scale.progress_cost, p.deadline, profile=p, n=n))
    return sorted(items, key=_run_order) if p.interleave else items


def _run_order(item: Item) -> tuple[int, int, int]:
    """Each btlcore figure runs right after the references it is compared with, so that a
    ratio is taken under the same load even when the machine's load drifts during the run."""
    parts = item.specs[0][0].split(".")
    kind, what = parts[0], parts[1]
    if what in ("udp_blast", "udp_bulk"):
        return (0, int(parts[2]), 0 if kind == "ref" else 1)
    if what in ("tcp_stream", "quic_bulk"):
        return (1, int(parts[2]) if len(parts) > 2 else 0, 0)
    if what in ("udp_rtt", "tcp_rtt"):
        order = {"ref.udp_rtt": 0, "ref.tcp_rtt": 1, "btl.udp_rtt": 2}[f"{kind}.{what}"]
        return (2, int(parts[2]) * 2 + (parts[3] == "busy"), order)
    if what == "quic_echo":
        return (3, 0, 0)
    return (4, 0, 0)  # the simulator and scale: in-process, keep their order (sort is stable)


def select_sections(sections: Iterable[str] | str | None) -> tuple[str, ...]:
    if sections is None:
        return SECTIONS
    if isinstance(sections, str):
        sections = [x for x in sections.split(",") if x]
    chosen: list[str] = []
    for s in sections:
        s = s.strip()
        group = GROUPS.get(s, (s,))
        for g in group:
            if g not in SECTIONS:
                raise ValueError(f"unknown benchmark section {s!r}; known: {', '.join((*SECTIONS, *GROUPS))}")
            if g not in chosen:
                chosen.append(g)
    return tuple(chosen)


PAIRED = ("raw_udp", "tcp", "quic", "btl_udp")  # sections whose figures are ratios to one another


def rounds(p: Profile, chosen: Sequence[str]) -> list[tuple[Profile, tuple[str, ...]]]:
    """The run as rounds: with ``p.interleave``, the paired sections (references and btlcore
    over UDP) one trial per round, ``p.trials`` rounds (the warm-up in the first), so each
    trial of a reference runs next to the same trial of what it is compared with (reference,
    btlcore, reference, btlcore, ...) and load that drifts moves both; then the in-process
    sections (simulator, scale) once, with every trial (their trials differ by seed)."""
    paired = tuple(s for s in chosen if s in PAIRED)
    rest = tuple(s for s in chosen if s not in PAIRED)
    if not p.interleave or p.trials <= 1 or not paired:
        return [(p, tuple(chosen))]
    out = [(dataclasses.replace(p, trials=1, warmup=p.warmup if i == 0 else 0), paired) for i in range(p.trials)]
    return out + ([(p, rest)] if rest else [])


def merge(old: Result | None, new: Result) -> Result:
    """One figure's trials gathered over the rounds (a round that failed leaves the others')."""
    if old is None or not old.ok:
        return new if old is None or new.ok else old
    if not new.ok:
        old.extra["rounds_failed"] = old.extra.get("rounds_failed", 0) + 1
        return old
    old.values.extend(new.values)
    old.stats = harness.summarize(old.values)
    return old


def _run_item(item: Item, p: Profile, t_start: float, cprofile: str | None, log: TextIO | None) -> list[Result]:
    """Run one measurement (unless the run's time budget is spent) and log its figures."""
    t0 = time.monotonic()
    if t0 - t_start > p.budget:
        why = f"the run's time budget ({p.budget:g} s, profile {p.name}) was spent"
        return [skipped(i, item.section, n, u, why, better=b) for i, n, u, b in item.specs]
    if cprofile:
        os.environ[harness.CPROFILE_ENV] = os.path.abspath(cprofile)
        os.environ[harness.LABEL_ENV] = item.specs[0][0]
    try:
        got = item.run()
    finally:
        os.environ.pop(harness.CPROFILE_ENV, None)
        os.environ.pop(harness.LABEL_ENV, None)
    if log is not None:
        for r in got:
            if r.ok:
                s = r.stats
                shown = (f"{report.fmt(s['median'], r.unit)}  [{report.fmt(s['min'], r.unit)} … "
                         f"{report.fmt(s['max'], r.unit)}]")
            else:
                shown = f"skipped: {r.skipped}" if r.skipped else f"ERROR: {report.short_error(r.error or '')}"
            print(f"[{time.monotonic() - t_start:6.1f}s] {r.name}: {shown}  ({time.monotonic() - t0:.1f}s)",
                  file=log, flush=True)
    return got


def run(quick: bool = True, json: bool = False, sections: Iterable[str] | str | None = None, *,
        profile: Profile | str | None = None, out: TextIO | None | Literal["stdout"] = "stdout",
        log: TextIO | None | Literal["stderr"] = "stderr",
        docs: str | None = None, trials: int | None = None, host: str = harness.LOOPBACK_V4,
        cprofile: str | None = None) -> dict[str, Any]:
    """Run the benchmarks and return the report; print the table (or JSON if ``json``) to ``out``.

    ``profile`` overrides ``quick`` ("tiny", "quick" or "full"); ``sections`` is a list or a
    comma-separated string of section names or groups (refs, btl, all); ``docs`` is a
    repository root whose docs/benchmarks.md and docs/benchmarks-loss.png are rewritten;
    ``out`` (default sys.stdout) gets the table or JSON and ``log`` (default sys.stderr) a
    line per figure as it is measured; None silences either.  ``cprofile``: a directory where
    each btlcore side writes its cProfile stats (``<figure id>.<side>.prof`` and a ``.txt``
    of the top functions by own time)."""
    # the streams as they are now (a test may have replaced them since this module loaded)
    out = sys.stdout if out == "stdout" else out
    log = sys.stderr if log == "stderr" else log
    if isinstance(profile, str):
        profile = PROFILES[profile]
    p = profile or (QUICK if quick else PROFILES["full"])
    if trials:
        p = dataclasses.replace(p, trials=trials)
    chosen = select_sections(sections)
    busy_before = harness.contention()
    if busy_before and log is not None:
        print(f"btl bench: warning: {busy_before}", file=log, flush=True)
    t_start = time.monotonic()
    merged: dict[str, Result] = {}
    for rp, sections in rounds(p, chosen):
        for item in plan(rp, host):
            if item.section not in sections:
                continue
            for r in _run_item(item, rp, t_start, cprofile, log):
                merged[r.id] = merge(merged.get(r.id), r)
    results = list(merged.values())
    meta = machine()
    busy_after = harness.contention()
    meta.update(host=host, warnings=[w for w in (busy_before, busy_after) if w][:1], profile=p.name,
                trials=p.trials, warmup=p.warmup, sections=list(chosen), elapsed=time.monotonic() - t_start,
                aioquic=ref_quic.version() if not ref_quic.available() else None,
                btlcore=btl_adapter.availability())
    dicts = [r.to_json() for r in results]
    order = {sec: i for i, sec in enumerate(SECTIONS)}
    dicts.sort(key=lambda r: order.get(r["section"], len(order)))  # stable: run order within a section
    rep = {"meta": meta, "results": dicts, "ratios": report.ratios(dicts), "targets": report.targets(dicts)}
    if docs is not None:
        from . import docs as docs_mod
        docs_mod.write(rep, docs)
    if out is not None:
        print(report.render_json(rep) if json else report.render_text(rep), file=out, flush=True)
    return rep


DESCRIPTION = ("Measure btlcore side by side with raw UDP, kernel TCP and aioquic on loopback "
               "(two processes pinned to different cores); print the ratios and the targets (issues 6 and 15).")


def add_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``btl bench``'s options to ``ap`` (for a CLI that builds its own subparser)."""
    ap.add_argument("--quick", action="store_true", help="short trials: about a minute in all")
    ap.add_argument("--profile", choices=sorted(PROFILES),
                    help="tiny | quick | full (default full, or quick with --quick)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON instead of the table")
    ap.add_argument("--only", metavar="SECTIONS", default=None,
                    help=f"comma-separated sections or groups: {', '.join((*SECTIONS, *GROUPS))}")
    ap.add_argument("--trials", type=int, default=None, help="trials per figure (after one warm-up)")
    ap.add_argument("--output", metavar="FILE", help="also write the JSON report to FILE")
    ap.add_argument("--docs", metavar="ROOT", nargs="?", const=".", default=None,
                    help="rewrite ROOT/docs/benchmarks.md and ROOT/docs/benchmarks-loss.png (ROOT defaults to .)")
    ap.add_argument("--host", default=harness.LOOPBACK_V4, choices=(harness.LOOPBACK_V4, harness.LOOPBACK_V6),
                    help="the loopback address to measure on (default 127.0.0.1)")
    ap.add_argument("--cprofile", metavar="DIR", default=None,
                    help="write cProfile stats of every btlcore side to DIR (figures are then slower)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    ap.add_argument("--builds", action="store_true",
                    help="compare the compiled and the pure-Python build instead, interleaved "
                    "(engine CPU per segment, simulator segments/s; --trials pairs, default 5)")
    rg = ap.add_argument_group("the regime sweep (btl bench --regimes [--quick]; see btlcore.bench.regimes)")
    rg.add_argument("--regimes", action="store_true",
                    help="sweep rate, delay, loss, queue and flow count on the simulator instead "
                    "(--quick: the quick grid, about a minute); --docs writes its section and heatmap")
    rg.add_argument("--set", action="append", metavar="NAME=VALUE",
                    help="a protocol parameter for every btlcore flow of the sweep (cc=NAME ...); repeatable")
    rg.add_argument("--compete", action="append", metavar="NAME=VALUE[,...]",
                    help="one flow of the sweep's compete slice, with its own parameters; repeat per flow "
                    "(default: --compete cc=bbr --compete cc=cubic, where both are installed)")
    rg.add_argument("--no-kernel", action="store_true",
                    help="leave out kernel TCP and btlcore over UDP on a veth pair (root, ip netns, tc, nft)")
    return ap


def parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(prog="btl bench", description=DESCRIPTION))


def run_args(args: argparse.Namespace) -> int:
    """Run from parsed options (see :func:`add_arguments`); the exit status: 0, 1 if a
    measurement failed (an error, not a skip and not a missed target), 2 on bad options."""
    if args.regimes:
        from . import regimes

        return regimes.run_args(args)
    if args.builds:
        from . import builds

        return builds.main(args.trials or 5)
    try:
        sections = select_sections(args.only)
    except ValueError as exc:
        print(f"btl bench: {exc}", file=sys.stderr)
        return 2
    rep = run(quick=args.quick, json=args.json, sections=sections, profile=args.profile,
              log=None if args.quiet else "stderr", docs=args.docs, trials=args.trials, host=args.host,
              cprofile=args.cprofile)
    if args.output:
        with open(args.output, "w") as f:
            f.write(report.render_json(rep))
    errors = [r for r in rep["results"] if r.get("error")]
    return 1 if errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``btl bench [--quick] [--json] ...``; returns the exit status."""
    return run_args(parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
