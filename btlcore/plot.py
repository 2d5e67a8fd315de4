"""``btl plot``'s picture: a time-sequence (Stevens) graph of one flow, with its window and
RTT below when the source has them, as PNG or SVG (matplotlib, the ``plot`` extra).

Top: each data segment as a dot at (time, sequence number) -- blue the first time, red when
retransmitted --, the cumulative ACK as a green step line, each SACK block as an orange
vertical bar (the segments received above the ACK), the simulator's drops as black marks,
one shape per cause, and a trace's loss episodes as grey ticks on the time axis.  Below, from
a trace: cwnd (segments), the smoothed and minimum RTT (ms) and, when the congestion
controller paces, the pacing rate (Mbit/s) over time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .timeseq import Flow, load

FORMATS = ("png", "svg")
_DROP_MARKS = ("x", "v", "s", "D", "^", "P", "*", "<", ">", "h")


def output_format(out: str | os.PathLike[str]) -> str:
    """``png`` or ``svg``, from ``out``'s suffix; ValueError naming both otherwise."""
    fmt = Path(out).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise ValueError(f"cannot tell the image format of {os.fspath(out)!r}: name it *.png or *.svg")
    return fmt


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise ImportError("btl plot needs matplotlib: pip install 'btlcore[plot]'") from None
    matplotlib.use("Agg")  # (files only: no display needed)
    import matplotlib.pyplot as plt

    return plt


def pick(flows: list[Flow], sender: str | None) -> Flow:
    """The busiest flow, or the busiest whose sender contains ``sender``."""
    if sender is None:
        return flows[0]
    for flow in flows:
        if sender in flow.sender:
            return flow
    raise ValueError(f"no flow from {sender!r}; the flows: "
                     + "; ".join(f"{f.sender} -> {f.receiver}" for f in flows))


def plot(source: str | os.PathLike[str], out: str | os.PathLike[str], sender: str | None = None,
         title: str | None = None, span: tuple[float, float] | None = None) -> Flow:
    """Draw ``source`` (a capture or a trace) into ``out`` (``.png`` or ``.svg``), only
    between ``span``'s two times (seconds from the source's start) if given; returns the flow
    drawn."""
    fmt = output_format(out)
    kind, flows = load(source)
    flow = pick(flows, sender)
    if span is not None:
        flow = flow.clip(*span)
    plt = _pyplot()
    paced = any(rate > 0 for _, rate in flow.pacing)
    rows = 1 + bool(flow.cwnd) + bool(flow.srtt) + paced
    fig, axes = plt.subplots(rows, 1, sharex=True, squeeze=False,
                             figsize=(10, 5 + 2.2 * (rows - 1)),
                             gridspec_kw={"height_ratios": [3] + [1] * (rows - 1)})
    axes = [row[0] for row in axes]
    _sequence(axes[0], flow)
    axes[0].set_title(title or f"{Path(source).name} ({kind}): {flow.sender} -> {flow.receiver}")
    row = 1
    if flow.cwnd:
        ax = axes[row]
        ax.step([t * 1e3 for t, _ in flow.cwnd], [c for _, c in flow.cwnd], where="post", color="tab:purple")
        ax.set_ylabel("cwnd (segments)")
        row += 1
    if flow.srtt:
        ax = axes[row]
        ax.plot([t * 1e3 for t, _ in flow.srtt], [r * 1e3 for _, r in flow.srtt], color="tab:brown", label="srtt")
        if flow.min_rtt:
            ax.plot([t * 1e3 for t, _ in flow.min_rtt], [r * 1e3 for _, r in flow.min_rtt], color="tab:gray",
                    linestyle="--", label="min rtt")
        ax.set_ylabel("RTT (ms)")
        ax.legend(loc="upper left", fontsize="small")
        row += 1
    if paced:
        ax = axes[row]
        ax.step([t * 1e3 for t, _ in flow.pacing], [r * 8e-6 for _, r in flow.pacing], where="post",
                color="tab:cyan")
        ax.set_ylabel("pacing (Mbit/s)")
    axes[-1].set_xlabel("time (ms)")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.fspath(out), format=fmt, dpi=110)
    plt.close(fig)
    return flow


def _sequence(ax: Any, flow: Flow) -> None:
    """The time-sequence graph proper."""
    ms = 1e3
    if flow.sent:
        ax.plot([t * ms for t, _ in flow.sent], [s for _, s in flow.sent], ".", color="tab:blue",
                markersize=3, label="data")
    if flow.resent:
        ax.plot([t * ms for t, _ in flow.resent], [s for _, s in flow.resent], "o", color="tab:red",
                markersize=4, fillstyle="none", label="retransmission")
    if flow.acks:
        ax.step([t * ms for t, _ in flow.acks], [a for _, a in flow.acks], where="post", color="tab:green",
                linewidth=1, label="ACK")
    if flow.sacks:
        ax.vlines([t * ms for t, _, _ in flow.sacks], [lo - 0.4 for _, lo, _ in flow.sacks],
                  [hi + 0.4 for _, _, hi in flow.sacks], color="tab:orange", linewidth=2, alpha=0.6,
                  label="SACK block")
    for i, (cause, points) in enumerate(sorted(flow.drops.items())):
        ax.plot([t * ms for t, _ in points], [s for _, s in points], _DROP_MARKS[i % len(_DROP_MARKS)],
                color="black", markersize=6, label=f"dropped: {cause}")
    if flow.losses:
        ax.plot([t * ms for t in flow.losses], [0] * len(flow.losses), "|", color="tab:gray",
                markersize=12, label="loss episode")
    ax.set_ylabel("segment (seq - first + 1)")
    ax.legend(loc="upper left", fontsize="small")
