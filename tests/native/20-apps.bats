#!/usr/bin/env bats
# Native suite, part 20: real applications (redis, iperf3) over loopback with
# the shim on the server only, the client only, and both.  Every run must work
# exactly as without the shim, and SDPSHIM_STATS_FILE must show kernel TCP with
# reason loopback for each connection of a preloaded side, and nothing at all
# from the side that is not preloaded.

load ../helpers

setup_file() {
  cat >"$BATS_FILE_TMPDIR/check_stats.py" <<'EOF'
# check_stats.py FILE PORT SERVER_PRELOADED CLIENT_PRELOADED [MIN_CLIENT_SENT] [exact]
# Checks the stats lines of one application run against the server on PORT.
import json, os, re, sys

def plain(addr):
    """[::ffff:a.b.c.d]:p (a dual-stack listener's view) -> a.b.c.d:p"""
    return re.sub(r"^\[::ffff:([0-9.]+)\]", r"\1", addr)

path, port = sys.argv[1], sys.argv[2]
server_on, client_on = sys.argv[3] == "1", sys.argv[4] == "1"
min_client_sent = int(sys.argv[5]) if len(sys.argv) > 5 else 0
exact_bytes = len(sys.argv) > 6 and sys.argv[6] == "exact"
lines = []
if os.path.exists(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f]
suffix = ":" + port
server = [c for c in lines if c["role"] == "server" and c["local"].endswith(suffix)]
client = [c for c in lines if c["role"] == "client" and c["remote"].endswith(suffix)]
errors = []
for c in lines:
    if c not in server and c not in client:
        errors.append("a line for another connection: %s" % c)
    if c["path"] != "tcp" or c["reason"] != "loopback":
        errors.append("path/reason %s/%s, expected tcp/loopback: %s" % (c["path"], c["reason"], c))
for side, conns, on in (("server", server, server_on), ("client", client, client_on)):
    if on and not conns:
        errors.append("the %s side is preloaded but wrote no stats line" % side)
    if not on and conns:
        errors.append("the %s side is not preloaded but wrote %d lines" % (side, len(conns)))
if client_on and max([c["bytes_sent"] for c in client] + [0]) < min_client_sent:
    errors.append("no client line sent %d bytes or more" % min_client_sent)
if server_on and client_on:
    # Loopback TCP may reuse a closed connection's 4-tuple at once
    # (net.ipv4.tcp_tw_reuse=2), so one tuple can name several connections
    # over a run: a client line pairs with any unpaired server line of its
    # tuple, one with the mirrored byte counts when the counts must agree.
    by_tuple = {}
    for c in server:
        by_tuple.setdefault((plain(c["local"]), plain(c["remote"])), []).append(c)
    for c in client:
        candidates = by_tuple.get((plain(c["remote"]), plain(c["local"])), [])
        mirrored = [s for s in candidates
                    if (s["bytes_received"], s["bytes_sent"]) == (c["bytes_sent"], c["bytes_received"])]
        if not candidates:
            errors.append("client connection %s -> %s has no server line" % (c["local"], c["remote"]))
        elif exact_bytes and not mirrored:
            errors.append("byte counts disagree: client %s, server line(s) %s" % (c, candidates))
        else:
            candidates.remove((mirrored or candidates)[0])
    for key, rest in by_tuple.items():
        for s in rest:
            errors.append("server connection %s <- %s has no client line" % key)
print("%d lines: %d server, %d client" % (len(lines), len(server), len(client)))
for e in errors[:10]:
    print("ERROR: " + e)
sys.exit(1 if errors else 0)
EOF
}

setup() {
  [ -x "$SDPSHIM_BIN" ] || { echo "missing $SDPSHIM_BIN: run make first" >&2; return 1; }
  export SDPSHIM_RUN_DIR=$BATS_TEST_TMPDIR/run
  mkdir -p "$SDPSHIM_RUN_DIR"
  unset SDPSHIM_CONFIG SDPSHIM_MODE SDPSHIM_LOG LD_PRELOAD
  STATS=$BATS_TEST_TMPDIR/stats.jsonl
}

teardown() { stop_recorded_pids; }

need() {
  local prog
  for prog in "$@"; do
    command -v "$prog" >/dev/null || skip "$prog is not installed"
  done
}

# on_side SIDE PRELOADED_SIDES CMD... : runs CMD (by exec, so a background
# job's $! is CMD's pid), preloaded when SIDE is in PRELOADED_SIDES ("server",
# "client" or "both").  Both ways the stats file is set, so an accidental
# preload of the other side would show up in it.
on_side() {
  local side=$1 preloaded=$2; shift 2
  if [ "$preloaded" = both ] || [ "$preloaded" = "$side" ]; then
    exec env SDPSHIM_STATS_FILE="$STATS" "$SDPSHIM_BIN" run -- "$@"
  fi
  exec env SDPSHIM_STATS_FILE="$STATS" "$@"
}

preloads() {   # preloads SIDE PRELOADED_SIDES -> prints 1 or 0
  { [ "$2" = both ] || [ "$2" = "$1" ]; } && echo 1 || echo 0
}

check_stats() {   # check_stats PORT PRELOADED_SIDES [MIN_CLIENT_SENT] [exact]
  local port=$1 sides=$2
  run python3 "$BATS_FILE_TMPDIR/check_stats.py" "$STATS" "$port" \
    "$(preloads server "$sides")" "$(preloads client "$sides")" "${3:-0}" "${4:-}"
  show "stats ($sides preloaded): $output"
  [ "$status" -eq 0 ]
}

# --- redis -------------------------------------------------------------------

start_redis() {   # start_redis PORT PRELOADED_SIDES
  local port=$1 sides=$2
  (on_side server "$sides" timeout -k 5 60 redis-server --port "$port" --bind 127.0.0.1 \
    --save '' --appendonly no --daemonize no) >"$BATS_TEST_TMPDIR/redis.log" 2>&1 3>&- &
  echo $! >"$BATS_TEST_TMPDIR/redis.pid"
  wait_port 127.0.0.1 "$port" 15 || { cat "$BATS_TEST_TMPDIR/redis.log" >&2; return 1; }
}

# SIGTERM: redis shuts down cleanly, so its exit handlers run.
stop_redis() {
  local pid rc=0
  pid=$(cat "$BATS_TEST_TMPDIR/redis.pid")
  kill -TERM "$pid"
  wait "$pid" || rc=$?
  rm -f "$BATS_TEST_TMPDIR/redis.pid"
  [ "$rc" -eq 0 ] || { echo "redis-server exited with $rc" >&2; cat "$BATS_TEST_TMPDIR/redis.log" >&2; return 1; }
}

benchmark() {   # benchmark PORT SIDES [ARGS...]: checks rps lines and no errors
  local port=$1 sides=$2 out; shift 2
  out=$BATS_TEST_TMPDIR/bench.out
  (on_side client "$sides" timeout -k 5 20 redis-benchmark -p "$port" -n 20000 -q \
    -t set,get "$@") >"$out" 2>&1 || { cat "$out" >&2; return 1; }
  tr '\r' '\n' <"$out" | grep -E 'requests per second' | while read -r l; do show "  $l"; done
  tr '\r' '\n' <"$out" | grep -Eq '^SET: [0-9.]+ requests per second'
  tr '\r' '\n' <"$out" | grep -Eq '^GET: [0-9.]+ requests per second'
  if grep -Eiq 'error|ERR ' "$out"; then
    echo "redis-benchmark reported errors:" >&2
    cat "$out" >&2
    return 1
  fi
}

# A 4 MiB random value: SET with redis-cli -x, GET back, compare by SHA-256.
big_value_roundtrip() {   # big_value_roundtrip PORT SIDES
  local port=$1 sides=$2 value=$BATS_TEST_TMPDIR/value got=$BATS_TEST_TMPDIR/got
  head -c $((4 << 20)) /dev/urandom >"$value"
  (on_side client "$sides" timeout -k 5 20 redis-cli -p "$port" -x set bigvalue) <"$value" \
    >"$BATS_TEST_TMPDIR/set.out" 2>&1 || { cat "$BATS_TEST_TMPDIR/set.out" >&2; return 1; }
  [ "$(cat "$BATS_TEST_TMPDIR/set.out")" = OK ]
  (on_side client "$sides" timeout -k 5 20 redis-cli -p "$port" get bigvalue) >"$got"
  # redis-cli prints the raw value and a newline when stdout is not a terminal.
  show "4 MiB value: sent $(sha256_of "$value"), got back $(head -c $((4 << 20)) "$got" | sha256sum | cut -c1-64), $(stat -c %s "$got") bytes"
  [ "$(stat -c %s "$got")" -eq $(( (4 << 20) + 1 )) ]
  [ "$(head -c $((4 << 20)) "$got" | sha256sum | cut -c1-64)" = "$(sha256_of "$value")" ]
}

redis_case() {   # redis_case SIDES
  local sides=$1 port
  need redis-server redis-benchmark redis-cli
  port=$(free_port)
  start_redis "$port" "$sides"
  benchmark "$port" "$sides"
  benchmark "$port" "$sides" -P 16
  big_value_roundtrip "$port" "$sides"
  stop_redis
  check_stats "$port" "$sides" $((4 << 20)) exact
}

@test "redis: server preloaded, plain client: benchmark, -P 16, 4 MiB value" {
  redis_case server
}

@test "redis: plain server, client preloaded: benchmark, -P 16, 4 MiB value" {
  redis_case client
}

@test "redis: both preloaded: benchmark, -P 16, 4 MiB value" {
  redis_case both
}

# --- iperf3 ------------------------------------------------------------------

# One iperf3 server (-s -1: serves one test, then exits) and one client run.
iperf_run() {   # iperf_run SIDES CLIENT_ARGS...
  local sides=$1 port json=$BATS_TEST_TMPDIR/iperf.json rc=0 spid; shift
  port=$(free_port)
  (on_side server "$sides" timeout -k 5 30 iperf3 -s -1 -p "$port") \
    >"$BATS_TEST_TMPDIR/iperf-server.log" 2>&1 3>&- &
  spid=$!
  echo "$spid" >"$BATS_TEST_TMPDIR/iperf.pid"
  wait_port 127.0.0.1 "$port" 15
  (on_side client "$sides" timeout -k 5 20 iperf3 -c 127.0.0.1 -p "$port" -t 2 --json "$@") \
    >"$json" 2>&1 || rc=$?
  wait "$spid" || { echo "iperf3 server failed:" >&2; cat "$BATS_TEST_TMPDIR/iperf-server.log" >&2; return 1; }
  [ "$rc" -eq 0 ] || { echo "iperf3 client exited $rc:" >&2; cat "$json" >&2; return 1; }
  run python3 -c '
import json, sys
end = json.load(open(sys.argv[1]))["end"]
got, sent = end["sum_received"]["bytes"], end["sum_sent"]["bytes"]
print("sent %d bytes, receiver got %d bytes (%.1f Gbit/s)" % (sent, got, end["sum_received"]["bits_per_second"] / 1e9))
sys.exit(0 if got > 0 and sent > 0 else 1)' "$json"
  show "iperf3 $* ($sides preloaded): $output"
  [ "$status" -eq 0 ]
  check_stats "$port" "$sides"
  rm -f "$STATS"
}

iperf_case() {   # iperf_case SIDES
  need iperf3
  iperf_run "$1"
  iperf_run "$1" -R
  iperf_run "$1" -P 4
}

@test "iperf3: server preloaded, plain client: -t 2, -R, -P 4" {
  iperf_case server
}

@test "iperf3: plain server, client preloaded: -t 2, -R, -P 4" {
  iperf_case client
}

@test "iperf3: both preloaded: -t 2, -R, -P 4" {
  iperf_case both
}
