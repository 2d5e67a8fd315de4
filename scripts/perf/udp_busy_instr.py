"""Instructions per busy-polling 64 B round trip over udp, the spin left out.

    .venv/bin/python scripts/perf/udp_busy_instr.py [TREE ...]   # each tree's own .venv, in turn

``udp_instr.py``'s ``busy`` run (an echo server and a client in two processes, as ``btl
bench`` runs them) under callgrind, collecting inside ``Progress.wait_pass`` only (the echo's
reply, sent from its handler, is inside; the client's ``send()`` is not).  Each tree runs
with N and 2N round trips; the difference over N is one round trip, both ends together,
minus the device's wait (its spin depends on timing); then its parts, inclusive: the
engine's receive, ``datagrams_to_send``, ``Recovery.next_deadline``, the udp device's
receive and send.  The second line gives each part per call, from the 2N run.
``KEEP=DIR`` keeps the 2N run's callgrind files there (one per process)."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile

N = 1000
HERE = os.path.dirname(os.path.abspath(__file__))
# (the handlers' sends run inside it; the native entry, which Progress.progress calls directly
# where the transport binds it, and the Python wrapper calls in older trees)
COLLECT = ("CPyDef_progress___Progress___wait_pass",)
WAIT = "CPyDef__wait___wait"
PARTS = {
    "engine receive": "CPyDef_receive___Receiver___receive_datagrams",
    "datagrams_to_send": "CPyDef_engine___Engine___datagrams_to_send",
    "Recovery.next_deadline": "CPyDef_recovery___Recovery___next_deadline",
    "device receive": "CPyDef__receive___poll_recv_from",
    "device send": "CPyDef__send___post_send_many",
}


def inclusive(path: str) -> dict[str, int]:
    """Inclusive instructions of the functions named in WAIT and PARTS, and the total."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         check=True, capture_output=True, text=True).stdout
    got = {"total": 0}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(.*?\)\s+(\S+)", line)
        if not m:
            continue
        n, where = int(m.group(1).replace(",", "")), m.group(2)
        if "PROGRAM TOTALS" in line:
            got["total"] = n
            continue
        fn = where.rpartition(":")[2]
        for name in (WAIT, *PARTS.values()):
            if fn == name and where.endswith(".c:" + name):
                got[name] = max(got.get(name, 0), n)
    return got


def calls(path: str) -> dict[str, int]:
    """How often each function of WAIT and PARTS was called (from the callgrind file's
    ``cfn=``/``calls=`` lines; names are compressed to ``(id)`` after their first use)."""
    names: dict[str, str] = {}
    count: dict[str, int] = {}
    target = ""
    with open(path) as f:
        for line in f:
            if line.startswith(("cfn=", "fn=")):
                m = re.match(r"c?fn=(\(\d+\))(?: (.*))?", line.rstrip("\n"))
                if m:
                    if m.group(2):
                        names[m.group(1)] = m.group(2)
                    target = names.get(m.group(1), "") if line.startswith("cfn=") else ""
            elif line.startswith("calls=") and target:
                fn = target.rpartition(":")[2] if ":" in target else target
                count[fn] = count.get(fn, 0) + int(line[6:].split()[0])
    return count


def measure(tree: str, n: int, keep: str | None) -> dict[str, int]:
    """The sums over both processes of one run of ``n`` round trips."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=no", f"--callgrind-out-file={tmp}/cg.%p",
                        *(f"--toggle-collect={f}" for f in COLLECT),
                        os.path.join(tree, ".venv", "bin", "python"), os.path.join(HERE, "udp_instr.py"),
                        "--run", "busy", str(n)], cwd=tree, check=True, capture_output=True)
        total: dict[str, int] = {}
        for i, path in enumerate(sorted(glob.glob(f"{tmp}/cg.*"))):
            for k, v in inclusive(path).items():
                total[k] = total.get(k, 0) + v
            for k, v in calls(path).items():
                if k in (WAIT, *PARTS.values()):
                    total["calls " + k] = total.get("calls " + k, 0) + v
            if keep:
                os.replace(path, os.path.join(keep, f"cg.{os.path.basename(os.path.abspath(tree))}.{i}"))
        return total


def main(trees: list[str]) -> None:
    keep = os.environ.get("KEEP")
    for tree in trees:
        one, two = measure(tree, N, None), measure(tree, 2 * N, keep)
        per = {k: (two.get(k, 0) - one.get(k, 0)) / N for k in two}
        line = f"{per['total'] - per.get(WAIT, 0):,.0f} per round trip without the wait ("
        line += ", ".join(f"{name} {per.get(fn, 0):,.0f}" for name, fn in PARTS.items())
        print(f"{tree:20s} {line}; the wait {per.get(WAIT, 0):,.0f})", flush=True)
        # per call (the 2N run's totals): steadier than the per-round-trip figures, which
        # move by several percent from run to run (probes and ACK timers fire on the
        # wall clock, slowed by callgrind and by the machine's load)
        each = []
        for name, fn in PARTS.items():
            n = two.get("calls " + fn, 0)
            each.append(f"{name} {two.get(fn, 0) / max(1, n):,.0f} ({n / (2 * N):.2f} a round trip)")
        print(" " * 21 + "per call: " + ", ".join(each), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["."])
