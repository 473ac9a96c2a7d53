#!/bin/bash
# vm_bench.sh: kernel TCP vs sdpshim vs rsocket's preload on soft-RoCE.
# Boots ONE test-bed VM (tests/vm/run-in-vm.sh) and runs
# bench/vm_bench_inside.sh there: redis-benchmark, iperf3, rstream and
# syscalls per redis GET, for the three setups, then prints one table
# (see bench/README.md).  Under software emulation rxe is slower than kernel
# TCP: the figures compare the setups on this bed, never real hardware.
#
# Usage: bench/vm_bench.sh [-n both|dummy|pair] [-b REV] [-p PARTS] [-o DIR]
#   -n both   (default) one `pair` boot: the one-device phase (10.77.0.1 ->
#             10.77.0.1 inside rxe0) then the two-device phase (10.77.0.1 ->
#             10.77.0.2 across the veth)
#   -n dummy  a `dummy` boot, the one-device phase only
#   -n pair   a `pair` boot, the two-device phase only
#   -b REV    also run the library of git rev REV (built once into
#             .cache/bench-base, bench/base_build.bash) as setup "base", in the
#             same boot: the table gains a base column and sdpshim/base
#   -p PARTS  the groups to run, of "redis iperf rstream strace perf ctxsw sides idle" (default all)
#   -o DIR    keep the raw results there (default: a new /tmp/sdpshim-vm-bench.*)
# Env (forwarded): REDIS_N REDIS_NP IPERF_T RS_BIG_C RS_SMALL_C STRACE_N PERF_N BUILD BENCH_IDLE_S BENCH_RS_PP_I
# BENCH_SPIN_US (a "spin" column: this library with SDPSHIM_SPIN_US)
# BENCH_ROUNDS (with -b: rounds of the two libraries, alternating order);
# VM_BENCH_MEM (guest RAM, default 1536M).  Run `make` first.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODE=both OUTDIR= BASE_REV= BENCH_PARTS="redis iperf rstream strace perf ctxsw sides idle"
while getopts "n:b:p:o:h" o; do
	case $o in
		n) MODE=$OPTARG ;;
		b) BASE_REV=$OPTARG ;;
		p) BENCH_PARTS=$OPTARG ;;
		o) OUTDIR=$OPTARG ;;
		*) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 2 ;;
	esac
done
case $MODE in
	both) NET=pair; BENCH_LAYOUTS="single pair" ;;
	dummy) NET=dummy; BENCH_LAYOUTS=single ;;
	pair) NET=pair; BENCH_LAYOUTS=pair ;;
	*) echo "vm_bench: -n both|dummy|pair" >&2; exit 2 ;;
esac
BUILD=${BUILD:-build}
case "$BUILD" in /*) LIBF=$BUILD/libsdpshim.so ;; *) LIBF=$REPO/$BUILD/libsdpshim.so ;; esac
[ -f "$LIBF" ] || { echo "vm_bench: $LIBF missing: run make first" >&2; exit 2; }
[ -n "$OUTDIR" ] || OUTDIR=$(mktemp -d /tmp/sdpshim-vm-bench.XXXXXX)
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
BASE_BUILD=
if [ -n "$BASE_REV" ]; then
	. "$REPO/bench/base_build.bash"
	base_build vm_bench "$BASE_REV"
	BASE_BUILD=$BASE_BUILD_DIR
fi
export BENCH_LAYOUTS BUILD BENCH_OUT=$OUTDIR BENCH_PARTS BASE_BUILD BASE_REV
FWD=()
for v in REDIS_N REDIS_NP IPERF_T RS_BIG_C RS_SMALL_C STRACE_N PERF_N BENCH_ROUNDS BENCH_IDLE_S BENCH_RS_PP_I BENCH_SPIN_US; do
	[ -n "${!v+x}" ] && FWD+=(-e "$v")
done

T0=$(date +%s)
{
	echo "host: $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')," \
		"$(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r)"
	echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ); layout $MODE (run-in-vm.sh -n $NET);" \
		"lib $(sha256sum "$LIBF" | cut -c1-16)${BASE_REV:+, base $BASE_REV}, git $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)" \
		"$( [ -n "$(git -C "$REPO" status --porcelain -- base core preload ipoib_fallback 2>/dev/null)" ] && echo '(library sources modified)')"
} | tee "$OUTDIR/host.txt" >&2
rc=0
RXE_VM_TIMING_FILE=$OUTDIR/vm_timing.txt "$REPO/tests/vm/run-in-vm.sh" -n "$NET" -m "${VM_BENCH_MEM:-1536M}" \
	-t 1500 -w "$OUTDIR" -e BENCH_LAYOUTS -e BENCH_OUT -e BUILD -e BENCH_PARTS -e BASE_BUILD -e BASE_REV \
	"${FWD[@]}" \
	"bash $REPO/bench/vm_bench_inside.sh" || rc=$?
T1=$(date +%s)
echo "vm_bench: wall time $((T1 - T0)) s including the VM queue and boot ($(cat "$OUTDIR/vm_timing.txt" 2>/dev/null));" \
	"raw results in $OUTDIR (rc $rc)" | tee -a "$OUTDIR/host.txt" >&2
exit "$rc"
