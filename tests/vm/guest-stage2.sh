#!/bin/bash
# Stage 2: runs as PID 1 inside the chroot (host's root fs, read-only 9p + tmpfs overlay),
# using the host's own bash/kmod/iproute2/rdma-core binaries.
# Loads soft-RoCE, creates rxe0, runs the user's command, records its exit code, powers off.
RUN=$1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb
. "$RUN/env.sh"          # KVER, MODDIR, RXE_NETDEV, RXE_IP, RXE_MTU, HOST_PWD, forwarded vars

log() { echo "rxe-vm: $*" >/dev/console; }
t() { [ -n "${RXE_VM_DEBUG:-}" ] && echo "rxe-vm: [$(cut -d' ' -f1 /proc/uptime)] $*" >/dev/console; true; }
t stage2-start
finish() {   # $1 = exit code to hand to the host
  echo "$1" > "$RUN/rc"
  sync
  echo o > /proc/sysrq-trigger 2>/dev/null   # immediate power off (no init to talk to)
  sleep 5; exit "$1"
}

# Fresh pseudo filesystems over the host's copies visible through the overlay.
mkdir -p /dev/pts /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
# devtmpfs has no /dev/fd, /dev/stdin... (udev makes them normally); bash process
# substitution <(...), which bats uses, needs /dev/fd.
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
for i in 0:stdin 1:stdout 2:stderr; do [ -e /dev/${i#*:} ] || ln -s /proc/self/fd/${i%%:*} /dev/${i#*:}; done
mount -t tmpfs tmpfs /run
mkdir -p /run/lock
# NB: no tmpfs on /tmp: the run dir and the module cache may live under host /tmp;
# writes to /tmp already land in the overlay's tmpfs upper layer.

# The kernel's module tree (extracted .deb in the host cache) at the standard place.
mkdir -p /lib/modules/$KVER
mount --bind "$MODDIR" /lib/modules/$KVER
mount -t configfs configfs /sys/kernel/config 2>/dev/null

t mounts-done
hostname rxe-vm
ip link set lo up

# --- soft-RoCE ---------------------------------------------------------------
modprobe -a rdma_rxe ib_uverbs rdma_ucm ib_umad 2>/dev/null || modprobe -a rdma_rxe ib_uverbs rdma_ucm
t modules-loaded
# A NIC delivers the packets of one flow in order.  veth queues each packet on
# the backlog of the CPU that sent it, and rxe's tasks move between CPUs, so the
# RoCE packets of one QP can arrive out of order: rxe then NAKs and retransmits,
# and rxe of Linux 6.1 can stall a QP after that.  Receive packet steering to
# CPU 0 puts every received packet on one backlog, in the order it was sent.
veth_in_order() {
  local d q
  for d in "$@"; do
    for q in /sys/class/net/$d/queues/rx-*/rps_cpus; do echo 1 >"$q" || log "rps on $q failed"; done
  done
}
case "$RXE_NETDEV" in
  dummy) modprobe dummy numdummies=0; ip link add rxenet0 type dummy
         ip link set rxenet0 mtu "$RXE_MTU"; ip addr add "$RXE_IP/24" dev rxenet0
         ip link set rxenet0 up; rdma link add rxe0 type rxe netdev rxenet0 ;;
  veth)  ip link add rxenet0 type veth peer name rxenet1
         ip link set rxenet0 mtu "$RXE_MTU"; ip link set rxenet1 mtu "$RXE_MTU"
         ip addr add "$RXE_IP/24" dev rxenet0; ip link set rxenet0 up; ip link set rxenet1 up
         veth_in_order rxenet0 rxenet1
         rdma link add rxe0 type rxe netdev rxenet0 ;;
  pair)  # Two rxe devices on the two ends of a veth pair, same netns. rxe in 6.1 has no
         # netns support (its UDP socket and route lookups are in init_net), so instead of two
         # namespaces we make locally-generated packets for the *other* end's IP leave
         # through the veth: rule 100 (iif lo = locally generated) beats the local table,
         # which is moved from pref 0 to 1000; received packets still hit the local table.
         ip link add rxenet0 type veth peer name rxenet1
         for d in rxenet0 rxenet1; do ip link set $d mtu "$RXE_MTU"; done
         ip addr add "$RXE_IP/24" dev rxenet0; ip addr add "$RXE_IP2/24" dev rxenet1
         for i in all default rxenet0 rxenet1; do
           sysctl -qw net.ipv4.conf.$i.accept_local=1 net.ipv4.conf.$i.rp_filter=0; done
         ip link set rxenet0 up; ip link set rxenet1 up    # (before the routes: nexthop must be up)
         ip rule add pref 1000 lookup local; ip rule del pref 0
         ip route add "$RXE_IP2/32" dev rxenet0 src "$RXE_IP" table 100
         ip route add "$RXE_IP/32" dev rxenet1 src "$RXE_IP2" table 100
         ip rule add pref 100 iif lo lookup 100
         veth_in_order rxenet0 rxenet1
         rdma link add rxe0 type rxe netdev rxenet0
         rdma link add rxe1 type rxe netdev rxenet1 ;;
  lo)    rdma link add rxe0 type rxe netdev lo ;;
  none)  ;;
  *)     log "unknown netdev mode $RXE_NETDEV" ;;
esac
t rxe-up
# --- the user's command ------------------------------------------------------
cd "$HOST_PWD" 2>/dev/null || cd /
# stdout/stderr go to virtio-serial ports that the host copies to its stdout/stderr.
# (No udev here, so resolve the port names via sysfs instead of /dev/virtio-ports/.)
OUT=/dev/console; ERR=/dev/console
for p in /sys/class/virtio-ports/*; do
  case "$(cat "$p/name" 2>/dev/null)" in
    rxevm.out) OUT=/dev/${p##*/} ;;
    rxevm.err) ERR=/dev/${p##*/} ;;
  esac
done
: > "$RUN/started"        # lets the host measure the boot time (RXE_VM_TIMING)
bash "$RUN/cmd.sh" </dev/null >"$OUT" 2>"$ERR"
rc=$?; t command-done; finish $rc
