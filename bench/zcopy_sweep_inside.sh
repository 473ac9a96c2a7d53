#!/bin/bash
# zcopy_sweep_inside.sh: the measurements of bench/zcopy_sweep.sh.  Runs INSIDE
# the soft-RoCE guest: one tests/progs/stream transfer (-F: every write is
# exactly SIZE bytes, the receiver checks every byte) per write size and setup:
#   tcp      kernel TCP, nothing preloaded
#   copy     sdpshim on both ends, SDPSHIM_ZCOPY_THRESH=0 (buffer copy only)
#   zcopy    sdpshim on both ends, SDPSHIM_ZCOPY_THRESH=1 (every write zero-copy)
#   rsocket  rdma-core's librspreload.so on both ends
# Writes $BENCH_OUT/zcopy.tsv: setup size bytes wall_s gbps cpu_client_s
# cpu_server_s zcopy_pct path.  An sdpshim run whose stats do not say path=rdma
# on both ends is recorded with path "FALLBACK" and its figures are not used.
# Env: BENCH_OUT (required), BUILD, ZC_SIZES, ZC_BYTES (per run, default 128 MiB),
# RXE_IP.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
OUT=${BENCH_OUT:?BENCH_OUT must name a directory}
IP=${RXE_IP:-10.77.0.1}
SIZES=${ZC_SIZES:-"4096 16384 65536 262144 1048576 4194304"}
BYTES=${ZC_BYTES:-134217728}
RSPRE=${RSPRELOAD:-/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so}
STREAM=$BUILD/tests/progs/stream
WORK=$(mktemp -d /tmp/zcopy_sweep.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
LIB=$WORK/libsdpshim.so      # a private copy: the host may rebuild meanwhile
cp "$BUILD/libsdpshim.so" "$LIB"
cp "$STREAM" "$WORK/stream"
STREAM=$WORK/stream
mkdir -p "$OUT"
TSV=$OUT/zcopy.tsv
printf 'setup\tsize\tbytes\twall_s\tgbps\tcpu_client_s\tcpu_server_s\tzcopy_pct\tpath\n' >"$TSV"
export SDPSHIM_CONNECT_TIMEOUT_MS=10000 SDPSHIM_ACK_TIMEOUT=19 SDPSHIM_RUN_DIR=$WORK SDPSHIM_NEGCACHE_TTL_MS=0
unset LD_PRELOAD SDPSHIM_STATS_FILE SDPSHIM_MODE SDPSHIM_CONFIG SDPSHIM_ZCOPY_THRESH
PORT=23000

setup_env() {   # setup_env SETUP: the env prefix (as words) for both ends
	case $1 in
		tcp) echo "" ;;
		copy) echo "LD_PRELOAD=$LIB SDPSHIM_ZCOPY_THRESH=0 SDPSHIM_STATS_FILE=$WORK/stats" ;;
		zcopy) echo "LD_PRELOAD=$LIB SDPSHIM_ZCOPY_THRESH=1 SDPSHIM_STATS_FILE=$WORK/stats" ;;
		rsocket) echo "LD_PRELOAD=$RSPRE" ;;
	esac
}

wait_listen() {   # a kernel TCP listener (tcp, copy, zcopy) or an rdma_cm one (rsocket)
	local i hex
	hex=$(printf ':%04X 00000000:0000 0A' "$1")
	for i in $(seq 1 100); do
		grep -q "$hex" /proc/net/tcp && return 0
		rdma resource show cm_id 2>/dev/null | grep -Eq "state LISTEN .*src-addr [^ ]*:$1( |$)" && return 0
		sleep 0.1
	done
	return 1
}

# stats_verdict: "rdma <zcopy%>" when both ends logged path rdma, else FALLBACK
stats_verdict() {
	python3 -S - "$WORK/stats" <<'PY'
import json, sys
try:
    recs = [json.loads(l) for l in open(sys.argv[1])]
except OSError:
    recs = []
roles = {r["role"] for r in recs if r["path"] == "rdma"}
if len(recs) < 2 or any(r["path"] != "rdma" for r in recs) or roles != {"client", "server"}:
    print("FALLBACK 0")
else:
    c = max((r for r in recs if r["role"] == "client"), key=lambda r: r["bytes_sent"])
    print("rdma", c["zcopy_bytes_sent"] * 100 // max(c["bytes_sent"], 1))
PY
}

one_run() {   # one_run SETUP SIZE
	local setup=$1 size=$2 envs t0 t1 crc=0 src=0 verdict path pct
	PORT=$((PORT + 1))
	envs=$(setup_env "$setup")
	rm -f "$WORK/stats"
	# shellcheck disable=SC2086  # envs is a list of NAME=VALUE words
	env $envs /usr/bin/time -f '%U %S' -o "$WORK/server.time" \
		timeout 600 "$STREAM" -s "$PORT" -n 1 >"$WORK/server.log" 2>&1 &
	local spid=$!
	wait_listen "$PORT" || echo "zcopy_sweep: server on $PORT not up" >&2
	t0=$(date +%s%N)
	# shellcheck disable=SC2086
	env $envs /usr/bin/time -f '%U %S' -o "$WORK/client.time" \
		timeout 600 "$STREAM" -c "$IP" -p "$PORT" -b "$BYTES" -d up -m "$size" -F \
		>"$WORK/client.log" 2>&1 || crc=$?
	t1=$(date +%s%N)
	wait "$spid" || src=$?
	if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ] || ! grep -q " OK$" "$WORK/server.log"; then
		echo "zcopy_sweep: $setup size $size failed (client $crc, server $src):" \
			"$(tail -2 "$WORK/client.log" "$WORK/server.log" | tr '\n' ' ')" >&2
		printf '%s\t%s\t%s\tfail\tfail\tfail\tfail\t0\tfail\n' "$setup" "$size" "$BYTES" >>"$TSV"
		return
	fi
	case $setup in
		copy|zcopy) read -r path pct < <(stats_verdict) ;;
		*) path=$setup pct=0 ;;
	esac
	awk -v s="$setup" -v z="$size" -v b="$BYTES" -v ns=$((t1 - t0)) -v pct="$pct" -v path="$path" \
		-v c="$(awk '{ print $1 + $2 }' "$WORK/client.time")" \
		-v sv="$(awk '{ print $1 + $2 }' "$WORK/server.time")" 'BEGIN {
		w = ns / 1e9; gib = b / 1073741824
		printf "%s\t%d\t%d\t%.2f\t%.4f\t%.2f\t%.2f\t%d\t%s\n", s, z, b, w, b * 8 / w / 1e9, c / gib, sv / gib, pct, path
	}' >>"$TSV"
	tail -1 "$TSV" >&2
}

echo "zcopy_sweep: $BYTES bytes per run, sizes $SIZES, lib $(sha256sum "$LIB" | cut -c1-16)" >&2
for size in $SIZES; do
	for setup in tcp copy zcopy rsocket; do
		one_run "$setup" "$size"
	done
done
