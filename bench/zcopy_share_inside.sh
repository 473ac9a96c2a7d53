#!/bin/bash
# zcopy_share_inside.sh: the measurements of bench/zcopy_share.sh, INSIDE the
# soft-RoCE guest.  Per reader (fast, slow), per run, per library of ZS_LIBS
# (NAME=PATH words, interleaved so drift hits each alike): one
# tests/progs/stream upload of ZS_BYTES in random writes of up to 1 MiB,
# checked by the receiver; prints one line per run (the client's stats line:
# path, zero-copy share of its bytes, zero-copy operations; its user+system
# CPU; wall time) and the medians per reader and library.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
IP=${RXE_IP:-10.77.0.1}
WORK=$(mktemp -d /tmp/zcopy_share.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cp "$BUILD/tests/progs/stream" "$WORK/stream"
NAMES=()
for spec in $ZS_LIBS; do
	NAMES+=("${spec%%=*}")
	cp "${spec#*=}" "$WORK/${spec%%=*}.so" # private copies: the host may rebuild meanwhile
done
export SDPSHIM_CONNECT_TIMEOUT_MS=10000 SDPSHIM_RUN_DIR=$WORK SDPSHIM_NEGCACHE_TTL_MS=0
unset LD_PRELOAD SDPSHIM_STATS_FILE SDPSHIM_ZCOPY_THRESH SDPSHIM_CONFIG
PORT=24000

wait_listen() {
	local i hex
	hex=$(printf ':%04X 00000000:0000 0A' "$1")
	for i in $(seq 1 100); do
		grep -q "$hex" /proc/net/tcp && return 0
		sleep 0.1
	done
	return 1
}

one_run() {   # one_run READER NAME
	local renv=() t0 t1 ok sp
	[ "$1" = slow ] && renv=(STREAM_READ_MAX=65536 STREAM_READ_PAUSE_US=2000)
	PORT=$((PORT + 1))
	rm -f "$WORK/stats"
	env "${renv[@]}" LD_PRELOAD="$WORK/$2.so" SDPSHIM_STATS_FILE="$WORK/stats" \
		timeout 300 "$WORK/stream" -s "$PORT" -n 1 >"$WORK/server.log" 2>&1 &
	sp=$!
	wait_listen "$PORT" || echo "zcopy_share: server on $PORT not up" >&2
	t0=$(date +%s%N)
	env LD_PRELOAD="$WORK/$2.so" SDPSHIM_STATS_FILE="$WORK/stats" /usr/bin/time -f '%U %S' \
		-o "$WORK/client.time" timeout 300 "$WORK/stream" -c "$IP" -p "$PORT" -b "$ZS_BYTES" \
		-d up -m 1M >"$WORK/client.log" 2>&1
	t1=$(date +%s%N)
	wait "$sp"
	ok=$(grep -c " OK$" "$WORK/server.log")
	python3 -S - "$WORK/stats" "$1" "$2" "$ok" $(((t1 - t0) / 1000000)) "$(cat "$WORK/client.time")" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
c = [r for r in recs if r["role"] == "client"][0]
cpu = sum(float(x) for x in sys.argv[6].split())
print("run reader=%s lib=%s checked=%s path=%s zc_pct=%.1f zc_ops=%d client_cpu_s=%.2f wall_ms=%s"
      % (sys.argv[2], sys.argv[3], "yes" if sys.argv[4] == "1" else "NO", c["path"],
         100.0 * c["zcopy_bytes_sent"] / max(c["bytes_sent"], 1), c["zcopy_ops"], cpu, sys.argv[5]))
PY
}

for reader in fast slow; do
	for i in $(seq 1 "$ZS_RUNS"); do
		for name in "${NAMES[@]}"; do
			one_run "$reader" "$name"
		done
	done
done | tee "$WORK/runs"
python3 -S - "$WORK/runs" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in line.split()[1:])
    rows.setdefault((f["reader"], f["lib"]), []).append(f)
def med(vals):
    v = sorted(vals)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
print("medians: reader, library, zero-copy share %, client CPU s, wall ms, runs checked")
for (reader, lib), fs in rows.items():
    print("  %-5s %-8s %6.1f %6.2f %7d %d/%d" % (reader, lib, med([float(f["zc_pct"]) for f in fs]),
          med([float(f["client_cpu_s"]) for f in fs]), med([int(f["wall_ms"]) for f in fs]),
          sum(f["checked"] == "yes" for f in fs), len(fs)))
PY
