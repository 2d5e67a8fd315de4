"""The regime sweep's table, heatmap and section of ``docs/benchmarks.md``.

The section sits between :data:`START` and :data:`END` in ``docs/benchmarks.md``, so that
``btl bench --docs`` (which rewrites the rest of the file) keeps it, and ``btl bench
--regimes --docs`` replaces only it.  The heatmap is ``docs/benchmarks-regimes.png`` and
``.svg``.  ``python -m btlcore.bench.regimes_report REPORT.json [ROOT]`` redraws both from a
saved ``--output`` report.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

START = "<!-- regimes: written by btl bench --regimes --docs; everything up to the end marker is replaced -->"
END = "<!-- regimes: end -->"
IMAGE = "benchmarks-regimes"


def command_line(args: Any) -> str:
    """The command that reproduces a run (for the docs)."""
    words = ["btl", "bench", "--regimes"]
    if args.quick:
        words.append("--quick")
    for s in args.set or []:
        words += ["--set", s]
    for c in args.compete or []:
        words += ["--compete", c]
    if args.no_kernel:
        words.append("--no-kernel")
    if args.docs is not None:
        words.append("--docs")
    return shlex.join(words)


def goal_misses(r: Mapping[str, Any]) -> list[str]:
    """Issue #12's goals a row misses: goodput >= 0.9 of the rate lossless, >= 0.85 of
    (1-p)·rate up to 1% loss, 0.75 at 5%, 0.6 at 10%; spurious retransmissions <= 1%; Jain's
    index >= 0.95 between flows of one algorithm; every byte verified."""
    if r.get("error") or not r.get("verified"):
        return ["not verified"]
    misses = []
    p = r["loss"]
    need = 0.9 if not p else 0.85 if p <= 0.01 else 0.75 if p <= 0.05 else 0.6
    if r["kind"] != "compete" and r["goodput_frac"] < need:
        misses.append(f"goodput < {need:g}")
    if r["spurious_frac"] > 0.01:
        misses.append("spurious > 1%")
    if r["kind"] == "flows" and r["flows"] > 1 and r["jain"] < 0.95:
        misses.append("Jain < 0.95")
    return misses


def _frac(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _row_cells(r: Mapping[str, Any]) -> list[str]:
    loss = (f"{r['loss']:.0%} burst ({r['burst']:g})" if r.get("burst") else
            (f"{r['loss'] * 100:g}%" if r["loss"] else "0"))
    rate = f"{r['rate_mbps'] / 1000:g} Gb/s" if r["rate_mbps"] >= 1000 else f"{r['rate_mbps']:g} Mb/s"
    sets = " / ".join(",".join(f"{k}={v}" for k, v in s.items()) for s in r.get("sets", []) if s)
    if r.get("error"):
        return [r["kind"], rate, f"{r['delay'] * 1e3:g}", loss, f"{r['queue_bdp']:g}", str(r["flows"]),
                "ERROR", "-", "-", "-", "-", "-", r["error"][:80]]
    note = []
    if sets:
        note.append(sets + ": shares " + ", ".join(f"{s:.2f}" for s in r["shares"]))
    if r.get("aqm", "droptail") != "droptail":
        note.append(r["aqm"])
    if r.get("needs"):
        note.append("needs " + ", ".join(f"{k}={v}" for k, v in r["needs"].items()) + _rerun_note(r))
    if not r["verified"]:
        note.append("; ".join(r.get("errors", [])[:2]))
    misses = goal_misses(r)
    return [r["kind"], rate, f"{r['delay'] * 1e3:g}", loss, f"{r['queue_bdp']:g}", str(r["flows"]),
            ("FAIL: " + ", ".join(misses)) if misses else "PASS",
            _frac(r["goodput_frac"]), f"{r['jain']:.3f}" if r["flows"] > 1 else "-",
            f"{r['spurious_frac']:.2%}", f"{r['verified_bytes'] / 1e6:.1f} MB" + ("" if r["verified"] else " FAIL"),
            f"{r['duration_s'] * 1e3:.0f} ms", "; ".join(note)]


def _rerun_note(r: Mapping[str, Any]) -> str:
    """What the cell did when run again with the setting it needs (regimes.rerun_with_needs)."""
    again = r.get("rerun")
    if not again:
        return ""
    if "skipped" in again:
        return f" (not run again: {again['skipped']})"
    if again.get("error"):
        return f" (run again with it: ERROR {again['error'][:60]})"
    misses = again.get("misses") or []
    return (f"; with it {again['goodput_frac']:.2f}, " + ("FAIL: " + ", ".join(misses) if misses else "PASS")
            + f" ({again['duration_s'] * 1e3:.0f} ms, measured after {again['warmup_s'] * 1e3:.0f})")


def rerun_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The cells run again with the setting they need, as a table (empty if none)."""
    out = []
    for r in rows:
        again = r.get("rerun")
        if not again:
            continue
        cells = _row_cells(r)
        sets = ", ".join(f"{k}={v}" for k, v in again["sets"].items())
        if "skipped" in again:
            out.append([cells[1], cells[2], cells[3], _frac(r.get("goodput_frac")), f"`{sets}`", "-",
                        f"not run: {again['skipped']}"])
            continue
        misses = again.get("misses") or []
        out.append([cells[1], cells[2], cells[3], _frac(r.get("goodput_frac")), f"`{sets}`",
                    f"{again['goodput_frac']:.2f}" if "goodput_frac" in again else "ERROR",
                    ("FAIL: " + ", ".join(misses) if misses else "PASS")
                    + f" ({again['duration_s'] * 1e3:.0f} ms, measured after {again['warmup_s'] * 1e3:.0f} ms)"])
    if not out:
        return []
    return ["Cells that missed with the defaults, run again with exactly the setting their note names "
            "(`--set`), long enough to leave STARTUP behind (goodput measured after it):", "",
            md_table(["rate", "delay ms", "loss", "default", "setting", "with it", "goals"], out), ""]


HEADER = ["slice", "rate", "delay ms", "loss", "queue BDP", "flows", "goals", "goodput / (1-p)·rate", "Jain",
          "spurious", "verified", "virtual time", "note"]


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def matrix(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str], list[list[float | None]]]:
    """The loss slice as a matrix: path labels, loss labels, goodput fractions (None: error)."""
    loss_rows = [r for r in rows if r["kind"] == "loss"]
    paths: list[tuple[float, float]] = []
    losses: list[tuple[float, float | None]] = []
    for r in loss_rows:
        p, lo = (r["rate_mbps"], r["delay"]), (r["loss"], r.get("burst"))
        if p not in paths:
            paths.append(p)
        if lo not in losses:
            losses.append(lo)
    losses.sort(key=lambda x: (x[1] is not None, x[0]))
    grid: list[list[float | None]] = [[None] * len(losses) for _ in paths]
    for r in loss_rows:
        i, j = paths.index((r["rate_mbps"], r["delay"])), losses.index((r["loss"], r.get("burst")))
        grid[i][j] = None if r.get("error") else r["goodput_frac"]
    plabels = [(f"{a / 1000:g} Gb/s" if a >= 1000 else f"{a:g} Mb/s") + f", {d * 1e3:g} ms" for a, d in paths]
    llabels = [f"{p:.0%} burst" if b else (f"{p * 100:g}%" if p else "lossless") for p, b in losses]
    return plabels, llabels, grid


def _kernel_cell(name: str, v: float | None, runs: Sequence[float | None]) -> str:
    """A cell of the veth table: the median, and the spread of its runs where there were
    several; the ratio row (btlcore over kernel bbr, trial by trial) as a factor."""
    if v is None:
        return "-"
    if name.startswith("btlcore /"):
        return f"{v:.2f}x"
    got = [r for r in runs if r is not None]
    return f"{v:.1f} Mb/s" + (f" ({min(got):.0f}-{max(got):.0f})" if len(got) > 1 else "")


def kernel_lines(kern: Mapping[str, Any]) -> list[str]:
    """The veth comparison: one table per path, a column per loss rate (Mb/s of goodput)."""
    if kern.get("skipped"):
        return [f"Kernel comparison skipped: {kern['skipped']}."]
    out = [kern["setup"], ""]
    for p in kern["paths"]:
        rate = f"{p['rate_mbps'] / 1000:g} Gb/s" if p["rate_mbps"] >= 1000 else f"{p['rate_mbps']:g} Mb/s"
        head = [f"{rate} ({p['shaper']})"] + [f"{x * 100:g}% loss" for x in p["losses"]]
        runs = p.get("runs", {})
        body = [[name] + [_kernel_cell(name, v, runs[name][i] if name in runs else []) for i, v in enumerate(vals)]
                for name, vals in p["mbps"].items()]
        out += [md_table(head, body), ""]
    return out


def render_text(rep: Mapping[str, Any]) -> str:
    meta = rep["meta"]
    out = [f"Regime sweep ({meta['grid']} grid, {meta['cells']} cells, cc={meta['cc']}"
           + (f", --set {meta['sets']}" if meta["sets"] else "") + f"): {meta['elapsed_s']:.0f} s",
           "", "Goodput / (1-p)·rate, one flow, queue 1 BDP:", ""]
    plabels, llabels, grid = matrix(rep["rows"])
    out.append(md_table(["path"] + llabels, [[p] + [_frac(x) for x in row] for p, row in zip(plabels, grid,
                                                                                             strict=True)]))
    out += ["", md_table(HEADER, [_row_cells(r) for r in rep["rows"]]), ""]
    out += rerun_lines(rep["rows"])
    if meta.get("compete_skipped"):
        out.append(f"Compete slice skipped: {meta['compete_skipped']}.")
    out += kernel_lines(rep.get("kernel", {}))
    bad = [r for r in rep["rows"] if not r.get("verified")]
    out.append(f"\nCorrectness: {len(rep['rows']) - len(bad)} of {len(rep['rows'])} cells verified every byte "
               "with no live peer declared dead.")
    out.append(goals_line(rep["rows"]))
    return "\n".join(out)


def goals_line(rows: Sequence[Mapping[str, Any]]) -> str:
    met = sum(1 for r in rows if not goal_misses(r))
    again = [r["rerun"] for r in rows if r.get("rerun") and "misses" in r["rerun"]]
    fixed = sum(1 for a in again if not a["misses"] and a.get("verified"))
    text = (f"Goals of #12 (goodput by loss rate, spurious <= 1%, Jain >= 0.95; the 'goals' column): "
            f"met in {met} of {len(rows)} cells.")
    if again:
        text += f" Run again with the setting their note names: {fixed} of {len(again)} more met."
    return text


def heatmap(rep: Mapping[str, Any], stem: str) -> list[str]:
    """Draw the loss slice (goodput fraction by path and loss) and the queue and flows
    slices beside it; write ``stem.png`` and ``stem.svg``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plabels, llabels, grid = matrix(rep["rows"])
    side = [r for r in rep["rows"] if r["kind"] in ("queue", "flows", "compete")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.5 * max(len(plabels), len(side)) + 2.2), dpi=100,
                             gridspec_kw={"width_ratios": [len(llabels) + 2, 4]})
    ax = axes[0]
    vals = [[float("nan") if x is None else x for x in row] for row in grid]
    im = ax.imshow(vals, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(llabels)), llabels)
    ax.set_yticks(range(len(plabels)), plabels)
    for i, row in enumerate(grid):
        for j, x in enumerate(row):
            ax.text(j, i, "err" if x is None else f"{x:.2f}", ha="center", va="center", fontsize=8)
    ax.set_title("goodput / (1-p)·rate, 1 flow, queue 1 BDP")
    fig.colorbar(im, ax=ax, fraction=0.04)
    ax2 = axes[1]
    labels = [f"{r['kind']}: {_row_cells(r)[1]}, {r['delay'] * 1e3:g} ms, loss {_row_cells(r)[3]}, "
              f"q {r['queue_bdp']:g}, {r['flows']} fl" + (f" {r['aqm']}" if r.get("aqm") != "droptail" else "")
              for r in side]
    good = [[r.get("goodput_frac") or 0.0, r.get("jain", 0.0) if r["flows"] > 1 else float("nan")] for r in side]
    if side:
        ax2.imshow(good, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
        for i, (gp, jn) in enumerate(good):
            ax2.text(0, i, f"{gp:.2f}", ha="center", va="center", fontsize=8)
            ax2.text(1, i, "-" if jn != jn else f"{jn:.3f}", ha="center", va="center", fontsize=8)
        ax2.set_yticks(range(len(labels)), labels, fontsize=8)
        ax2.set_xticks([0, 1], ["goodput", "Jain"])
    ax2.set_title("queues, flows, competition")
    meta = rep["meta"]
    fig.suptitle(f"btlcore across regimes on the simulator (cc={meta['cc']}, {meta['grid']} grid)")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    paths = [f"{stem}.png", f"{stem}.svg"]
    for p in paths:
        fig.savefig(p)
    plt.close(fig)
    return paths


def section(rep: Mapping[str, Any]) -> str:
    """The markdown section between the markers."""
    meta = rep["meta"]
    plabels, llabels, grid = matrix(rep["rows"])
    lines = [START, "## Across network regimes", "",
             f"Made with `{meta.get('command', 'btl bench --regimes --docs')}` on {meta['time']} "
             f"({meta['grid']} grid, {meta['cells']} cells, cc={meta['cc']}; {meta['elapsed_s']:.0f} s). "
             "Each cell is a short run in virtual time on the simulator through one shared bottleneck "
             "(a drop-tail queue unless noted); goodput is measured after the first third of the run "
             "(slow start left out), as a fraction of (1 − p) × rate; *spurious* is the share of data "
             "segments that reached the receiver twice; *verified* is the bytes checked at the receiver "
             "(index and CRC32C of every message) once the flows drained.", "",
             md_table(["path"] + llabels, [[p] + [_frac(x) for x in row] for p, row in zip(plabels, grid,
                                                                                          strict=True)]),
             "", f"![goodput by regime]({IMAGE}.png) ([SVG]({IMAGE}.svg))", "",
             md_table(HEADER, [_row_cells(r) for r in rep["rows"]]), "", goals_line(rep["rows"]), ""]
    lines += rerun_lines(rep["rows"])
    if meta.get("compete_skipped"):
        lines += [f"Compete slice skipped: {meta['compete_skipped']}.", ""]
    lines += ["### Kernel TCP and btlcore over UDP on a veth pair", ""] + kernel_lines(rep.get("kernel", {}))
    lines += ["", END]
    return "\n".join(lines)


def splice(text: str, new_section: str) -> str:
    """``text`` with its regimes section replaced by ``new_section`` (appended if none)."""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1]
        return head + new_section + tail
    return text.rstrip("\n") + "\n\n" + new_section + "\n"


def kept_section(path: str) -> str | None:
    """The regimes section of the file at ``path``, if it has one (``btl bench --docs`` keeps it)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    if START in text and END in text:
        return START + text.split(START, 1)[1].split(END, 1)[0] + END
    return None


def write_docs(rep: Mapping[str, Any], root: str = ".") -> list[str]:
    """Replace the regimes section of ROOT/docs/benchmarks.md and draw the heatmap beside it."""
    d = os.path.join(root, "docs")
    os.makedirs(d, exist_ok=True)
    md = os.path.join(d, "benchmarks.md")
    try:
        with open(md) as f:
            text = f.read()
    except OSError:
        text = "# Benchmarks\n"
    with open(md, "w") as f:
        f.write(splice(text, section(rep)))
    return [md, *heatmap(rep, os.path.join(d, IMAGE))]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m btlcore.bench.regimes_report REPORT.json [ROOT]``: redraw the section and the
    heatmap from a saved ``btl bench --regimes --output`` report."""
    import json
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m btlcore.bench.regimes_report REPORT.json [ROOT]", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        rep = json.load(f)
    print(render_text(rep))
    for p in write_docs(rep, args[1] if len(args) > 1 else "."):
        print(p, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
