#!/bin/bash
# connect_bind.sh: what the binding handshake costs at connect.  Compares the
# library of git rev $BASE_REV (default ad1ce48, the last one without it: its
# server sends ATTACH as soon as accept() matches the channel, with no urgent
# byte and PROOF on TCP first) with the working tree's build, in ONE boot of the
# soft-RoCE test bed.
#
# Usage: bench/connect_bind.sh [-o DIR] [N]
#        bench/connect_bind.sh -T DIR      (the table of an earlier run, no boot)
#   N        connect-echo-close cycles per client run (default 200)
#   -o DIR   keep the raw results there (default: a new /tmp/sdpshim-connect-bind.*)
# Env: BASE_REV (ad1ce48), BUILD (build: the "after" build and the connects
#   program used for both), CB_ROUNDS (4: runs per build; odd rounds run
#   before first, even rounds after first), CB_BYTES (64: payload per
#   connection), CB_LOG (info: SDPSHIM_LOG of both ends), CB_LAT (1: also
#   ib_send_lat -R in the same boot; 0 skips it), VM_BENCH_MEM (1536M).
#
# The baseline is built once into .cache/bench-base/REV (git archive + make) and
# reused.  Inside the guest (bench/connect_bind_inside.sh) each run is a preloaded
# `connects` echo server and a preloaded `connects` client, both under the same
# build; connect_ms is the connect() call, first_ms the time from the start of
# connect() to the first echoed byte (the channel usable); the rate is connects'
# own cycles/s after the first cycle, beside the client's voluntary context
# switches per cycle (/usr/bin/time) and the ratios to TCP.  Every connection of
# both builds must report path=rdma in the stats files, else the bench exits 1.
# Under TCG, compare the two builds with each other, never with hardware.
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
rc=0
if [ -z "$TABLE_ONLY" ]; then
N=${1:-200}
case $N in '' | *[!0-9]*) echo "connect_bind: N must be a number" >&2; exit 2 ;; esac
[ "$N" -ge 2 ] || { echo "connect_bind: N must be at least 2 (the first of each run is not counted)" >&2; exit 2; }
BASE_REV=${BASE_REV:-ad1ce48}
BUILD=${BUILD:-build}
case "$BUILD" in /*) AFTER=$BUILD ;; *) AFTER=$REPO/$BUILD ;; esac
for f in libsdpshim.so sdpshim tests/progs/connects; do
	[ -f "$AFTER/$f" ] || { echo "connect_bind: $AFTER/$f missing: run make first" >&2; exit 2; }
done
grep -q 'first_ms=' "$AFTER/tests/progs/connects" ||
	{ echo "connect_bind: $AFTER/tests/progs/connects prints no first_ms: run make" >&2; exit 2; }

# --- the baseline build, cached -------------------------------------------------
. "$REPO/bench/base_build.bash"
base_build connect_bind "$BASE_REV"
BEFORE=$BASE_BUILD_DIR
rev=$(cat "$BEFORE/.bench-built")

[ -n "$OUTDIR" ] || OUTDIR=$(mktemp -d /tmp/sdpshim-connect-bind.XXXXXX)
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
export BENCH_OUT=$OUTDIR CB_N=$N CB_BEFORE=$BEFORE CB_AFTER=$AFTER CB_PROGS=$AFTER/tests/progs
export CB_ROUNDS=${CB_ROUNDS:-4} CB_BYTES=${CB_BYTES:-64} CB_LOG=${CB_LOG:-info} CB_LAT=${CB_LAT:-1}
dirty=$( [ -n "$(git -C "$REPO" status --porcelain -- base core preload ipoib_fallback 2>/dev/null)" ] &&
	echo ' + working tree changes' || true)
{
	echo "host: $(hostname), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
	echo "started: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "before: $BASE_REV ($(git -C "$REPO" rev-parse --short "$rev")), lib $(sha256sum "$BEFORE/libsdpshim.so" | cut -c1-16)"
	echo "after:  $BUILD (HEAD $(git -C "$REPO" rev-parse --short HEAD)$dirty), lib $(sha256sum "$AFTER/libsdpshim.so" | cut -c1-16)"
	echo "runs: $CB_ROUNDS rounds x {before, after, tcp}, N=$N connects each, -b $CB_BYTES; conn 1 of each run not counted"
} | tee "$OUTDIR/host.txt" >&2

echo "$CB_ROUNDS" >"$OUTDIR/rounds.txt"
RXE_VM_TIMING_FILE=$OUTDIR/vm_timing.txt "$REPO/tests/vm/run-in-vm.sh" -n dummy -m "${VM_BENCH_MEM:-1536M}" \
	-t 1500 -w "$OUTDIR" -e BENCH_OUT -e CB_N -e CB_BEFORE -e CB_AFTER -e CB_PROGS -e CB_ROUNDS \
	-e CB_BYTES -e CB_LOG -e CB_LAT "bash $REPO/bench/connect_bind_inside.sh" || rc=$?
fi
CB_ROUNDS=$(cat "$OUTDIR/rounds.txt" 2>/dev/null || echo 0)

TSV=$OUTDIR/conns.tsv
[ -s "$TSV" ] || { echo "connect_bind: no results in $TSV (rc $rc)" >&2; exit 1; }
echo "connect_bind: $(cat "$OUTDIR/vm_timing.txt" 2>/dev/null); raw results in $OUTDIR" >&2

# The table: pooled over the rounds, conn 1 of each run left out.  Median of an
# even count = mean of the two middle values; p90 = nearest rank.
stats() {   # build column -> "n median p90"
	awk -F'\t' -v b="$1" -v c="$2" 'NR > 1 && $1 == b && $3 > 1 { print $c }' "$TSV" | sort -g |
		awk '{ v[++n] = $1 }
		END {
			if (!n) { print 0, "-", "-"; exit }
			m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
			r = int(0.9 * n); if (r < 0.9 * n) r++
			printf "%d %.2f %.2f\n", n, m, v[r]
		}'
}
gap() {   # build -> median of first_ms - connect_ms
	awk -F'\t' -v b="$1" 'NR > 1 && $1 == b && $3 > 1 { print $5 - $4 }' "$TSV" | sort -g |
		awk '{ v[++n] = $1 } END { if (!n) { print "-"; exit }
			printf "%.2f\n", (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}
{
	echo
	printf '%-8s %5s %10s %10s %10s %10s %12s  %s\n' build n "connect" "connect" "first" "first" "first-conn" path
	printf '%-8s %5s %10s %10s %10s %10s %12s  %s\n' "" "" "p50 ms" "p90 ms" "p50 ms" "p90 ms" "p50 ms" ""
	for b in before after tcp; do
		read -r n cm cp <<<"$(stats "$b" 4)"
		read -r _ fm fp <<<"$(stats "$b" 5)"
		eval "${b}_cm=$cm ${b}_fm=$fm"
		# path: connections on rdma / all, client and server stats of every run of b
		path=$(awk -F'\t' -v b="$b" '$1 == b { split($3, c, "/"); split($4, s, "/"); r += c[1] + s[1]; t += c[2] + s[2]
			st = st (st ? "," : "") $5 }
			END { if (b == "tcp") print "tcp (no preload), runs " st; else printf "rdma %d/%d, runs %s\n", r, t, st }' "$OUTDIR/runs.tsv" 2>/dev/null)
		printf '%-8s %5s %10s %10s %10s %10s %12s  %s\n' "$b" "$n" "$cm" "$cp" "$fm" "$fp" "$(gap "$b")" "$path"
	done
	d_c=$(awk -v a="$after_cm" -v b="$before_cm" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%+.2f", a - b }')
	d_f=$(awk -v a="$after_fm" -v b="$before_fm" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%+.2f", a - b }')
	printf '%-8s %5s %10s %10s %10s %10s\n' "after-before" "" "$d_c" "" "$d_f" ""
	echo
	echo "per run, in the order run (medians of conns 2..N; conn 1 also opens the device):"
	awk -F'\t' '
	function med(list,   v, n, i, j, t) {
		n = split(substr(list, 2), v, " ")
		for (i = 2; i <= n; i++) { t = v[i] + 0; for (j = i - 1; j >= 1 && v[j] + 0 > t; j--) v[j + 1] = v[j]; v[j + 1] = t }
		return n ? ((n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2) : -1
	}
	NR > 1 {
		k = $1 " r" $2
		if (!(k in seen)) { seen[k] = 1; o[++no] = k }
		if ($3 == 1) { c1[k] = $4; f1[k] = $5 } else { c[k] = c[k] " " $4; f[k] = f[k] " " $5; n[k]++ }
	}
	END {
		for (i = 1; i <= no; i++) {
			k = o[i]
			printf "  %-10s n=%-4d connect p50 %7.2f  first p50 %7.2f   conn 1: connect %7.1f  first %7.1f\n",
			       k, n[k], med(c[k]), med(f[k]), c1[k], f1[k]
		}
	}' "$TSV"
	echo
	echo "rate: cycles/s after the first (connects' own line), per run in the order run, and the median;"
	echo "client voluntary context switches per cycle (/usr/bin/time, all threads, cycle 1 included)"
	for b in before after tcp; do
		rates= vcs=
		for r in $(seq 1 "$CB_ROUNDS"); do
			f=$OUTDIR/$b.r$r.client.out
			rates="$rates $(sed -n 's/.*after_first_per_s=\([0-9.]*\).*/\1/p' "$f" 2>/dev/null | grep . || echo -)"
			vcs="$vcs $(awk -v n="$N" 'NR == 1 && $1 ~ /^[0-9]+$/ { printf "%.1f", $1 / n; f = 1 } END { if (!f) print "-" }' \
				"$OUTDIR/$b.r$r.client.vcs" 2>/dev/null || echo -)"
		done
		med=$(echo "$rates" | tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -g |
			awk '{ v[++n] = $1 } END { if (!n) { print "-"; exit } printf "%.1f\n", (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }')
		eval "${b}_rate=$med"
		printf '  %-8s p50 %8s   runs:%s   vcs/cycle:%s\n' "$b" "$med" "$rates" "$vcs"
	done
	echo
	echo "where a cycle went: client medians over cycles 2..N, ms (connects' phases line):"
	echo "connect(), connect() to the first echoed byte, shutdown(SHUT_WR) to EOF, close()"
	for b in before after tcp; do
		for r in $(seq 1 "$CB_ROUNDS"); do
			sed -nE "s/^phases cycles=[0-9]+ (.*)$/  $b r$r  \1/p" "$OUTDIR/$b.r$r.client.out" 2>/dev/null
		done
	done
	echo
	awk -v a="$after_rate" -v b="$before_rate" -v t="$tcp_rate" 'BEGIN {
		if (a == "-" || b == "-" || t == "-" || t == 0 || b == 0) { print "  ratios: NA"; exit }
		printf "  after/before %.3f   before/tcp %.3f   after/tcp %.3f (issue 15: at least 0.5)\n", a / b, b / t, a / t }'
	[ -s "$OUTDIR/lat.txt" ] && { echo; cat "$OUTDIR/lat.txt"; }
	[ -s "$OUTDIR/notes.txt" ] && { echo; echo "notes:"; sed 's/^/  /' "$OUTDIR/notes.txt"; }
	echo
	delta=$(awk -v a="$after_fm" -v b="$before_fm" 'BEGIN { if (a == "-" || b == "-") print "NA"; else printf "%.2f", a - b }')
	echo "connect_bind: before_first_ms=${before_fm/-/NA} after_first_ms=${after_fm/-/NA} delta_ms=$delta"
} | tee "$OUTDIR/table.txt"

# A run that fell back (or failed) means these are not sdpshim-over-RDMA figures.
if grep -qvP '\tok$' <(awk -F'\t' '$1 != "tcp"' "$OUTDIR/runs.tsv" 2>/dev/null) ||
	[ "$(awk -F'\t' '$1 != "tcp"' "$OUTDIR/runs.tsv" 2>/dev/null | wc -l)" -ne $((2 * CB_ROUNDS)) ]; then
	echo "connect_bind: FAILED: not every run of both builds was all path=rdma (see notes, $OUTDIR/*.log)" >&2
	exit 1
fi
[ "$rc" = 0 ] || { echo "connect_bind: the guest script ended with status $rc" >&2; exit 1; }
exit 0
