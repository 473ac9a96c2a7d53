#!/bin/bash
# zcopy_sweep.sh: copy versus zero-copy on soft-RoCE.  Boots the test bed once
# and runs bench/zcopy_sweep_inside.sh there (one byte-checked stream per write
# size for kernel TCP, sdpshim copy-only, sdpshim zero-copy and rsocket), then
# prints a table (Gbit/s, CPU seconds per GiB for each end, ratios against
# kernel TCP and rsocket from the same boot) and plots throughput against write
# size into DIR/zcopy.png with gnuplot.
# Usage: bench/zcopy_sweep.sh [-o DIR]      Env: ZC_SIZES, ZC_BYTES, BUILD.
# Under TCG rxe is slower than kernel TCP: compare setups, not absolute figures.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUTDIR=
while getopts "o:h" o; do
	case $o in
		o) OUTDIR=$OPTARG ;;
		*) sed -n '2,/^set -euo/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 2 ;;
	esac
done
[ -f "$REPO/${BUILD:-build}/libsdpshim.so" ] || { echo "zcopy_sweep: run make first" >&2; exit 2; }
[ -n "$OUTDIR" ] || OUTDIR=$(mktemp -d /tmp/sdpshim-zcopy.XXXXXX)
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
export BENCH_OUT=$OUTDIR BUILD=${BUILD:-build}
FWD=(-e BENCH_OUT -e BUILD)
for v in ZC_SIZES ZC_BYTES; do [ -n "${!v+x}" ] && FWD+=(-e "$v"); done
"$REPO/tests/vm/run-in-vm.sh" -n dummy -m "${VM_BENCH_MEM:-1536M}" -t 1500 -w "$OUTDIR" "${FWD[@]}" \
	"bash $REPO/bench/zcopy_sweep_inside.sh"
TSV=$OUTDIR/zcopy.tsv
[ -s "$TSV" ] || { echo "zcopy_sweep: no results in $TSV" >&2; exit 1; }

# The table: one row per (size, setup), ratios against tcp and rsocket of the same size.
awk -F'\t' '
NR == 1 { next }
{ key = $1 "|" $2; gbps[key] = $5; line[++n] = $0 }
END {
	printf "%-8s %-9s %9s %8s %8s %10s %10s %6s %s\n", "size", "setup", "Gbit/s", "xTCP", "xrsocket",
	       "cli CPU s/GiB", "srv CPU s/GiB", "zc%", "path"
	for (i = 1; i <= n; i++) {
		split(line[i], f, "\t")
		t = gbps["tcp|" f[2]]; r = gbps["rsocket|" f[2]]
		xt = (f[5] + 0 > 0 && t + 0 > 0) ? sprintf("%.3f", f[5] / t) : "-"
		xr = (f[5] + 0 > 0 && r + 0 > 0) ? sprintf("%.3f", f[5] / r) : "-"
		printf "%-8s %-9s %9s %8s %8s %10s %10s %6s %s\n", f[2], f[1], f[5], xt, xr, f[6], f[7], f[8], f[9]
	}
}' "$TSV" | tee "$OUTDIR/zcopy_table.txt"

if command -v gnuplot >/dev/null; then
	for s in tcp copy zcopy rsocket; do
		awk -F'\t' -v s="$s" 'NR > 1 && $1 == s && $5 != "fail" && $9 != "FALLBACK" { print $2 / 1024, $5 }' "$TSV" \
			>"$OUTDIR/plot.$s"
	done
	gnuplot <<GP
set terminal png size 900,560
set output "$OUTDIR/zcopy.png"
set title "Throughput against write size, soft-RoCE under TCG (one stream, receiver checks every byte)"
set logscale x 2
set xlabel "write size (KiB)"
set ylabel "Gbit/s"
set key top left
set grid
plot "$OUTDIR/plot.tcp" using 1:2 with linespoints title "kernel TCP", \
     "$OUTDIR/plot.copy" using 1:2 with linespoints title "sdpshim, copy only", \
     "$OUTDIR/plot.zcopy" using 1:2 with linespoints title "sdpshim, zero-copy", \
     "$OUTDIR/plot.rsocket" using 1:2 with linespoints title "rsocket (librspreload)"
GP
	echo "zcopy_sweep: plot in $OUTDIR/zcopy.png" >&2
else
	echo "zcopy_sweep: gnuplot missing (tests/setup-debian.sh installs gnuplot-nox): no plot" >&2
fi
echo "zcopy_sweep: raw results in $OUTDIR" >&2
