#!/bin/bash
# shellcheck disable=SC2046  # $(prefix ...) is an env prefix, split on purpose
# vm_bench_inside.sh: the measurements of bench/vm_bench.sh.  Runs INSIDE the
# soft-RoCE guest (tests/vm/run-in-vm.sh), as root, and compares three setups
# on the same rxe device(s) in the same boot:
#
#   TCP      kernel TCP, nothing preloaded
#   sdpshim  both ends LD_PRELOAD=libsdpshim.so; every connection must report
#            path rdma in SDPSHIM_STATS_FILE, or the cell reads FALLBACK
#   rsocket  both ends LD_PRELOAD=librspreload.so (rdma-core's rsocket
#            preload); a failure is recorded as "fails" with its error
#
# Workloads: redis-benchmark GET/SET (-c 10, and -P 16), iperf3 (-P 1, -P 4),
# rstream (native rsocket vs `-T s` plain sockets: 64 KiB and 64 B messages),
# and syscalls per redis GET (strace -f on redis-server), with the writes to
# /dev/infiniband/uverbs* (rxe's post_send doorbell and CQ arm, which are
# syscalls only on soft-RoCE) counted apart.  Prints one table at the end.
#
# Layouts (BENCH_LAYOUTS, space separated, run in this order):
#   single  client and server on $RXE_IP: one rxe device, traffic loops back
#           inside rxe0 (the "dummy" layout).  In a `pair` boot the pair's
#           policy rule (pref 100) is removed for this phase so 10.77.0.1 ->
#           10.77.0.1 stays on rxe0; the veth counters prove it.
#   pair    server on $RXE_IP2 (rxe1), client from $RXE_IP (rxe0): packets
#           cross the veth (needs a `run-in-vm.sh -n pair` boot).
#
# Env: BENCH_LAYOUTS (default "single"), BENCH_OUT (directory for raw results;
# default a temp dir), BUILD (default build), REDIS_N (20000), REDIS_NP
# (requests for -P 16, default 2*REDIS_N), IPERF_T (5), RS_BIG_C (2000),
# RS_SMALL_C (5000), STRACE_N (3000: under strace, TCG serves only ~125 GET/s
# even on TCP), PERF_N (20000: the perf part's GETs; no ptrace, so many more,
# and the connection's setup weighs less per GET), REDIS_CAP (120: seconds before a redis-benchmark run counts as
# hung; also the GETs of ctxsw), BENCH_PARTS (default "redis iperf rstream strace perf ctxsw sides idle":
# the groups to run), BENCH_IDLE_S (10: the idle part's window), BENCH_RS_PP_I
# (2000: iterations of the 64 B rstream ping-pong, -C 1),
# BENCH_ROUNDS (with BASE_BUILD: rounds of the two sdpshim libraries, default
# 1; TCP, rsocket and strace run in the first only), BASE_BUILD (a build directory of another revision, see vm_bench.sh -b: its
# library runs as a fourth setup, "base", beside sdpshim, and the table gains
# a base column and the sdpshim/base ratio).  Under TCG rxe is slower than kernel TCP: the ratios compare setups
# on this test bed, not on real hardware.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
RSPRE=${RSPRELOAD:-/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so}
LAYOUTS=${BENCH_LAYOUTS:-single}
REDIS_N=${REDIS_N:-20000}
REDIS_NP=${REDIS_NP:-$((REDIS_N * 2))}
IPERF_T=${IPERF_T:-5}
RS_BIG_C=${RS_BIG_C:-2000}
RS_SMALL_C=${RS_SMALL_C:-5000}
STRACE_N=${STRACE_N:-3000}
PERF_N=${PERF_N:-20000}
REDIS_CAP=${REDIS_CAP:-120}   # seconds before a redis-benchmark run counts as hung
IP1=${RXE_IP:-10.77.0.1}
IP2=${RXE_IP2:-10.77.0.2}

[ -f "$BUILD/libsdpshim.so" ] || { echo "vm_bench: $BUILD/libsdpshim.so missing: run make" >&2; exit 2; }
for p in redis-server redis-benchmark iperf3 rstream strace python3 rdma; do
	command -v "$p" >/dev/null || { echo "vm_bench: $p is not installed" >&2; exit 2; }
done

WORK=$(mktemp -d /tmp/vm_bench.XXXXXX)
OUT=${BENCH_OUT:-$WORK/out}
mkdir -p "$OUT"
# A private copy of the library: other engineers may rebuild on the host
# while this runs, and the guest sees the host's files live.
LIB=$WORK/libsdpshim.so
cp "$BUILD/libsdpshim.so" "$LIB"
LIB_SHA=$(sha256sum "$LIB" | cut -c1-16)
PARTS=${BENCH_PARTS:-redis iperf rstream strace perf ctxsw sides idle}
IDLE_S=${BENCH_IDLE_S:-10}
RS_PP_I=${BENCH_RS_PP_I:-2000}
ROUNDS=${BENCH_ROUNDS:-1}
SETUPS="tcp sdpshim rsocket" SHIMS=sdpshim LIBBASE= BASE_SHA=
if [ -n "${BASE_BUILD:-}" ]; then
	[ -f "$BASE_BUILD/libsdpshim.so" ] || { echo "vm_bench: $BASE_BUILD/libsdpshim.so missing" >&2; exit 2; }
	LIBBASE=$WORK/libbase.so
	cp "$BASE_BUILD/libsdpshim.so" "$LIBBASE"
	BASE_SHA=$(sha256sum "$LIBBASE" | cut -c1-16)
	SETUPS="tcp sdpshim base rsocket" SHIMS="sdpshim base"
else
	ROUNDS=1
fi
# BENCH_SPIN_US: the working tree's library once more with SDPSHIM_SPIN_US
# (busy-poll before sleeping), as setup "spin", in one more column.
SPIN_US=${BENCH_SPIN_US:-}
if [ -n "$SPIN_US" ]; then
	SETUPS="$SETUPS spin" SHIMS="$SHIMS spin"
fi
# is_shim SETUP: one of the sdpshim builds (the working tree's or the base)
is_shim() { [ "$1" = sdpshim ] || [ "$1" = base ] || [ "$1" = spin ]; }
has_part() { [[ " $PARTS " == *" $1 "* ]]; }

export SDPSHIM_CONNECT_TIMEOUT_MS=10000 SDPSHIM_ACK_TIMEOUT=19 SDPSHIM_RUN_DIR=$WORK SDPSHIM_NEGCACHE_TTL_MS=0
unset LD_PRELOAD SDPSHIM_STATS_FILE SDPSHIM_MODE SDPSHIM_CONFIG

PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	# keep the small raw files; the strace logs are big
	if [ "$OUT" != "$WORK/out" ]; then
		(cd "$WORK" && find . -path ./out -prune -o -type f ! -name 'strace.log' ! -name '*.so' \
			! -name '*.stats' -print | cpio -pdm --quiet "$OUT/raw" 2>/dev/null)
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT

T_START=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - T_START) / 1000000 )); }
say() { printf '[%6.1fs] %s\n' "$(awk -v m="$(ms)" 'BEGIN { print m / 1000 }')" "$*" >&2; }

declare -A HUNG=()    # HUNG[layout.setup]=1: redis stopped answering in that setup
declare -A VAL=()     # VAL[layout|metric|setup] = number, "fails", "FALLBACK" or ""
declare -A ROWNAME=() # ROWNAME[metric] = label in the table
ROWS=()               # metric keys in table order
NOTES=()
row() { ROWS+=("$1"); ROWNAME[$1]=$2; }
row redis.get.rps   "redis GET req/s (-c 10)"
row redis.get.p50   "redis GET p50 ms (-c 10)"
row redis.set.rps   "redis SET req/s (-c 10)"
row redis.set.p50   "redis SET p50 ms (-c 10)"
row redis16.get.rps "redis GET req/s (-c 10 -P 16)"
row redis16.get.p50 "redis GET p50 ms (-P 16)"
row redis16.set.rps "redis SET req/s (-c 10 -P 16)"
row redis16.set.p50 "redis SET p50 ms (-P 16)"
row iperf.1         "iperf3 -t $IPERF_T Gbit/s (-P 1)"
row iperf.4         "iperf3 -t $IPERF_T Gbit/s (-P 4)"
row rs.big.gbps     "rstream 64KiB x$RS_BIG_C Gb/s"
row rs.small.gbps   "rstream 64B x$RS_SMALL_C Gb/s"
row rs.small.us     "rstream 64B us/xfer"
row rs.pp.us        "rstream 64B ping-pong us/xfer (-C 1)"
row sc.total        "syscalls/GET (redis-server)"
row sc.excl         "syscalls/GET excl. rxe doorbells/arms"
row sc.excl2        "  ... and excl. clock reads"
row sc.uverbs       "  uverbs calls/GET (rxe only)"
row sc.postsend     "    of which post_send doorbell"
row sc.arm          "    of which CQ arm (notify; ioctl)"
row pf.total        "syscalls/GET, perf (no ptrace stops)"
row pf.excl         "  ... excl. clocks, arms, doorbells"
row pf.read         "    read/GET"
row pf.write        "    write/GET (incl. doorbells)"
row pf.epoll        "    epoll_wait+epoll_pwait/GET"
row pf.ioctl        "    ioctl/GET (rxe: CQ arms)"
row pf.futex        "    futex/GET"
row pf.clock        "    clock reads/GET"
row cs.vol          "context switches/GET, voluntary"
row cs.invol        "  ... non-voluntary"
row cs.wake         "progress-thread wakeups/GET"
row sd.s1.excl      "GET -c 1, server: syscalls/GET excl. clocks, arms, doorbells"
row sd.s1.cs        "  ... context switches/GET (all threads)"
row sd.s1.wake      "  ... progress-thread wakeups/GET"
row sd.c1.excl      "GET -c 1, client: syscalls/GET excl. clocks, arms, doorbells"
row sd.c1.cs        "  ... context switches/GET (all threads)"
row sd.s50.excl     "GET -c 50, server: syscalls/GET excl. clocks, arms, doorbells"
row sd.s50.cs       "  ... context switches/GET (all threads)"
row sd.s50.wake     "  ... progress-thread wakeups/GET"
row sd.c50.excl     "GET -c 50, client: syscalls/GET excl. clocks, arms, doorbells"
row sd.c50.cs       "  ... context switches/GET (all threads)"
row idle.cpu        "idle connection: CPU ms in ${IDLE_S}s (server+client)"
row idle.wake       "  ... progress-thread wakeups in ${IDLE_S}s (server)"

# set_val LAYOUT METRIC SETUP VALUE: a number joins the numbers of earlier
# rounds (the table shows their median); a word ("fails", "FALLBACK"...)
# replaces them, and a number never replaces a word.
set_val() {
	local k="$1|$2|$3" old=${VAL["$1|$2|$3"]:-}
	if [[ $4 =~ ^[0-9]+(\.[0-9]+)?$ ]] && [ -n "$old" ]; then
		[[ $old =~ ^[0-9.\ ]+$ ]] && VAL[$k]="$old $4"
	else
		VAL[$k]=$4
	fi
}
# med VALUES: the median of a list of numbers; anything else as it is
med() {
	[[ $1 =~ ^[0-9.]+(\ [0-9.]+)+$ ]] || { echo "$1"; return; }
	tr ' ' '\n' <<<"$1" | sort -g | awk '{ v[++n] = $1 } END { printf "%g\n", (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }'
}
note() { NOTES+=("$*"); say "note: $*"; }

PORT=21000   # every server gets a fresh port (call as `next_port; port=$PORT`, not in $(...))
next_port() { PORT=$((PORT + 1)); }

# listening PORT: "tcp" if a kernel TCP listener is up, "rdma" if an rdma_cm
# id listens on it (rsocket's listeners are rdma_cm only), both, or nothing.
listening() {
	local hex t="" r=""
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" 'NR > 1 && substr($2, length($2) - 4) == p && $4 == "0A" { f = 1 } END { exit !f }' \
		/proc/net/tcp && t=tcp
	# "link rxe0/1 cm-idn 0 state LISTEN ps TCP pid 160 comm redis-server src-addr 10.77.0.1:31907 ..."
	rdma resource show cm_id 2>/dev/null | grep -Eq "state LISTEN .*src-addr [^ ]*:$1( |$)" && r=rdma
	echo "$t$r"
}

# wait_up PORT PID WANT SECS: WANT = tcp, tcprdma (both) or any.
# Returns 0 when up, 2 when PID died, 1 on timeout.
wait_up() {
	local port=$1 pid=$2 want=$3 got until=$((SECONDS + $4))
	while [ "$SECONDS" -lt "$until" ]; do
		got=$(listening "$port")
		case "$want:$got" in
			tcp:tcp*|tcprdma:tcprdma|any:?*) return 0 ;;
		esac
		kill -0 "$pid" 2>/dev/null || return 2
		sleep 0.1
	done
	return 1
}

STOP_ST=0
stop() {   # stop PID: TERM, then KILL after 5 s; the exit status goes to STOP_ST
	local pid=$1
	kill "$pid" 2>/dev/null
	for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null; STOP_ST=$?
	# 0, or killed by our TERM (143): anything else is worth a note
	case $STOP_ST in 0|143) ;; *) note "${2:-process $pid} ended with status $STOP_ST at stop" ;; esac
}

# prefix SETUP STATSFILE: the env prefix of one process of SETUP.
prefix() {
	case $1 in
		tcp) echo "env" ;;
		sdpshim) echo "env LD_PRELOAD=$LIB SDPSHIM_STATS_FILE=$2" ;;
		base) echo "env LD_PRELOAD=$LIBBASE SDPSHIM_STATS_FILE=$2" ;;
		rsocket) echo "env LD_PRELOAD=$RSPRE" ;;
		spin) echo "env LD_PRELOAD=$LIB SDPSHIM_SPIN_US=$SPIN_US SDPSHIM_STATS_FILE=$2" ;;
	esac
}

# check_rdma DIR: every stats line in DIR/*.jsonl says path rdma, and both
# ends wrote some.  Prints "N" (connections seen) or "FALLBACK: why".
check_rdma() {
	local d=$1 n bad srv cli
	srv=$(cat "$d"/stats.srv*.jsonl 2>/dev/null | grep -c . || true)
	cli=$(cat "$d"/stats.cli*.jsonl 2>/dev/null | grep -c . || true)
	n=$(cat "$d"/stats.*.jsonl 2>/dev/null | grep -c '"path":"rdma"' || true)
	bad=$(cat "$d"/stats.*.jsonl 2>/dev/null | grep -v '"path":"rdma"' | grep -c . || true)
	if [ "$srv" -eq 0 ] || [ "$cli" -eq 0 ] || [ "$bad" -gt 0 ]; then
		echo "FALLBACK: server lines $srv, client lines $cli, non-rdma $bad ($(cat "$d"/stats.*.jsonl 2>/dev/null |
			grep -v '"path":"rdma"' | grep -o '"reason":"[a-z_]*"' | sort | uniq -c | tr -s ' \n' ' '))"
	else
		echo "$n"
	fi
}

# mark_fallback LAYOUT SETUP MSG METRIC...: a measurement on fallback is not an RDMA figure.
mark_fallback() {
	local lay=$1 setup=$2 msg=$3 m; shift 3
	for m in "$@"; do [ -n "${VAL[$lay|$m|$setup]:-}" ] && set_val "$lay" "$m" "$setup" FALLBACK; done
	note "$lay $setup: $msg -> cells $* marked FALLBACK"
}

server_failed() {   # server_failed DIR STATUS: a one-line description
	local d=$1 st=$2 why
	why=$(grep -Eim1 'crashed by signal' "$d/server.log" || grep -Eim1 'segmentation|error|fail|unable|cannot' "$d/server.log")
	why=$(sed -E 's/^[0-9]+:[A-Z] [0-9]+ [A-Za-z]+ [0-9]+ [0-9:.]+ [#*] //' <<<"$why" | cut -c1-120)
	[ "$st" -ge 128 ] 2>/dev/null && why="killed by signal $((st - 128))${why:+: $why}"
	echo "server exited (status $st)${why:+: $why}"
}

# ---------------------------------------------------------------- redis
parse_redis() {   # parse_redis FILE TEST FIELD: FIELD 1 = req/s, 2 = p50
	tr '\r' '\n' <"$1" | sed -nE "s/^$2: ([0-9.]+) requests per second, p50=([0-9.]+).*/\\$3/p" | tail -1
}

redis_group() {   # redis_group LAYOUT SETUP SERVER_IP
	local lay=$1 setup=$2 ip=$3 port d spid rc st v t f ok=1
	next_port; port=$PORT; d=$WORK/$lay/redis.$setup; mkdir -p "$d"
	say "$lay redis $setup (port $port)"
	$(prefix "$setup" "$d/stats.srv.jsonl") redis-server --port "$port" --bind "$ip" --save '' \
		--appendonly no --protected-mode no >"$d/server.log" 2>&1 &
	spid=$!; PIDS+=("$spid")
	wait_up "$port" "$spid" "$(is_shim "$setup" && echo tcprdma || echo any)" 20; rc=$?
	if [ "$rc" = 2 ]; then
		wait "$spid"; st=$?
		for m in redis.get.rps redis.get.p50 redis.set.rps redis.set.p50 redis16.get.rps \
			redis16.get.p50 redis16.set.rps redis16.set.p50; do set_val "$lay" "$m" "$setup" fails; done
		note "$lay redis $setup fails: redis-server $(server_failed "$d" "$st")"
		return
	fi
	[ "$rc" = 1 ] && note "$lay redis $setup: no listener seen after 20 s, trying anyway"
	local hung=0
	for v in plain p16; do
		local args=(-n "$REDIS_N") key=redis bad
		[ $v = p16 ] && args=(-n "$REDIS_NP" -P 16) && key=redis16
		f=$d/bench.$v.out
		if [ $hung = 1 ]; then   # the server already stopped answering: don't wait again
			for t in get set; do set_val "$lay" "$key.$t.rps" "$setup" skipped; set_val "$lay" "$key.$t.p50" "$setup" skipped; done
			continue
		fi
		timeout -k 5 "$REDIS_CAP" $(prefix "$setup" "$d/stats.cli.$v.jsonl") redis-benchmark -h "$ip" -p "$port" \
			"${args[@]}" -c 10 -t get,set -q >"$f" 2>&1; rc=$?
		bad=fails
		case $rc in 124|137) bad=hangs; hung=1 ;; esac
		ok=1
		for t in GET SET; do
			local lt=${t,,} r p
			r=$(parse_redis "$f" "$t" 1); p=$(parse_redis "$f" "$t" 2)
			if [ -n "$r" ]; then
				set_val "$lay" "$key.$lt.rps" "$setup" "$r"; set_val "$lay" "$key.$lt.p50" "$setup" "$p"
			else
				set_val "$lay" "$key.$lt.rps" "$setup" $bad; set_val "$lay" "$key.$lt.p50" "$setup" $bad
				ok=0
			fi
		done
		[ $ok = 0 ] && note "$lay redis $setup $v $bad: redis-benchmark ${args[*]} -c 10 rc $rc$([ $bad = hangs ] &&
			echo " (no result within $REDIS_CAP s)"): $(tr '\r' '\n' <"$f" | grep -v '^ *$' | tail -2 | tr '\n' ' ' | cut -c1-160)"
		say "  $v: $(tr '\r' '\n' <"$f" | grep 'requests per second' | tr '\n' ' ')"
	done
	[ $hung = 1 ] && HUNG[$lay.$setup]=1
	stop "$spid" "$lay redis-server ($setup)"
	if is_shim "$setup"; then
		v=$(check_rdma "$d")
		case $v in
			FALLBACK*) mark_fallback "$lay" "$setup" "redis: $v" redis.get.rps redis.get.p50 redis.set.rps \
				redis.set.p50 redis16.get.rps redis16.get.p50 redis16.set.rps redis16.set.p50 ;;
			*) NOTES+=("$lay redis $setup: all $v connections (server + client lines) on path rdma") ;;
		esac
	fi
}

# ---------------------------------------------------------------- iperf3
iperf_run() {   # iperf_run LAYOUT SETUP SERVER_IP STREAMS
	local lay=$1 setup=$2 ip=$3 P=$4 port d spid rc v
	next_port; port=$PORT; d=$WORK/$lay/iperf$P.$setup; mkdir -p "$d"
	say "$lay iperf3 -P $P $setup (port $port)"
	$(prefix "$setup" "$d/stats.srv.jsonl") iperf3 -s -1 -B "$ip" -p "$port" >"$d/server.log" 2>&1 &
	spid=$!; PIDS+=("$spid")
	wait_up "$port" "$spid" "$(is_shim "$setup" && echo tcprdma || echo any)" 20
	local cap=$((IPERF_T + 45))
	[ "$setup" = rsocket ] && cap=$((IPERF_T + 15))   # known to stall with 0 bytes received
	timeout -k 5 "$cap" $(prefix "$setup" "$d/stats.cli.jsonl") iperf3 -c "$ip" -p "$port" \
		-t "$IPERF_T" -P "$P" --json >"$d/client.json" 2>"$d/client.err"; rc=$?
	v=$(python3 -c '
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception:
    print("fails:no JSON result (client %s)" % ("killed after " + sys.argv[3] + " s" if sys.argv[2] in ("124", "137") else "rc " + sys.argv[2])); sys.exit()
if j.get("error"):
    print("fails:" + j["error"]); sys.exit()
b = j.get("end", {}).get("sum_received", {}).get("bits_per_second", 0)
print("%.3f" % (b / 1e9) if b > 0 else "fails:0 bytes received")' "$d/client.json" "$rc" "$cap")
	stop "$spid" "$lay iperf3 -s ($setup)"
	case $v in
		fails:*) set_val "$lay" "iperf.$P" "$setup" fails
			local got
			got=$(awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i ~ /Bytes$/) l = $(i - 1) " " $i } END { print l }' "$d/server.log")
			note "$lay iperf3 -P $P $setup fails: $([ "$rc" = 124 ] && echo "client still running after $cap s, killed;")" \
				"server received ${got:-nothing}; iperf3: ${v#fails:}$(grep -m1 -i 'error' "$d/client.err" "$d/server.log" |
				cut -d: -f2- | cut -c1-100 | sed 's/^/; /')" ;;
		*) set_val "$lay" "iperf.$P" "$setup" "$v" ;;
	esac
	say "  $v Gbit/s"
	if is_shim "$setup"; then
		v=$(check_rdma "$d")
		case $v in
			FALLBACK*) mark_fallback "$lay" "$setup" "iperf3 -P $P: $v" "iperf.$P" ;;
			*) NOTES+=("$lay iperf3 -P $P $setup: all $v connections on path rdma") ;;
		esac
	fi
}

# ---------------------------------------------------------------- rstream
# TCP: `rstream -T s` plain; sdpshim: `rstream -T s` with both ends preloaded;
# rsocket: native rstream (rsockets API, no preload).
rstream_run() {   # rstream_run LAYOUT SETUP SERVER_IP SIZE COUNT KEY [ITERATIONS]
	local lay=$1 setup=$2 ip=$3 size=$4 count=$5 key=$6 port d spid rc line us gb opt=(-T s)
	next_port; port=$PORT; d=$WORK/$lay/rstream.$key.$setup; mkdir -p "$d"
	[ "$setup" = rsocket ] && opt=()
	[ -n "${7:-}" ] && opt+=(-I "$7")
	say "$lay rstream -S $size -C $count $setup (port $port)"
	local pre=env
	is_shim "$setup" && pre=$(prefix "$setup" "$d/stats.srv.jsonl")
	$pre rstream "${opt[@]}" -b "$ip" -p "$port" -S "$size" -C "$count" >"$d/server.log" 2>&1 &
	spid=$!; PIDS+=("$spid")
	wait_up "$port" "$spid" "$(is_shim "$setup" && echo tcprdma || echo any)" 20
	is_shim "$setup" && pre=$(prefix "$setup" "$d/stats.cli.jsonl")
	timeout -k 5 180 $pre rstream "${opt[@]}" -s "$ip" -p "$port" -S "$size" -C "$count" \
		>"$d/client.log" 2>&1; rc=$?
	stop "$spid" "$lay rstream server ($setup, $key)"
	# "custom 64k 2000 1 250m 10.5s 0.20 2612.1": usec/xfer is the precise column,
	# Gb/s = size * 8 / usec / 1000 (the printed Gb/s has two decimals).
	line=$(awk '$1 == "custom" { l = $0 } END { print l }' "$d/client.log")
	us=$(awk '{ print $NF }' <<<"$line")
	if [ "$rc" = 0 ] && [ -n "$us" ]; then
		gb=$(awk -v s="$size" -v u="$us" 'BEGIN { printf "%.4f", s * 8 / u / 1000 }')
		[ "$key" != pp ] && set_val "$lay" "rs.$key.gbps" "$setup" "$gb"
		[ "$key" = small ] && set_val "$lay" rs.small.us "$setup" "$us"
		[ "$key" = pp ] && set_val "$lay" rs.pp.us "$setup" "$us"
	else
		[ "$key" != pp ] && set_val "$lay" "rs.$key.gbps" "$setup" fails
		[ "$key" = small ] && set_val "$lay" rs.small.us "$setup" fails
		[ "$key" = pp ] && set_val "$lay" rs.pp.us "$setup" fails
		note "$lay rstream $key $setup fails (rc $rc): $(tail -2 "$d/client.log" | tr '\n' ' ' | cut -c1-160)"
	fi
	say "  $line"
	if is_shim "$setup"; then
		local v; v=$(check_rdma "$d")
		case $v in
			FALLBACK*) mark_fallback "$lay" "$setup" "rstream $key: $v" "rs.$key.gbps" \
				$([ "$key" = small ] && echo rs.small.us) $([ "$key" = pp ] && echo rs.pp.us) ;;
			*) NOTES+=("$lay rstream $key $setup: all $v connections on path rdma") ;;
		esac
	fi
}

# start_quiet_redis SETUP DIR PORT IP: a redis-server without persistence for
# the per-GET counts, up and listening (its pid in REDIS_PID, and in PIDS).
start_quiet_redis() {
	local setup=$1 d=$2 port=$3 ip=$4
	$(prefix "$setup" "$d/stats.srv.jsonl") redis-server --port "$port" --bind "$ip" --save '' \
		--appendonly no --protected-mode no >"$d/server.log" 2>&1 &
	REDIS_PID=$!; PIDS+=("$REDIS_PID")
	wait_up "$port" "$REDIS_PID" "$(is_shim "$setup" && echo tcprdma || echo tcp)" 20
}

# ---------------------------------------------------------------- syscalls
# strace -f attached to redis-server while redis-benchmark -c 1 -t get runs
# STRACE_N requests; counts every syscall entry, and the writes to
# /dev/infiniband/uverbs* by verbs command (first header word: 28 = POST_SEND,
# 23 = REQ_NOTIFY_CQ; on a real HCA both are user-space doorbells, no syscall).
strace_run() {   # strace_run LAYOUT SETUP SERVER_IP
	local lay=$1 setup=$2 ip=$3 port d spid tpid rc
	next_port; port=$PORT; d=$WORK/$lay/strace.$setup; mkdir -p "$d"
	say "$lay strace redis-server $setup, $STRACE_N GETs -c 1 (port $port)"
	if [ -n "${HUNG[$lay.$setup]:-}" ]; then
		for m in sc.total sc.excl sc.excl2 sc.uverbs sc.postsend sc.arm; do set_val "$lay" $m "$setup" skipped; done
		note "$lay strace $setup skipped: redis hung in this setup above"
		return
	fi
	start_quiet_redis "$setup" "$d" "$port" "$ip"; spid=$REDIS_PID
	strace -f -qq -y -x -s 4 -o "$d/strace.log" -p "$spid" 2>"$d/strace.err" &
	tpid=$!; PIDS+=("$tpid")
	for _ in $(seq 100); do   # every thread traced?
		grep -h '^TracerPid:' /proc/"$spid"/task/*/status 2>/dev/null | grep -q 'TracerPid:[[:space:]]*0$' || break
		sleep 0.1
	done
	timeout -k 5 $((60 + STRACE_N / 25)) $(prefix "$setup" "$d/stats.cli.jsonl") redis-benchmark -h "$ip" \
		-p "$port" -n "$STRACE_N" -c 1 -t get -q >"$d/bench.out" 2>&1; rc=$?
	kill -INT "$tpid"; wait "$tpid" 2>/dev/null
	stop "$spid" "$lay redis-server under strace ($setup)"
	say "  $(tr '\r' '\n' <"$d/bench.out" | grep 'requests per second') (under strace)"
	if [ "$rc" != 0 ] || [ -z "$(parse_redis "$d/bench.out" GET 1)" ]; then
		local bad=fails; case $rc in 124|137) bad=hangs ;; esac
		for m in sc.total sc.excl sc.excl2 sc.uverbs sc.postsend sc.arm; do set_val "$lay" $m "$setup" $bad; done
		note "$lay strace $setup $bad: redis-benchmark -n $STRACE_N -c 1 -t get rc $rc"
		return
	fi
	awk '
		/^[0-9]+ +<\.\.\. / { next }          # "<... read resumed>": counted at entry
		match($0, /^[0-9]+ +[a-z_0-9]+\(/) {
			s = substr($0, RSTART, RLENGTH); sub(/^[0-9]+ +/, "", s); sub(/\($/, "", s)
			n[s]++; total++
			# rxe rings its doorbells and arms its CQs with system calls on
			# the uverbs fd; a hardware NIC writes its doorbell page instead
			if (s == "write" && index($0, "</dev/infiniband/uverbs")) {
				uv++
				if (index($0, ", \"\\x1c\\x00")) ps++; else if (index($0, ", \"\\x17\\x00")) arm++
			} else if (s == "ioctl" && index($0, "</dev/infiniband/uverbs")) {
				uv++; arm++   # the verbs ioctl: req_notify_cq (INVOKE_WRITE)
			}
		}
		END {
			printf "total %d\nuverbs %d\npostsend %d\narm %d\n", total, uv, ps, arm
			for (s in n) printf "sys.%s %d\n", s, n[s]
		}' "$d/strace.log" >"$d/counts"
	grep -m 4 'ioctl(.*uverbs' "$d/strace.log" >"$d/uverbs-ioctl.sample" || true   # what the arms are
	local tot uv
	tot=$(awk '$1 == "total" { print $2 }' "$d/counts"); uv=$(awk '$1 == "uverbs" { print $2 }' "$d/counts")
	per() { awk -v a="$1" -v n="$STRACE_N" 'BEGIN { printf "%.3f", a / n }'; }
	set_val "$lay" sc.total "$setup" "$(per "$tot")"
	set_val "$lay" sc.excl "$setup" "$(per $((tot - uv)))"
	# the guest's clocksource has no vDSO fast path, so time reads are syscalls here
	local clk
	clk=$(awk '$1 ~ /^sys\.(gettimeofday|clock_gettime|time)$/ { n += $2 } END { print n + 0 }' "$d/counts")
	set_val "$lay" sc.excl2 "$setup" "$(per $((tot - uv - clk)))"
	set_val "$lay" sc.uverbs "$setup" "$(per "$uv")"
	set_val "$lay" sc.postsend "$setup" "$(per "$(awk '$1 == "postsend" { print $2 }' "$d/counts")")"
	set_val "$lay" sc.arm "$setup" "$(per "$(awk '$1 == "arm" { print $2 }' "$d/counts")")"
	local s c
	while read -r s c; do
		set_val "$lay" "sc.sys.${s#sys.}" "$setup" "$(per "$c")"
	done < <(grep '^sys\.' "$d/counts")
	say "  total $tot syscalls, $uv uverbs writes: $(grep '^sys\.' "$d/counts" | sort -k2,2nr | head -6 | tr '\n' ' ')"
	if is_shim "$setup"; then
		local v; v=$(check_rdma "$d")
		case $v in
			FALLBACK*) mark_fallback "$lay" "$setup" "strace: $v" sc.total sc.excl sc.excl2 sc.uverbs sc.postsend sc.arm ;;
			*) NOTES+=("$lay strace $setup: all $v connections on path rdma") ;;
		esac
	fi
}

# ---------------------------------------------------------------- context switches
# redis-server without strace (a tracer adds switches of its own) serving
# STRACE_N GETs from redis-benchmark -c 1: the context switches of all its
# threads (/proc/PID/task/*/status), and for a shim the progress thread's
# wake-ups (progress_wakeups in `sdpshim stat --json`; a library without the
# counter leaves the row empty), each per GET.  Connection setup is included.
ctx_total() {   # ctx_total PID FIELD: FIELD summed over the process's threads
	cat /proc/"$1"/task/*/status 2>/dev/null | awk -v f="$2:" '$1 == f { n += $2 } END { print n + 0 }'
}

wakeups_of() {   # wakeups_of SETUP PID: the process's progress_wakeups, or nothing
	local cli
	case $1 in
		sdpshim) cli=$BUILD/sdpshim ;;
		base) cli=${BASE_BUILD:-/nonexistent}/sdpshim ;;
		*) return 0 ;;
	esac
	[ -x "$cli" ] || return 0
	"$cli" stat -p "$2" --json 2>/dev/null | python3 -S -c '
import json, sys
procs = json.load(sys.stdin).get("processes", [])
if procs and "progress_wakeups" in procs[0]:
    print(procs[0]["progress_wakeups"])' 2>/dev/null || true
}

ctxsw_run() {   # ctxsw_run LAYOUT SETUP SERVER_IP
	local lay=$1 setup=$2 ip=$3 port d spid rc v0 n0 w0 v1 n1 w1 m
	next_port; port=$PORT; d=$WORK/$lay/ctxsw.$setup; mkdir -p "$d"
	say "$lay context switches, redis-server $setup, $PERF_N GETs -c 1 (port $port)"
	if [ -n "${HUNG[$lay.$setup]:-}" ]; then
		for m in cs.vol cs.invol cs.wake; do set_val "$lay" $m "$setup" skipped; done
		note "$lay ctxsw $setup skipped: redis hung in this setup above"
		return
	fi
	start_quiet_redis "$setup" "$d" "$port" "$ip"; spid=$REDIS_PID
	v0=$(ctx_total "$spid" voluntary_ctxt_switches); n0=$(ctx_total "$spid" nonvoluntary_ctxt_switches)
	w0=$(wakeups_of "$setup" "$spid")
	timeout -k 5 $((60 + PERF_N / 25)) $(prefix "$setup" "$d/stats.cli.jsonl") redis-benchmark -h "$ip" \
		-p "$port" -n "$PERF_N" -c 1 -t get -q >"$d/bench.out" 2>&1; rc=$?
	v1=$(ctx_total "$spid" voluntary_ctxt_switches); n1=$(ctx_total "$spid" nonvoluntary_ctxt_switches)
	w1=$(wakeups_of "$setup" "$spid")
	stop "$spid" "$lay redis-server for context switches ($setup)"
	if [ "$rc" != 0 ] || [ -z "$(parse_redis "$d/bench.out" GET 1)" ]; then
		for m in cs.vol cs.invol cs.wake; do set_val "$lay" $m "$setup" fails; done
		note "$lay ctxsw $setup fails: redis-benchmark -n $PERF_N -c 1 -t get rc $rc"
		return
	fi
	per_get() { awk -v a="$1" -v n="$PERF_N" 'BEGIN { printf "%.3f", a / n }'; }
	set_val "$lay" cs.vol "$setup" "$(per_get $((v1 - v0)))"
	set_val "$lay" cs.invol "$setup" "$(per_get $((n1 - n0)))"
	[ -n "$w0" ] && [ -n "$w1" ] && set_val "$lay" cs.wake "$setup" "$(per_get $((w1 - w0)))"
	say "  voluntary $((v1 - v0)), non-voluntary $((n1 - n0)), progress wakeups ${w0:+$((w1 - w0))}"
	if is_shim "$setup"; then
		local v; v=$(check_rdma "$d")
		case $v in
			FALLBACK*) mark_fallback "$lay" "$setup" "ctxsw: $v" cs.vol cs.invol cs.wake ;;
			*) NOTES+=("$lay ctxsw $setup: all $v connections on path rdma") ;;
		esac
	fi
}

# An idle connection: redis-server and a client that sent one PING and waits,
# both preloaded; the CPU time both processes use (all threads, utime +
# stime, in clock ticks) and the server's progress-thread wake-ups over
# IDLE_S seconds once the connection is up and quiet.
cpu_ticks() {   # cpu_ticks PID: utime + stime of the whole process
	awk '{ sub(/^.*\) /, ""); print $12 + $13 }' /proc/"$1"/stat 2>/dev/null || echo 0
}

idle_run() {   # idle_run LAYOUT SETUP SERVER_IP
	local lay=$1 setup=$2 ip=$3 port d spid cpid s0 c0 s1 c1 w0 w1 hz
	next_port; port=$PORT; d=$WORK/$lay/idle.$setup; mkdir -p "$d"
	say "$lay idle connection, $setup, ${IDLE_S}s (port $port)"
	start_quiet_redis "$setup" "$d" "$port" "$ip"; spid=$REDIS_PID
	$(prefix "$setup" "$d/stats.cli.jsonl") python3 -S -c '
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall(b"PING\r\n")
assert s.recv(64).startswith(b"+PONG"), "no PONG"
print("up", flush=True)
time.sleep(int(sys.argv[3]) + 4)
s.close()' "$ip" "$port" "$IDLE_S" >"$d/client.log" 2>&1 &
	cpid=$!; PIDS+=("$cpid")
	for _ in $(seq 100); do grep -q '^up$' "$d/client.log" 2>/dev/null && break; sleep 0.2; done
	if ! grep -q '^up$' "$d/client.log"; then
		set_val "$lay" idle.cpu "$setup" fails; set_val "$lay" idle.wake "$setup" fails
		note "$lay idle $setup fails: $(tail -2 "$d/client.log" | tr '\n' ' ')"
		stop "$cpid" "idle client ($setup)"; stop "$spid" "redis-server, idle ($setup)"
		return
	fi
	sleep 2   # the connection settles (binding, first credits)
	s0=$(cpu_ticks "$spid"); c0=$(cpu_ticks "$cpid"); w0=$(wakeups_of "$setup" "$spid")
	sleep "$IDLE_S"
	s1=$(cpu_ticks "$spid"); c1=$(cpu_ticks "$cpid"); w1=$(wakeups_of "$setup" "$spid")
	wait "$cpid"   # it closes and exits on its own: both ends write their stats lines
	stop "$spid" "redis-server, idle ($setup)"
	hz=$(getconf CLK_TCK)
	set_val "$lay" idle.cpu "$setup" "$(awk -v t=$(( s1 - s0 + c1 - c0 )) -v hz="$hz" 'BEGIN { printf "%.1f", t * 1000 / hz }')"
	[ -n "$w0" ] && [ -n "$w1" ] && set_val "$lay" idle.wake "$setup" "$((w1 - w0))"
	say "  CPU ticks server $((s1 - s0)), client $((c1 - c0)) (${hz}/s); progress wakeups ${w0:+$((w1 - w0))}"
	if is_shim "$setup"; then
		local v; v=$(check_rdma "$d")
		case $v in
			FALLBACK*) mark_fallback "$lay" "$setup" "idle: $v" idle.cpu idle.wake ;;
			*) NOTES+=("$lay idle $setup: all $v connections on path rdma") ;;
		esac
	fi
}

# The same GETs counted by perf's syscall tracepoints (every thread of the
# server, no ptrace): strace stops the tracee at each call, so a thread that
# would be asleep when a completion comes is often not, and the progress
# thread takes it instead.  The doorbell writes are one post_send per
# answer (the strace part counts them); perf cannot tell them from the
# others.
perf_run() {   # perf_run LAYOUT SETUP SERVER_IP
	local lay=$1 setup=$2 ip=$3 port d spid ppid rc ev s m
	next_port; port=$PORT; d=$WORK/$lay/perf.$setup; mkdir -p "$d"
	say "$lay syscalls by perf, redis-server $setup, $PERF_N GETs -c 1 (port $port)"
	if ! command -v perf >/dev/null || { ! mountpoint -q /sys/kernel/tracing &&
		! mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null; }; then
		note "$lay perf $setup skipped: no perf or tracefs"
		return
	fi
	ev=raw_syscalls:sys_enter
	for s in read write epoll_wait epoll_pwait ioctl gettimeofday clock_gettime futex; do
		ev="$ev,syscalls:sys_enter_$s"
	done
	start_quiet_redis "$setup" "$d" "$port" "$ip"; spid=$REDIS_PID
	perf stat -x, -e "$ev" -p "$spid" -o "$d/perf.csv" 2>"$d/perf.err" &
	ppid=$!; PIDS+=("$ppid")
	sleep 1
	timeout -k 5 $((60 + PERF_N / 25)) $(prefix "$setup" "$d/stats.cli.jsonl") redis-benchmark -h "$ip" \
		-p "$port" -n "$PERF_N" -c 1 -t get -q >"$d/bench.out" 2>&1; rc=$?
	kill -INT "$ppid"; wait "$ppid" 2>/dev/null
	stop "$spid" "$lay redis-server under perf ($setup)"
	if [ "$rc" != 0 ] || [ -z "$(parse_redis "$d/bench.out" GET 1)" ] || [ ! -s "$d/perf.csv" ]; then
		for m in pf.total pf.excl pf.read pf.write pf.epoll pf.ioctl pf.futex pf.clock; do
			set_val "$lay" $m "$setup" fails
		done
		note "$lay perf $setup fails: rc $rc, $(head -c 200 "$d/perf.err")"
		return
	fi
	# "COUNT,,EVENT,...": the process's threads summed
	cnt() { awk -F, -v e="$1" '$3 == e { n += $1 } END { print n + 0 }' "$d/perf.csv"; }
	per() { awk -v a="$1" -v n="$PERF_N" 'BEGIN { printf "%.3f", a / n }'; }
	local tot rd wr ew ep io fu gt cg clk
	tot=$(cnt raw_syscalls:sys_enter); rd=$(cnt syscalls:sys_enter_read); wr=$(cnt syscalls:sys_enter_write)
	ew=$(cnt syscalls:sys_enter_epoll_wait); ep=$(cnt syscalls:sys_enter_epoll_pwait)
	io=$(cnt syscalls:sys_enter_ioctl); fu=$(cnt syscalls:sys_enter_futex)
	gt=$(cnt syscalls:sys_enter_gettimeofday); cg=$(cnt syscalls:sys_enter_clock_gettime)
	clk=$((gt + cg))
	set_val "$lay" pf.total "$setup" "$(per "$tot")"
	set_val "$lay" pf.read "$setup" "$(per "$rd")"
	set_val "$lay" pf.write "$setup" "$(per "$wr")"
	set_val "$lay" pf.epoll "$setup" "$(per $((ew + ep)))"
	set_val "$lay" pf.ioctl "$setup" "$(per "$io")"
	set_val "$lay" pf.futex "$setup" "$(per "$fu")"
	set_val "$lay" pf.clock "$setup" "$(per "$clk")"
	# doorbells: one post_send write per answer on the shims (the strace part counts them)
	local bells=0
	is_shim "$setup" && bells=$PERF_N
	set_val "$lay" pf.excl "$setup" "$(per $((tot - clk - io - bells)))"
	say "  perf: $tot syscalls; read $rd write $wr epoll $((ew + ep)) ioctl $io futex $fu clocks $clk"
	if is_shim "$setup"; then
		local v; v=$(check_rdma "$d")
		case $v in
			FALLBACK*) mark_fallback "$lay" "$setup" "perf: $v" pf.total pf.excl pf.read pf.write pf.epoll \
				pf.ioctl pf.futex pf.clock ;;
			*) NOTES+=("$lay perf $setup: all $v connections on path rdma") ;;
		esac
	fi
}

# Both ends of redis GET, one connection and 50 (the "sides" part): perf
# counts the syscalls and context switches of every thread of the side
# measured, the server attached by pid, the client run under perf stat.
# Excluded: clock reads, CQ arms (ioctl on rxe) and one doorbell per
# message sent (a request on the client, an answer on the server; a credit
# update would be a further doorbell, and is counted against the library).
side_run() {   # side_run LAYOUT SETUP SERVER_IP SIDE(server|client) CONNS
	local lay=$1 setup=$2 ip=$3 side=$4 conns=$5 port d spid ppid rc ev key w0 w1
	key=sd.${side:0:1}$conns
	next_port; port=$PORT; d=$WORK/$lay/side.$side.$conns.$setup; mkdir -p "$d"
	say "$lay perf on the $side, redis GET -c $conns, $setup, $PERF_N GETs (port $port)"
	if [ -n "${HUNG[$lay.$setup]:-}" ]; then
		for m in excl cs wake; do set_val "$lay" "$key.$m" "$setup" skipped; done
		note "$lay $key $setup skipped: redis hung in this setup above"
		return
	fi
	ev=raw_syscalls:sys_enter,context-switches
	for s in ioctl gettimeofday clock_gettime; do ev="$ev,syscalls:sys_enter_$s"; done
	start_quiet_redis "$setup" "$d" "$port" "$ip"; spid=$REDIS_PID
	w0=$(wakeups_of "$setup" "$spid")
	if [ "$side" = server ]; then
		perf stat -x, -e "$ev" -p "$spid" -o "$d/perf.csv" 2>"$d/perf.err" &
		ppid=$!; PIDS+=("$ppid")
		sleep 1
		timeout -k 5 $((60 + PERF_N / 25)) $(prefix "$setup" "$d/stats.cli.jsonl") redis-benchmark \
			-h "$ip" -p "$port" -n "$PERF_N" -c "$conns" -t get -q >"$d/bench.out" 2>&1; rc=$?
		w1=$(wakeups_of "$setup" "$spid")
		kill -INT "$ppid"; wait "$ppid" 2>/dev/null
	else
		timeout -k 5 $((60 + PERF_N / 25)) perf stat -x, -e "$ev" -o "$d/perf.csv" -- \
			$(prefix "$setup" "$d/stats.cli.jsonl") redis-benchmark -h "$ip" -p "$port" \
			-n "$PERF_N" -c "$conns" -t get -q >"$d/bench.out" 2>"$d/perf.err"; rc=$?
		w1=$(wakeups_of "$setup" "$spid")
	fi
	stop "$spid" "$lay redis-server, $key ($setup)"
	if [ "$rc" != 0 ] || [ -z "$(parse_redis "$d/bench.out" GET 1)" ] || [ ! -s "$d/perf.csv" ]; then
		for m in excl cs wake; do set_val "$lay" "$key.$m" "$setup" fails; done
		note "$lay $key $setup fails: rc $rc, $(head -c 200 "$d/perf.err")"
		return
	fi
	cnt() { awk -F, -v e="$1" '$3 == e { n += $1 } END { print n + 0 }' "$d/perf.csv"; }
	per() { awk -v a="$1" -v n="$PERF_N" 'BEGIN { printf "%.3f", a / n }'; }
	local tot io clk cs bells=0
	tot=$(cnt raw_syscalls:sys_enter); io=$(cnt syscalls:sys_enter_ioctl); cs=$(cnt context-switches)
	clk=$(( $(cnt syscalls:sys_enter_gettimeofday) + $(cnt syscalls:sys_enter_clock_gettime) ))
	is_shim "$setup" && bells=$PERF_N
	set_val "$lay" "$key.excl" "$setup" "$(per $((tot - clk - io - bells)))"
	set_val "$lay" "$key.cs" "$setup" "$(per "$cs")"
	[ "$side" = server ] && [ -n "$w0" ] && [ -n "$w1" ] && set_val "$lay" "$key.wake" "$setup" "$(per $((w1 - w0)))"
	say "  perf ($side, -c $conns): $tot syscalls; ioctl $io clocks $clk; context switches $cs; wakeups ${w0:+$((w1 - w0))}"
	if is_shim "$setup"; then
		local v; v=$(check_rdma "$d")
		case $v in
			FALLBACK*) mark_fallback "$lay" "$setup" "$key: $v" "$key.excl" "$key.cs" "$key.wake" ;;
			*) NOTES+=("$lay $key $setup: all $v connections on path rdma") ;;
		esac
	fi
}

# ---------------------------------------------------------------- counters
counters() {   # one line: veth and rxe packet counters
	local out="" n f
	for n in rxenet0 rxenet1; do
		f=/sys/class/net/$n/statistics/tx_packets
		[ -r "$f" ] && out+="$n.tx=$(cat "$f") "
	done
	for n in /sys/class/infiniband/*; do
		f=$n/ports/1/hw_counters/sent_pkts
		[ -r "$f" ] && out+="${n##*/}.sent=$(cat "$f") "
	done
	echo "$out"
}

run_layout() {   # run_layout LAYOUT
	local lay=$1 srv setup t0 c0 c1 P
	case $lay in
		single) srv=$IP1
			# a pair boot: keep 10.77.0.1 -> 10.77.0.1 inside rxe0 (no veth)
			ip rule del pref 100 2>/dev/null && note "single: removed the pair boot's ip rule pref 100 for this phase" ;;
		pair) srv=$IP2
			[ -d /sys/class/infiniband/rxe1 ] || { note "pair: no rxe1 (boot with run-in-vm.sh -n pair); skipped"; return; }
			ip rule show | grep -q '^100:' || ip rule add pref 100 iif lo lookup 100 ;;
		*) note "unknown layout $lay"; return ;;
	esac
	LAYS+=("$lay")
	t0=$(ms); c0=$(counters)
	say "=== layout $lay: server $srv; $(ip route get "$srv" | head -1)"
	run_parts "$lay" "$srv" "$SETUPS" 1
	local r order
	for r in $(seq 2 "$ROUNDS"); do   # more rounds of the two libraries, in alternating order
		order="sdpshim base"; [ $((r % 2)) = 0 ] && order="base sdpshim"
		say "=== layout $lay: round $r of $ROUNDS ($order)"
		run_parts "$lay" "$srv" "$order" "$r"
	done
	c1=$(counters)
	NOTES+=("$lay counters before: $c0")
	NOTES+=("$lay counters after:  $c1")
	NOTES+=("$lay took $(( ($(ms) - t0) / 1000 )) s")
}

run_parts() {   # run_parts LAYOUT SERVER_IP SETUPS ROUND
	local lay=$1 srv=$2 setups=$3 round=$4 setup P
	if has_part redis; then
		for setup in $setups; do redis_group "$lay" $setup "$srv"; done
	fi
	if has_part iperf; then
		for P in 1 4; do
			for setup in $setups; do
				[ $P = 4 ] && [ $setup = rsocket ] && continue   # the brief: -P 4 for TCP and sdpshim only
				iperf_run "$lay" $setup "$srv" $P
			done
		done
	fi
	if has_part rstream; then
		for setup in $setups; do rstream_run "$lay" $setup "$srv" 65536 "$RS_BIG_C" big; done
		for setup in $setups; do rstream_run "$lay" $setup "$srv" 64 "$RS_SMALL_C" small; done
		for setup in $setups; do rstream_run "$lay" $setup "$srv" 64 1 pp "$RS_PP_I"; done
	fi
	if has_part strace && [ "$round" = 1 ]; then
		for setup in tcp $SHIMS; do strace_run "$lay" $setup "$srv"; done
	fi
	if has_part ctxsw && [ "$round" = 1 ]; then
		for setup in tcp $SHIMS; do ctxsw_run "$lay" $setup "$srv"; done
	fi
	if has_part perf && [ "$round" = 1 ]; then
		for setup in tcp $SHIMS; do perf_run "$lay" $setup "$srv"; done
	fi
	if has_part sides && [ "$round" = 1 ]; then
		local side conns
		for conns in 1 50; do
			for side in server client; do
				for setup in tcp $SHIMS; do side_run "$lay" $setup "$srv" $side $conns; done
			done
		done
	fi
	if has_part idle && [ "$round" = 1 ]; then
		for setup in tcp $SHIMS; do idle_run "$lay" $setup "$srv"; done
	fi
}

# ---------------------------------------------------------------- table
num() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
ratio() { if num "$1" && num "$2" && [ "$(awk -v b="$2" 'BEGIN { print (b > 0) }')" = 1 ]; then
	awk -v a="$1" -v b="$2" 'BEGIN { r = a / b; printf(r < 0.1 ? "%.3f" : "%.2f", r) }'; else echo -; fi; }
fmt() {   # numbers: 3 significant decimals at most
	if num "$1"; then awk -v v="$1" 'BEGIN { if (v >= 1000) printf "%.0f", v; else if (v >= 10) printf "%.1f", v
		else if (v >= 0.1) printf "%.3f", v; else printf "%.4f", v }'
	else echo "${1:--}"; fi
}

print_table() {
	local lay m t s b r tsv=$OUT/results.tsv extra
	local W='%-36s %11s %11s %11s %12s %15s\n' sp
	[ -n "$LIBBASE" ] && W='%-36s %11s %11s %11s %11s %12s %15s %13s\n'
	[ -n "$SPIN_US" ] && W="${W%\\n} %11s %11s %13s\\n"
	: >"$tsv"; : >"$OUT/rounds.tsv"
	echo
	echo "sdpshim VM bench: $(date -u +%Y-%m-%dT%H:%MZ), guest $(uname -r), $(nproc) vCPU (TCG), lib sha256 $LIB_SHA"
	[ -n "$LIBBASE" ] && echo "base column: the library of ${BASE_REV:-another build} (sha256 $BASE_SHA), run in the same boot;" \
		"sdpshim and base: median of $ROUNDS rounds, alternating which goes first (each round's figures: rounds.tsv)"
	echo "Soft-RoCE under software emulation: ratios compare the setups on this bed, not on real hardware."
	echo "rsocket column: librspreload.so on both ends; rstream rows: native rsocket (no preload)."
	echo "TCP/sdpshim rstream rows: rstream -T s (plain sockets), sdpshim preloaded on both ends."
	echo "p50 and syscall rows: lower is better (a ratio above 1 means sdpshim is slower / busier)."
	[ -n "$SPIN_US" ] && echo "spin column: this library with SDPSHIM_SPIN_US=$SPIN_US on both ends (busy-poll before sleeping)."
	for lay in "${LAYS[@]}"; do
		echo
		case $lay in
			single) echo "== one device: $IP1 -> $IP1 (rxe0 loopback; kernel TCP over lo)" ;;
			pair) echo "== pair: $IP1 (rxe0) -> $IP2 (rxe1) across the veth" ;;
		esac
		if [ -n "$LIBBASE" ]; then
			printf "$W" "metric" "TCP" "sdpshim" "base" "rsocket" "sdpshim/TCP" "sdpshim/rsocket" "sdpshim/base" \
				${SPIN_US:+"spin" "spin/TCP" "spin/rsocket"}
		else
			printf "$W" "metric" "TCP" "sdpshim" "rsocket" "sdpshim/TCP" "sdpshim/rsocket" \
				${SPIN_US:+"spin" "spin/TCP" "spin/rsocket"}
		fi
		extra=()
		# the syscalls with the most calls per GET, in either setup
		mapfile -t extra < <(for k in "${!VAL[@]}"; do
			case $k in "$lay|sc.sys."*) echo "${VAL[$k]} ${k#*|}" ;; esac; done |
			sort -k1,1gr | awk '!seen[$2]++ { print $2 }' | head -6)
		for m in "${ROWS[@]}" "${extra[@]}"; do
			t=$(med "${VAL[$lay|$m|tcp]:-}"); s=$(med "${VAL[$lay|$m|sdpshim]:-}")
			r=$(med "${VAL[$lay|$m|rsocket]:-}"); b=$(med "${VAL[$lay|$m|base]:-}")
			[ "$ROUNDS" -gt 1 ] && printf '%s\t%s\tsdpshim\t%s\n%s\t%s\tbase\t%s\n' "$lay" "$m" \
				"${VAL[$lay|$m|sdpshim]:-}" "$lay" "$m" "${VAL[$lay|$m|base]:-}" >>"$OUT/rounds.tsv"
			[ -z "$t$s$b$r${VAL[$lay|$m|spin]:-}" ] && continue
			local name=${ROWNAME[$m]:-"  ${m#sc.sys.}/GET"} spcols=()
			sp=$(med "${VAL[$lay|$m|spin]:-}")
			[ -n "$SPIN_US" ] && spcols=("$(fmt "$sp")" "$(ratio "$sp" "$t")" "$(ratio "$sp" "$r")")
			if [ -n "$LIBBASE" ]; then
				printf "$W" "$name" "$(fmt "$t")" "$(fmt "$s")" "$(fmt "$b")" "$(fmt "$r")" "$(ratio "$s" "$t")" \
					"$(ratio "$s" "$r")" "$(ratio "$s" "$b")" "${spcols[@]}"
			else
				printf "$W" "$name" "$(fmt "$t")" "$(fmt "$s")" "$(fmt "$r")" "$(ratio "$s" "$t")" "$(ratio "$s" "$r")" \
					"${spcols[@]}"
			fi
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$lay" "$m" "${t:--}" "${s:--}" "${r:--}" "${b:--}" "${sp:--}" >>"$tsv"
		done
	done
	echo
	echo "notes:"
	printf '  %s\n' "${NOTES[@]}"
}

LAYS=()
say "vm_bench: layouts '$LAYOUTS', redis -n $REDIS_N (-P 16: $REDIS_NP), iperf3 -t $IPERF_T," \
	"rstream -C $RS_BIG_C/$RS_SMALL_C, strace -n $STRACE_N, perf -n $PERF_N; lib $LIB_SHA"
say "devices: $(ibv_devices | awk 'NR > 2 { print $1 }' | tr '\n' ' ')"
NOTES+=("guest clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null) (unless tsc, gettimeofday/clock_gettime are real syscalls; vDSO on most hosts)")
for lay in $LAYOUTS; do run_layout "$lay"; done
print_table | tee "$OUT/table.txt"
say "vm_bench: done in $(( $(ms) / 1000 )) s"
# exit 1 when an sdpshim figure could not be taken (rsocket failures are expected)
bad=$(awk -F '\t' '$4 ~ /^(FALLBACK|fails|hangs|skipped)$/ || $6 ~ /^(FALLBACK|fails|hangs|skipped)$/ || $7 ~ /^(FALLBACK|fails|hangs|skipped)$/' "$OUT/results.tsv" | wc -l)
[ "$bad" -eq 0 ] || { echo "vm_bench: $bad sdpshim cells have no figure (see notes)" >&2; exit 1; }
