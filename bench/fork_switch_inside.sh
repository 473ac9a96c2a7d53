#!/bin/bash
# fork_switch_inside.sh: runs inside the test bed (bench/fork_switch.sh).  What a
# fork costs when it moves the accepted RDMA connection to TCP, against a fork
# with a plain TCP connection, and against what re-creating an RDMA channel in
# the child would cost at least (an RDMA connect: the first one of a process
# also opens the device).  Prints one line per measurement.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../tests/helpers.bash"   # SDPSHIM_BIN, PROGS, RXE_IP, free_port, wait_port
B=$BUILD
P=$PROGS
IP=$RXE_IP
N=${FORK_CONNS:-50}
export SDPSHIM_CONNECT_TIMEOUT_MS=10000 SDPSHIM_ACK_TIMEOUT=19

# fork_case LABEL PRELOAD_CLIENT [FORK_MODE]: N connections to a preloaded
# forkecho server (SDPSHIM_FORK=FORK_MODE, default the library's: handoff)
fork_case() {
	local port pre=() line t0 t1
	port=$(free_port)
	[ "$2" = yes ] && pre=("$B/sdpshim" run --)
	SDPSHIM_FORK=${3:-handoff} "$B/sdpshim" run -- "$P/forkecho" -s "$port" -a "$IP" -n "$N" \
		>/tmp/fs.server 2>&1 &
	wait_port "$IP" "$port" || { echo "$1: server did not listen"; return 1; }
	t0=$(date +%s%N)
	rm -f /tmp/fs.cstats
	SDPSHIM_STATS_FILE=/tmp/fs.cstats "${pre[@]}" "$P/forkecho" -c "$IP" -p "$port" -n "$N" \
		-b 65536 >/tmp/fs.client 2>&1 || echo "$1: client failed: $(tail -2 /tmp/fs.client)"
	t1=$(date +%s%N)
	wait
	line=$(sed -n 's/^forkecho: server: fork() took //p' /tmp/fs.server)
	echo "$1: ${line:-no timing}; client: $(tail -1 /tmp/fs.client);" \
	     "$(awk -v d=$((t1 - t0)) -v n="$N" 'BEGIN { printf "%.1f ms a connection, whole run", d / 1e6 / n }');" \
	     "$(client_paths)"
}

# client_paths: the client's connections by path and climbs, and the share
# of their bytes that went over RDMA (by their counters)
client_paths() {
	[ -s /tmp/fs.cstats ] || { echo "no client stats"; return; }
	python3 -S -c '
import json, sys
lines = [json.loads(l) for l in open("/tmp/fs.cstats") if l.strip()]
total = sum(c["bytes_sent"] + c["bytes_received"] for c in lines)
tcp = sum(c["tcp_bytes_sent"] + c["tcp_bytes_received"] for c in lines)
kinds = {}
for c in lines:
    k = "%s/climbs=%d" % (c["path"], c.get("climbs", 0))
    kinds[k] = kinds.get(k, 0) + 1
print("client connections: %s; %.1f %% of their bytes over RDMA" % (
    ", ".join("%d %s" % (n, k) for k, n in sorted(kinds.items())),
    100.0 * (total - tcp) / total if total else 0.0))'
}

fork_case "fork() with the accepted connection on RDMA, SDPSHIM_FORK=switch (moved to TCP first)" yes switch
fork_case "fork() with the accepted connection on RDMA, SDPSHIM_FORK=handoff (moved when the child uses it)" yes handoff
fork_case "fork() with the accepted connection on TCP (client not preloaded)" no

# RDMA channel setup: one process, 20 connects (the first opens the device).
port=$(free_port)
"$B/sdpshim" run -- "$P/connects" -s "$port" -a "$IP" -n 20 >/tmp/fs.cserver 2>&1 &
wait_port "$IP" "$port"
SDPSHIM_STATS_FILE=/tmp/fs.stats "$B/sdpshim" run -- "$P/connects" -c "$IP" -p "$port" -n 20 \
	>/tmp/fs.connects 2>&1 || echo "connects failed: $(tail -2 /tmp/fs.connects)"
wait
paths=$(grep -o '"path":"[a-z]*"' /tmp/fs.stats 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ';')
first=$(sed -nE 's/^conn 1 connect_ms=([0-9.]+) .*/\1/p' /tmp/fs.connects)
sed -nE 's/^conn ([0-9]+) connect_ms=([0-9.]+) .*/\1 \2/p' /tmp/fs.connects | awk '$1 != 1 { print $2 }' |
	sort -n | awk -v first="${first:-0}" -v paths="$paths" '
	{ v[++n] = $1 }
	END {
		printf "RDMA connect (channel setup), first in a process: %.1f ms; next %d: median %.1f ms (client paths: %s)\n",
		       first, n, v[int((n + 1) / 2)], paths
	}'
