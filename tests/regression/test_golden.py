"""The golden runs: each scenario, re-run today, gives the capture and counters stored in
``golden/`` (byte for byte; per (src, dst) frame sequence where many peers share instants).

A failure names the scenario and the first frame, counter or application event that
differs.  If the protocol changed on purpose, regenerate with
``python tests/regression/record.py`` and justify it in the commit message (README.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from pcapdiff import differences  # type: ignore[import-not-found]
from record import GOLDEN_DIR, capture, load  # type: ignore[import-not-found]
from scenarios import SCENARIOS  # type: ignore[import-not-found]

REGENERATE = "if the change is intended: python tests/regression/record.py (see tests/regression/README.md)"


def _counter_differences(scenario: str, stored: dict[str, Any], now: dict[str, Any]) -> list[str]:
    problems = []
    for section in ("stats", "links"):
        old, new = stored[section], now[section]
        for who in sorted(set(old) | set(new)):
            if who not in old or who not in new:
                problems.append(f"{scenario}: {section} of {who!r} only {'stored' if who in old else 'now'}")
                continue
            for name in sorted(set(old[who]) | set(new[who])):
                if old[who].get(name) != new[who].get(name):
                    problems.append(f"{scenario}: {section}[{who}].{name}: stored "
                                    f"{old[who].get(name)!r}, now {new[who].get(name)!r}")
    return problems


def _app_differences(scenario: str, stored: dict[str, Any], now: dict[str, Any]) -> list[str]:
    problems = []
    old, new = stored["app"], now["app"]
    for node in sorted(set(old) | set(new)):
        peers_old, peers_new = old.get(node, {}), new.get(node, {})
        for peer in sorted(set(peers_old) | set(peers_new)):
            logs_old, logs_new = peers_old.get(peer, {}), peers_new.get(peer, {})
            for kind in sorted(set(logs_old) | set(logs_new)):
                a, b = logs_old.get(kind, []), logs_new.get(kind, [])
                if a == b:
                    continue
                i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
                problems.append(
                    f"{scenario}: {node} <-> {peer} {kind}[{i}]: stored "
                    f"{a[i] if i < len(a) else '(none)'}, now {b[i] if i < len(b) else '(none)'} "
                    f"({len(a)} stored, {len(b)} now)")
    for key in sorted(set(stored["notes"]) | set(now["notes"])):
        if stored["notes"].get(key) != now["notes"].get(key):
            problems.append(f"{scenario}: note {key!r}: stored {stored['notes'].get(key)!r}, "
                            f"now {now['notes'].get(key)!r}")
    if stored["end_ns"] != now["end_ns"]:
        problems.append(f"{scenario}: run ended at {now['end_ns']} ns, stored {stored['end_ns']} ns")
    return problems


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_matches_its_golden_record(name: str) -> None:
    if not (GOLDEN_DIR / f"{name}.json").exists():
        pytest.fail(f"{name}: no stored record in {GOLDEN_DIR}; {REGENERATE}")
    stored_pcap, stored = load(name)
    pcap, record = capture(name)
    problems = differences(name, stored_pcap, pcap, SCENARIOS[name].per_peer)
    problems += _counter_differences(name, stored, record)
    problems += _app_differences(name, stored, record)
    if problems:
        shown = problems[:12] + ([f"... and {len(problems) - 12} more"] if len(problems) > 12 else [])
        pytest.fail("\n".join([f"scenario {name} changed ({SCENARIOS[name].doc.splitlines()[0]})",
                               *shown, REGENERATE]), pytrace=False)


def test_every_stored_record_has_a_scenario() -> None:
    """A scenario renamed or removed must take its stored files with it."""
    stored = {p.name.split(".")[0] for p in GOLDEN_DIR.iterdir() if p.suffix in (".json", ".gz")}
    assert stored == set(SCENARIOS), (
        f"stored without a scenario: {sorted(stored - set(SCENARIOS))}; "
        f"scenarios not stored: {sorted(set(SCENARIOS) - stored)}; {REGENERATE}")


def test_the_comparison_names_the_frame_that_differs() -> None:
    """The pcap comparison reports scenario, frame index and decoded fields: one frame's
    byte changed in a stored capture must show up as that frame, with its header."""
    name = next(n for n, s in SCENARIOS.items() if not s.per_peer)
    raw, _ = load(name)
    from pcapdiff import read_frames  # type: ignore[import-not-found]

    frames = read_frames(raw)
    target = frames[len(frames) // 2]
    at = raw.index(target.block) + 28 + 42 + 24  # the ack field of its btlcore header
    broken = raw[:at] + bytes([raw[at] ^ 0x01]) + raw[at + 1:]
    (problem,) = differences(name, raw, broken, per_peer=False)
    assert f"frame {target.index} differs (data; first differing datagram byte: 24)" in problem
    assert name in problem and f"stored: #{target.index} " in problem and "ack=" in problem
    (per_peer,) = differences(name, raw, broken, per_peer=True)
    assert f"{target.src}->{target.dst}: frame of this direction" in per_peer
    assert f"now:    #{target.index} " in per_peer
