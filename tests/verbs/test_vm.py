"""The verbs backend on a real RDMA device: Soft-RoCE (rdma_rxe) in a qemu VM.

Boots the harness (scripts/vm: Debian's kernel, a busybox initramfs, this machine's root
read-only over 9p), adds rxe0 on lo, and runs inside the guest the pyverbs UD smoke test and
pytest on tests/verbs (device, transport and, when present, conformance tests), under
/usr/bin/python3, whose pyverbs Debian ships.  Skips with a plain reason when qemu cannot run
here.  ``scripts/vm/run-verbs-tests.sh`` does the same from a shell (and installs packages).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = [pytest.mark.verbs_vm, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
VM = REPO / "scripts" / "vm"


def _skip_reason() -> str | None:
    if os.environ.get("BTLVM_GUEST"):
        return "already inside the VM"
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return f"the VM harness needs x86_64 Linux (this is {platform.system()}/{platform.machine()})"
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 is not installed (scripts/vm/run-verbs-tests.sh installs it)"
    return None


@pytest.fixture(scope="module")
def guest_run(tmp_path_factory):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    build = subprocess.run(["bash", str(VM / "build.sh")], capture_output=True, text=True, timeout=900)
    if build.returncode == 3:
        pytest.skip(f"cannot build the VM image: {build.stderr.strip().splitlines()[-1:]}")
    assert build.returncode == 0, build.stderr
    out = tmp_path_factory.mktemp("vm")
    guest = ("python3 scripts/vm/ud_smoke.py > /btlvm/smoke.txt 2>&1; echo $? > /btlvm/smoke.rc; "
             "exec python3 -m pytest -p no:cacheprovider -p no:hypothesispytest --color=no -q "
             "-o console_output_style=classic --junitxml=/btlvm/junit.xml -ra tests/verbs")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    proc = subprocess.run(["bash", str(VM / "run.sh"), "--quiet", "--timeout", "900", "--out", str(out),
                           "--", "sh", "-c", guest], capture_output=True, text=True, env=env, timeout=1000)
    console = (out / "console.log").read_text(errors="replace") if (out / "console.log").exists() else ""
    if proc.returncode == 125 and "BTLVM: t=" not in console:
        pytest.skip(f"qemu could not boot the VM here: {proc.stderr.strip()[-300:]}")
    print(console)
    return proc.returncode, out, console


def test_guest_boots_with_rxe(guest_run):
    _rc, _out, console = guest_run
    assert "rxe0 up" in console, console[-2000:]


def test_pyverbs_ud_smoke_in_guest(guest_run):
    _rc, out, _console = guest_run
    smoke = (out / "smoke.txt").read_text()
    assert (out / "smoke.rc").read_text().strip() == "0", smoke
    assert "UD SMOKE OK" in smoke and "gid[1] 0000:0000:0000:0000:0000:ffff:7f00:0001" in smoke


def test_verbs_suite_passes_in_guest(guest_run):
    rc, out, console = guest_run
    junit = out / "junit.xml"
    assert junit.exists(), console[-3000:]
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
              if c.find("failure") is not None or c.find("error") is not None]
    assert rc == 0 and not failed, f"{counts}: {failed}\n{console[-4000:]}"
    # on rxe nothing may skip for want of a device
    skipped = [(c.get("name"), c.find("skipped").get("message", ""))
               for c in suite.iter("testcase") if c.find("skipped") is not None]
    assert not [s for s in skipped if "verbs unavailable" in s[1]], skipped
    assert counts["tests"] >= 40, counts
