"""Ratios, targets, and the two outputs: a text table and JSON.

The targets are the goals of issues 6 and 15, *printed* by the benchmark with a pass/fail marker;
they are never timed tests.  A target whose figures are missing shows ``n/a`` and why.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

SECTION_TITLES = {
    "raw_udp": "Reference: raw UDP (no reliability)",
    "tcp": "Reference: kernel TCP",
    "quic": "Reference: aioquic",
    "btl_udp": "btlcore over UDP",
    "btl_sim": "btlcore on the simulator",
    "btl_scale": "btlcore scale",
}

PASS, FAIL, NA = "PASS", "FAIL", "n/a"
MARK = {PASS: "[x]", FAIL: "[ ]", NA: "[-]"}


# -- formatting -----------------------------------------------------------------------------

def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    v = float(value)
    if unit == "B/s":
        for scale, name in ((1e9, "GB/s"), (1e6, "MB/s"), (1e3, "kB/s")):
            if abs(v) >= scale:
                return f"{v / scale:.3g} {name}"
        return f"{v:.3g} B/s"
    if unit == "s":
        if abs(v) < 1e-3:
            return f"{v * 1e6:.3g} µs"
        if abs(v) < 1:
            return f"{v * 1e3:.3g} ms"
        return f"{v:.3g} s"
    if unit == "B":
        return f"{v:,.0f} B"
    if unit == "1/s":
        if abs(v) >= 1e6:
            return f"{v / 1e6:.3g} M/s"
        if abs(v) >= 1e3:
            return f"{v / 1e3:.3g} k/s"
        return f"{v:.3g} /s"
    return f"{v:.3g}"


def _note(r: Mapping[str, Any]) -> str:
    ex = r.get("extra", {})
    parts = []
    if "p99" in ex and "mean" in ex:
        parts.append(f"mean {fmt(ex['mean'], 's')}, p99 {fmt(ex['p99'], 's')}")
    if "loss_median" in ex:
        parts.append(f"loss {ex['loss_median']:.2%}")
    if "send_cpu_per_datagram" in ex:
        parts.append(f"CPU/datagram send {ex['send_cpu_per_datagram'] * 1e6:.2g} µs, "
                     f"recv {ex['recv_cpu_per_datagram'] * 1e6:.2g} µs")
    if ex.get("cpu_per_datagram"):
        parts.append(f"client CPU {ex['cpu_per_datagram'] * 1e6:.0f} µs/datagram")
    if "tx_per_segment" in ex:
        parts.append(f"tx/seg {ex['tx_per_segment']:.3f}, ACKs/seg {ex['acks_per_segment']:.3f}")
    if "ideal" in ex and r.get("unit") == "x":
        parts.append(f"ideal {ex['ideal']:.3g}")
    if "needless" in ex:
        parts.append(f"{ex['needless']:.1%} of retransmissions arrived as duplicates")
    if ex.get("lost_estimated"):
        parts.append("losses estimated")
    if "crc" in ex and ex["crc"] is not None:
        parts.append("CRC32C on" if ex["crc"] else "no CRC (the device promises integrity)")
    return "; ".join(parts)


def short_error(error: str, limit: int = 200) -> str:
    """The first line of an error, without the harness's wrapping (the JSON keeps it whole)."""
    line = error.splitlines()[0] if error else ""
    for noise in ("BenchError: ", "client failed: ", "server failed: "):
        line = line.replace(noise, "")
    return line[:limit]


def rows(results: Iterable[Mapping[str, Any]]) -> list[tuple[str, list[list[str]]]]:
    """Per section: [measurement, median, min…max, IQR, n, note] rows."""
    out: dict[str, list[list[str]]] = {}
    for r in results:
        sec = out.setdefault(r["section"], [])
        if r.get("skipped"):
            sec.append([r["name"], "skipped", "", "", "", r["skipped"]])
            continue
        if r.get("error"):
            sec.append([r["name"], "ERROR", "", "", "", short_error(r["error"])])
            continue
        s, u = r["stats"], r["unit"]
        sec.append([r["name"], fmt(s["median"], u), f"{fmt(s['min'], u)} … {fmt(s['max'], u)}",
                    f"{fmt(s['q1'], u)} … {fmt(s['q3'], u)}", str(int(s["n"])), _note(r)])
    return [(SECTION_TITLES.get(k, k), v) for k, v in out.items()]


def text_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(b) for b in body)])


def md_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in b) + " |" for b in body]
    return "\n".join(lines)


# -- ratios ---------------------------------------------------------------------------------

def _by_id(results: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {r["id"]: r for r in results}


def _median(res: Mapping[str, Mapping[str, Any]], rid: str) -> float | None:
    r = res.get(rid)
    if not r or r.get("skipped") or r.get("error") or not r.get("stats"):
        return None
    median: float = r["stats"]["median"]  # a report read back from JSON: the value is a number
    return median


def _why(res: Mapping[str, Mapping[str, Any]], *ids: str) -> str:
    for rid in ids:
        r = res.get(rid)
        if r is None:
            return f"{rid} not measured in this run"
        if r.get("skipped"):
            return str(r["skipped"])
        if r.get("error"):
            return f"{rid} failed"
    return ""


def ratio_pairs(sizes: Sequence[int] = (1472, 8972, 65000),
                msgs: Sequence[int] = (64, 8192)) -> list[tuple[str, str, str]]:
    """(btlcore id, reference id, label) pairs printed side by side."""
    pairs = []
    for s in sizes:
        pairs.append((f"btl.udp_bulk.{s}", f"ref.udp_blast.{s}", f"bulk {s} B vs raw UDP blast"))
    for s in sizes:
        pairs.append((f"btl.udp_bulk.{s}", "ref.tcp_stream", f"bulk {s} B vs kernel TCP stream"))
    for s in (1472, 8972):
        pairs.append((f"btl.udp_bulk.{s}", f"ref.quic_bulk.{s}", f"bulk {s} B vs aioquic bulk"))
    for m in msgs:
        for mode in ("blocking", "busy"):
            pairs.append((f"btl.udp_rtt.{m}.{mode}", f"ref.udp_rtt.{m}.{mode}", f"round trip {m} B {mode} vs UDP"))
            pairs.append((f"btl.udp_rtt.{m}.{mode}", f"ref.tcp_rtt.{m}.{mode}", f"round trip {m} B {mode} vs TCP"))
    pairs.append(("btl.udp_rtt.64.blocking", "ref.quic_echo.64", "round trip 64 B blocking vs aioquic echo"))
    return pairs


def ratios(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    res = _by_id(results)
    out = []
    for b, r, label in ratio_pairs():
        if b not in res and r not in res:
            continue
        vb, vr = _median(res, b), _median(res, r)
        unit = (res.get(b) or res.get(r) or {}).get("unit", "")
        ratio = vb / vr if vb is not None and vr else None
        spread = _pair_ratios(res, b, r) if ratio is not None else []
        if spread:  # trials run side by side (btl bench's rounds): the median of the per-pair ratios
            ratio = statistics.median(spread)
        out.append({"label": label, "btlcore": b, "reference": r, "unit": unit, "btlcore_value": vb,
                    "reference_value": vr, "ratio": ratio, "pairs": len(spread),
                    "ratio_min": min(spread) if spread else None, "ratio_max": max(spread) if spread else None,
                    "why": "" if ratio is not None else _why(res, b, r)})
    return out


def _pair_ratios(res: Mapping[str, Mapping[str, Any]], b: str, r: str) -> list[float]:
    """btlcore's trial i over the reference's trial i, where both have the same number (> 1) of
    trials: the rounds of an interleaved run measure them one after the other."""
    vb, vr = res[b].get("values") or [], res[r].get("values") or []
    if len(vb) != len(vr) or len(vb) < 2 or not all(vr):
        return []
    return sorted(x / y for x, y in zip(vb, vr, strict=True))


# -- targets --------------------------------------------------------------------------------

def _target(name: str, goal: str, value: float | None, ok: Callable[[float], bool], why: str,
            shown: str | None = None, context: str = "") -> dict[str, Any]:
    """``context``: shown beside a measured figure (e.g. what the best reference reaches)."""
    status = NA if value is None else (PASS if ok(value) else FAIL)
    return {"target": name, "goal": goal, "value": value, "shown": shown if value is not None else None,
            "status": status, "why": why if value is None else context}


def _ratio_target(res: Mapping[str, Mapping[str, Any]], name: str, goal: str, b: str, r: str,
                  ok: Callable[[float], bool], ceiling: str | None = None) -> dict[str, Any]:
    """``ceiling``: a reference id whose ratio to ``r`` is printed beside the figure -- the
    same ratio for a transport with no protocol cost at all (raw UDP)."""
    vb, vr = _median(res, b), _median(res, r)
    v = vb / vr if vb is not None and vr else None
    context = ""
    vc = _median(res, ceiling) if ceiling else None
    if vc is not None and vr:
        context = f"raw UDP itself: {vc / vr:.3g}x"
    return _target(name, goal, v, ok, _why(res, b, r), f"{v:.3g}x" if v is not None else None, context)


def targets(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    res = _by_id(results)
    out: list[dict[str, Any]] = []
    bulk = {rid: v for rid in res if rid.startswith("btl.udp_bulk.") and (v := _median(res, rid)) is not None}
    best_id = max(bulk, key=bulk.__getitem__, default="btl.udp_bulk.65000")
    out.append(_ratio_target(res, "UDP bulk goodput vs kernel TCP stream", ">= 1.0x (best datagram size)",
                             best_id, "ref.tcp_stream", lambda v: v >= 1.0,
                             ceiling="ref.udp_blast." + best_id.rsplit(".", 1)[1]))
    out.append(_ratio_target(res, "UDP bulk goodput vs raw UDP at 8972 B", ">= 0.5x",
                             "btl.udp_bulk.8972", "ref.udp_blast.8972", lambda v: v >= 0.5))
    for m in (64, 8192):
        for mode in ("blocking", "busy"):
            out.append(_ratio_target(res, f"round trip {m} B {mode} vs raw UDP", "<= 1.3x",
                                     f"btl.udp_rtt.{m}.{mode}", f"ref.udp_rtt.{m}.{mode}", lambda v: v <= 1.3))
    # issue 15's goals for the compiled build, beside issue 6's stricter round-trip one
    out.append(_ratio_target(res, "round trip 64 B busy vs raw UDP (issue 15)", "<= 2x",
                             "btl.udp_rtt.64.busy", "ref.udp_rtt.64.busy", lambda v: v <= 2.0))
    out.append(_ratio_target(res, "UDP bulk goodput at 65000 B vs kernel TCP stream (issue 15)", ">= 1.0x",
                             "btl.udp_bulk.65000", "ref.tcp_stream", lambda v: v >= 1.0))
    for s in (1472, 8972):
        out.append(_ratio_target(res, f"UDP bulk goodput vs aioquic at {s} B", ">= 30x",
                                 f"btl.udp_bulk.{s}", f"ref.quic_bulk.{s}", lambda v: v >= 30,
                                 ceiling=f"ref.udp_blast.{s}"))
    v = _median(res, "btl.sim_rate")
    out.append(_target("simulator segments per wall-second", ">= 200k/s", v, lambda x: x >= 200e3,
                       _why(res, "btl.sim_rate"), f"{v / 1e3:.3g}k/s" if v is not None else None))
    def loss_key(rid: str) -> tuple[bool, int]:
        model = rid.split(".")[2]
        return model.startswith("burst"), int("".join(ch for ch in model if ch.isdigit()) or 0)

    loss_ids = sorted((k for k in res if k.startswith("btl.loss.") and k.endswith(".tx_per_loss")), key=loss_key)
    for rid in loss_ids or ["btl.loss.random1.tx_per_loss"]:
        v = _median(res, rid)
        model = rid.split(".")[2]
        out.append(_target(f"transmissions per lost segment ({model})", "<= 1.1", v, lambda x: x <= 1.1,
                           _why(res, rid), f"{v:.3g}" if v is not None else None))
    for rid in sorted(bulk) or ["btl.udp_bulk.8972"]:
        r = res.get(rid, {})
        v = r.get("extra", {}).get("acks_per_segment") if _median(res, rid) is not None else None
        out.append(_target(f"standalone ACKs per data segment, bulk {rid.rsplit('.', 1)[1]} B", "<= 0.25", v,
                           lambda x: x <= 0.25, _why(res, rid), f"{v:.3g}" if v is not None else None))
    v = _median(res, "btl.mem_per_peer")
    out.append(_target("memory per idle peer", "<= 4 KiB", v, lambda x: x <= 4096, _why(res, "btl.mem_per_peer"),
                       f"{v:,.0f} B" if v is not None else None))
    v = _median(res, "btl.keepalive_idle_ratio")
    out.append(_target("keepalive: idle progress, 1000 peers / 1", "<= 1.1x", v, lambda x: x <= 1.1,
                       _why(res, "btl.keepalive_idle_ratio"), f"{v:.3g}x" if v is not None else None))
    for kind, label in (("idle", "idle progress"), ("active", "one active peer's exchange")):
        ids = sorted((k for k in res if k.startswith(f"btl.progress_{kind}.")), key=lambda k: int(k.rsplit(".", 1)[1]))
        lo, hi = (ids[0], ids[-1]) if len(ids) >= 2 else (f"btl.progress_{kind}.1", f"btl.progress_{kind}.1000")
        n_lo, n_hi = lo.rsplit(".", 1)[1], hi.rsplit(".", 1)[1]
        out.append(_ratio_target(res, f"{label}: cost with {n_hi} peers / with {n_lo}",
                                 "<= 2x (grows with active peers, not all)", hi, lo, lambda x: x <= 2.0))
    return out


# -- outputs --------------------------------------------------------------------------------

HEADER = ["measurement", "median", "min … max", "IQR", "n", "note"]


def render_text(report: Mapping[str, Any]) -> str:
    meta = report.get("meta", {})
    out = [f"btl bench ({meta.get('profile', '?')}): {meta.get('time', '')}, Python {meta.get('python', '')}, "
           f"btlcore {meta.get('build', '?')}, "
           f"cores {meta.get('pinned_cores', '')} of {meta.get('cpus', '')}, {meta.get('elapsed', 0):.1f} s"]
    out += [f"WARNING: {w}" for w in meta.get("warnings", [])]
    for title, body in rows(report["results"]):
        out += ["", title, text_table(HEADER, body)]
    rat = [[r["label"], fmt(r["btlcore_value"], r["unit"]), fmt(r["reference_value"], r["unit"]),
            f"{r['ratio']:.3g}x" if r["ratio"] is not None else "-",
            f"{r['ratio_min']:.3g} … {r['ratio_max']:.3g} (n={r['pairs']})" if r.get("pairs") else "",
            r["why"][:70]] for r in report.get("ratios", [])]
    if rat:
        out += ["", "btlcore / reference (ratio: the median of the trials' pairs where they ran side by side)",
                text_table(["comparison", "btlcore", "reference", "ratio", "pairs min … max", ""], rat)]
    tg = [[MARK[t["status"]] + " " + t["status"], t["target"], t["goal"], t["shown"] or "-", t["why"][:70]]
          for t in report.get("targets", [])]
    if tg:
        out += ["", "Targets (goals, not tests)", text_table(["", "target", "goal", "measured", ""], tg)]
    return "\n".join(out)


def render_json(report: Mapping[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False, default=str)
