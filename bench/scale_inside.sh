#!/bin/bash
# scale_inside.sh: runs inside the test bed (bench/scale.sh), as root, in one boot:
#   (i)   rate: SCALE_CYCLES sequential connect-echo-close cycles of 64 bytes
#         (tests/progs/connects), kernel TCP (nothing preloaded) and sdpshim (both
#         ends preloaded), SCALE_ROUNDS rounds each, the order alternating;
#   (ii)  bulk: one busy stream of SCALE_BULK bytes (tests/progs/hol -m idle, every
#         byte checked) alone and beside SCALE_IDLE idle connections of the same
#         two processes, both preloaded, SCALE_ROUNDS rounds each, alternating;
#   (iii) pin: for each N in SCALE_N, N concurrent connections tests/progs/manyconn
#         -> tests/progs/evecho, both preloaded; while all are open, per process
#         the sum of mrlen of its MRs, their count, VmPin and its RC QPs
#         (rdma_usage, tests/vm/vm_helpers.bash), and how many are on RDMA.
# SCALE_PARTS ("rate bulk pin") picks the parts; a part left out keeps only
# its header line.
# Writes into $BENCH_OUT: rate.tsv, bulk.tsv, pin.tsv, notes.txt, and each run's
# output and stats files.  An sdpshim run whose connections are not all on RDMA
# is marked FALLBACK (a failed one FAIL); the script then exits 1.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$HERE/../tests/helpers.bash"            # PROGS, RXE_IP, free_port, wait_port, wait_for_line
. "$HERE/../tests/vm/vm_helpers.bash"      # rdma_usage, live_paths, PY
unset SDPSHIM_LIB LD_PRELOAD SDPSHIM_CONFIG SDPSHIM_MODE SDPSHIM_STATS_FILE
ROUNDS=${SCALE_ROUNDS:-3}
CYCLES=${SCALE_CYCLES:-1000}
IDLE=${SCALE_IDLE:-1000}
BULK=${SCALE_BULK:-134217728}
NS=${SCALE_N:-100 1000}
NOFILE=${SCALE_NOFILE:-1048576}
CAP=${SCALE_CAP:-900}      # seconds any one run may take
IP=$RXE_IP
export SDPSHIM_CONNECT_TIMEOUT_MS=10000 SDPSHIM_ACK_TIMEOUT=19

# Private copies: a rebuild on the host during the run changes nothing.
W=/tmp/scale
rm -rf "$W"
mkdir -p "$W/run"
export SDPSHIM_RUN_DIR=$W/run
for f in "$BUILD/libsdpshim.so" "$BUILD/sdpshim" "$PROGS/connects" "$PROGS/hol" "$PROGS/manyconn" \
	"$PROGS/evecho"; do
	cp "$f" "$W/" || { echo "cannot copy $f" >&2; exit 2; }
done
# Every file of a run is written in the guest and copied to $BENCH_OUT when
# this script ends.  On the host's share (9p under TCG) a stats line at each
# close costs a preloaded cycle milliseconds that kernel TCP's run, which
# writes none, never pays (bench/connect_bind_inside.sh).
OUT=$W/out
mkdir -p "$OUT"
trap 'cp -a "$OUT/." "$BENCH_OUT/"' EXIT
SDPSHIM_BIN=$W/sdpshim                     # live_paths reads the segments with it
SHIM=(env "SDPSHIM_LIB=$W/libsdpshim.so" "$W/sdpshim" run --)
LIM=(prlimit "--nofile=$NOFILE:$NOFILE")
: >"$OUT/notes.txt"
note() { echo "$*" | tee -a "$OUT/notes.txt" >&2; }

# Thousands of client ports, each held 60 s in TIME_WAIT after it closed (the
# shim binds before it connects), and several fds per connection.
sysctl -qw net.ipv4.ip_local_port_range="10000 65000"
[ "$(sysctl -n fs.file-max)" -ge 4194304 ] || sysctl -qw fs.file-max=4194304
note "guest: $(nproc) vCPUs, $(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo) MiB, lib $(sha256sum "$W/libsdpshim.so" | cut -c1-16)"

# rdma_of FILE [ROLE]: "RDMA/LINES" of a stats file (path rdma and reason none)
rdma_of() {
	"$PY" -S - "$1" "${2:-}" <<'EOF'
import json, os, sys
path, role = sys.argv[1], sys.argv[2]
lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
lines = [c for c in lines if not role or c["role"] == role]
print("%d/%d" % (sum(c["path"] == "rdma" and c["reason"] == "none" for c in lines), len(lines)))
EOF
}

# reasons_of FILE: "reason count; ..." of a stats file
reasons_of() {
	grep -o '"reason":"[a-z_]*"' "$1" 2>/dev/null | sort | uniq -c | awk '{ printf "%s%s %d", s, substr($2, 11, length($2) - 11), $1; s = "; " }'
}

# stop_wait PID SECS: wait for PID up to SECS, then SIGTERM it; its exit status
stop_wait() {
	local i
	for i in $(seq 1 $(( $2 * 10 ))); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$1" 2>/dev/null && kill -TERM "$1"
	wait "$1"
}

# --- (i) connection rate ---------------------------------------------------------
printf 'setup\tround\tper_s\tafter_first_per_s\telapsed_ms\tclient_rdma\tserver_rdma\tstatus\n' >"$OUT/rate.tsv"
rate_run() {   # rate_run tcp|sdpshim ROUND
	local b=$1 r=$2 tag=rate.$1.r$2 port spid crc=0 src=0 pre=() status=ok line cr=- sr=-
	[ "$b" = sdpshim ] && pre=("${SHIM[@]}")
	port=$(free_port)
	rm -f "$OUT/$tag".*
	SDPSHIM_STATS_FILE=$OUT/$tag.server.stats "${pre[@]}" "$W/connects" -s "$port" -a "$IP" -n "$CYCLES" \
		>"$OUT/$tag.server.out" 2>&1 &
	spid=$!
	if ! wait_for_line "$OUT/$tag.server.out" "^listening on $port\$" 60 2>/dev/null; then
		note "$tag: the server did not listen: $(tail -3 "$OUT/$tag.server.out" | tr '\n' ' ')"
		kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
		printf '%s\t%s\t-\t-\t-\t-\t-\tFAIL\n' "$b" "$r" >>"$OUT/rate.tsv"
		return
	fi
	SDPSHIM_STATS_FILE=$OUT/$tag.client.stats timeout -k 5 "$CAP" "${pre[@]}" "$W/connects" -c "$IP" \
		-p "$port" -n "$CYCLES" -b 64 -g "$CAP" >"$OUT/$tag.client.out" 2>&1 || crc=$?
	stop_wait "$spid" 30 || src=$?
	line=$(sed -nE 's/^rate cycles=[0-9]+ elapsed_ms=([0-9.]+) per_s=([0-9.]+) after_first_per_s=([0-9.]+)$/\2\t\3\t\1/p' \
		"$OUT/$tag.client.out")
	if [ "$crc" != 0 ] || [ "$src" != 0 ] || [ -z "$line" ] || ! grep -qx "ok $CYCLES" "$OUT/$tag.client.out"; then
		note "$tag: client rc $crc, server rc $src: $(grep -m2 -E '^FAIL|^server:' "$OUT/$tag.client.out" "$OUT/$tag.server.out" | tr '\n' ' ')"
		status=FAIL
		line=$(printf -- '-\t-\t-')
	fi
	if [ "$b" = sdpshim ]; then
		cr=$(rdma_of "$OUT/$tag.client.stats" client)
		sr=$(rdma_of "$OUT/$tag.server.stats" server)
		if [ "$cr" != "$CYCLES/$CYCLES" ] || [ "$sr" != "$CYCLES/$CYCLES" ]; then
			[ "$status" = ok ] && status=FALLBACK
			note "$tag: on RDMA: client $cr, server $sr; reasons: client $(reasons_of "$OUT/$tag.client.stats"), server $(reasons_of "$OUT/$tag.server.stats")"
		fi
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$b" "$r" "$line" "$cr" "$sr" "$status" >>"$OUT/rate.tsv"
	echo "$tag: $status $(grep '^rate ' "$OUT/$tag.client.out")" >&2
}

# --- (ii) one busy stream, alone and beside idle connections -------------------------
printf 'idle\tround\tmb_per_s\tms\tclient_rdma\tserver_rdma\tstatus\n' >"$OUT/bulk.tsv"
bulk_run() {   # bulk_run IDLE ROUND
	local k=$1 r=$2 tag=bulk.k$1.r$2 port spid crc=0 src=0 status=ok line cr sr
	port=$(free_port)
	rm -f "$OUT/$tag".*
	SDPSHIM_STATS_FILE=$OUT/$tag.server.stats "${LIM[@]}" "${SHIM[@]}" "$W/hol" -s "$port" -a "$IP" \
		-n $(( k + 1 )) >"$OUT/$tag.server.out" 2>&1 &
	spid=$!
	if ! wait_for_line "$OUT/$tag.server.out" "^listening on $port\$" 60 2>/dev/null; then
		note "$tag: the server did not listen: $(tail -3 "$OUT/$tag.server.out" | tr '\n' ' ')"
		kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
		printf '%s\t%s\t-\t-\t-\t-\tFAIL\n' "$k" "$r" >>"$OUT/bulk.tsv"
		return
	fi
	SDPSHIM_STATS_FILE=$OUT/$tag.client.stats timeout -k 5 "$CAP" "${LIM[@]}" "${SHIM[@]}" "$W/hol" \
		-c "$IP" -p "$port" -m idle -k "$k" -b "$BULK" >"$OUT/$tag.client.out" 2>&1 || crc=$?
	stop_wait "$spid" 30 || src=$?
	line=$(sed -nE 's/^busy: [0-9]+ bytes in ([0-9]+) ms = ([0-9.]+) MB\/s with [0-9]+ idle connections, every byte checked ok$/\2\t\1/p' \
		"$OUT/$tag.client.out")
	if [ "$crc" != 0 ] || [ "$src" != 0 ] || [ -z "$line" ]; then
		note "$tag: client rc $crc, server rc $src: $(grep -m2 -E '^FAIL|^server:' "$OUT/$tag.client.out" "$OUT/$tag.server.out" | tr '\n' ' ')"
		status=FAIL
		line=$(printf -- '-\t-')
	fi
	cr=$(rdma_of "$OUT/$tag.client.stats" client)
	sr=$(rdma_of "$OUT/$tag.server.stats" server)
	if [ "$cr" != "$(( k + 1 ))/$(( k + 1 ))" ] || [ "$sr" != "$(( k + 1 ))/$(( k + 1 ))" ]; then
		[ "$status" = ok ] && status=FALLBACK
		note "$tag: on RDMA: client $cr, server $sr; reasons: client $(reasons_of "$OUT/$tag.client.stats"), server $(reasons_of "$OUT/$tag.server.stats")"
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$k" "$r" "$line" "$cr" "$sr" "$status" >>"$OUT/bulk.tsv"
	echo "$tag: $status $(grep '^busy: ' "$OUT/$tag.client.out")" >&2
}

# --- (iii) pinned memory and QPs per process at N connections --------------------------
printf 'n\tprocess\tlive_rdma\tmr_bytes\tmrs\tvmpin_kb\trc_qps\tstats_rdma\tstatus\n' >"$OUT/pin.tsv"
pin_run() {   # pin_run N
	local n=$1 tag=pin.n$1 port epid spid cpid crc=0 erc=0 status=ok lc lsv cr sr who pid live st
	port=$(free_port)
	rm -f "$OUT/$tag".*
	SDPSHIM_STATS_FILE=$OUT/$tag.stats "${LIM[@]}" "${SHIM[@]}" "$W/evecho" -s "$port" -a "$IP" -w 4096 \
		>"$OUT/$tag.server.out" 2>&1 &
	epid=$!
	if ! wait_for_line "$OUT/$tag.server.out" '^listening ' 60 2>/dev/null; then
		note "$tag: evecho did not listen: $(tail -3 "$OUT/$tag.server.out" | tr '\n' ' ')"
		kill "$epid" 2>/dev/null; wait "$epid" 2>/dev/null
		printf '%s\t-\t-\t-\t-\t-\t-\t-\tFAIL\n' "$n" >>"$OUT/pin.tsv"
		return
	fi
	spid=$(sed -nE 's/^listening .* pid=([0-9]+) .*/\1/p' "$OUT/$tag.server.out")
	SDPSHIM_STATS_FILE=$OUT/$tag.stats timeout -k 5 "$CAP" "${LIM[@]}" "${SHIM[@]}" "$W/manyconn" -c "$IP" \
		-p "$port" -n "$n" -b 256 -j 64 -w "$W/$tag.release" -g "$CAP" >"$OUT/$tag.client.out" 2>&1 &
	cpid=$!
	for _ in $(seq 1 $(( CAP * 5 ))); do
		grep -qx holding "$OUT/$tag.client.out" && break
		kill -0 "$cpid" 2>/dev/null || break
		sleep 0.2
	done
	if grep -qx holding "$OUT/$tag.client.out"; then
		rdma_usage "$(sed -nE 's/^start pid=([0-9]+) .*/\1/p' "$OUT/$tag.client.out")" "$spid" >"$OUT/$tag.usage"
		lc=$(live_paths "$(sed -nE 's/^start pid=([0-9]+) .*/\1/p' "$OUT/$tag.client.out")" client)
		lsv=$(live_paths "$spid" server)
	else
		status=FAIL
		note "$tag: manyconn never held its $n connections: $(grep -m2 '^FAIL' "$OUT/$tag.client.out")"
	fi
	touch "$W/$tag.release"
	wait "$cpid" || crc=$?
	for _ in $(seq 1 600); do
		[ "$(grep -c '^close conn=' "$OUT/$tag.server.out")" -ge "$n" ] && break
		sleep 0.1
	done
	kill -TERM "$epid" 2>/dev/null
	wait "$epid" || erc=$?
	if [ "$crc" != 0 ] || [ "$erc" != 0 ] || ! grep -qx "ok $n" "$OUT/$tag.client.out"; then
		status=FAIL
		note "$tag: manyconn rc $crc, evecho rc $erc: $(grep -m2 '^FAIL' "$OUT/$tag.client.out")"
	fi
	cr=$(rdma_of "$OUT/$tag.stats" client)
	sr=$(rdma_of "$OUT/$tag.stats" server)
	if [ "$status" = ok ] && { [ "$cr" != "$n/$n" ] || [ "$sr" != "$n/$n" ]; }; then
		status=FALLBACK
		note "$tag: on RDMA: client $cr, server $sr; reasons: $(reasons_of "$OUT/$tag.stats")"
	fi
	for who in manyconn evecho; do
		if [ "$who" = manyconn ]; then pid=$(sed -nE 's/^start pid=([0-9]+) .*/\1/p' "$OUT/$tag.client.out"); live=${lc:-}; st=$cr
		else pid=$spid; live=${lsv:-}; st=$sr; fi
		if [ -s "$OUT/$tag.usage" ]; then
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$who" "$(tr ' ' / <<<"${live:--}")" \
				"$(usage_field "$OUT/$tag.usage" "$pid" mr_bytes)" "$(usage_field "$OUT/$tag.usage" "$pid" mrs)" \
				"$(usage_field "$OUT/$tag.usage" "$pid" vmpin_kb)" "$(usage_field "$OUT/$tag.usage" "$pid" rc_qps)" \
				"$st" "$status" >>"$OUT/pin.tsv"
		else
			printf '%s\t%s\t-\t-\t-\t-\t-\t%s\t%s\n' "$n" "$who" "$st" "$status" >>"$OUT/pin.tsv"
		fi
	done
	echo "$tag: $status, live client ${lc:--} server ${lsv:--}; $(grep -E '^(pid|other)' "$OUT/$tag.usage" 2>/dev/null | tr '\n' ';')" >&2
}

part() { case " ${SCALE_PARTS:-rate bulk pin} " in *" $1 "*) return 0 ;; esac; return 1; }
T0=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
	part rate || break
	if [ $(( r % 2 )) = 1 ]; then order="tcp sdpshim"; else order="sdpshim tcp"; fi
	for b in $order; do rate_run "$b" "$r"; done
done
part rate && note "rate: $ROUNDS rounds in $(( $(date +%s) - T0 )) s"
T0=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
	part bulk || break
	if [ $(( r % 2 )) = 1 ]; then order="0 $IDLE"; else order="$IDLE 0"; fi
	for k in $order; do bulk_run "$k" "$r"; done
done
part bulk && note "bulk: $ROUNDS rounds in $(( $(date +%s) - T0 )) s"
T0=$(date +%s)
if part pin; then
	for n in $NS; do pin_run "$n"; done
	note "pin: N = $NS in $(( $(date +%s) - T0 )) s"
fi

# Any sdpshim run that fell back or failed: these are not sdpshim-over-RDMA figures.
if awk -F'\t' 'FNR > 1 && $NF != "ok" { bad = 1 } END { exit !bad }' "$OUT/rate.tsv" "$OUT/bulk.tsv" "$OUT/pin.tsv"; then
	exit 1
fi
exit 0
