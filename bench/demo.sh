#!/bin/bash
# demo.sh: the README's main job.  Boots the soft-RoCE test bed once and,
# inside it, runs the same workloads twice on the rxe device's address:
# plain kernel TCP ("before") and both ends under sdpshim ("after").  Prints
# one table with requests/s, p50 latency and throughput; then what carries
# over to hardware: redis-server's read/write syscalls and context switches
# per request (/proc), CPU copies per byte of an iperf3 stream, and rstream
# under sdpshim against rsocket's own on the same device; a short reading of
# which figures the emulator distorts; and the evidence that the "after" run
# really used RDMA (path counters and RC QPs).  The structural figures are
# also drawn, into DEMO_OUT/demo.png (gnuplot; bench/demo.png is one run's).
#
# Usage: bench/demo.sh        (run `make` first; env REQUESTS=20000 CLIENTS=10,
#                              DEMO_OUT=build/demo: demo.tsv and demo.png)
# Under software emulation rxe is slower than kernel TCP: the demo proves the
# path, it is not a performance claim (see bench/README.md for measurements).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ "${1:-}" != --inside ]; then
	[ -f "$REPO/build/libsdpshim.so" ] || { echo "demo: run make first" >&2; exit 2; }
	DEMO_OUT=${DEMO_OUT:-$REPO/build/demo}
	mkdir -p "$DEMO_OUT"
	DEMO_OUT=$(cd "$DEMO_OUT" && pwd)
	export DEMO_OUT
	rm -f "$DEMO_OUT/demo.tsv" "$DEMO_OUT/demo.png"
	rc=0
	"$REPO/tests/vm/run-in-vm.sh" -m 1536M -e REQUESTS -e CLIENTS -e DEMO_OUT -w "$DEMO_OUT" \
		"bash $REPO/bench/demo.sh --inside" || rc=$?
	if [ -s "$DEMO_OUT/demo.tsv" ] && command -v gnuplot >/dev/null; then
		gnuplot <<GP
set terminal png size 900,520
set output "$DEMO_OUT/demo.png"
set title "What carries over to RDMA hardware: kernel TCP against sdpshim (soft-RoCE, one boot)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:*]
set grid ytics
set key outside bottom center horizontal
set offsets 0, 0, 0.5, 0
set ylabel "lower is less work for the CPU"
set datafile separator "\t"
set key autotitle columnhead
set xrange [-0.6:2.6]
plot "$DEMO_OUT/demo.tsv" using 2:xtic(1), "" using 3
GP
		echo "demo: plot in $DEMO_OUT/demo.png"
	fi
	exit "$rc"
fi

IP=${RXE_IP:-10.77.0.1}
LIB=$REPO/build/libsdpshim.so
REQUESTS=${REQUESTS:-20000}
CLIENTS=${CLIENTS:-10}
WORK=$(mktemp -d)
export SDPSHIM_CONNECT_TIMEOUT_MS=10000 SDPSHIM_ACK_TIMEOUT=19 SDPSHIM_RUN_DIR=$WORK
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT

wait_port() {
	local hex i
	hex=$(printf '%04X' "$1")
	for i in $(seq 200); do
		grep -q ":$hex 00000000:0000 0A" /proc/net/tcp && return 0
		sleep 0.05
	done
	echo "demo: nothing listens on port $1" >&2
	return 1
}

# The kernel's part of a request, on redis-server, from /proc: context
# switches (voluntary and not, every thread) and read/write-family system
# calls (/proc/PID/io: read, write and their vector forms, on sockets,
# eventfds and, under sdpshim, the device's doorbell).  The figures that
# carry over to RDMA hardware, where the emulated device's speed does not.
# (perf would count every syscall, but attaching it to a process has locked
# up the emulated guest; bench/vm_bench.sh counts them all.)
proc_sum() {   # proc_sum PID FILE FIELD...: the fields summed over the process's threads
	local pid=$1 file=$2
	shift 2
	{ cat /proc/"$pid"/task/*/"$file" 2>/dev/null || true; } |
		awk -v fields=" $* " 'index(fields, " " $1 " ") { n += $2 } END { print n + 0 }'
}
ctx_switches() { proc_sum "$1" status voluntary_ctxt_switches: nonvoluntary_ctxt_switches:; }
rw_calls() { proc_sum "$1" io syscr: syscw:; }
per_request() { awk -v a="$1" -v n="$2" 'BEGIN { printf "%.2f", a / n }'; }

# run_side MODE: one redis + iperf3 round; prints
# "rps_get rps_set p50_get gbits qps rw_calls_per_req ctxsw_per_req".
run_side() {
	local mode=$1 pre=() stats=$WORK/stats.$1.jsonl out get set p50 gbits qps=0 cs0 cs1 rw0 rw1
	[ "$mode" = sdpshim ] && pre=(env LD_PRELOAD="$LIB" SDPSHIM_STATS_FILE="$stats")
	"${pre[@]}" redis-server --port 6390 --bind "$IP" --save '' --appendonly no \
		--protected-mode no >"$WORK/redis.$mode.log" 2>&1 &
	local rpid=$!
	wait_port 6390
	(	# the most RC QPs seen while the benchmark runs
		local most=0 now
		while [ ! -e "$WORK/bench.done" ]; do
			now=$(rdma resource show qp | grep -c 'type RC' || true)
			[ "$now" -gt "$most" ] && most=$now && echo "$most" >"$WORK/qps.$mode"
			sleep 0.2
		done
	) &
	cs0=$(ctx_switches "$rpid"); rw0=$(rw_calls "$rpid")
	out=$(timeout 300 "${pre[@]}" redis-benchmark -h "$IP" -p 6390 -n "$REQUESTS" \
		-c "$CLIENTS" -t get,set -q 2>&1 | tr '\r' '\n')
	cs1=$(ctx_switches "$rpid"); rw1=$(rw_calls "$rpid")
	touch "$WORK/bench.done"
	get=$(sed -nE 's/^GET: ([0-9.]+) requests per second, p50=([0-9.]+).*/\1/p' <<<"$out" | tail -1)
	p50=$(sed -nE 's/^GET: ([0-9.]+) requests per second, p50=([0-9.]+).*/\2/p' <<<"$out" | tail -1)
	set=$(sed -nE 's/^SET: ([0-9.]+) requests per second.*/\1/p' <<<"$out" | tail -1)
	wait $! 2>/dev/null || true
	rm -f "$WORK/bench.done"
	qps=$(cat "$WORK/qps.$mode" 2>/dev/null || echo 0)
	kill "$rpid"; wait "$rpid" 2>/dev/null || true
	"${pre[@]}" iperf3 -s -1 -B "$IP" >"$WORK/iperf.$mode.log" 2>&1 &
	wait_port 5201
	gbits=$(timeout 60 "${pre[@]}" iperf3 -c "$IP" -t 3 --json 2>/dev/null |
		python3 -c 'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))')
	wait
	echo "${get:-fail} ${set:-fail} ${p50:-fail} ${gbits:-fail} $qps" \
		"$(per_request $((rw1 - rw0)) $((REQUESTS * 2))) $(per_request $((cs1 - cs0)) $((REQUESTS * 2)))"
}

# copies_per_byte STATS COMM: CPU copies per byte moved, both ends, of COMM's
# connections.  By design (docs/links.md) a byte by buffer copy is copied
# twice at each end on a link (app -> staging -> link slot; link buffer ->
# staging -> app) and a zero-copy byte never; the stats split the bytes.
copies_per_byte() {
	python3 -S - "$1" "$2" <<'PY'
import json, sys
copy = zc = 0
for line in open(sys.argv[1]):
    c = json.loads(line)
    if c["comm"].startswith(sys.argv[2]) and c["path"] == "rdma":
        copy += c["copy_bytes_received"]
        zc += c["zcopy_bytes_received"]
print("%.2f %.0f" % (4.0 * copy / (copy + zc), 100.0 * zc / (copy + zc)) if copy + zc else "fail fail")
PY
}

# rstream_us MODE SIZE COUNT [ITERATIONS]: the client's usec/xfer, or fail.
# MODE: rsocket (its own rstream, no preload) or sdpshim (rstream -T s, plain
# sockets, both ends preloaded).
RS_PORT=7470
rstream_us() {
	local mode=$1 size=$2 count=$3 pre=(env) opt=(-T s) spid
	RS_PORT=$((RS_PORT + 1))
	[ "$mode" = rsocket ] && opt=()
	[ "$mode" = sdpshim ] && pre=(env LD_PRELOAD="$LIB" SDPSHIM_STATS_FILE="$WORK/stats.rstream.jsonl")
	[ -n "${4:-}" ] && opt+=(-I "$4")
	"${pre[@]}" rstream "${opt[@]}" -b "$IP" -p "$RS_PORT" -S "$size" -C "$count" >"$WORK/rs.srv" 2>&1 &
	spid=$!
	if [ "$mode" = sdpshim ]; then wait_port "$RS_PORT"; else sleep 2; fi   # rsocket: no TCP listener
	timeout 180 "${pre[@]}" rstream "${opt[@]}" -s "$IP" -p "$RS_PORT" -S "$size" -C "$count" \
		>"$WORK/rs.cli" 2>&1 || true
	kill "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
	awk '$1 == "custom" { u = $NF } END { print u ? u : "fail" }' "$WORK/rs.cli"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "fail" }'; }

echo "demo: soft-RoCE device: $(ibv_devices | awk 'NR > 2 { print $1 }' | tr '\n' ' ')"
read -r tcp_get tcp_set tcp_p50 tcp_gb _ tcp_rw tcp_cs < <(run_side tcp)
read -r shim_get shim_set shim_p50 shim_gb QPS shim_rw shim_cs < <(run_side sdpshim)
read -r shim_copies shim_zc_pct < <(copies_per_byte "$WORK/stats.sdpshim.jsonl" iperf3)
rs_pp=$(rstream_us rsocket 64 1 2000); shim_pp=$(rstream_us sdpshim 64 1 2000)
rs_big=$(rstream_us rsocket 65536 1000); shim_big=$(rstream_us sdpshim 65536 1000)
rdma_conns=$(grep -c '"path":"rdma"' "$WORK/stats.sdpshim.jsonl" || true)
tcp_conns=$(grep -c '"path":"tcp"' "$WORK/stats.sdpshim.jsonl" || true)

printf '\n%-28s %14s %14s\n' "workload ($IP, rxe)" "kernel TCP" "sdpshim"
printf '%-28s %14s %14s\n' "redis GET requests/s" "$tcp_get" "$shim_get"
printf '%-28s %14s %14s\n' "redis SET requests/s" "$tcp_set" "$shim_set"
printf '%-28s %14s %14s\n' "redis GET p50 (ms)" "$tcp_p50" "$shim_p50"
printf '%-28s %14s %14s\n' "iperf3 (Gbit/s)" "$tcp_gb" "$shim_gb"
printf '%s\n' "redis-server, per request (GET and SET, -c $CLIENTS): kernel work, which carries over to hardware"
printf '%-28s %14s %14s\n' "  read/write syscalls" "$tcp_rw" "$shim_rw"
printf '%-28s %14s %14s\n' "  context switches" "$tcp_cs" "$shim_cs"
printf '%s\n' "iperf3, both ends: CPU copies per byte (TCP: user<->kernel, one each end)"
printf '%-28s %14s %14s\n' "  copies per byte" "2.00" "$shim_copies"
printf '%-28s %14s %14s\n' "  share by zero-copy (%)" "-" "$shim_zc_pct"
printf '%s\n' "rstream on the same device: sdpshim (plain sockets) against rsocket's own"
printf '%-28s %14s %14s %8s\n' "" "rsocket" "sdpshim" "ratio"
printf '%-28s %14s %14s %8s\n' "  64 B ping-pong (us/xfer)" "$rs_pp" "$shim_pp" "$(ratio "$rs_pp" "$shim_pp")"
printf '%-28s %14s %14s %8s\n' "  64 KiB stream (us/xfer)" "$rs_big" "$shim_big" "$(ratio "$rs_big" "$shim_big")"
echo "  (ratio above 1: sdpshim is faster than rsocket on this device)"
cat <<'READING'

reading: under emulation the RDMA device is software in the guest's kernel,
sharing 2 emulated CPUs with both apps, so requests/s, latency and Gbit/s
above say nothing about hardware: there rxe loses to kernel TCP by
construction.  What the emulator does not distort is the work each request
costs: the syscalls and context switches per request, the copies per byte,
the RC QPs, and the ratio to rsocket, which runs on the same emulated device.
On a real NIC the device's work leaves the CPU and those counts are what is
left.
READING
if [ -n "${DEMO_OUT:-}" ] && [ -d "$DEMO_OUT" ]; then
	printf 'metric\tkernel TCP\tsdpshim\n' >"$DEMO_OUT/demo.tsv"
	printf 'syscalls/request (rd+wr)\t%s\t%s\n' "$tcp_rw" "$shim_rw" >>"$DEMO_OUT/demo.tsv"
	printf 'ctx switches/request\t%s\t%s\n' "$tcp_cs" "$shim_cs" >>"$DEMO_OUT/demo.tsv"
	printf 'copies/byte (iperf3)\t2.00\t%s\n' "$shim_copies" >>"$DEMO_OUT/demo.tsv"
fi
printf '\nsdpshim connections: %s on RDMA, %s on TCP; RC QPs seen during redis: %s\n' \
	"$rdma_conns" "$tcp_conns" "${QPS:-0}"
echo "(software RoCE under emulation: correctness, not speed; see bench/README.md)"
[ "$rdma_conns" -gt 0 ] && [ "$tcp_conns" -eq 0 ]
