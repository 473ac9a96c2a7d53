#!/bin/bash
# run-bats.sh native|vm : runs a bats suite and prints its TAP on stdout.
#   native  bats --tap tests/native (on this machine, no RDMA needed)
#   vm      ONE boot of tests/vm/run-in-vm.sh (rxe0 on a dummy netdev) running
#           tests/vm/*.bats, then, if tests/vm/pair/ has .bats files, a second boot
#           with -n pair (rxe0 <-> rxe1 over a veth) running those.
# Env: BUILD (default build), SDPSHIM_STRICT (1: no skipping), SDPSHIM_VM_MEM (1G),
#      SDPSHIM_VM_TIMEOUT (seconds per boot, default 3300: a bound, not the budget; the
#      dummy boot took 2189 s and, on a busier host, passed 2400 s); BUILD, every SDPSHIM_* and
#      RDMA_SMOKE_* variable are forwarded into the guest.
# Prints "# vm[LAYOUT]: boot ... ms, wall ... s" lines; exits nonzero if any boot or
# suite failed (124: VM timeout, 125: VM could not start).
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 2
export BUILD=${BUILD:-build}

case "${1:-}" in
  native)
    exec bats --tap --timing tests/native ;;
  vm) ;;
  *) echo "usage: $0 native|vm" >&2; exit 2 ;;
esac

# Reference digests of the streams the VM suites check (tests/progs/streamref SEED
# BYTES), computed natively before the boot: in the guest a 1 GiB one costs ~35 s
# of emulated CPU.  The suites compute any that is missing themselves.
STREAMREF_DIR=$REPO/.cache/streamref
export STREAMREF_DIR
host_streamrefs() {
  local spec ref=$BUILD/tests/progs/streamref
  [ -x "$ref" ] || return 0
  mkdir -p "$STREAMREF_DIR" || return 0
  local specs=("1 256M")   # the long streams' size (vm_helpers.bash), and its default
  [ "${SDPSHIM_BIG_STREAM:-256M}" = 256M ] || specs+=("1 $SDPSHIM_BIG_STREAM")
  for spec in "${specs[@]}" "1 128M" "1 8M" "0 64M" "3 64M" "0 32M" "3 32M" "0 2M" "3 2M"; do
    set -- $spec
    "$ref" "$1" "$2" >"$STREAMREF_DIR/$1-$2.tmp" && mv "$STREAMREF_DIR/$1-$2.tmp" "$STREAMREF_DIR/$1-$2"
  done
}
t0=$SECONDS
host_streamrefs
echo "# reference digests computed on the host in $((SECONDS - t0)) s"

FWD=(-e BUILD -e STREAMREF_DIR)
for v in $(compgen -e); do
  case "$v" in SDPSHIM_*|RDMA_SMOKE_*) FWD+=(-e "$v") ;; esac
done
MEM=${SDPSHIM_VM_MEM:-1G}
TMO=${SDPSHIM_VM_TIMEOUT:-3300}

boot() {   # boot LAYOUT GLOB : one VM running bats on the files matching GLOB
  local layout=$1 glob=$2 tf rc t0 timing
  tf=$(mktemp); t0=$(date +%s)
  echo "# vm[$layout]: booting (bats --tap $glob, -m $MEM, timeout ${TMO}s)"
  RXE_VM_TIMING_FILE=$tf tests/vm/run-in-vm.sh -n "$layout" -m "$MEM" -t "$TMO" \
    "${FWD[@]}" "bats --tap --timing $glob"
  rc=$?
  timing=$(cat "$tf" 2>/dev/null); rm -f "$tf"
  local boot_ms=${timing#boot_ms=}; boot_ms=${boot_ms%% *}
  echo "# vm[$layout]: boot ${boot_ms:-?} ms, wall $(( $(date +%s) - t0 )) s, exit $rc"
  case $rc in
    124) echo "# vm[$layout]: the VM timed out after ${TMO}s" ;;
    125) echo "# vm[$layout]: the VM failed to start or to report back" ;;
  esac
  return "$rc"
}

status=0
if compgen -G 'tests/vm/*.bats' >/dev/null; then
  boot dummy 'tests/vm/*.bats' || status=1
else
  echo "# vm[dummy]: no tests/vm/*.bats"
fi
if compgen -G 'tests/vm/pair/*.bats' >/dev/null; then
  boot pair 'tests/vm/pair/*.bats' || status=1
fi
exit "$status"
