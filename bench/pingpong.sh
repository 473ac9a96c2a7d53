#!/bin/bash
# pingpong.sh: the cost of one small request/response on a linked stream,
# against git rev $BASE_REV and native rsocket, in ONE boot of the soft-RoCE
# test bed.  The workload is rstream's 64-byte ping-pong (-S 64 -C 1): under
# sdpshim as plain sockets (-T s, both ends preloaded), under rsocket natively.
#
# Usage: bench/pingpong.sh [-o DIR]
#        bench/pingpong.sh -T DIR      (the table of an earlier run, no boot)
#   -o DIR   keep the raw results there (default: a new /tmp/sdpshim-pingpong.*)
# Env: BASE_REV (e923ef7), BUILD (build: the "after" build), PP_ROUNDS (5:
#   timed runs per setup, the setups' order rotating each round), PP_N (5000
#   round trips a timed run), PP_SHORT / PP_LONG (1000 / 3000: the two
#   callgrind runs of each setup), VM_BENCH_MEM (1536M), PP_MODES ("s"; "s b"
#   adds the callgrind pair with blocking calls, rstream -T b, rows *-b).
#
# Two figures per setup:
#   - us per round trip: rstream's own usec/xfer, the median of the rounds;
#   - instructions per round trip in the client process, all its threads, by
#     callgrind: (Ir(PP_LONG) - Ir(PP_SHORT)) / (PP_LONG - PP_SHORT), so
#     start-up, connection set-up and exit cancel out.  Only the client runs
#     under callgrind; its server runs at full speed.  Under valgrind the
#     client runs far slower than its peer and its progress thread's timers
#     fire more often than they would: the figure is an upper bound for
#     sdpshim, and the same bound for both builds.
# Every sdpshim connection must report path=rdma in its stats, else exit 1.
# Instructions carry over to hardware; the microseconds are TCG's, good only
# for comparing the setups with each other.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUTDIR='' TABLE_ONLY=''
while getopts "o:T:h" o; do
	case $o in
		o) OUTDIR=$OPTARG ;;
		T) OUTDIR=$OPTARG TABLE_ONLY=1 ;;
		*) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
rc=0
if [ -z "$TABLE_ONLY" ]; then
	BASE_REV=${BASE_REV:-e923ef7}
	BUILD=${BUILD:-build}
	case "$BUILD" in /*) AFTER=$BUILD ;; *) AFTER=$REPO/$BUILD ;; esac
	[ -f "$AFTER/libsdpshim.so" ] || { echo "pingpong: $AFTER/libsdpshim.so missing: run make first" >&2; exit 2; }
	for prog in rstream valgrind; do
		command -v "$prog" >/dev/null || { echo "pingpong: $prog is not installed" >&2; exit 2; }
	done
	export PP_MODES=${PP_MODES:-s}
	case " $PP_MODES " in *" s "*) ;; *) echo "pingpong: PP_MODES must include s" >&2; exit 2 ;; esac
	for m in $PP_MODES; do
		case $m in s | b) ;; *) echo "pingpong: PP_MODES: '$m' is neither s nor b" >&2; exit 2 ;; esac
	done
	export PP_ROUNDS=${PP_ROUNDS:-5} PP_N=${PP_N:-5000} PP_SHORT=${PP_SHORT:-1000} PP_LONG=${PP_LONG:-3000}
	for v in PP_ROUNDS PP_N PP_SHORT PP_LONG; do
		case ${!v} in '' | *[!0-9]* | 0) echo "pingpong: $v must be a positive number" >&2; exit 2 ;; esac
	done
	[ "$PP_LONG" -gt "$PP_SHORT" ] || { echo "pingpong: PP_LONG must exceed PP_SHORT" >&2; exit 2; }

	. "$REPO/bench/base_build.bash"
	base_build pingpong "$BASE_REV"
	BEFORE=$BASE_BUILD_DIR
	rev=$(cat "$BEFORE/.bench-built")
	[ -n "$OUTDIR" ] || OUTDIR=$(mktemp -d /tmp/sdpshim-pingpong.XXXXXX)
	mkdir -p "$OUTDIR"
	OUTDIR=$(cd "$OUTDIR" && pwd)
	export BENCH_OUT=$OUTDIR PP_BEFORE=$BEFORE PP_AFTER=$AFTER
	dirty=$( [ -n "$(git -C "$REPO" status --porcelain -- base core preload ipoib_fallback Makefile 2>/dev/null)" ] &&
		echo ' + working tree changes' || true)
	{
		echo "host: $(hostname), $(nproc) cores"
		echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
		echo "before: $BASE_REV ($(git -C "$REPO" rev-parse --short "$rev")), lib $(sha256sum "$BEFORE/libsdpshim.so" | cut -c1-16)"
		echo "after:  $BUILD (HEAD $(git -C "$REPO" rev-parse --short HEAD)$dirty), lib $(sha256sum "$AFTER/libsdpshim.so" | cut -c1-16)"
		echo "rstream -S 64 -C 1: $PP_ROUNDS timed runs of $PP_N round trips per setup; callgrind -I $PP_SHORT and -I $PP_LONG"
	} | tee "$OUTDIR/host.txt" >&2
	RXE_VM_TIMING_FILE=$OUTDIR/vm_timing.txt "$REPO/tests/vm/run-in-vm.sh" -n dummy \
		-m "${VM_BENCH_MEM:-1536M}" -t 1500 -w "$OUTDIR" -e BENCH_OUT -e PP_BEFORE -e PP_AFTER \
		-e PP_ROUNDS -e PP_N -e PP_SHORT -e PP_LONG -e PP_MODES "bash $REPO/bench/pingpong_inside.sh" || rc=$?
fi

# ---- the table ------------------------------------------------------------------
[ -f "$OUTDIR/times.tsv" ] || { echo "pingpong: no results in $OUTDIR" >&2; exit 1; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
us_of() { awk -v s="$1" '$1 == s && $3 != "fails" { print $3 }' "$OUTDIR/times.tsv" | median; }
ir_of() { awk -v s="$1" '$1 == s { print $2 }' "$OUTDIR/instr.tsv" 2>/dev/null | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
rs_us=$(us_of rsocket) rs_ir=$(ir_of rsocket)
{
	cat "$OUTDIR/host.txt"
	echo
	echo "| setup | us per round trip (median) | vs rsocket | instructions per round trip (client) | vs rsocket |"
	echo "|---|---|---|---|---|"
	for s in before after rsocket; do
		us=$(us_of $s) ir=$(ir_of $s)
		echo "| $s | $us | $(ratio "$us" "$rs_us")x | ${ir:--} | $(ratio "$ir" "$rs_ir")x |"
	done
	if grep -q '^after-b' "$OUTDIR/instr.tsv" 2>/dev/null; then
		echo
		echo "| blocking calls (-T b) | instructions per round trip (client) | vs rsocket |"
		echo "|---|---|---|"
		for s in before-b after-b rsocket-b; do
			ir=$(ir_of $s)
			echo "| $s | ${ir:--} | $(ratio "$ir" "$(ir_of rsocket-b)")x |"
		done
		echo
		echo "blocking, after/before: instructions $(ratio "$(ir_of after-b)" "$(ir_of before-b)")x"
	fi
	echo
	echo "after/before: time $(ratio "$(us_of after)" "$(us_of before)")x, instructions $(ratio "$(ir_of after)" "$(ir_of before)")x"
	[ -s "$OUTDIR/notes.txt" ] && { echo; sed 's/^/note: /' "$OUTDIR/notes.txt"; }
} | tee "$OUTDIR/table.md"
grep -q '^FAIL' "$OUTDIR/notes.txt" 2>/dev/null && rc=1
exit $rc
