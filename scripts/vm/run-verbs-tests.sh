#!/usr/bin/env bash
# Run the verbs backend's tests on Soft-RoCE (rdma_rxe) inside a qemu VM: for .ci/run and for
# people.  Installs what it needs (Debian packages, the kernel package), builds the VM image
# under .vm/ (cached), boots it, runs pytest on tests/verbs in the guest, and prints the
# results.  Prints "SKIPPED: <reason>" and exits 0 when the VM cannot run here.
#
#   scripts/vm/run-verbs-tests.sh [PYTEST ARGS...]     (tests/verbs unless a path is given)
#
# Exit status: pytest's in the guest (0 passed, 1 failed...), 0 when skipped, 124 when the
# guest ran past BTLVM_TIMEOUT (default 900 s).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO"

[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] || vm_skip "the VM harness needs an x86_64 Linux host (this is $(uname -s)/$(uname -m))"
[ -z "${BTLVM_GUEST:-}" ] || vm_skip "already inside the VM"
command -v dpkg-query >/dev/null && command -v apt-get >/dev/null || vm_skip "the VM harness needs a Debian-style host (apt-get, dpkg)"
if ! vm_install_packages; then
    vm_skip "cannot install the harness's Debian packages (${VM_APT_PACKAGES[*]})"
fi
if [ ! -x .venv/bin/python ]; then
    bash scripts/setup.sh || { echo "run-verbs-tests: scripts/setup.sh failed" >&2; exit 1; }
fi
t0=$(date +%s)
bash "$VM_SCRIPTS/build.sh"
case $? in
    0) ;;
    3) vm_skip "cannot build the VM image (kernel package or Debian packages unavailable; see above)" ;;
    *) echo "run-verbs-tests: scripts/vm/build.sh failed" >&2; exit 1 ;;
esac
t1=$(date +%s)
# Default to tests/verbs unless a test path is among the arguments.
has_path=0
for arg in "$@"; do [ -e "${arg%%::*}" ] && has_path=1; done
[ "$has_path" = 1 ] || set -- "$@" tests/verbs
mkdir -p "$BTLVM_DIR/runs"
out=$(mktemp -d "$BTLVM_DIR/runs/tests.XXXXXX")
# In the guest: /usr/bin/python3 (Debian's pyverbs) with the venv's packages; no pytest cache
# (read-only root), no hypothesis plugin (3 s of imports under TCG), results as JUnit XML.
PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-} --color=no" \
bash "$VM_SCRIPTS/run.sh" --timeout "${BTLVM_TIMEOUT:-900}" --out "$out" -- \
    python3 -m pytest -p no:cacheprovider -p no:hypothesispytest -o console_output_style=classic \
    --junitxml=/btlvm/junit.xml -ra "$@"
rc=$?
t2=$(date +%s)
case $rc in
    125)
        reason=$(grep -m1 'BTLVM: FAILED' "$out/console.log" 2>/dev/null || true)
        if ! grep -q 'BTLVM: t=' "$out/console.log" 2>/dev/null; then
            why=$(grep -m1 -v '^[[:space:]]*$' "$out/console.log" 2>/dev/null | cut -c1-200)
            vm_skip "qemu could not boot the VM here: ${why:-no output} (console: $out/console.log)"
        fi
        echo "run-verbs-tests: the VM booted but could not run the tests: ${reason:-see $out/console.log}" >&2
        exit 1 ;;
    124)
        if ! grep -q 'BTLVM: t=.*rxe0 up' "$out/console.log" 2>/dev/null; then
            vm_skip "the VM did not come up within ${BTLVM_TIMEOUT:-900}s (qemu TCG too slow here?)"
        fi
        echo "run-verbs-tests: the tests in the VM ran past ${BTLVM_TIMEOUT:-900}s" >&2
        exit 124 ;;
esac
echo "run-verbs-tests: image $((t1 - t0))s, VM run $((t2 - t1))s; pytest in the guest exited $rc (junit: $out/junit.xml)"
exit "$rc"
