#!/bin/bash
# pingpong_inside.sh: runs inside the test bed (bench/pingpong.sh).  rstream's
# 64-byte ping-pong for three setups: sdpshim's baseline build (before), the
# new build (after), both as plain sockets (-T s) with both ends preloaded,
# and native rsocket.  PP_ROUNDS timed rounds (the order rotating), then one
# callgrind pair per setup (client -I PP_SHORT and -I PP_LONG).  Writes into
# $BENCH_OUT: times.tsv (setup round us), instr.tsv (setup Ir_per_round_trip
# Ir_short Ir_long), notes.txt (FAIL lines make the bench fail), and each
# run's logs and stats.  PP_MODES ("s"): "s b" also takes the callgrind pair
# with blocking calls (rstream -T b; setups before-b, after-b, rsocket-b):
# rstream's default loops on poll() with a zero timeout, so its client's
# count includes the spin of its wait, while a blocked client counts only
# the work of a round trip.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../tests/helpers.bash"   # free_port, RXE_IP
unset SDPSHIM_LIB LD_PRELOAD SDPSHIM_CONFIG SDPSHIM_MODE
OUT=$BENCH_OUT
IP=$RXE_IP
# Under callgrind the client's first contact takes far longer than 500 ms.
export SDPSHIM_CONNECT_TIMEOUT_MS=30000 SDPSHIM_NEGCACHE_TTL_MS=0
W=/tmp/pp
rm -rf "$W"
mkdir -p "$W/before" "$W/after"
cp "$PP_BEFORE/libsdpshim.so" "$W/before/" && cp "$PP_AFTER/libsdpshim.so" "$W/after/" ||
	{ echo "cannot copy the builds" >&2; exit 2; }
printf 'setup\tround\tus\n' >"$OUT/times.tsv"
: >"$OUT/instr.tsv"
: >"$OUT/notes.txt"
note() { echo "$*" | tee -a "$OUT/notes.txt" >&2; }

# prefix SETUP STATS: PRE, the command prefix of one end, and OPTS, rstream's
# socket-type options (sdpshim: plain sockets).
MODE=s
prefix() {
	PRE=(env) OPTS=()
	[ "$MODE" = b ] && OPTS=(-T b)
	[ "$1" = rsocket ] && return
	PRE+=("LD_PRELOAD=$W/$1/libsdpshim.so" "SDPSHIM_STATS_FILE=$2")
	OPTS+=(-T s)
}

# Every sdpshim connection in a stats file on path rdma (at least one).
check_rdma() {   # check_rdma SETUP FILE WHAT
	local total rdma
	[ "$1" = rsocket ] && return 0
	total=$(grep -c '"path":' "$2" 2>/dev/null) || total=0
	rdma=$(grep -c '"path":"rdma"' "$2" 2>/dev/null) || rdma=0
	if [ "$total" = 0 ] || [ "$rdma" != "$total" ]; then
		note "FAIL $3: $rdma of $total connections on path rdma ($2)"
		return 1
	fi
}

# up SETUP PORT PID: the server listens (sdpshim: on TCP and rdma_cm, rsocket:
# on rdma_cm, which no /proc/net/tcp shows) within 20 s.
up() {
	local hex t r
	hex=$(printf '%04X' "$2")
	for _ in $(seq 200); do
		t=0 r=0
		awk -v p=":$hex" 'NR > 1 && substr($2, length($2) - 4) == p && $4 == "0A" { f = 1 } END { exit !f }' \
			/proc/net/tcp && t=1
		rdma resource show cm_id 2>/dev/null | grep -Eq "state LISTEN .*src-addr [^ ]*:$2( |$)" && r=1
		[ "$r" = 1 ] && { [ "$1" = rsocket ] || [ "$t" = 1 ]; } && return 0
		kill -0 "$3" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# run SETUP TAG ITERATIONS [CALLGRIND_FILE]: one server and one client; prints
# the client's usec/xfer, or "fails".
run() {
	local setup=$1 tag=$2 n=$3 cg=${4:-} port spid d line rc=0 PRE OPTS
	d=$OUT/$tag
	mkdir -p "$d"
	port=$(free_port)
	prefix "$setup" "$d/srv.jsonl"
	"${PRE[@]}" rstream "${OPTS[@]}" -b "$IP" -p "$port" -S 64 -C 1 -I "$n" \
		>"$d/server.log" 2>&1 &
	spid=$!
	up "$setup" "$port" "$spid" || { note "FAIL $tag: the server did not listen"; kill "$spid" 2>/dev/null; echo fails; return; }
	prefix "$setup" "$d/cli.jsonl"
	if [ -n "$cg" ]; then
		timeout -k 5 600 "${PRE[@]}" valgrind --tool=callgrind --trace-children=no \
			--callgrind-out-file="$cg" rstream "${OPTS[@]}" -s "$IP" -p "$port" -S 64 -C 1 -I "$n" \
			>"$d/client.log" 2>&1 || rc=$?
	else
		timeout -k 5 180 "${PRE[@]}" rstream "${OPTS[@]}" -s "$IP" -p "$port" \
			-S 64 -C 1 -I "$n" >"$d/client.log" 2>&1 || rc=$?
	fi
	timeout 20 tail --pid="$spid" -f /dev/null || kill -9 "$spid" 2>/dev/null
	wait "$spid" 2>/dev/null
	line=$(awk '$1 == "custom" { l = $NF } END { print l }' "$d/client.log")
	if [ "$rc" != 0 ] || [ -z "$line" ]; then
		note "FAIL $tag: client rc $rc: $(tail -2 "$d/client.log" | tr '\n' ' ' | cut -c1-160)"
		echo fails
		return
	fi
	check_rdma "$setup" "$d/cli.jsonl" "$tag client" && check_rdma "$setup" "$d/srv.jsonl" "$tag server" ||
		{ echo fails; return; }
	echo "$line"
}

setups=(before after rsocket)
run after warmup 200 >/dev/null # first contact of the boot
for r in $(seq "$PP_ROUNDS"); do
	for i in 0 1 2; do
		s=${setups[$(((r + i) % 3))]}
		us=$(run "$s" "$s.r$r" "$PP_N")
		printf '%s\t%s\t%s\n' "$s" "$r" "$us" >>"$OUT/times.tsv"
		echo "round $r $s: $us us" >&2
	done
done

total_ir() { awk '/^summary:/ { print $2 }' "$1" 2>/dev/null; }
for MODE in ${PP_MODES:-s}; do
	sfx=
	[ "$MODE" = s ] || sfx=-$MODE
	for s in "${setups[@]}"; do
		t=$s$sfx
		short=$(run "$s" "$t.cg-short" "$PP_SHORT" "$OUT/$t.short.cg")
		long=$(run "$s" "$t.cg-long" "$PP_LONG" "$OUT/$t.long.cg")
		a=$(total_ir "$OUT/$t.short.cg") b=$(total_ir "$OUT/$t.long.cg")
		if [ "$short" = fails ] || [ "$long" = fails ] || [ -z "$a" ] || [ -z "$b" ]; then
			note "FAIL $t: no callgrind totals"
			continue
		fi
		per=$(awk -v a="$a" -v b="$b" -v s="$PP_SHORT" -v l="$PP_LONG" 'BEGIN { printf "%.0f", (b - a) / (l - s) }')
		printf '%s\t%s\t%s\t%s\n' "$t" "$per" "$a" "$b" >>"$OUT/instr.tsv"
		echo "$t: $per instructions a round trip" >&2
	done
done
exit 0
