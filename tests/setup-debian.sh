#!/bin/bash
# setup-debian.sh : as root on Debian 12, installs everything the build and the test
# suites need (build tools, rdma-core, the VM test bed, the apps the suites drive).
# Idempotent: installs only what is missing; keeps redis-server and postgresql from
# running as services (the tests start their own).  Also makes sure apt can fetch the kernel
# package that tests/vm/run-in-vm.sh downloads on first use.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
say() { echo "setup-debian: $*"; }
[ "$(id -u)" = 0 ] || { echo "setup-debian: must run as root (try: sudo $0)" >&2; exit 1; }

PKGS=(
  build-essential gcc make pkg-config                      # build
  libibverbs-dev librdmacm-dev uthash-dev                  # library headers
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
  qemu-system-x86 busybox-static kmod cpio xz-utils iproute2   # soft-RoCE VM
  bats                                                     # test runner
  iperf3 redis-server redis-tools sockperf                 # apps under test
  postgresql                                               # a forking server (tests/vm/75-postgres)
  strace procps psmisc clang python3 time                  # debugging, fuzzing, CPU time
  linux-perf                                               # bench/: syscalls per request
  gnuplot-nox                                              # bench/ plots (PNG)
  prometheus                                               # promtool: checks `sdpshim stat --prom`
  debhelper man-db                                         # make deb; man pages (tests/native/50-package)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

# run-in-vm.sh fetches the stock kernel with `apt-get download linux-image-<abi>`,
# which needs package lists: refresh them when the lists are missing too.
need_update=0
[ ${#missing[@]} -gt 0 ] && need_update=1
apt-cache show linux-image-amd64 >/dev/null 2>&1 || need_update=1
if [ "$need_update" = 1 ]; then
  say "apt-get update"
  apt-get update -qq
fi

if [ ${#missing[@]} -gt 0 ]; then
  # No service may start during the install (redis-server would grab its port).
  policy=/usr/sbin/policy-rc.d; made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod 755 "$policy"; made_policy=1
  fi
  say "installing: ${missing[*]}"
  rc=0
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
  [ "$made_policy" = 1 ] && rm -f "$policy"
  [ "$rc" = 0 ] || { echo "setup-debian: apt-get install failed (rc $rc)" >&2; exit "$rc"; }
else
  say "all ${#PKGS[@]} packages already installed"
fi

# Keep redis-server from auto-starting later (only where systemd is actually running).
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  for svc in redis-server postgresql; do
    if systemctl is-enabled --quiet "$svc" 2>/dev/null; then
      say "disabling the $svc service"
      systemctl disable --now "$svc" >/dev/null 2>&1 || true
    fi
  done
fi
say "done"
