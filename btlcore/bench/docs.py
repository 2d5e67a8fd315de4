"""Write ``docs/benchmarks.md`` (the latest table) and ``docs/benchmarks-loss.png`` (goodput
against loss rate) from a report.

    btl bench --docs                         # run, then write both files under ./docs
    python -m btlcore.bench.docs report.json   # rewrite both from a saved ``--output`` report
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from . import regimes_report
from . import report as R

MD = "benchmarks.md"
PNG = "benchmarks-loss.png"


def loss_points(results: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[float, ...]]]:
    """{"random": [(loss, median, min, max, ideal)], "burst": [...]} of goodput / link rate."""
    out: dict[str, list[tuple[float, ...]]] = {"random": [], "burst": []}
    for r in results:
        if not r["id"].endswith(".goodput_frac") or r.get("skipped") or r.get("error") or not r.get("stats"):
            continue
        ex, s = r.get("extra", {}), r["stats"]
        kind = "burst" if ex.get("burst") else "random"
        loss = float(ex.get("loss", 0.0))
        out[kind].append((loss, s["median"], s["min"], s["max"], float(ex.get("ideal", 1.0 - loss))))
    for v in out.values():
        v.sort()
    return out


def plot(rep: Mapping[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = loss_points(rep["results"])
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    xs = [0.0, 0.12]
    ax.plot([x * 100 for x in xs], [1 - x for x in xs], ls="--", color="grey", lw=1,
            label="limit for a long transfer: 1 − loss")
    if pts["random"]:
        lx = [p[0] * 100 for p in pts["random"]]
        med = [p[1] for p in pts["random"]]
        err = [[p[1] - p[2] for p in pts["random"]], [p[3] - p[1] for p in pts["random"]]]
        ax.errorbar(lx, med, yerr=err, marker="o", capsize=3, label="btlcore, random loss")
        ax.plot(lx, [p[4] for p in pts["random"]], ls=":", marker=".", color="grey",
                label="ideal for this transfer (1 RTT + bytes / (1 − loss))")
    if pts["burst"]:
        lx = [p[0] * 100 for p in pts["burst"]]
        med = [p[1] for p in pts["burst"]]
        err = [[p[1] - p[2] for p in pts["burst"]], [p[3] - p[1] for p in pts["burst"]]]
        ax.errorbar(lx, med, yerr=err, marker="s", ls="none", capsize=3, label="btlcore, burst loss (Gilbert-Elliott)")
    if pts["random"] and not pts["burst"]:
        why = next((r.get("skipped") or R.short_error(r.get("error") or "") for r in rep["results"]
                    if r["id"].startswith("btl.loss.burst") and r["id"].endswith(".goodput_frac")), None)
        if why:
            ax.text(0.98, 0.97, "burst loss: " + why.split(":")[0][:60], transform=ax.transAxes,
                    ha="right", va="top", fontsize=8, color="firebrick")
    if not pts["random"] and not pts["burst"]:
        why = next((r.get("skipped") or r.get("error") for r in rep["results"]
                    if r["id"].endswith(".goodput_frac")), None) or "btlcore simulator not measured"
        ax.text(0.5, 0.45, why.split(" (")[0], transform=ax.transAxes, ha="center", va="center", color="firebrick")
    ax.set_xlabel("loss rate (%)")
    ax.set_ylabel("goodput / link rate")
    ax.set_xlim(0, 12)
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    ax.set_title("btlcore on the simulator: 1 Gb/s link, 1 ms one-way delay")
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def markdown(rep: Mapping[str, Any]) -> str:
    meta = rep.get("meta", {})
    lines = [
        "# Benchmarks",
        "",
        "btlcore side by side with what users would pick instead, measured in one run on one machine.",
        "Regenerate with `btl bench --docs` (or `python -m btlcore.bench --docs`);",
        "`btl bench --quick` prints the same tables in about a minute. Figures on shared cores drift",
        "by up to 30% between sessions: compare only figures from the same run.",
        "",
        f"*Profile `{meta.get('profile', '?')}`, {meta.get('trials', '?')} trials after "
        f"{meta.get('warmup', '?')} warm-up, measured {meta.get('time', '?')} "
        f"on {meta.get('cpu_model') or 'unknown CPU'} ({len(meta.get('cpus', []))} CPUs), "
        f"Python {meta.get('python', '?')} (btlcore {meta.get('build', '?')}), "
        f"aioquic {meta.get('aioquic') or 'not installed'}; "
        f"the two ends pinned to cores {meta.get('pinned_cores', '?')}; the run took {meta.get('elapsed', 0):.0f} s.*",
        "",
        "Each figure is the median of its trials; the spread is min … max and the inter-quartile range.",
        "Where the time goes, and why the goals that are missed stay missed: [performance.md](performance.md).",
        "",
    ]
    for w in meta.get("warnings", []):
        lines += [f"**Warning:** {w}.", ""]
    for title, body in R.rows(rep["results"]):
        lines += [f"## {title}", "", R.md_table(R.HEADER, body), ""]
    rat = rep.get("ratios", [])
    if rat:
        lines += ["## btlcore / reference", "",
                  "The ratio is the median of the per-pair ratios where the trials ran side by side.", "",
                  R.md_table(["comparison", "btlcore", "reference", "ratio", "pairs min … max", "note"],
                             [[r["label"], R.fmt(r["btlcore_value"], r["unit"]), R.fmt(r["reference_value"], r["unit"]),
                               f"{r['ratio']:.3g}x" if r["ratio"] is not None else "-",
                               (f"{r['ratio_min']:.3g} … {r['ratio_max']:.3g} (n={r['pairs']})"
                                if r.get("pairs") else ""),
                               r["why"]] for r in rat]), ""]
    tg = rep.get("targets", [])
    if tg:
        lines += ["## Targets", "", "Goals of issues 6 and 15, printed by the benchmark (never timed tests).", "",
                  R.md_table(["", "target", "goal", "measured", "note"],
                             [[t["status"], t["target"], t["goal"], t["shown"] or "-", t["why"]] for t in tg]), ""]
    lines += [
        "## Goodput against loss", "",
        f"![goodput as a fraction of the link rate against the loss rate]({PNG})", "",
        "## How it is measured", "",
        "- **Side by side**: the references and btlcore over UDP run in rounds, one trial of each figure per",
        "  round (reference, btlcore, reference, btlcore, ...; the warm-up in the first), so a ratio is taken",
        "  per pair of trials run next to each other; the table gives the median of those ratios and their",
        "  spread. The simulator and scale figures run once, every trial in turn (their trials differ by seed).",
        "- **Raw UDP blast**: one process sends datagrams of one size for a fixed time, the other drains them",
        "  with `recv_into` into a 64 MiB receive buffer; goodput is what arrived, over first to last arrival; the",
        "  loss is reported beside it.",
        "- **Ping-pongs**: one message to an echo server and back; *blocking* sleeps in `recv`, *busy* spins on",
        "  non-blocking sockets at both ends. On this VM a cross-core wake-up is expensive, so blocking round",
        "  trips are several times the busy ones.",
        "- **Kernel TCP stream**: 1 MiB `sendall`s on a fresh connection per trial, read into a 1 MiB buffer.",
        "- **aioquic**: its asyncio API with a self-signed certificate made at run time; bulk is one stream per",
        "  trial written whole, timed to the server's byte count; the echo is 64 B on one stream.",
        "- **btlcore UDP**: 8 messages of 1 MiB kept in flight, goodput counted at the completion callbacks",
        "  (last byte ACKed); round trips through an echo handler, `progress(timeout>0)` or `progress(0)`.",
        "- **Simulator**: data segments per wall-second on a lossless fabric, with the end-to-end CRC32C (the",
        "  default fabric) and without it (a fabric made with `integrity=True`, which can never corrupt a frame;",
        "  the note says which); under loss, one transfer per seed on a 1 Gb/s link with 1 ms one-way delay,",
        "  goodput and completion time in virtual time.",
        "- **Scale**: `tracemalloc` growth per connection divided by its two ends; `progress(0)` with nothing to",
        "  do, and one message exchange, against the number of connected idle peers.",
        "",
    ]
    return "\n".join(lines)


BUILDS_START = "<!-- builds: start -->"
BUILDS_END = "<!-- builds: end -->"


def builds_section(path: str) -> str | None:
    """The compiled-vs-pure section of the file at ``path``, if it has one."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    if BUILDS_START in text and BUILDS_END in text:
        return BUILDS_START + text.split(BUILDS_START, 1)[1].split(BUILDS_END, 1)[0] + BUILDS_END
    return None


def write(rep: Mapping[str, Any], root: str = ".") -> tuple[str, str]:
    """Write docs/benchmarks.md and docs/benchmarks-loss.png under ``root``; return their paths.
    Ratios and targets are computed afresh from the results (a saved report may be older)."""
    rep = {**rep, "ratios": R.ratios(rep["results"]), "targets": R.targets(rep["results"])}
    d = os.path.join(root, "docs")
    os.makedirs(d, exist_ok=True)
    md, png = os.path.join(d, MD), os.path.join(d, PNG)
    plot(rep, png)
    # kept as they are: the compiled-vs-pure section (btl bench --builds, written by hand from
    # its output), the regime sweep's (its own command writes it) and what follows it (the
    # veth runs, the long paths, fairness over seeds: written by hand, nothing regenerates them)
    kept = [k for k in (builds_section(md), regimes_report.kept_section(md)) if k]
    tail = hand_written_tail(md)
    with open(md, "w") as f:
        f.write(markdown(rep) + "".join("\n" + k + "\n" for k in kept) + tail)
    return md, png


def hand_written_tail(path: str) -> str:
    """Whatever follows the regimes section's end marker in the file at ``path`` ("" if none)."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    rest = text.split(regimes_report.END, 1)[1].strip("\n") if regimes_report.END in text else ""
    return "\n" + rest + "\n" if rest.strip() else ""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m btlcore.bench.docs REPORT.json [ROOT]", file=sys.stderr)
        return 2
    with open(args[0]) as f:
        rep = json.load(f)
    for p in write(rep, args[1] if len(args) > 1 else "."):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
