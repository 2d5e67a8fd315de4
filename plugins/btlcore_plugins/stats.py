"""Report a transport's counters when it closes (usnic printed them at finalize): the
usnic-style line on a stream, and/or one JSON object per transport appended to a file::

    t = btlcore.open("udp", plugins=[StatsReporter(json_path="stats.jsonl")])
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import IO, Any

from btlcore.device import hookimpl

_STDERR: Any = object()  # "sys.stderr as it is when the transport closes"


class StatsReporter:
    def __init__(self, stream: IO[str] | None = _STDERR, json_path: str | None = None) -> None:
        self.stream = stream
        self.json_path = json_path
        self.reports: list[dict[str, Any]] = []

    @hookimpl
    def btl_transport_closed(self, transport: Any, stats: Mapping[str, Any]) -> None:
        record = {"backend": transport.backend, "address": transport.address.hex(), **stats}
        self.reports.append(record)
        if self.stream is not None:
            print(transport.stats_line(), file=sys.stderr if self.stream is _STDERR else self.stream)
        if self.json_path:
            with open(self.json_path, "a") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
