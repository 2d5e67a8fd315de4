#!/bin/sh
# /init of the Soft-RoCE VM (busybox sh).  Loads the modules, mounts the host's root
# read-only over virtio-9p under a tmpfs overlay, adds rxe0 on lo, and runs
# /btlvm/cmd.sh (written by scripts/vm/run.sh into the "results" 9p share) chrooted into
# the host's root.  Every fork+exec costs ~0.3 s under TCG: builtins where possible.
t() { read -r up _ < /proc/uptime; echo "BTLVM: t=${up}s $*"; }
fail() { echo "BTLVM: FAILED: $*"; poweroff -f; }

mount -t proc proc /proc
mount -t devtmpfs dev /dev
t "init"
read -r mods < /modules
modprobe -a $mods || fail "modprobe $mods"
t "modules loaded"
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot /host || fail "mount hostroot"
mount -t tmpfs -o size=75% tmpfs /ovl
mkdir /ovl/upper /ovl/work
mount -t overlay -o lowerdir=/host,upperdir=/ovl/upper,workdir=/ovl/work overlay /newroot || fail "mount overlay"
mkdir -p /newroot/btlvm
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 results /newroot/btlvm || fail "mount results"
mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
ip link set lo up
t "root mounted"
chroot /newroot /usr/bin/rdma link add rxe0 type rxe netdev lo || fail "rdma link add rxe0"
t "rxe0 up"
chroot /newroot /bin/sh /btlvm/cmd.sh
echo $? > /newroot/btlvm/rc
t "done"
sync
poweroff -f
