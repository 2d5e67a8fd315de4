# Shared settings and helpers for the Soft-RoCE VM harness (sourced, not run).
#
# Everything large is cached under $BTLVM_DIR (default <repo>/.vm, gitignored) and rebuilt
# from Debian's packages when missing: nothing here is committed but scripts.

VM_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$VM_SCRIPTS/../.." && pwd)
BTLVM_DIR=${BTLVM_DIR:-$REPO/.vm}
# The kernel: Debian's generic flavour ships rdma_rxe, ib_uverbs, 9p and overlay as modules
# (the cloud flavour does not).  The metapackage tells which versioned package is current.
BTLVM_KERNEL_META=${BTLVM_KERNEL_META:-linux-image-amd64}
# Modules the guest needs; their dependencies come from modprobe --show-depends.
# crc32_generic/crc32-pclmul: without a crc32 shash rdma_rxe fails to init and
# "rdma link add" says "No such file or directory".
VM_MODULES=(virtio_pci 9pnet_virtio 9p overlay crc32_generic crc32-pclmul ib_uverbs rdma_rxe)
# Debian packages the harness uses on the host (and, through the 9p root, in the guest).
VM_APT_PACKAGES=(qemu-system-x86 python3-pyverbs ibverbs-providers rdma-core iproute2 kmod cpio
                 busybox-static xz-utils)
# The interpreter that runs btlcore in the guest: Debian's python3-pyverbs is built for it.
VM_GUEST_PYTHON=/usr/bin/python3

vm_log() { printf '[vm] %s\n' "$*" >&2; }

# Print why the harness cannot run here and exit 0 ("skipped" is not a failure).
vm_skip() {
    printf 'SKIPPED: %s\n' "$*"
    exit "${VM_SKIP_STATUS:-0}"
}

# True when every Debian package the harness needs is installed.
vm_packages_present() {
    local p
    for p in "${VM_APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || return 1
    done
}

# Install the packages the harness needs (apt-get update only when something is missing).
vm_install_packages() {
    vm_packages_present && return 0
    if [ "$(id -u)" != 0 ]; then
        echo "cannot install ${VM_APT_PACKAGES[*]}: not root" >&2
        return 1
    fi
    command -v apt-get >/dev/null || { echo "no apt-get on this machine" >&2; return 1; }
    vm_log "installing ${VM_APT_PACKAGES[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${VM_APT_PACKAGES[@]}" >/dev/null || return 1
}
