"""How a run's result reaches the user: one JSON object, or the human summary; and the exit
status (0 only if every byte was verified)."""

from __future__ import annotations

import json
from typing import Any


def print_summary(result: dict[str, Any], title: str) -> None:
    s = result["stats"]
    mb = result["bytes_delivered"] / 1e6
    print(f"{title}: backend {result['backend']}, seed {result['seed']}")
    print(f"  messages: {result['messages_sent']} sent, {result['messages_delivered']} delivered "
          f"({mb:.2f} MB), {'ordered' if result['ordered'] else 'unordered'}")
    if result.get("sim_time_s") is not None:
        print(f"  time: {result['sim_time_s'] * 1000:.1f} ms simulated, {result['wall_time_s']:.2f} s wall")
    else:
        print(f"  time: {result['wall_time_s']:.2f} s")
    if result.get("goodput_mbps"):
        print(f"  goodput: {result['goodput_mbps']:.1f} Mbit/s")
    print(f"  sends {s['num_total_sends']}, resends {s['num_resends']} "
          f"({s['num_fast_retrans']} fast, {s['num_timeout_retrans']} timeout), "
          f"standalone ACKs received {s['num_ack_recvs']}")
    for line in result.get("stats_line", []):
        print(f"  {line}")
    for err in result.get("errors") or []:
        print(f"  error: {err}")
    print(f"  verified: {'yes' if result['verified'] else 'NO'}")


def report(json_out: bool, result: dict[str, Any], title: str) -> int:
    """Print the result (one JSON object, or the human summary); exit 0 only if verified."""
    if json_out:
        result.pop("stats_line", None)
        print(json.dumps(result, sort_keys=True, default=str))
    else:
        print_summary(result, title)
    return 0 if result["verified"] else 1
