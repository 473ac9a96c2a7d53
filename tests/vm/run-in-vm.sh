#!/bin/bash
# run-in-vm.sh — run a command as root inside a throw-away QEMU guest that has
# soft-RoCE (rdma_rxe) up, while seeing the *host's* root filesystem.
#
#   run-in-vm.sh [options] [--] 'command string'
#
# The guest boots Debian's stock kernel (downloaded once with apt-get into a cache),
# mounts the host's / read-only over virtio-9p with a tmpfs overlay on top (so the guest
# can write; writes vanish at poweroff), loads rdma_rxe, creates rxe0 on a netdev
# (dummy "rxenet0" with $RXE_IP by default), cds to the caller's cwd and runs the
# command with bash. The command's stdout/stderr are streamed to this script's
# stdout/stderr (virtio-serial ports), and the script exits with the command's code.
#
# Options:
#   -w DIR     also share host DIR *writable* at the same path (repeatable, max 8)
#   -e VAR     forward host environment variable VAR into the guest (repeatable)
#   -m MEM     guest RAM (default 2G; tmpfs overlay writes count against it)
#   -c N       guest vCPUs (default 2)
#   -t SECS    kill the VM after SECS (default 900) -> exit 124
#   -n MODE    netdev(s) for rxe:
#                dummy (default): rxe0 on dummy rxenet0 = $RXE_IP (client & server share it;
#                                 rxe short-circuits same-device traffic internally)
#                pair: veth pair rxenet0=$RXE_IP (rxe0) <-> rxenet1=$RXE_IP2 (rxe1), policy
#                      routing forces traffic between the two IPs over the veth "wire", so
#                      client and server use different RDMA devices (two "hosts", one netns)
#                veth: rxe0 on one end of a veth pair;  lo: rxe0 on lo;  none: no rxe device
#   -v         stream the guest kernel console to stderr
# Env: RXE_VM_CACHE (default <repo>/.cache/rxe-vm, <repo> = two levels above this script;
#      git-ignored), RXE_VM_KPKG (kernel package name, default: whatever linux-image-amd64
#      depends on), RXE_IP (default 10.77.0.1), RXE_IP2 (default 10.77.0.2, "pair" mode),
#      RXE_VM_DEBUG=1 (stage timestamps on console), RXE_MTU (default 9000 -> IB MTU 4096),
#      RXE_VM_TIMING=1 (print boot time = qemu start to command start, command time and
#      qemu wall time on stderr), RXE_VM_TIMING_FILE=PATH (also write them there as
#      "boot_ms=N command_ms=N wall_ms=N"; implies RXE_VM_TIMING),
#      RXE_VM_ACCEL (default "tcg,thread=multi"; set e.g. RXE_VM_ACCEL=kvm to try KVM),
#      RXE_VM_CPU (CPU model; default qemu64 under TCG, host under KVM).  Why qemu64:
#      TCG emulates AVX and the larger XSAVE state slowly, and the guest's glibc and
#      kernel use them when offered; a 256 MiB stream over rxe took 14.9 s with -cpu
#      max and 9.9 s with qemu64 (buffer copy: 12.3 s and 7.9 s).
#      Why TCG by default: on the machines this project runs on, /dev/kvm exists and
#      opens, but a KVM guest hangs during boot; TCG always works and boots
#      to a ready rxe0 in about 7 s, so probing for KVM would only risk a hang.
# Exit codes: command's own code; 124 timeout; 125 guest/setup failure (console shown).
#
# Host packages needed (Debian 12):
#   apt-get update   (also needed once for the kernel download itself)
#   apt-get install --no-install-recommends qemu-system-x86 busybox-static kmod cpio \
#       xz-utils iproute2 rdma-core ibverbs-providers ibverbs-utils   (+ whatever your
#       tests use: rdmacm-utils perftest iperf3 redis-server ...; tests/setup-debian.sh
#       installs the whole list for this project)
# The guest runs the HOST's binaries, so everything the command needs must be installed
# on the host. Needs no root for qemu itself, but reading the host's whole / through 9p
# with security_model=none works fully only when run as root.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)          # this script lives in <repo>/tests/vm/
CACHE=${RXE_VM_CACHE:-$REPO/.cache/rxe-vm}
MEM=2G; SMP=2; TIMEOUT=900; NETDEV=dummy; VERBOSE=0
RW_DIRS=(); FWD_VARS=()
while getopts "w:e:m:c:t:n:vh" o; do
  case $o in
    w) RW_DIRS+=("$(cd "$OPTARG" && pwd)") ;;
    e) FWD_VARS+=("$OPTARG") ;;
    m) MEM=$OPTARG ;; c) SMP=$OPTARG ;; t) TIMEOUT=$OPTARG ;; n) NETDEV=$OPTARG ;;
    v) VERBOSE=1 ;;
    h|*) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 2 ;;
  esac
done
shift $((OPTIND-1))
[ $# -gt 0 ] || { echo "usage: $0 [options] 'command'" >&2; exit 2; }
CMD="$*"
case "$HERE${TMPDIR:-/tmp}" in *[[:space:]]*) echo "run-in-vm: paths with spaces are not supported" >&2; exit 2 ;; esac

msg() { echo "run-in-vm: $*" >&2; }
need() { command -v "$1" >/dev/null || { msg "missing $1 (apt-get install $2)"; exit 125; }; }
need qemu-system-x86_64 qemu-system-x86; need cpio cpio; need depmod kmod
[ -x /bin/busybox ] || { msg "missing /bin/busybox (apt-get install busybox-static)"; exit 125; }

# ---------------------------------------------------------------------------
# 1. Kernel: apt-get download the stock Debian kernel .deb once, extract, depmod.
# ---------------------------------------------------------------------------
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"; flock 9           # parallel invocations share the cache safely
KPKG=${RXE_VM_KPKG:-}
if [ -z "$KPKG" ]; then
  if [ -f "$CACHE/kpkg" ]; then KPKG=$(cat "$CACHE/kpkg")   # pinned after first fetch
  else
    KPKG=$(apt-cache depends linux-image-amd64 2>/dev/null |
           awk '/Depends: linux-image-[0-9]/{print $2; exit}')
    [ -n "$KPKG" ] || { msg "cannot resolve linux-image-amd64: apt has no package lists;" \
                          "run 'apt-get update' (as root) first, or set RXE_VM_KPKG"; exit 125; }
  fi
fi
KVER=${KPKG#linux-image-}
KDIR=$CACHE/$KVER
if [ ! -f "$KDIR/.done" ]; then
  msg "fetching $KPKG into $CACHE (one-time)"
  rm -rf "$KDIR"; mkdir -p "$KDIR/dl"
  if ! (cd "$KDIR/dl" && apt-get download "$KPKG" >&2); then
    if ! apt-cache show "$KPKG" >/dev/null 2>&1; then
      msg "apt-get download $KPKG failed: apt does not know that package; run" \
          "'apt-get update' (as root) first, or pin another kernel with RXE_VM_KPKG"
    else
      msg "apt-get download $KPKG failed (no network, or stale lists: try 'apt-get update')"
    fi
    rm -rf "$KDIR"; exit 125
  fi
  dpkg-deb -x "$KDIR"/dl/*.deb "$KDIR/root"
  rm -rf "$KDIR/dl"
  depmod -b "$KDIR/root" "$KVER"        # the .deb ships no modules.dep
  touch "$KDIR/.done"; echo "$KPKG" > "$CACHE/kpkg"
fi
VMLINUZ=${RXE_VM_KERNEL:-$KDIR/root/boot/vmlinuz-$KVER}
# Boot speed: under TCG, decompressing the 65 MB XZ payload of the bzImage costs ~3-4 s.
# Extract the ELF vmlinux once (same trick as linux/scripts/extract-vmlinux); QEMU then
# boots it directly through the PVH entry point (CONFIG_PVH=y in Debian's kernel).
if [ -z "${RXE_VM_KERNEL:-}" ] && [ ! -f "$KDIR/vmlinux" ]; then
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$VMLINUZ" | head -1 | cut -d: -f1 || true)
  if [ -n "$off" ]; then
    tail -c +$((off+1)) "$VMLINUZ" | xz -dc > "$KDIR/vmlinux.tmp" 2>/dev/null || true
    if [ "$(head -c4 "$KDIR/vmlinux.tmp" | od -An -c | tr -d ' ')" = '177ELF' ]; then
      mv "$KDIR/vmlinux.tmp" "$KDIR/vmlinux"; else rm -f "$KDIR/vmlinux.tmp"; fi
  fi
fi
[ -z "${RXE_VM_KERNEL:-}" ] && [ -f "$KDIR/vmlinux" ] && VMLINUZ=$KDIR/vmlinux
MODDIR=$KDIR/root/lib/modules/$KVER

# ---------------------------------------------------------------------------
# 2. initramfs: busybox + the modules needed to reach the host fs + guest-init.sh.
#    Everything else (rdma_rxe, ib_*, dummy, veth ...) is modprobed later from
#    $MODDIR, which the guest sees through the shared root.
# ---------------------------------------------------------------------------
INITRD=$KDIR/initrd.gz
STAMP=$(cat "$HERE/guest-init.sh" "$HERE/run-in-vm.sh" /bin/busybox | md5sum | cut -c1-12)
if [ ! -f "$INITRD" ] || [ "$(cat "$KDIR/initrd.stamp" 2>/dev/null)" != "$STAMP" ]; then
  ir=$(mktemp -d); trap 'rm -rf "$ir"' EXIT
  mkdir -p "$ir"/{bin,proc,sys,dev,lib/modules}
  cp /bin/busybox "$ir/bin/"
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$ir/bin/$a"; done
  install -m755 "$HERE/guest-init.sh" "$ir/init"
  modprobe -a -d "$KDIR/root" -S "$KVER" --show-depends \
      virtio_pci 9pnet_virtio 9p overlay virtio_console |
    awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' | while read -r ko; do
      cp "$ko" "$ir/lib/modules/"; basename "$ko" >> "$ir/lib/modules/load.list"
    done
  (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD.tmp"
  mv "$INITRD.tmp" "$INITRD"; echo "$STAMP" > "$KDIR/initrd.stamp"
  rm -rf "$ir"; trap - EXIT
fi
flock -u 9

# ---------------------------------------------------------------------------
# 3. Per-run directory (shared writable into the guest at the same path).
# ---------------------------------------------------------------------------
RUN=$(mktemp -d "${TMPDIR:-/tmp}/rxe-vm-run.XXXXXX")
QPID=; HELPERS=()
cleanup() {
  [ -n "$QPID" ] && kill "$QPID" 2>/dev/null
  # cat readers end by themselves at EOF; kill them anyway in case qemu never opened the FIFOs.
  for p in "${HELPERS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
printf '%s\n' "$CMD" > "$RUN/cmd.sh"
{
  printf 'KVER=%q\nMODDIR=%q\nRXE_NETDEV=%q\n' "$KVER" "$MODDIR" "$NETDEV"
  printf 'export RXE_IP=%q RXE_IP2=%q\nRXE_MTU=%q\nHOST_PWD=%q\n' \
    "${RXE_IP:-10.77.0.1}" "${RXE_IP2:-10.77.0.2}" "${RXE_MTU:-9000}" "$PWD"
  for v in "${FWD_VARS[@]}"; do [ -n "${!v+x}" ] && printf 'export %s=%q\n' "$v" "${!v}"; done
  [ -n "${RXE_VM_DEBUG:-}" ] && echo "RXE_VM_DEBUG=1"
  echo 'export RXE_VM=1'
} > "$RUN/env.sh"
VIRTFS=(-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
        -virtfs "local,path=$RUN,mount_tag=rundir,security_model=none")
i=0
for d in "${RW_DIRS[@]}"; do
  echo "$d" > "$RUN/rw$i.path"
  VIRTFS+=(-virtfs "local,path=$d,mount_tag=rw$i,security_model=none,multidevs=remap")
  i=$((i+1))
done

# Output channels: two virtio-serial ports -> FIFOs -> our stdout/stderr.
mkfifo "$RUN/out.fifo" "$RUN/err.fifo"
cat "$RUN/out.fifo" & HELPERS+=($!)
cat "$RUN/err.fifo" >&2 & HELPERS+=($!)
: > "$RUN/console.log"
if [ "$VERBOSE" = 1 ]; then tail -n +1 -f "$RUN/console.log" >&2 & HELPERS+=($!); fi

# TCG unless asked otherwise: /dev/kvm can be present and openable while a KVM guest
# still hangs (see the header), so it is never picked automatically.
ACCEL=${RXE_VM_ACCEL:-tcg,thread=multi}
case "$ACCEL" in kvm*) CPU=${RXE_VM_CPU:-host} ;; *) CPU=${RXE_VM_CPU:-qemu64} ;; esac

# ---------------------------------------------------------------------------
# 4. Boot. -nodefaults/-nic none: no network to the outside world at all.
# ---------------------------------------------------------------------------
# One guest at a time: two TCG guests on a 2-core machine slow each other
# down enough to break timing-sensitive tests.  Later invocations queue here
# (RXE_VM_NO_QUEUE=1 skips the queue).
if [ -z "${RXE_VM_NO_QUEUE:-}" ]; then
  exec 8>"${TMPDIR:-/tmp}/rxe-vm.run.lock"
  flock 8 || true
fi
T0=$(date +%s%N)
# The guest creates $RUN/started just before the command runs (the run dir is 9p with
# cache=none, so the file shows up here at once): a host-side watcher timestamps it.
[ -n "${RXE_VM_TIMING_FILE:-}" ] && RXE_VM_TIMING=1
if [ -n "${RXE_VM_TIMING:-}" ]; then
  ( while [ ! -e "$RUN/started" ]; do sleep 0.1; done; date +%s%N > "$RUN/started.host" ) &
  HELPERS+=($!)
fi
timeout --foreground -k 5 "$TIMEOUT" qemu-system-x86_64 \
  -nodefaults -no-user-config -display none -nic none -no-reboot \
  -machine q35 -accel "$ACCEL" -cpu "$CPU" -smp "$SMP" -m "$MEM" \
  -kernel "$VMLINUZ" -initrd "$INITRD" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init rxevm.run=$RUN rxevm.stage2=$HERE/guest-stage2.sh${RXE_VM_DEBUG:+ rxevm.debug}" \
  -serial "file:$RUN/console.log" \
  "${VIRTFS[@]}" \
  -device virtio-serial-pci \
  -chardev "file,id=out,path=$RUN/out.fifo" -device virtserialport,chardev=out,name=rxevm.out \
  -chardev "file,id=err,path=$RUN/err.fifo" -device virtserialport,chardev=err,name=rxevm.err \
  </dev/null &
QPID=$!
set +e; wait "$QPID"; QRC=$?; set -e; QPID=
T1=$(date +%s%N)
wait "${HELPERS[0]}" "${HELPERS[1]}" 2>/dev/null || true   # drain the output FIFOs
if [ -n "${RXE_VM_TIMING:-}" ]; then
  if [ -s "$RUN/started.host" ]; then
    TS=$(cat "$RUN/started.host")
    B=$(( (TS - T0) / 1000000 )); C=$(( (T1 - TS) / 1000000 ))
  else B=-1; C=-1; fi
  W=$(( (T1 - T0) / 1000000 ))
  if [ "$B" -ge 0 ]; then
    msg "boot $B ms (qemu start to command start), command $C ms, qemu wall time $W ms"
  else
    msg "qemu wall time $W ms (the command never started)"
  fi
  if [ -n "${RXE_VM_TIMING_FILE:-}" ]; then
    echo "boot_ms=$B command_ms=$C wall_ms=$W" > "$RXE_VM_TIMING_FILE"
  fi
fi

if [ "$QRC" = 124 ] || [ "$QRC" = 137 ]; then
  msg "timeout after ${TIMEOUT}s; console tail:"; tail -n 30 "$RUN/console.log" >&2; exit 124
fi
if [ ! -s "$RUN/rc" ]; then
  msg "guest did not report an exit code (qemu rc=$QRC); console tail:"
  tail -n 40 "$RUN/console.log" >&2; exit 125
fi
exit "$(cat "$RUN/rc")"
