"""``btl bench --regimes``: btlcore across network regimes, on the simulator.

A sampled grid over the link rate (10 Mb/s to 10 Gb/s), the one-way delay (0.05 to 50 ms),
random loss (0 to 10 %) and burst loss, the bottleneck's queue (0.1 to 2 BDP) and the number
of flows sharing it (1, 2, 8), in four slices:

* ``loss``: each path (rate, delay) at each loss model, one flow, a queue of 1 BDP;
* ``queue``: paths at each queue size;
* ``flows``: 1, 2 and 8 flows of the same algorithm (drop-tail, and CoDel for 8);
* ``compete``: flows with different settings side by side (``--compete``; by default
  ``cc=bbr`` beside ``cc=cubic`` where both are installed), each one's share reported.

Each cell runs :func:`btlcore.bench.flows.run_flows`: goodput as a fraction of
``(1 - p) x rate`` after a warm-up, Jain's index, the share of segments retransmitted
needlessly, and the verified bytes (every message checked; a cell whose bytes did not all
arrive intact, or where a live peer was declared dead, is marked FAIL).  Cells are short in
virtual time (``quick``: about a minute of CPU for the whole grid).  Where the machine allows,
:mod:`.veth` adds kernel TCP (cubic, bbr) and btlcore over UDP on a veth pair.

Code calls :func:`sweep`; ``btl bench --regimes [--quick]`` calls :func:`run_args`.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from ..config import Config
from ..protocol.wire import CHUNK_LEN, HEADER_LEN
from .flows import MTU, PathSpec, recovery_rtts, run_flows, window_needs

RATES = (10.0, 100.0, 1000.0, 10000.0)
DELAYS = (0.00005, 0.001, 0.01, 0.05)
LOSSES = (0.0, 0.001, 0.01, 0.05, 0.1)
BURST = (0.05, 4.0)
"""Burst loss: 5 % long-run, mean burst 4 frames (Gilbert-Elliott)."""
QUEUES = (0.1, 0.5, 1.0, 2.0)
FLOWS = (1, 2, 8)
DEFAULT_COMPETE = ("cc=bbr", "cc=cubic")


STARTUP_EXTRA_RTTS = 6
"""Round trips of a run's start besides STARTUP's doublings: the handshake, three rounds
without growth, DRAIN, and one for the pacing's first window."""
RERUN_RTTS = 10
"""Round trips measured (at least) when a cell is run again with the setting it needs."""
RERUN_MAX_BUFFER = 256 << 20
"""A cell whose setting asks for a larger ``recv_buffer`` is not run again: the simulator
would hold that much out-of-order data in this process (it is listed, not checked)."""


@dataclass(frozen=True)
class Grid:
    """Which cells a sweep runs and how long each lasts: ``max(min_time, rtts x RTT, min_bytes
    of link time)`` virtual seconds, cut to ``budget`` bytes of link time (never under 8 RTTs).
    ``min_bytes`` keeps the measured window long beside what a receiver may hold back for
    reordering while a hole is repaired (it lands all at once, at the window's edges)."""

    name: str
    loss_paths: tuple[tuple[float, float], ...]
    losses: tuple[float, ...]
    queue_paths: tuple[tuple[float, float], ...]
    queue_losses: tuple[float, ...]
    flow_paths: tuple[tuple[float, float], ...]
    compete_paths: tuple[tuple[float, float], ...]
    min_time: float
    rtts: float
    min_bytes: float
    budget: float

    def duration(self, path: PathSpec) -> float:
        rate = path.rate_mbps * 1e6 / 8
        t = max(self.min_time, self.rtts * path.rtt, self.min_bytes / rate)
        return max(min(t, self.budget / rate), 8 * path.rtt)

    def rerun_times(self, path: PathSpec, cfg: Config) -> tuple[float, float]:
        """``(duration, warmup)`` of a cell run again with the setting it needs: the warm-up
        covers STARTUP (a doubling per round from ``cwnd_initial`` to the BDP, then three flat
        rounds, DRAIN and the handshake: :data:`STARTUP_EXTRA_RTTS`) and the repair of what
        its last, largest flight lost (:func:`~.flows.recovery_rtts`), which on a long fat
        path outlast the grid's first third; :data:`RERUN_RTTS` round trips are measured."""
        duration = self.duration(path)
        flight = path.bdp / (MTU - HEADER_LEN - CHUNK_LEN)
        rtts = math.log2(max(2.0, flight / cfg.cwnd_initial)) + STARTUP_EXTRA_RTTS + recovery_rtts(path, flight)
        warmup = max(duration / 3, rtts * path.rtt)
        return max(duration, warmup + RERUN_RTTS * path.rtt), warmup


GRIDS = {
    "quick": Grid("quick", loss_paths=((10, 0.05), (100, 0.01), (1000, 0.001), (10000, 0.00005)),
                  losses=(0.0, 0.01, 0.1, -1.0), queue_paths=((100, 0.01),), queue_losses=(0.0,),
                  flow_paths=((100, 0.01),), compete_paths=((100, 0.01),),
                  min_time=0.5, rtts=60, min_bytes=6e6, budget=100e6),
    "full": Grid("full", loss_paths=tuple((r, d) for r in RATES for d in DELAYS), losses=(*LOSSES, -1.0),
                 queue_paths=((10, 0.05), (100, 0.01), (1000, 0.001)), queue_losses=(0.0, 0.01),
                 flow_paths=((100, 0.001), (100, 0.01), (1000, 0.001)), compete_paths=((100, 0.01), (1000, 0.001)),
                 min_time=0.5, rtts=60, min_bytes=15e6, budget=250e6),
}
"""``-1.0`` in ``losses`` stands for the burst-loss model :data:`BURST`."""


@dataclass(frozen=True)
class Cell:
    """One run of the sweep: its slice, path, and each flow's settings (``NAME=VALUE``)."""

    kind: str
    path: PathSpec
    flows: tuple[tuple[tuple[str, str], ...], ...]

    def label(self) -> str:
        return f"{self.kind}: {self.path.label()}, {self.path.loss_label()}, queue {self.path.queue_bdp:g} BDP, " \
               f"{len(self.flows)} flow{'s' if len(self.flows) > 1 else ''}" + \
               (f" ({self.path.aqm})" if self.path.aqm != "droptail" else "")


def parse_sets(text: str) -> tuple[tuple[str, str], ...]:
    """``cc=bbr,cwnd_max=2048`` as pairs; ValueError naming the form."""
    pairs = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"expected NAME=VALUE[,NAME=VALUE...], got {text!r}")
        name, value = item.split("=", 1)
        pairs.append((name.strip(), value.strip()))
    return tuple(pairs)


def _path(rate: float, delay: float, loss: float = 0.0, queue: float = 1.0, aqm: str = "droptail") -> PathSpec:
    if loss < 0:
        return PathSpec(rate, delay, BURST[0], BURST[1], queue, aqm)
    return PathSpec(rate, delay, loss, None, queue, aqm)


def cells(grid: Grid, compete: Sequence[tuple[tuple[str, str], ...]] = ()) -> list[Cell]:
    """Every cell of ``grid``, slice by slice (``compete``: one flow per entry)."""
    one: tuple[tuple[tuple[str, str], ...], ...] = ((),)
    out = [Cell("loss", _path(r, d, p), one) for r, d in grid.loss_paths for p in grid.losses]
    out += [Cell("queue", _path(r, d, p, q), one) for r, d in grid.queue_paths for p in grid.queue_losses
            for q in QUEUES if q != 1.0]
    for r, d in grid.flow_paths:
        out += [Cell("flows", _path(r, d), ((),) * n) for n in FLOWS if n > 1 or (r, d) not in grid.loss_paths]
        out.append(Cell("flows", _path(r, d, queue=2.0), ((),) * FLOWS[-1]))
        out.append(Cell("flows", _path(r, d, queue=2.0, aqm="codel"), ((),) * FLOWS[-1]))
    if compete:
        out += [Cell("compete", _path(r, d), tuple(compete)) for r, d in grid.compete_paths]
    return out


def compete_unavailable(compete: Sequence[tuple[tuple[str, str], ...]]) -> str | None:
    """Why flows with these settings cannot run here (an algorithm not installed), or None."""
    from ..protocol.congestion import available

    known = available()
    for sets in compete:
        for name, value in sets:
            if name == "cc" and value not in known:
                return f"cc={value} is not installed (entry-point group btlcore.congestion has: {', '.join(known)})"
    return None


def _configs(base: Config, cell: Cell) -> list[Config]:
    return [Config.from_strings(list(sets), base) if sets else base for sets in cell.flows]


def run_cell(cell: Cell, grid: Grid, base: Config, seed: int = 1,
             times: tuple[float, float] | None = None) -> dict[str, Any]:
    """One cell's row: its parameters and :func:`run_flows`' figures (or its error);
    ``times``: ``(duration, warmup)`` other than the grid's."""
    duration = grid.duration(cell.path)
    duration, warmup = times or (duration, duration / 3)
    row: dict[str, Any] = {"kind": cell.kind, **asdict(cell.path), "flows": len(cell.flows),
                           "sets": [dict(s) for s in cell.flows], "duration_s": duration, "warmup_s": warmup,
                           "needs": window_needs(cell.path, base)}
    try:
        configs = _configs(base, cell)
        row.update(run_flows(cell.path, configs, duration, warmup, seed=seed))
    except Exception as exc:  # one broken cell must not stop the sweep
        row.update(error=f"{type(exc).__name__}: {exc}", verified=False, errors=[str(exc)])
    return row


def sweep(grid: Grid | str = "quick", sets: Sequence[tuple[str, str]] = (),
          compete: Sequence[tuple[tuple[str, str], ...]] | None = None, *, kernel: bool = True,
          log: TextIO | None = None, only: Callable[[Cell], bool] | None = None, seed: int = 1) -> dict[str, Any]:
    """Run the grid; return ``{"meta", "rows", "kernel"}``.  ``sets`` apply to every flow;
    ``compete`` gives one flow per entry for the compete slice (None: :data:`DEFAULT_COMPETE`)."""
    g = GRIDS[grid] if isinstance(grid, str) else grid
    base = Config.from_strings(list(sets), Config.build())
    if compete is None:
        compete = tuple(parse_sets(s) for s in DEFAULT_COMPETE)
    skipped_compete = compete_unavailable(compete)
    todo = cells(g, () if skipped_compete else compete)
    if only is not None:
        todo = [c for c in todo if only(c)]
    t0 = time.perf_counter()
    rows = []
    for i, cell in enumerate(todo):
        row = run_cell(cell, g, base, seed)
        rows.append(row)
        if log is not None:
            print(f"[{time.perf_counter() - t0:6.1f}s] {i + 1}/{len(todo)} {cell.label()}: {_brief(row)}",
                  file=log, flush=True)
    for cell, row in zip(todo, rows, strict=True):
        rerun_with_needs(cell, row, g, base, seed, log)
    kern: dict[str, Any] = {"skipped": "not asked for (--no-kernel)"}
    if kernel:
        from . import veth
        kern = veth.compare(quick=g.name == "quick", log=log)
    meta = {"grid": g.name, "cc": base.cc, "sets": dict(sets), "compete": [dict(c) for c in compete],
            "compete_skipped": skipped_compete, "cells": len(rows), "elapsed_s": time.perf_counter() - t0,
            "cpu_s": time.process_time(), "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "grid_spec": asdict(g)}
    return {"meta": meta, "rows": rows, "kernel": kern}


def rerun_with_needs(cell: Cell, row: dict[str, Any], grid: Grid, base: Config, seed: int = 1,
                     log: TextIO | None = None) -> None:
    """A one-flow cell that missed its goals and lists a setting it needs is run again with
    exactly that setting (``--set``), long enough to leave STARTUP behind
    (:meth:`Grid.rerun_times`): ``row["rerun"]`` holds that run's figures, or why it was not
    run.  The setting is then shown to do, or not."""
    from .regimes_report import goal_misses

    needs = row.get("needs")
    if not needs or len(cell.flows) != 1 or not goal_misses(row):
        return
    if needs.get("recv_buffer", 0) > RERUN_MAX_BUFFER:
        row["rerun"] = {"sets": needs, "skipped": f"recv_buffer above {RERUN_MAX_BUFFER >> 20} MiB"}
        return
    cfg = Config.from_strings([(k, str(v)) for k, v in needs.items()], base)
    t0 = time.perf_counter()
    again = run_cell(cell, grid, cfg, seed, grid.rerun_times(cell.path, cfg))
    keep = ("goodput_frac", "spurious_frac", "verified", "verified_bytes", "errors", "duration_s", "warmup_s",
            "error", "loss", "kind", "flows", "jain")
    row["rerun"] = {"sets": needs, **{k: again[k] for k in keep if k in again}}
    row["rerun"]["misses"] = goal_misses(again)
    if log is not None:
        print(f"  again with {', '.join(f'{k}={v}' for k, v in needs.items())} "
              f"({time.perf_counter() - t0:.1f}s): {_brief(again)}", file=log, flush=True)


def _brief(row: dict[str, Any]) -> str:
    if row.get("error"):
        return f"ERROR {row['error']}"
    text = f"goodput {row['goodput_frac']:.2f} of (1-p)·rate, spurious {row['spurious_frac']:.1%}"
    if row["flows"] > 1:
        text += f", Jain {row['jain']:.3f}"
    return text + ("" if row["verified"] else "  FAIL: " + "; ".join(row["errors"][:2]))


def failures(rep: dict[str, Any]) -> list[str]:
    """The cells whose bytes were not all verified, or where a live peer was declared dead
    (in the grid's run, or in the run again with the setting a cell needs)."""
    out = []
    for r in rep["rows"]:
        again = r.get("rerun") or {}
        for run, what in ((r, ""), (again, " (run again with the setting it needs)")):
            if run is again and (not again or "skipped" in again):
                continue
            if not run.get("verified"):
                out.append(f"{r['kind']} {r['rate_mbps']:g} Mb/s {r['delay'] * 1e3:g} ms loss {r['loss']:g}{what}: "
                           + "; ".join(run.get("errors", [])[:2]))
    return out


def _set_pairs(items: Iterable[str] | None) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for item in items or []:
        pairs.extend(parse_sets(item))
    return pairs


def run_args(args: Any) -> int:
    """``btl bench --regimes``: run, print the table (or JSON), write the docs if asked.
    Exit status 1 if a cell failed its correctness check, 2 on bad options."""
    from . import regimes_report as report

    try:
        sets = _set_pairs(args.set)
        compete = [parse_sets(c) for c in args.compete] if args.compete else None
        Config.from_strings(sets, Config.build())
        unknown = compete_unavailable([tuple(sets)])
        if unknown:
            raise ValueError(f"--set: {unknown}")
    except (ValueError, Exception) as exc:
        print(f"btl bench --regimes: {exc}", file=sys.stderr)
        return 2
    grid = "quick" if args.quick or args.profile in ("quick", "tiny") else "full"
    rep = sweep(grid, sets, compete, kernel=not args.no_kernel, log=None if args.quiet else sys.stderr)
    rep["meta"]["command"] = report.command_line(args)
    print(json.dumps(rep, indent=1, default=str) if args.json else report.render_text(rep), flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(rep, f, indent=1, default=str)
    if args.docs is not None:
        for p in report.write_docs(rep, args.docs):
            print(f"wrote {p}", file=sys.stderr)
    return 1 if failures(rep) else 0
