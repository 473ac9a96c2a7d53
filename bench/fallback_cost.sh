#!/bin/bash
# fallback_cost.sh: the instructions sdpshim adds per request when every
# connection stays on kernel TCP, counted by callgrind (deterministic, unlike
# a rate).  redis-benchmark -c 1 -t get runs against redis-server on
# 127.0.0.1, twice per setup (-n SHORT and -n LONG); per request =
# (Ir(LONG) - Ir(SHORT)) / (LONG - SHORT), so start-up and exit cancel out.
# Only the measured process runs under callgrind:
#   client side: redis-benchmark plain vs preloaded, against a plain server;
#   server side: redis-server plain vs preloaded, driven by a plain client.
# Ends with fallback_client_ratio=R.RRR and fallback_server_ratio=R.RRR.
#
# Usage: bench/fallback_cost.sh [-o DIR] [-s client|server]   (make first)
#   -o DIR   keep the callgrind files (and logs) in DIR (default: a temp dir, removed)
#   -s SIDE  measure one side only
# Env: SHORT (3000), LONG (30000), ROUNDS (1: with more, each figure is the
#      median of the rounds), BUILD (build), PRELOAD_LIB (default the build's
#      libsdpshim.so; e.g. rsocket's librspreload.so), TOP (8 functions).
SHORT=${SHORT:-3000}
LONG=${LONG:-30000}
ROUNDS=${ROUNDS:-1}
TOP=${TOP:-8}
set -eu
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC1091
. "$HERE/local.bash"   # tests/helpers.bash (SDPSHIM_LIB, free_port, ...), WORK, PIDS
PRELOAD_LIB=${PRELOAD_LIB:-$SDPSHIM_LIB}
OUT=
SIDES="client server"
while getopts o:s: opt; do
  case $opt in
    o) OUT=$OPTARG ;;
    s) SIDES=$OPTARG ;;
    *) echo "usage: $0 [-o DIR] [-s client|server]" >&2; exit 2 ;;
  esac
done

for prog in redis-server redis-benchmark valgrind callgrind_annotate; do
  command -v "$prog" >/dev/null || { echo "$prog is not installed" >&2; exit 2; }
done
[ -f "$PRELOAD_LIB" ] || { echo "$PRELOAD_LIB missing: run make first" >&2; exit 2; }
[ "$LONG" -gt "$SHORT" ] || { echo "LONG ($LONG) must exceed SHORT ($SHORT)" >&2; exit 2; }
PRELOAD_LIB=$(realpath "$PRELOAD_LIB")
IS_SDPSHIM=0
case $(basename "$PRELOAD_LIB") in libsdpshim*) IS_SDPSHIM=1 ;; esac

[ -n "$OUT" ] && mkdir -p "$OUT"
FILES=${OUT:-$WORK}

# The prefix that runs a program under callgrind, preloaded or not:
# LD_PRELOAD in valgrind's environment reaches the program it runs (valgrind
# adds its own preloads to it) and valgrind itself is static, so the library
# is measured inside that program only.  Sets RUN.
prefix_for() {   # prefix_for VARIANT CALLGRIND_FILE
  RUN=(env)
  [ "$1" = shim ] && RUN+=(LD_PRELOAD="$PRELOAD_LIB" SDPSHIM_STATS_FILE="$WORK/stats-$TAG.jsonl")
  RUN+=(valgrind --tool=callgrind --trace-children=no --callgrind-out-file="$2")
}

# redis-server seeds its hash functions from /dev/urandom, and the seed
# decides how many entries the command table compares before it finds GET:
# that moved the server's figure by up to 65 instructions per request from
# one start to the next.  So the measured server reads a fixed seed: a file
# bound over /dev/urandom in a mount namespace of its own (as root, or in a
# user namespace).  Sets SEEDED (a prefix), empty when neither is allowed.
SEEDED=()
fixed_seed_prefix() {
  local how
  head -c 64 /dev/zero | tr '\0' 'S' >"$WORK/seed"
  for how in -m -rm; do
    # shellcheck disable=SC2016 # $1 and $@ are the inner shell's
    if unshare "$how" sh -c 'mount --bind "$1" /dev/urandom' sh "$WORK/seed" 2>/dev/null; then
      # shellcheck disable=SC2016
      SEEDED=(unshare "$how" sh -c 'mount --bind "$1" /dev/urandom && shift && exec "$@"' sh "$WORK/seed")
      return 0
    fi
  done
  echo "note: no mount namespace (unshare -m / -rm): the server's figure varies by up to" \
    "65 instructions per request with redis's random hash seed" >&2
}

# --hz 1: serverCron is the server's one cost that follows wall time rather
# than requests, and wall time under callgrind varies from run to run (at the
# default 10 Hz it moved the server's figure by up to 0.5 %).
start_server() {   # start_server LOG PORT [PREFIX...]: sets SERVER_PID
  local log=$1 port=$2; shift 2
  "$@" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no --hz 1 >"$log" 2>&1 &
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  wait_port 127.0.0.1 "$port" 120 || { cat "$log" >&2; exit 1; }
}

stop_server() {   # SIGTERM: redis exits cleanly, so callgrind writes its file
  kill -TERM "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}

# --csv: without it redis-benchmark prints a progress line every 250 ms, and
# each one walks its latency histograms (hdr_mean): about 1 M instructions a
# line, so the count follows wall time (under callgrind, 590 per request of
# a plain client's 3,330, and more for a slower run), not requests.
bench() {   # bench PORT N LOG [PREFIX...]
  local port=$1 n=$2 log=$3; shift 3
  if ! run_timeout 1800 "$@" redis-benchmark -p "$port" -t get -n "$n" -c 1 --csv >"$log" 2>&1 ||
     ! grep -q '^"GET"' "$log"; then
    echo "redis-benchmark failed:" >&2; cat "$log" >&2; exit 1
  fi
}

total_ir() {   # total_ir CALLGRIND_FILE
  awk '/^(summary|totals):/ { print $2; exit }' "$1"
}

# The connections of a preloaded run must have stayed on kernel TCP.
check_fallback() {
  local f="$WORK/stats-$TAG.jsonl"
  [ "$IS_SDPSHIM" = 1 ] || return 0
  if [ ! -s "$f" ] || grep -vq '"path":"tcp"' "$f"; then
    echo "$TAG: the preloaded run's connections were not all on kernel TCP:" >&2
    cat "$f" >&2 2>/dev/null || echo "(no stats lines)" >&2
    exit 1
  fi
}

# The library must really have been loaded into the measured process.
check_loaded() {   # check_loaded CALLGRIND_FILE
  grep -qF "$PRELOAD_LIB" "$1" || {
    echo "$1: $PRELOAD_LIB does not appear in the profile" >&2; exit 1; }
}

# File names (and so the measured process's environment, which names its
# stats file) have the same length for both run lengths: N is zero-padded.
tag() {   # tag SIDE VARIANT N ROUND
  printf '%s-%s-%07d-r%d' "$@"
}

measure() {   # measure SIDE VARIANT N ROUND [SERVER_PORT]: sets IR
  local side=$1 variant=$2 n=$3 port=${5:-} f
  TAG=$(tag "$side" "$variant" "$n" "$4")
  f=$FILES/$TAG.callgrind
  prefix_for "$variant" "$f"
  if [ "$side" = client ]; then
    bench "$port" "$n" "$FILES/$TAG.log" "${RUN[@]}"
  else
    port=$(free_port)
    start_server "$FILES/$TAG.log" "$port" "${SEEDED[@]}" "${RUN[@]}"
    bench "$port" "$n" "$FILES/$TAG.bench.log"
    stop_server
  fi
  if [ "$variant" = shim ]; then check_loaded "$f"; check_fallback; fi
  IR=$(total_ir "$f")
  [ -n "$IR" ] || { echo "$f: no instruction total" >&2; exit 1; }
}

per_request() {   # per_request IR_SHORT IR_LONG
  awk -v a="$1" -v b="$2" -v s="$SHORT" -v l="$LONG" 'BEGIN { printf "%.1f", (b - a) / (l - s) }'
}

# Self cost per request of each function of the preloaded library (the
# difference of the two runs), the largest first.  callgrind_annotate lists
# the lines a function inlined from a header (fdtable.h:send) apart, without
# the object: they count for the library's function of that name.
where_it_goes() {   # where_it_goes SIDE (from round 1)
  local side=$1 lib n
  lib=$(basename "$PRELOAD_LIB")
  for n in "$SHORT" "$LONG"; do
    callgrind_annotate --auto=no --threshold=100 "$FILES/$(tag "$side" shim "$n" 1).callgrind" 2>/dev/null |
      awk -v lib="$lib" -v n="$n" '$1 ~ /^[0-9,]+$/ && $3 !~ /^TOTALS/ {
        ir = $1; gsub(",", "", ir); fn = $0
        sub(/^ *[0-9,]+ +\([^)]*\) +/, "", fn)
        obj = ""; if (match(fn, / \[[^]]*\]$/)) { obj = substr(fn, RSTART + 2); fn = substr(fn, 1, RSTART - 1) }
        sub(/^.*:/, "", fn)
        if (index(obj, lib)) { ours[fn] = 1; cost[fn] += ir } else if (obj == "") loose[fn] += ir }
        END { for (f in ours) print n, f, cost[f] + loose[f] }'
  done | awk -v s="$SHORT" -v l="$LONG" '
    { cost[$2] += ($1 == l ? $3 : -$3) }
    END { for (f in cost) if (cost[f] != 0) printf "%.1f %s\n", cost[f] / (l - s), f }' |
    sort -gr | awk -v top="$TOP" '
      NR <= top { printf "    %-28s %8.1f\n", $2, $1 }
      { sum += $1 }
      END { printf "    %-28s %8.1f\n", "(all, self)", sum }'
}

declare -A PER RATIO
# measure_side SIDE [SERVER_PORT]: ROUNDS rounds of both variants at both
# lengths; the per-request figure of each variant is the median of its rounds.
measure_side() {
  local side=$1 port=${2:-} r variant a b per
  for r in $(seq 1 "$ROUNDS"); do
    for variant in plain shim; do
      measure "$side" "$variant" "$SHORT" "$r" "$port"; a=$IR
      measure "$side" "$variant" "$LONG" "$r" "$port"; b=$IR
      per=$(per_request "$a" "$b")
      echo "$per" >>"$WORK/per-$side-$variant"
      printf '  %s round %d %-5s: Ir %s / %s, %s per request\n' "$side" "$r" "$variant" \
        "$a" "$b" "$per" >&2
    done
  done
  a=$(median <"$WORK/per-$side-plain")
  b=$(median <"$WORK/per-$side-shim")
  PER[$side]="$a $b"
  RATIO[$side]=$(awk -v s="$b" -v p="$a" 'BEGIN { printf "%.3f", s / p }')
}

echo "redis GET on 127.0.0.1, redis-benchmark -c 1 -t get --csv, -n $SHORT and -n $LONG," \
  "$ROUNDS round(s); preload $PRELOAD_LIB" >&2
for side in $SIDES; do
  case $side in
    client)
      port=$(free_port)
      start_server "$FILES/server-for-client.log" "$port"
      bench "$port" 1000 "$FILES/warm-up.log"
      measure_side client "$port"
      stop_server
      ;;
    server)
      fixed_seed_prefix
      measure_side server
      ;;
    *) echo "unknown side $side" >&2; exit 2 ;;
  esac
done

printf '%-8s %18s %18s %8s\n' side "plain Ir/request" "shim Ir/request" ratio
for side in $SIDES; do
  read -r p s <<<"${PER[$side]}"
  printf '%-8s %18s %18s %8s\n' "$side" "$p" "$s" "${RATIO[$side]}"
done
for side in $SIDES; do
  echo "where the $side's extra goes (self Ir per request, functions of $(basename "$PRELOAD_LIB")):"
  where_it_goes "$side"
done
for side in $SIDES; do
  echo "fallback_${side}_ratio=${RATIO[$side]}"
done
