#!/usr/bin/env bash
# Build (or reuse) what the Soft-RoCE VM boots: an uncompressed vmlinux and a busybox
# initramfs holding just the modules the guest needs.  Idempotent; prints nothing when the
# cache is current.  Usage: scripts/vm/build.sh [--force]
#
#   $BTLVM_DIR/dl/linux-image-*.deb   Debian's kernel package (apt-get download)
#   $BTLVM_DIR/kroot/                 its files (dpkg -x), with modules.dep from depmod
#   $BTLVM_DIR/vmlinux                the bzImage's XZ payload: qemu boots it via PVH, which
#                                      skips seconds of in-guest decompression under TCG
#   $BTLVM_DIR/initramfs.cpio         busybox-static + /init + modules (+ their modules.dep)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

force=0
[ "${1:-}" = --force ] && force=1

vm_install_packages || { echo "build: the harness's Debian packages are missing" >&2; exit 3; }
mkdir -p "$BTLVM_DIR/dl"

# 1. The kernel package: the versioned package the metapackage depends on.
kpkg=$(apt-cache depends "$BTLVM_KERNEL_META" 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')
if [ -z "$kpkg" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    kpkg=$(apt-cache depends "$BTLVM_KERNEL_META" | awk '/Depends: linux-image-/ {print $2; exit}')
fi
[ -n "$kpkg" ] || { echo "build: apt knows no $BTLVM_KERNEL_META" >&2; exit 3; }
kver=${kpkg#linux-image-}
deb=$(ls "$BTLVM_DIR"/dl/"${kpkg}"_*.deb 2>/dev/null | head -n1 || true)
if [ -z "$deb" ]; then
    vm_log "downloading $kpkg"
    # apt's sandbox user cannot write into root's tree: download elsewhere, then move.
    tmp=$(mktemp -d)
    chmod 777 "$tmp"
    if ! (cd "$tmp" && apt-get download -q "$kpkg" >/dev/null 2>&1); then
        # stale package lists (the archive moved on): refresh once and retry
        DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1 || true
        kpkg=$(apt-cache depends "$BTLVM_KERNEL_META" | awk '/Depends: linux-image-/ {print $2; exit}')
        kver=${kpkg#linux-image-}
        (cd "$tmp" && apt-get download -q "$kpkg" >/dev/null 2>&1) \
            || { rm -rf "$tmp"; echo "build: apt-get download $kpkg failed" >&2; exit 3; }
    fi
    rm -f "$BTLVM_DIR"/dl/linux-image-*.deb  # keep only the current kernel package
    mv "$tmp"/*.deb "$BTLVM_DIR/dl/"
    rm -rf "$tmp"
    deb=$(ls "$BTLVM_DIR"/dl/"${kpkg}"_*.deb | head -n1)
fi

kroot=$BTLVM_DIR/kroot
if [ "$force" = 1 ] || [ ! -f "$kroot/.stamp" ] || [ "$(cat "$kroot/.stamp")" != "$(basename "$deb")" ]; then
    vm_log "unpacking $(basename "$deb")"
    rm -rf "$kroot"
    mkdir -p "$kroot"
    dpkg -x "$deb" "$kroot"
    depmod -b "$kroot" "$kver"
    basename "$deb" > "$kroot/.stamp"
    rm -f "$BTLVM_DIR/vmlinux"
fi

# 2. vmlinux: the ELF inside the bzImage (Debian compresses it with XZ; CONFIG_PVH=y).
if [ "$force" = 1 ] || [ ! -s "$BTLVM_DIR/vmlinux" ]; then
    vm_log "extracting vmlinux"
    python3 - "$kroot/boot/vmlinuz-$kver" "$BTLVM_DIR/vmlinux.tmp" <<'PY'
import lzma, sys
data = open(sys.argv[1], "rb").read()
pos = data.find(b"\xfd7zXZ\x00")
if pos < 0:
    sys.exit("no XZ stream in the bzImage")
elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[pos:])
if not elf.startswith(b"\x7fELF"):
    sys.exit("the XZ payload is not an ELF vmlinux")
open(sys.argv[2], "wb").write(elf)
PY
    mv "$BTLVM_DIR/vmlinux.tmp" "$BTLVM_DIR/vmlinux"
fi

# 3. The initramfs: rebuilt when the kernel, the module list or /init change.
want=$( { echo "$kver"; echo "${VM_MODULES[*]}"; cat "$VM_SCRIPTS/init.sh"; } | sha256sum | cut -d' ' -f1)
if [ "$force" = 1 ] || [ ! -s "$BTLVM_DIR/initramfs.cpio" ] || [ "$(cat "$BTLVM_DIR/initramfs.stamp" 2>/dev/null)" != "$want" ]; then
    vm_log "building initramfs ($kver: ${VM_MODULES[*]})"
    stage=$(mktemp -d)
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage"/{bin,dev,proc,sys,host,ovl,newroot,lib/modules/"$kver"}
    cp /bin/busybox "$stage/bin/busybox"
    for applet in sh mount mkdir modprobe chroot poweroff ip sync; do
        ln -s busybox "$stage/bin/$applet"
    done
    install -m 0755 "$VM_SCRIPTS/init.sh" "$stage/init"
    echo "${VM_MODULES[*]}" > "$stage/modules"
    # Every module and its dependencies, at their usual paths, in load order.
    for m in "${VM_MODULES[@]}"; do
        modprobe -d "$kroot" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
    done | awk '!seen[$0]++' > "$stage/modlist"
    while read -r path; do
        rel=${path#"$kroot"/}
        mkdir -p "$stage/$(dirname "$rel")"
        cp "$path" "$stage/$rel"
        echo "${rel#lib/modules/"$kver"/}"
    done < "$stage/modlist" > "$stage/lib/modules/$kver/modules.order"
    rm "$stage/modlist"
    cp "$kroot/lib/modules/$kver"/modules.builtin* "$stage/lib/modules/$kver/" 2>/dev/null || true
    depmod -b "$stage" "$kver"
    (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet) > "$BTLVM_DIR/initramfs.cpio.tmp"
    mv "$BTLVM_DIR/initramfs.cpio.tmp" "$BTLVM_DIR/initramfs.cpio"
    echo "$want" > "$BTLVM_DIR/initramfs.stamp"
fi
echo "$kver" > "$BTLVM_DIR/kernel.version"
