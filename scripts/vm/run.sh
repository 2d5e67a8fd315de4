#!/usr/bin/env bash
# Boot the Soft-RoCE VM and run one command in it, chrooted into this machine's own root
# (read-only over virtio-9p, with a tmpfs overlay), with rxe0 already on lo.
#
#   scripts/vm/run.sh [--timeout SEC] [--mem MB] [--out DIR] [--quiet] -- COMMAND [ARG...]
#
# COMMAND runs under /bin/sh in the repository's directory with:
#   BTLVM_GUEST=1, BTLVM_OUT=/btlvm (the --out directory, shared read-write: put results
#   there), python3 = /usr/bin/python3 (Debian's, which python3-pyverbs serves) with the
#   repository's .venv site-packages added ahead of Debian's (scripts/vm/guest/sitecustomize.py).
# Exit status: COMMAND's; 124 if the VM timed out; 125 if the VM did not boot (qemu missing or
# unable to run, or /init failed before COMMAND ran: see the console output).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

timeout_s=${BTLVM_TIMEOUT:-300}
mem=${BTLVM_MEM:-512}
out=""
quiet=0
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) timeout_s=$2; shift 2 ;;
        --mem) mem=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --quiet) quiet=1; shift ;;
        --) shift; break ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--timeout SEC] [--mem MB] [--out DIR] [--quiet] -- COMMAND [ARG...]" >&2; exit 2; }

command -v qemu-system-x86_64 >/dev/null || { echo "run: qemu-system-x86_64 is not installed" >&2; exit 125; }
[ -s "$BTLVM_DIR/vmlinux" ] && [ -s "$BTLVM_DIR/initramfs.cpio" ] || { echo "run: no VM image; run scripts/vm/build.sh" >&2; exit 125; }

if [ -z "$out" ]; then
    mkdir -p "$BTLVM_DIR/runs"
    # keep the 20 newest run directories
    ls -1dt "$BTLVM_DIR"/runs/run.* 2>/dev/null | tail -n +20 | xargs -r rm -rf || true
    out=$(mktemp -d "$BTLVM_DIR/runs/run.XXXXXX")
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out/rc" "$out/cmd.sh"

# POSIX single-quoting (the guest's /bin/sh is dash: no $'...' from printf %q).
shq() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }

venv_site=$(ls -d "$REPO"/.venv/lib/python3.*/site-packages 2>/dev/null | head -n1 || true)
# The venv's packages serve the guest's /usr/bin/python3 only if both are the same CPython
# minor version (same ABI and bytecode).  If not (another machine image), fall back to a venv
# of /usr/bin/python3 itself, with Debian's site-packages (pyverbs) visible, built once.
guest_minor=$("$VM_GUEST_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo none)
venv_minor=$(sed -n 's/^version[_a-z]* *= *\([0-9]*\.[0-9]*\).*/\1/p' "$REPO/.venv/pyvenv.cfg" 2>/dev/null | head -n1)
if [ -z "$venv_site" ] || [ "$venv_minor" != "$guest_minor" ] || [ -n "${BTLVM_GUEST_VENV:-}" ]; then
    gv=$BTLVM_DIR/guest-venv
    if [ ! -x "$gv/bin/python" ] || [ "$(cat "$gv/.stamp" 2>/dev/null)" != "$(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1)" ]; then
        vm_log "the venv (Python ${venv_minor:-none}) does not match $VM_GUEST_PYTHON ($guest_minor): building $gv"
        rm -rf "$gv"
        "$VM_GUEST_PYTHON" -m venv --system-site-packages "$gv" >&2
        "$gv/bin/python" -m pip install -q -e "$REPO[test]" >&2
        sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1 > "$gv/.stamp"
    fi
    venv_site=$(ls -d "$gv"/lib/python3.*/site-packages | head -n1)
fi
{
    echo "cd $(shq "$REPO") || exit 126"
    echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8"
    echo "export BTLVM_GUEST=1 BTLVM_OUT=/btlvm PYTHONUNBUFFERED=1"
    echo "export PYTHONPATH=$(shq "$VM_SCRIPTS/guest") BTLVM_VENV_SITE=$(shq "$venv_site")"
    # Forward the test knobs the caller set (BTL_* and PYTEST_ADDOPTS).
    # (The harness's own settings are BTLVM_*, not BTL_*: btlcore rejects unknown BTL_ names.)
    env | grep -E '^(BTL_[A-Z0-9_]+|PYTEST_ADDOPTS)=' \
        | while IFS='=' read -r k v; do echo "export $k=$(shq "$v")"; done || true
    printf 'exec'
    for arg in "$@"; do printf ' %s' "$(shq "$arg")"; done
    echo
} > "$out/cmd.sh"

# Byte-compile the repository's Python on the host: compiling in the guest is slow under TCG.
/usr/bin/python3 -m compileall -q -j 0 "$REPO/btlcore" "$REPO/backends" "$REPO/plugins" "$REPO/scripts/vm/guest" >/dev/null 2>&1 || true

console=$out/console.log
start=$(date +%s.%N)
set +e
timeout -k 10 "$timeout_s" qemu-system-x86_64 \
    -machine q35,accel=tcg -cpu "${BTLVM_CPU:-max}" -smp 1 -m "$mem" \
    -nodefaults -no-user-config -display none -no-reboot -serial stdio \
    -kernel "$BTLVM_DIR/vmlinux" -initrd "$BTLVM_DIR/initramfs.cpio" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$out,mount_tag=results,security_model=none,multidevs=remap" \
    </dev/null 2>&1 | tr -d '\r' | if [ "$quiet" = 1 ]; then cat > "$console"; else tee "$console"; fi
qemu_rc=${PIPESTATUS[0]}
set -e
[ "$quiet" = 1 ] || echo
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
echo "$elapsed" > "$out/elapsed"
if [ "$qemu_rc" = 124 ] || [ "$qemu_rc" = 137 ]; then
    vm_log "VM timed out after ${timeout_s}s (console: $console)"
    exit 124
fi
if [ ! -f "$out/rc" ]; then
    if grep -q 'BTLVM: FAILED' "$console"; then
        vm_log "guest /init failed: $(grep 'BTLVM: FAILED' "$console" | head -n1)"
    else
        vm_log "the VM did not run the command (qemu exit $qemu_rc; console: $console)"
    fi
    exit 125
fi
rc=$(cat "$out/rc")
vm_log "VM run took ${elapsed}s; command exit status $rc (results in $out)"
exit "$rc"
