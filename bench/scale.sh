#!/bin/bash
# scale.sh: issue 15's measurements (many connections per process) in ONE boot
# of the soft-RoCE test bed (bench/scale_inside.sh runs there):
#   (i)   connection rate: SCALE_CYCLES (1000) sequential connect-echo-close
#         cycles of 64 bytes (tests/progs/connects) on kernel TCP and under
#         sdpshim (both ends preloaded); cycles/s after the first cycle (the
#         first is sdpshim's first contact with the server, so the rest go to a
#         server already linked) and the ratio sdpshim/TCP (issue 15: >= 0.5);
#   (ii)  a busy stream of SCALE_BULK bytes (tests/progs/hol -m idle, every
#         byte checked) alone and beside SCALE_IDLE (1000) idle connections of
#         the same two processes, both preloaded: MB/s and the ratio
#         (issue 15: >= 0.9);
#   (iii) for each N in SCALE_N ("100 1000"), N concurrent connections
#         tests/progs/manyconn -> tests/progs/evecho, both preloaded: per process,
#         while all are open, the sum of mrlen over `rdma resource show mr`, the
#         MR count, VmPin and the RC QPs (issue 15, at N = 10000: <= 256 MiB and
#         <= 64 QPs per process).
# Medians over SCALE_ROUNDS (3) rounds, the order alternating each round.
# Every sdpshim run must have every connection on RDMA (SDPSHIM_STATS_FILE of
# both ends); a run that fell back reads FALLBACK, its reasons are in the notes,
# and the script exits 1.
#
# Usage: bench/scale.sh [-o DIR]
#        bench/scale.sh -T DIR      (the table of an earlier run, no boot)
#   -o DIR   keep the raw results there (default: a new /tmp/sdpshim-scale.*)
# Env: BUILD (build), SCALE_ROUNDS (3), SCALE_CYCLES (1000), SCALE_IDLE (1000),
#   SCALE_BULK (134217728), SCALE_N ("100 1000"; add 10000 for the issue's
#   figure, with VM_BENCH_MEM=3G), SCALE_NOFILE (1048576: RLIMIT_NOFILE of every
#   sdpshim process), SCALE_CAP (900 s per run), VM_BENCH_MEM (2G),
#   SCALE_VM_TIMEOUT (5400 s for the boot), SCALE_PARTS ("rate bulk pin": the
#   parts to run; a part left out shows "-").
# Under TCG, compare the setups of one boot with each other, never with hardware.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUTDIR= TABLE_ONLY=
while getopts "o:T:h" o; do
	case $o in
		o) OUTDIR=$OPTARG ;;
		T) OUTDIR=$OPTARG TABLE_ONLY=1 ;;
		*) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || { echo "scale: unexpected argument '$1'" >&2; exit 2; }
rc=0
if [ -z "$TABLE_ONLY" ]; then
	BUILD=${BUILD:-build}
	case "$BUILD" in /*) B=$BUILD ;; *) B=$REPO/$BUILD ;; esac
	for f in libsdpshim.so sdpshim tests/progs/connects tests/progs/hol tests/progs/manyconn tests/progs/evecho; do
		[ -f "$B/$f" ] || { echo "scale: $B/$f missing: run make first" >&2; exit 2; }
	done
	grep -q 'after_first_per_s' "$B/tests/progs/connects" ||
		{ echo "scale: $B/tests/progs/connects prints no rate line: run make" >&2; exit 2; }
	[ -n "$OUTDIR" ] || OUTDIR=$(mktemp -d /tmp/sdpshim-scale.XXXXXX)
	mkdir -p "$OUTDIR"
	OUTDIR=$(cd "$OUTDIR" && pwd)
	export BENCH_OUT=$OUTDIR BUILD=$B
	export SCALE_ROUNDS=${SCALE_ROUNDS:-3} SCALE_CYCLES=${SCALE_CYCLES:-1000} SCALE_IDLE=${SCALE_IDLE:-1000}
	export SCALE_BULK=${SCALE_BULK:-134217728} SCALE_N=${SCALE_N:-100 1000} SCALE_NOFILE=${SCALE_NOFILE:-1048576}
	export SCALE_CAP=${SCALE_CAP:-900} SCALE_PARTS=${SCALE_PARTS:-rate bulk pin}
	for p in $SCALE_PARTS; do
		case $p in rate | bulk | pin) ;; *) echo "scale: SCALE_PARTS: '$p' is not rate, bulk or pin" >&2; exit 2 ;; esac
	done
	dirty=$( [ -n "$(git -C "$REPO" status --porcelain -- base core preload ipoib_fallback 2>/dev/null)" ] &&
		echo ' + working tree changes' || true)
	{
		echo "host: $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
		echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
		echo "build: $B (HEAD $(git -C "$REPO" rev-parse --short HEAD)$dirty), lib $(sha256sum "$B/libsdpshim.so" | cut -c1-16)"
		echo "parts: $SCALE_PARTS"
		echo "runs: $SCALE_ROUNDS rounds; rate $SCALE_CYCLES cycles of 64 B; bulk $SCALE_BULK B alone and beside $SCALE_IDLE idle; pin N = $SCALE_N"
	} | tee "$OUTDIR/host.txt" >&2
	RXE_VM_TIMING_FILE=$OUTDIR/vm_timing.txt "$REPO/tests/vm/run-in-vm.sh" -n dummy -m "${VM_BENCH_MEM:-2G}" \
		-t "${SCALE_VM_TIMEOUT:-5400}" -w "$OUTDIR" -e BENCH_OUT -e BUILD -e SCALE_ROUNDS -e SCALE_CYCLES \
		-e SCALE_IDLE -e SCALE_BULK -e SCALE_N -e SCALE_NOFILE -e SCALE_CAP -e SCALE_PARTS \
		"bash $REPO/bench/scale_inside.sh" || rc=$?
	echo "scale: $(cat "$OUTDIR/vm_timing.txt" 2>/dev/null); raw results in $OUTDIR" >&2
fi
for f in rate.tsv bulk.tsv pin.tsv; do
	[ -s "$OUTDIR/$f" ] || { echo "scale: no $OUTDIR/$f (guest status $rc)" >&2; exit 1; }
done

# median COLUMN KEYCOL KEY FILE: the median of COLUMN over the ok rows whose KEYCOL is KEY
median() {
	awk -F'\t' -v c="$1" -v k="$2" -v want="$3" 'NR > 1 && $k == want && $NF == "ok" { print $c }' "$4" | sort -g |
		awk '{ v[++n] = $1 } END { if (!n) { print "-"; exit }
			m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2; printf "%.2f\n", m }'
}
# rounds COLUMN KEYCOL KEY FILE: every round's COLUMN; "VALUE(FALLBACK)" for a round
# not all on RDMA (left out of the median), or just its status when it has no value
rounds() {
	awk -F'\t' -v c="$1" -v k="$2" -v want="$3" 'NR > 1 && $k == want {
			v = ($NF == "ok") ? $c : (($c == "-") ? $NF : $c "(" $NF ")")
			printf "%s%s", s, v; s = " " }
		END { print "" }' "$4"
}
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "NA"; else printf "%.3f\n", a / b }'
}
mib() {
	awk -v b="$1" 'BEGIN { if (b == "-" || b == "") print "-"; else printf "%.1f", b / 1048576 }'
}
{
	R=$OUTDIR/rate.tsv U=$OUTDIR/bulk.tsv P=$OUTDIR/pin.tsv
	cycles=$(sed -n 's/.*rate \([0-9]*\) cycles.*/\1/p' "$OUTDIR/host.txt")
	echo
	echo "(i) connection rate: ${cycles:-N} sequential connect-echo-close cycles of 64 B (tests/progs/connects)"
	printf '  %-8s %14s %14s  %s\n' setup "cycles/s p50" "(all) p50" "after the first cycle, per round; path (client, server on RDMA)"
	for b in tcp sdpshim; do
		paths=$(awk -F'\t' -v b="$b" 'NR > 1 && $1 == b && b == "sdpshim" { printf "%s%s,%s", s, $6, $7; s = " " }' "$R")
		printf '  %-8s %14s %14s  %s%s\n' "$b" "$(median 4 1 "$b" "$R")" "$(median 3 1 "$b" "$R")" \
			"$(rounds 4 1 "$b" "$R")" "${paths:+; rdma $paths}"
	done
	rate_ratio=$(ratio "$(median 4 1 sdpshim "$R")" "$(median 4 1 tcp "$R")")
	echo "  sdpshim/tcp: $rate_ratio (issue 15: at least 0.5)"
	echo
	idle=$(awk -F'\t' 'NR > 1 && $1 != 0 { print $1; exit }' "$U")
	echo "(ii) one busy stream (tests/progs/hol -m idle), both preloaded"
	printf '  %-22s %12s  %s\n' "" "MB/s p50" "per round; path (client, server on RDMA)"
	for k in 0 ${idle:-}; do
		paths=$(awk -F'\t' -v k="$k" 'NR > 1 && $1 == k { printf "%s%s,%s", s, $5, $6; s = " " }' "$U")
		label=alone; [ "$k" = 0 ] || label="beside $k idle"
		printf '  %-22s %12s  %s; rdma %s\n' "$label" "$(median 3 1 "$k" "$U")" "$(rounds 3 1 "$k" "$U")" "$paths"
	done
	bulk_ratio=$(ratio "$(median 3 1 "${idle:-x}" "$U")" "$(median 3 1 0 "$U")")
	echo "  with idle/alone: $bulk_ratio (issue 15: at least 0.9)"
	echo
	echo "(iii) per process, N concurrent connections manyconn -> evecho, all open (rdma resource show)"
	printf '  %7s %-9s %13s %10s %7s %10s %7s %13s  %s\n' N process "live on rdma" "MR MiB" MRs "VmPin MiB" "RC QPs" "stats rdma" status
	awk -F'\t' 'NR > 1' "$P" | while IFS=$'\t' read -r n who live mrb mrs pin qps st status; do
		printf '  %7s %-9s %13s %10s %7s %10s %7s %13s  %s\n' "$n" "$who" "$live" "$(mib "$mrb")" "$mrs" \
			"$(awk -v k="$pin" 'BEGIN { if (k == "-") print "-"; else printf "%.1f", k / 1024 }')" "$qps" "$st" "$status"
	done
	echo "  issue 15, at N = 10000: at most 256 MiB of MRs and 64 RC QPs per process"
	[ -s "$OUTDIR/notes.txt" ] && { echo; echo "notes:"; sed 's/^/  /' "$OUTDIR/notes.txt"; }
	echo
	echo "scale: connect_rate_ratio=$rate_ratio idle_throughput_ratio=$bulk_ratio"
} | tee "$OUTDIR/table.txt"

if awk -F'\t' 'FNR > 1 && $NF != "ok" { bad = 1 } END { exit !bad }' "$OUTDIR/rate.tsv" "$OUTDIR/bulk.tsv" "$OUTDIR/pin.tsv"; then
	echo "scale: FAILED: not every run was all path=rdma and byte-exact (see notes, $OUTDIR)" >&2
	exit 1
fi
[ "$rc" = 0 ] || { echo "scale: the guest script ended with status $rc" >&2; exit 1; }
exit 0
