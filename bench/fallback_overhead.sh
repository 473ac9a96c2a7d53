#!/bin/bash
# fallback_overhead.sh: what preloading sdpshim costs when every connection
# stays on kernel TCP.  On loopback, one plain redis-server and one preloaded
# redis-server run side by side; redis-benchmark (plain against the plain
# server, preloaded against the preloaded one) measures GET requests/s,
# alternating plain and shim rounds so drift hits both equally.  Prints the
# median of each, the ratio shim/plain, and finally fallback_get_ratio=R.x
#
# Usage: bench/fallback_overhead.sh      (make first; env ROUNDS=5 REQUESTS=200000
#                                          CLIENTS=50 BUILD=build)
set -eu
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC1091
. "$HERE/local.bash"   # tests/helpers.bash (SDPSHIM_BIN, free_port, ...), WORK, PIDS

ROUNDS=${ROUNDS:-5}
REQUESTS=${REQUESTS:-200000}
CLIENTS=${CLIENTS:-50}

for prog in redis-server redis-benchmark; do
  command -v "$prog" >/dev/null || { echo "$prog is not installed" >&2; exit 2; }
done
if [ ! -x "$SDPSHIM_BIN" ] || [ ! -f "$SDPSHIM_LIB" ]; then
  echo "$SDPSHIM_BIN or $SDPSHIM_LIB missing: run make first" >&2
  exit 2
fi

start_server() {   # start_server NAME PORT [PREFIX...]: a redis-server, plain or preloaded
  local name=$1 port=$2; shift 2
  "$@" timeout -k 5 600 redis-server --port "$port" --bind 127.0.0.1 --save '' \
    --appendonly no --daemonize no >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
  wait_port 127.0.0.1 "$port" 15 || { cat "$WORK/$name.log" >&2; exit 1; }
}

# One benchmark round; prints the GET requests/s.
get_rps() {   # get_rps PORT [PREFIX...] :: [EXTRA ARGS...]
  local port=$1 prefix=() out; shift
  while [ "$1" != :: ]; do prefix+=("$1"); shift; done
  shift
  out=$(run_timeout 120 "${prefix[@]}" redis-benchmark -p "$port" -t get -n "$REQUESTS" \
    -c "$CLIENTS" -q "$@" 2>&1 | tr '\r' '\n')
  if grep -Eiq 'error' <<<"$out"; then
    echo "redis-benchmark failed: $out" >&2
    exit 1
  fi
  sed -nE 's/^GET: ([0-9.]+) requests per second.*/\1/p' <<<"$out" | tail -1
}

SHIM=("$SDPSHIM_BIN" run --)
PLAIN_PORT=$(free_port)
SHIM_PORT=$(free_port)
start_server plain "$PLAIN_PORT"
start_server shim "$SHIM_PORT" "${SHIM[@]}"

# measure LABEL [EXTRA ARGS...]: ROUNDS alternating rounds; sets RATIO.
measure() {
  local label=$1 plain shim i p s; shift
  : >"$WORK/plain" ; : >"$WORK/shim"
  get_rps "$PLAIN_PORT" :: "$@" >/dev/null                # warm-up, not counted
  get_rps "$SHIM_PORT" "${SHIM[@]}" :: "$@" >/dev/null
  for i in $(seq 1 "$ROUNDS"); do
    if [ $((i % 2)) -eq 1 ]; then
      p=$(get_rps "$PLAIN_PORT" :: "$@"); s=$(get_rps "$SHIM_PORT" "${SHIM[@]}" :: "$@")
    else
      s=$(get_rps "$SHIM_PORT" "${SHIM[@]}" :: "$@"); p=$(get_rps "$PLAIN_PORT" :: "$@")
    fi
    if [ -z "$p" ] || [ -z "$s" ]; then
      echo "no GET result in round $i" >&2
      exit 1
    fi
    echo "$p" >>"$WORK/plain"; echo "$s" >>"$WORK/shim"
    printf '  %-22s round %d: plain %12.2f  shim %12.2f\n' "$label" "$i" "$p" "$s" >&2
  done
  plain=$(median <"$WORK/plain")
  shim=$(median <"$WORK/shim")
  RATIO=$(awk -v s="$shim" -v p="$plain" 'BEGIN { printf "%.3f", s / p }')
  ROWS+=("$(printf '%-22s %14.2f %14.2f %8s' "$label" "$plain" "$shim" "$RATIO")")
}

ROWS=()
echo "redis GET on loopback, $ROUNDS rounds each, -n $REQUESTS -c $CLIENTS (per-round figures on stderr)"
measure "GET -c $CLIENTS" ; RATIO_PLAIN=$RATIO
measure "GET -c $CLIENTS -P 16" -P 16 ; RATIO_P16=$RATIO
printf '%-22s %14s %14s %8s\n' "benchmark" "plain req/s" "shim req/s" "ratio"
printf '%s\n' "${ROWS[@]}"
echo "fallback_get_p16_ratio=${RATIO_P16}x"
echo "fallback_get_ratio=${RATIO_PLAIN}x"
