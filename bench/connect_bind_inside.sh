#!/bin/bash
# connect_bind_inside.sh: runs inside the test bed (bench/connect_bind.sh).  For
# CB_ROUNDS rounds, the order alternating each round so drift hits both: a
# `connects` echo server and a `connects` client doing CB_N sequential
# connect-echo-close cycles of CB_BYTES, both ends preloaded with the baseline
# build (before), both with the new build (after), and both without a preload
# (tcp, a reference for what a TCP round trip costs in this boot).  Then, if
# CB_LAT=1, ib_send_lat over rxe0 (the RDMA round trip in the same boot).
# Writes into $BENCH_OUT: conns.tsv (build round conn connect_ms first_ms),
# runs.tsv (build round client_rdma/lines server_rdma/lines status), lat.txt,
# notes.txt, and each run's output, log (SDPSHIM_LOG=$CB_LOG) and stats files.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../tests/helpers.bash"   # free_port, wait_port, RXE_IP
# helpers.bash exports SDPSHIM_LIB (the launcher's override): each run names its own.
unset SDPSHIM_LIB LD_PRELOAD SDPSHIM_CONFIG SDPSHIM_MODE
N=${CB_N:-200}
ROUNDS=${CB_ROUNDS:-4}
BYTES=${CB_BYTES:-64}
IP=$RXE_IP
export SDPSHIM_CONNECT_TIMEOUT_MS=10000 SDPSHIM_ACK_TIMEOUT=19 SDPSHIM_NEGCACHE_TTL_MS=0
export SDPSHIM_LOG=${CB_LOG:-info}

# Private copies: a rebuild on the host during the run changes nothing.  The
# launcher preloads the libsdpshim.so next to itself (and SDPSHIM_LIB says so too).
W=/tmp/cb
rm -rf "$W"
mkdir -p "$W/before" "$W/after" "$W/run"
export SDPSHIM_RUN_DIR=$W/run
for b in before after; do
	src=$CB_BEFORE
	[ $b = after ] && src=$CB_AFTER
	cp "$src/libsdpshim.so" "$src/sdpshim" "$W/$b/" || { echo "cannot copy the $b build from $src" >&2; exit 2; }
done
cp "$CB_PROGS/connects" "$W/connects"
# Every file of a run is written in the guest and copied to $BENCH_OUT when
# this script ends.  On the host's share (9p under TCG) a stats line at each
# close and a log line at each connect cost a preloaded run milliseconds a
# cycle (a client's close() took 4.6 ms at the median, 2026-12-06) that the
# TCP run, which writes neither, never pays.
OUT=$W/out
mkdir -p "$OUT"
trap 'cp -a "$OUT/." "$BENCH_OUT/"' EXIT
printf 'build\tround\tconn\tconnect_ms\tfirst_ms\n' >"$OUT/conns.tsv"
: >"$OUT/runs.tsv"
: >"$OUT/notes.txt"
note() { echo "$*" | tee -a "$OUT/notes.txt" >&2; }

# paths FILE: "RDMA/LINES" of a stats file
paths() {
	local lines rdma
	lines=$(grep -c . "$1" 2>/dev/null) || lines=0
	rdma=$(grep -c '"path":"rdma"' "$1" 2>/dev/null) || rdma=0
	echo "$rdma/$lines"
}

# one_run BUILD ROUND
one_run() {
	local b=$1 r=$2 tag=$1.r$2 port spid crc=0 src=0 pre=() lib status=ok cp sp i
	port=$(free_port)
	if [ "$b" != tcp ]; then
		lib=$W/$b/libsdpshim.so
		pre=(env "SDPSHIM_LIB=$lib" "$W/$b/sdpshim" run --)
	fi
	rm -f "$OUT/$tag".*
	# The launcher execs: $! is the server itself.
	SDPSHIM_STATS_FILE=$OUT/$tag.server.stats "${pre[@]}" "$W/connects" -s "$port" -a "$IP" -n "$N" \
		>"$OUT/$tag.server.out" 2>"$OUT/$tag.server.log" &
	spid=$!
	if ! wait_port "$IP" "$port" 30; then
		note "$tag: the server did not listen: $(tail -3 "$OUT/$tag.server.log" "$OUT/$tag.server.out" | tr '\n' ' ')"
		kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null
		printf '%s\t%s\t-\t-\tFAIL\n' "$b" "$r" >>"$OUT/runs.tsv"
		return
	fi
	if [ "$b" != tcp ] && ! grep -qF "$lib" "/proc/$spid/maps" 2>/dev/null; then
		note "$tag: the server does not map $lib"
		status=FAIL
	fi
	# /usr/bin/time: the client's voluntary context switches, all its threads.
	SDPSHIM_STATS_FILE=$OUT/$tag.client.stats timeout -k 5 300 /usr/bin/time -f %w -o "$OUT/$tag.client.vcs" \
		"${pre[@]}" "$W/connects" -c "$IP" \
		-p "$port" -n "$N" -b "$BYTES" >"$OUT/$tag.client.out" 2>"$OUT/$tag.client.log" || crc=$?
	# The server ends once N connections ended; a client that gave up leaves it waiting.
	for i in $(seq 1 300); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$spid" 2>/dev/null && { note "$tag: the server still ran 30 s after the client; killed"; kill "$spid"; }
	wait "$spid" || src=$?
	sed -nE 's/^conn ([0-9]+) connect_ms=([0-9.]+) first_ms=([0-9.]+) .* ok$/\1\t\2\t\3/p' "$OUT/$tag.client.out" |
		sed "s/^/$b\t$r\t/" >>"$OUT/conns.tsv"
	if [ "$crc" != 0 ] || [ "$src" != 0 ] || ! grep -qx "ok $N" "$OUT/$tag.client.out"; then
		note "$tag: client rc $crc, server rc $src: $(grep -m2 -E 'FAIL|server:' "$OUT/$tag.client.out" "$OUT/$tag.server.out" | tr '\n' ' ')"
		status=FAIL
	fi
	if [ "$b" = tcp ]; then
		printf '%s\t%s\t-\t-\t%s\n' "$b" "$r" "$status" >>"$OUT/runs.tsv"
	else
		cp=$(paths "$OUT/$tag.client.stats")
		sp=$(paths "$OUT/$tag.server.stats")
		if [ "$cp" != "$N/$N" ] || [ "$sp" != "$N/$N" ]; then
			[ "$status" = ok ] && status=FALLBACK
			note "$tag: path=rdma on client $cp, server $sp connections (want $N/$N each)"
			note "  client reasons: $(grep -o '"reason":"[a-z_]*"' "$OUT/$tag.client.stats" 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
			note "  server reasons: $(grep -o '"reason":"[a-z_]*"' "$OUT/$tag.server.stats" 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
			note "  client log ($SDPSHIM_LOG), first non-rdma lines: $(grep -v 'path=rdma' "$OUT/$tag.client.log" | head -4 | tr '\n' ' ')"
			note "  server log, first lines: $(head -4 "$OUT/$tag.server.log" | tr '\n' ' ')"
		fi
		printf '%s\t%s\t%s\t%s\t%s\n' "$b" "$r" "$cp" "$sp" "$status" >>"$OUT/runs.tsv"
	fi
	echo "$tag: $status ($(grep -c '^conn ' "$OUT/$tag.client.out") conns$( [ "$b" != tcp ] && echo ", rdma client $cp server $sp"))" >&2
}

# sock_diag modules: the kernel loads them on first use (from 9p, under TCG: slow),
# and a process that asks first waits; a change is noted with the run that saw it.
diag_mods() { awk '$1 ~ /diag$/ { print $1 }' /proc/modules | sort | tr '\n' ' '; }
mods=$(diag_mods) starts=
note "sock_diag modules at start: ${mods:-none}"

T0=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
	if [ $((r % 2)) = 1 ]; then order="before after tcp"; else order="after before tcp"; fi
	for b in $order; do
		starts="$starts $b.r$r@$(cut -d' ' -f1 /proc/uptime)s"
		one_run "$b" "$r"
		now=$(diag_mods)
		[ "$now" = "$mods" ] || note "sock_diag modules loaded during $b.r$r: ${now:-none}"
		mods=$now
	done
done
echo "runs took $(( $(date +%s) - T0 )) s" >&2
# The new build draws its nonces (client at connect, server for the HelloAck) with
# getrandom(), which blocks until the kernel's CRNG is ready: in a fresh guest that
# can be after the first runs (conn 1 of the first "after" run then stalls).
note "crng: $(dmesg 2>/dev/null | grep -m1 -i 'crng init' || echo 'no crng init line in dmesg'); runs started (uptime):$starts"

# The RDMA round trip of this boot: ib_send_lat (ping-pong; it reports half the
# round trip), connected with rdma_cm (-R) so the GID follows the IP.
if [ "${CB_LAT:-1}" = 1 ] && command -v ib_send_lat >/dev/null; then
	timeout -k 5 90 ib_send_lat -d rxe0 -R -s "$BYTES" -n 2000 >"$OUT/lat.server" 2>&1 &
	lpid=$!
	sleep 1
	lrc=0
	timeout -k 5 90 ib_send_lat -d rxe0 -R -s "$BYTES" -n 2000 "$IP" >"$OUT/lat.client" 2>&1 || lrc=$?
	wait "$lpid"
	row=$(awk -v s="$BYTES" '$1 == s && NF >= 6 { print; exit }' "$OUT/lat.client")
	if [ -n "$row" ]; then
		# columns: #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%
		awk -v s="$BYTES" '{ printf "ib_send_lat -R -s %s -n 2000 on rxe0: t_typical %.2f us, t_avg %.2f us, 99%% %.2f us (half a round trip: RTT ~ %.1f us)\n", s, $5, $6, $8, 2 * $5 }' \
			<<<"$row" >"$OUT/lat.txt"
	else
		echo "ib_send_lat: no result (rc $lrc): $(tail -3 "$OUT/lat.client" | tr '\n' ' ')" >"$OUT/lat.txt"
	fi
	cat "$OUT/lat.txt" >&2
fi
grep -qvP '\tok$' "$OUT/runs.tsv" && exit 1
exit 0
