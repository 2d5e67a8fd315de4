"""Same seeds, same bytes: the compiled and the pure-Python build give identical simulator runs.

Every golden scenario runs here in this process (the compiled build where it is installed) and
in a child process with ``BTL_PURE=1`` (the pure build: the same sources, uncompiled); the two
captures must be equal byte for byte, and so must the counters and what the applications saw.
(``test_golden.py`` compares each build with the stored records; this compares the builds with
each other, so a difference between them is named as such.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import btlcore

from record import capture  # type: ignore[import-not-found]
from scenarios import SCENARIOS  # type: ignore[import-not-found]

HERE = Path(__file__).resolve().parent
CHILD = """
import json, sys
from record import capture
out = sys.argv[1]
for name in sys.argv[2:]:
    raw, record = capture(name)
    with open(f"{out}/{name}.pcapng", "wb") as f:
        f.write(raw)
    with open(f"{out}/{name}.json", "w") as f:
        json.dump(record, f)
import btlcore
print(int(btlcore.compiled))
"""


@pytest.fixture(scope="module")
def pure_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every scenario, run once by a pure-Python child process."""
    if not btlcore.compiled:
        pytest.skip("this process runs the pure build (nothing compiled here): nothing to compare it with")
    out = tmp_path_factory.mktemp("pure")
    env = {**os.environ, "BTL_PURE": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", CHILD, str(out), *SCENARIOS], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "0", "the child was to run the pure build"
    return out


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_compiled_and_pure_builds_give_the_same_run(name: str, pure_runs: Path) -> None:
    raw, record = capture(name)
    pure_raw = (pure_runs / f"{name}.pcapng").read_bytes()
    pure_record = json.loads((pure_runs / f"{name}.json").read_text())
    assert record == pure_record, f"{name}: counters or application events differ between the builds"
    if SCENARIOS[name].per_peer:  # peers due at one instant may be served in either order
        from pcapdiff import differences  # type: ignore[import-not-found]

        assert differences(name, pure_raw, raw, True) == [], f"{name}: captures differ between the builds"
    else:
        assert raw == pure_raw, f"{name}: captures differ between the builds ({len(raw)} B compiled, " \
                                f"{len(pure_raw)} B pure)"
