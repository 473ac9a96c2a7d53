#!/usr/bin/env bats
# VM suite, part 80: many connections per process (issue 15), both ends
# preloaded, on rxe0 ($RXE_IP).  Each case checks the bytes end to end and the
# path of every connection by the shim's own counters (`sdpshim stat --json`
# while the connections are open, SDPSHIM_STATS_FILE after they closed, each
# client line paired with its server line, both ends' byte counts equal).
#
#  - concurrent: SDPSHIM_SCALE_CONNS (default 1000) connections from one
#    tests/progs/manyconn process to one tests/progs/evecho process, all open at
#    once, each echoing 256 bytes of its own seeded stream, compared byte by
#    byte and by a combined SHA-256 against `manyconn -R` (no sockets).  While
#    all are open: every one on RDMA, and per process at most 256 MiB pinned
#    (the sum of mrlen over `rdma -j resource show mr`) and at most 64 RC QPs
#    (`rdma -j resource show qp`, also never more while it ran).  The soak of the
#    issue is SDPSHIM_SCALE_CONNS=10000 (see "Soak" below).
#  - redis: redis-server and redis-benchmark -c SDPSHIM_SCALE_REDIS_CLIENTS
#    (default 1000) -n SDPSHIM_SCALE_REDIS_REQUESTS (default 4 per client) -t
#    get,set -d 64, both preloaded, maxclients and RLIMIT_NOFILE raised: no
#    error from either, none rejected, the SET values 64 bytes long, 40 keys
#    and a 4 MiB value back by SHA-256 (redis_data), every connection on RDMA.
#  - cycles: SDPSHIM_SCALE_CYCLES (default 1000) sequential connect-echo-close
#    cycles of tests/progs/connects, 1 KiB each, SHA-256-checked, all on RDMA; a
#    connection to a peer already linked opens no queue pair of its own, so at
#    most 128 distinct RC QPs of connects (64 per process) are seen over the
#    whole run.  Its rate is printed, never asserted (bench/scale.sh measures it).
#  - spin: with SDPSHIM_SPIN_US=5000 at both ends, a 1 MiB echo on a link
#    (connects, held open): byte-exact, and the client's link record counts
#    messages its app thread took in itself (msgs_received_by_app > 0).
#  - stopped readers: tests/progs/hol, 8 streams whose server stops reading
#    (the client fills their windows) and 8 the client stops reading (the server
#    fills them), then a 4 MiB echo between the same two processes must finish
#    within 60 s, checked byte by byte; then every stopped stream resumes and
#    its bytes are checked (count and SHA-256 against the writer's).
#  - busy beside idle: tests/progs/hol -m idle, SDPSHIM_SCALE_IDLE (default 1000)
#    idle connections and one stream of 64 MiB between the same two processes,
#    every byte compared; then each idle one echoes 16 checked bytes.
#  - unprivileged: manyconn and evecho as nobody with RLIMIT_MEMLOCK 8 MiB
#    (ulimit -l 8192), 100 concurrent connections, all on RDMA, byte-exact.
#
# Soak (issue 15's "Done when"): run-bats.sh forwards SDPSHIM_* into the guest;
#   SDPSHIM_SCALE_CONNS=10000 SDPSHIM_SCALE_REDIS_CLIENTS=10000 \
#   SDPSHIM_VM_MEM=3G SDPSHIM_VM_TIMEOUT=7200 make vm
# setup_file then widens net.ipv4.ip_local_port_range (the shim binds every
# client socket before it connects, so each one holds its port, TIME_WAIT
# included, for 60 s after it closed: 10000 + 2 x 10000 redis clients do not
# fit the default 28232 ports) and raises fs.file-max; both are restored in
# teardown_file.  Every process of a case runs with RLIMIT_NOFILE
# SDPSHIM_SCALE_NOFILE (default 1048576, the kernel's nr_open): above 65536 the
# shim keeps its own fds at 49152 and up, so the application's fds stay low
# (redis-benchmark's event loop takes fds below 10240 only).

load ../helpers
load vm_helpers

CONNS=${SDPSHIM_SCALE_CONNS:-1000}
REDIS_CLIENTS=${SDPSHIM_SCALE_REDIS_CLIENTS:-1000}
REDIS_REQUESTS=${SDPSHIM_SCALE_REDIS_REQUESTS:-$((4 * REDIS_CLIENTS))}
CYCLES=${SDPSHIM_SCALE_CYCLES:-1000}
IDLE_CONNS=${SDPSHIM_SCALE_IDLE:-1000}
NOFILE=${SDPSHIM_SCALE_NOFILE:-1048576}
ECHO_BYTES=256
PIN_MAX=$((256 << 20))   # pinned bytes (sum of mrlen) per process
QP_MAX=64                # RC QPs per process

setup_file() {
  requires_rdma
  local f=$BATS_FILE_TMPDIR/sysctl.restore need files
  : >"$f"
  need=$(( CONNS + 2 * REDIS_CLIENTS + CYCLES ))
  if [ "$need" -gt 20000 ]; then
    echo "net.ipv4.ip_local_port_range=$(sysctl -n net.ipv4.ip_local_port_range | tr -s '\t ' ' ')" >>"$f"
    sysctl -qw net.ipv4.ip_local_port_range="10000 65000"
  fi
  files=$(( 16 * (CONNS > REDIS_CLIENTS ? CONNS : REDIS_CLIENTS) + 65536 ))
  if [ "$(sysctl -n fs.file-max)" -lt "$files" ]; then
    echo "fs.file-max=$(sysctl -n fs.file-max)" >>"$f"
    sysctl -qw fs.file-max="$files"
  fi
}

teardown_file() {
  local line f=$BATS_FILE_TMPDIR/sysctl.restore
  [ -f "$f" ] || return 0
  while IFS= read -r line; do
    sysctl -qw "$line" || true
  done <"$f"
}

setup() {
  # Many connections per process need links (docs/links.md): every process
  # of this file runs with them, whatever the default.
  export SDPSHIM_LINKS=1
  vm_setup
  local p
  for p in manyconn evecho connects hol; do
    [ -x "$PROGS/$p" ] || { echo "missing $PROGS/$p: run make" >&2; return 1; }
  done
}

teardown() { vm_teardown; }

# qpmax_start COMM...: every 0.25 s, the RC QPs of each COMM (`rdma resource show qp`) as
# one line "COMM=N ..." in $T/qpmax.samples (counts only: with thousands of QPs the whole
# listing would fill the guest's memory); qpmax_stop; qpmax_seen COMM: the most in one sample
qpmax_start() {
  : >"$T/qpmax.samples"
  (
    while :; do
      rdma resource show qp 2>/dev/null | awk -v comms="$*" '
        BEGIN { n = split(comms, c, " "); for (i = 1; i <= n; i++) k[c[i]] = 0 }
        / type RC / { for (i = 1; i < NF; i++) if ($i == "comm" && ($(i + 1) in k)) k[$(i + 1)]++ }
        END { s = ""; for (x in k) s = s x "=" k[x] " "; print s }'
      sleep 0.25
    done
  ) >>"$T/qpmax.samples" 2>/dev/null 3>&- &
  echo $! >"$T/qpmax.pid"
}

qpmax_stop() {
  local pid
  pid=$(cat "$T/qpmax.pid" 2>/dev/null) || return 0
  rm -f "$T/qpmax.pid"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

qpmax_seen() {
  awk -v comm="$1" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == comm && kv[2] + 0 > m) m = kv[2] + 0 } }
    END { print m + 0 }' "$T/qpmax.samples" 2>/dev/null
}

# stats_count K=V...: how many stats lines match every K=V
stats_count() { stats_lines "$STATS" "$@" | wc -l; }

# reasons: the stats lines grouped by comm, role, path and reason
reasons() {
  "$PY" -S - "$STATS" <<'EOF'
import collections, json, os, sys
lines = [json.loads(l) for l in open(sys.argv[1])] if os.path.exists(sys.argv[1]) else []
groups = collections.Counter((c["comm"], c["role"], c["path"], c["reason"]) for c in lines)
print("stats: %d lines%s" % (len(lines), "".join(
    "\n  %6d x %s %s path=%s reason=%s" % ((n,) + k) for k, n in sorted(groups.items()))))
EOF
}

# live_paths_settled N SECS PID ROLE [--all-users]: live_paths until it reads
# "N N" or SECS pass; prints the last reading.  A connection's data runs on TCP
# until its channel opens, so an echo can complete before the path event: the
# channels still have to open while the connections are held.
live_paths_settled() {
  local n=$1 until=$(( $(date +%s) + $2 )) got; shift 2
  while :; do
    got=$(live_paths "$@")
    [ "$got" = "$n $n" ] || [ "$(date +%s)" -ge "$until" ] && break
    sleep 0.5
  done
  echo "$got"
}

# manyconn_case N WHO: N concurrent connections, manyconn -> evecho, both preloaded, as root
# (RLIMIT_NOFILE $NOFILE) or as nobody (RLIMIT_MEMLOCK 8 MiB, RLIMIT_NOFILE 65536).  Holds
# them open while it takes `rdma_usage` ($T/usage.txt) and the live paths (LIVE_C, LIVE_S:
# "RDMA TOTAL"), then closes them and checks everything but the resource bounds.
manyconn_case() {
  local n=$1 who=$2 port secs crc=0 erc=0 ref got cpid spid pre=() stat_args=() t0
  secs=$(( 240 + n / 10 ))
  if [ "$who" = nobody ]; then
    # The processes as nobody must reach the run directory, the stats file, the hold file.
    local d=$T
    while [ "$d" != / ]; do chmod o+x "$d"; d=$(dirname "$d"); done
    chmod 1777 "$SDPSHIM_RUN_DIR"
    touch "$STATS"
    chmod 666 "$STATS"
    pre=(prlimit --nofile=65536:65536 --memlock=8388608:8388608 "${PRE[@]}" "${AS_NOBODY[@]}")
    stat_args=(--all-users)
  else
    pre=(prlimit --nofile="$NOFILE:$NOFILE" "${PRE[@]}")
  fi
  ref=$("$PROGS/manyconn" -R -n "$n" -b "$ECHO_BYTES" | sed -nE 's/^reference [0-9]+ sha256=([0-9a-f]{64})$/\1/p')
  port=$(free_port)
  start_bg evecho timeout -k 5 "$secs" "${pre[@]}" "$PROGS/evecho" -s "$port" -a "$RXE_IP" -w 4096
  bg_wait_line evecho '^listening ' 60
  spid=$(sed -nE 's/^listening .* pid=([0-9]+) .*/\1/p' "$T/evecho.log")
  qpmax_start manyconn evecho
  t0=$(now_ms)
  start_bg client timeout -k 5 "$secs" "${pre[@]}" env ${MANYCONN_CLIENT_ENV:-} "$PROGS/manyconn" -c "$RXE_IP" -p "$port" \
    -n "$n" -b "$ECHO_BYTES" -j 64 -w "$T/release" -g "$secs"
  if ! bg_wait_line client '^holding$' "$secs"; then
    qpmax_stop
    show "manyconn -n $n ($who) never held all its connections: $(bg_log client | tail -5)" \
         "evecho: $(grep -Ev '^(accept|close) ' "$T/evecho.log" | tail -5)" \
         "RC QPs seen: manyconn $(qpmax_seen manyconn), evecho $(qpmax_seen evecho)" "$(reasons)"
    return 1
  fi
  cpid=$(sed -nE 's/^start pid=([0-9]+) .*/\1/p' "$T/client.log")
  # Every connection is open now: resources and paths per process.
  rdma_usage "$cpid" "$spid" >"$T/usage.txt"
  LIVE_C=$(live_paths_settled "$n" 60 "$cpid" client "${stat_args[@]}")
  LIVE_S=$(live_paths_settled "$n" 60 "$spid" server "${stat_args[@]}")
  rm -f "$T/strays.txt"
  [ "$LIVE_C" = "$n $n" ] || live_strays "$cpid" client "${stat_args[@]}" >>"$T/strays.txt"
  [ "$LIVE_S" = "$n $n" ] || live_strays "$spid" server "${stat_args[@]}" >>"$T/strays.txt"
  touch "$T/release"
  wait_bg client || crc=$?
  # evecho closes each connection at the client's EOF; then SIGTERM makes it print its totals.
  wait_count "$T/evecho.log" '^close conn=' "$n" 120 || true
  kill -TERM "$(cat "$T/evecho.pid")" 2>/dev/null || true
  wait_bg evecho || erc=$?
  qpmax_stop
  got=$(sed -nE 's/^verified [0-9]+ sha256=([0-9a-f]{64})$/\1/p' "$T/client.log")
  show "manyconn -n $n -b $ECHO_BYTES -j 64 ($who), evecho -w 4096: $(( $(now_ms) - t0 )) ms" \
       "client (rc=$crc): $(grep -v '^FAIL' "$T/client.log" | tr '\n' ';')" \
       "$(grep '^FAIL' "$T/client.log")" \
       "evecho (rc=$erc): $(grep -Ev '^(accept|close) ' "$T/evecho.log" | tr '\n' ';')" \
       "evecho closes: $(grep -c '^close conn=.* end=eof ' "$T/evecho.log") eof of $(grep -c '^close conn=' "$T/evecho.log")" \
       "echo: verified sha256 ${got:-none}, reference $ref" \
       "live, all open: client $LIVE_C, server $LIVE_S (rdma total)" \
       "$(cat "$T/strays.txt" 2>/dev/null)" \
       "while all were open:" "$(sed 's/^/  /' "$T/usage.txt")" \
       "most RC QPs seen in one sample: manyconn $(qpmax_seen manyconn), evecho $(qpmax_seen evecho)" \
       "$(reasons)"
  [ "$crc" -eq 0 ]
  [ "$erc" -eq 0 ]
  grep -qx "connected $n" "$T/client.log"
  grep -qx "ok $n" "$T/client.log"
  [ -n "$ref" ]
  [ "$got" = "$ref" ]
  # The server saw every byte once, each connection ended by the client's EOF.
  grep -Eq "^totals conns=$n open=0 in=$(( n * ECHO_BYTES )) out=$(( n * ECHO_BYTES )) " "$T/evecho.log"
  [ "$(grep -c '^close conn=.* end=eof ' "$T/evecho.log")" -eq "$n" ]
  # All N open at once, every one on RDMA, on both ends.
  [ "$LIVE_C" = "$n $n" ]
  [ "$LIVE_S" = "$n $n" ]
  # And after they closed: one line per end, all RDMA, paired, bytes equal.
  [ "$(stats_count comm=manyconn role=client)" -eq "$n" ]
  [ "$(stats_count comm=evecho role=server)" -eq "$n" ]
  assert_all_rdma "$STATS" manyconn evecho
  assert_exact_bytes "$STATS"
  CPID=$cpid SPID=$spid
}

# resource_bounds MAX_PIN: per process at most MAX_PIN pinned bytes and QP_MAX RC QPs
# while all connections were open (and no more QPs in any sample), at least one of each
# (on RDMA a process has its QP and MRs: zero means the counting failed).
resource_bounds() {
  local max=$1 pid v
  for pid in "$CPID" "$SPID"; do
    v=$(usage_field "$T/usage.txt" "$pid" mr_bytes)
    [ "${v:-0}" -gt 0 ] || { echo "no MR found for pid $pid" >&2; return 1; }
    [ "$v" -le "$max" ] || { echo "pid $pid pins $v bytes in MRs, more than $max" >&2; return 1; }
    v=$(usage_field "$T/usage.txt" "$pid" rc_qps)
    [ "${v:-0}" -ge 1 ] || { echo "no RC QP found for pid $pid" >&2; return 1; }
    [ "$v" -le "$QP_MAX" ] || { echo "pid $pid has $v RC QPs, more than $QP_MAX" >&2; return 1; }
  done
  # Nothing was left out: every user MR and QP of the guest is one of the two's.
  [ "$(usage_field "$T/usage.txt" all mr_bytes)" -le $(( 2 * max )) ]
  [ "$(usage_field "$T/usage.txt" all rc_qps)" -le $(( 2 * QP_MAX )) ]
  [ "$(qpmax_seen manyconn)" -le "$QP_MAX" ]
  [ "$(qpmax_seen evecho)" -le "$QP_MAX" ]
}

@test "scale: $CONNS concurrent connections, one process each end, all on RDMA, each echo checked; per process <= 256 MiB pinned and <= 64 QPs" {
  manyconn_case "$CONNS" root
  resource_bounds "$PIN_MAX"
}

# Before a non-blocking connect adopts its channel, the progress thread may
# have run the whole attempt (kernel connect, binding): the channel's event
# found the socket without it.  The debug delay makes that happen every time.
@test "scale: non-blocking connects whose channels open before their sockets adopt them report path=rdma while open" {
  MANYCONN_CLIENT_ENV="SDPSHIM_DEBUG_ADOPT_DELAY_MS=300" manyconn_case 8 root
}

# redis-benchmark opens its clients with blocking connects in a burst: the
# link's credits run out and later OPEN_COMMITs wait in its queue.  Each SYN
# must wait for its OPEN's answer then, or it overtakes the OPEN and the
# server accepts it with no channel (accepted_elsewhere: 713 and 859 of
# 2,001 connections on TCP, in two runs of a build without that wait).
@test "scale: redis-benchmark -c $REDIS_CLIENTS -t get,set against redis-server, both preloaded: no errors, every connection on RDMA" {
  need redis-server redis-benchmark redis-cli
  local c=$REDIS_CLIENTS n=$REDIS_REQUESTS port secs rc=0 out=$T/bench.out t0 v info rejected received
  secs=$(( 300 + c / 5 ))
  port=$(free_port)
  # maxclients: the clients, redis-cli's and room for fds the shim may keep low.
  start_bg redis timeout -k 5 $(( 3 * secs )) prlimit --nofile="$NOFILE:$NOFILE" "${PRE[@]}" \
    redis-server --port "$port" --bind "$RXE_IP" --protected-mode no --save '' --appendonly no \
    --daemonize no --maxclients $(( 4 * c + 1000 ))
  wait_port "$RXE_IP" "$port" 30 || { bg_log redis >&2; return 1; }
  # Logged after listen() returned, so after the shim's RDMA listener is up too.
  bg_wait_line redis 'Ready to accept connections' 30
  qpmax_start redis-benchmark redis-server
  t0=$(now_ms)
  run_timeout "$secs" prlimit --nofile="$NOFILE:$NOFILE" "${PRE[@]}" redis-benchmark -h "$RXE_IP" \
    -p "$port" -c "$c" -n "$n" -t get,set -d 64 -q >"$out" 2>&1 || rc=$?
  qpmax_stop
  show "redis-benchmark -c $c -n $n -t get,set -d 64: rc=$rc, $(( $(now_ms) - t0 )) ms" \
       "$(tr '\r' '\n' <"$out" | grep -E 'requests per second' | sed -E 's/^.*(SET|GET)/\1/')" \
       "most RC QPs seen in one sample: redis-benchmark $(qpmax_seen redis-benchmark), redis-server $(qpmax_seen redis-server)"
  [ "$rc" -eq 0 ] || { tr '\r' '\n' <"$out" | tail -20 >&2; return 1; }
  tr '\r' '\n' <"$out" | grep -Eq '^SET: [0-9.]+ requests per second'
  tr '\r' '\n' <"$out" | grep -Eq '^GET: [0-9.]+ requests per second'
  # redis-benchmark 7 stops at the first error reply and prints it; redis-server logs its
  # own (e.g. "Error registering fd event for the new client"); the shim's lines aside.
  if grep -qi 'error' "$out" || grep -v '^sdpshim\[' "$T/redis.log" | grep -qi 'error'; then
    echo "errors:" >&2
    grep -i 'error' "$out" | head -10 >&2
    grep -v '^sdpshim\[' "$T/redis.log" | grep -i 'error' | head -10 >&2
    return 1
  fi
  # The values SET arrived whole (redis-benchmark's key without -r; its value is random).
  v=$(run_timeout 60 "${PRE[@]}" redis-cli -h "$RXE_IP" -p "$port" STRLEN key:__rand_int__)
  info=$(run_timeout 60 "${PRE[@]}" redis-cli -h "$RXE_IP" -p "$port" INFO stats | tr -d '\r')
  rejected=$(sed -n 's/^rejected_connections://p' <<<"$info")
  received=$(sed -n 's/^total_connections_received://p' <<<"$info")
  show "STRLEN key:__rand_int__ = $v; rejected_connections $rejected, total_connections_received $received"
  [ "$v" = 64 ]
  [ "$rejected" = 0 ]
  [ "$received" -ge $(( 2 * c + 1 )) ]
  # Bytes end to end by SHA-256: 40 keys and a 4 MiB value through redis-cli.
  redis_data "$RXE_IP" "$port"
  redis_stop
  show "$(reasons)"
  # SET's clients, GET's, the benchmark's CONFIG connection, redis-cli's: every line on
  # RDMA, each client line paired with its server line, both ends' byte counts equal.
  # A socket redis-benchmark opened for a client it no longer needed, its
  # connect still in flight when the run ended, never decided a path
  # (path=undecided, reason=pending, no bytes): it never carried a byte, so
  # it is counted apart, at most one connect batch of them.
  [ "$(stats_count comm=redis-benchmark role=client)" -ge $(( 2 * c + 1 )) ]
  local undecided
  undecided=$(grep -c '"path":"undecided","reason":"pending"' "$STATS" || true)
  [ "$undecided" -le 64 ]
  if [ "$undecided" -gt 0 ]; then
    ! grep '"path":"undecided"' "$STATS" | grep -vq '"bytes_sent":0,"bytes_received":0'
    grep -v '"path":"undecided","reason":"pending"' "$STATS" >"$T/stats.decided"
    STATS=$T/stats.decided
  fi
  assert_all_rdma "$STATS" redis-server redis-benchmark redis-cli
  assert_exact_bytes "$STATS"
}

@test "scale: $CYCLES sequential connect-echo-close cycles, each byte-exact, all on RDMA, no queue pair per connection" {
  local port rc=0 src=0 secs ok distinct
  secs=$(( 120 + CYCLES / 2 ))
  port=$(free_port)
  start_bg server timeout -k 5 "$secs" "${PRE[@]}" "$PROGS/connects" -s "$port" -a "$RXE_IP" -n "$CYCLES"
  bg_wait_line server "^listening on $port\$" 60
  qp_watch_start
  run_timeout "$secs" "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" -p "$port" -n "$CYCLES" -b 1024 \
    -g "$secs" >"$T/client.out" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || kill -TERM "$(cat "$T/server.pid")" 2>/dev/null || true
  wait_bg server || src=$?
  qp_watch_stop
  ok=$(grep -cE '^conn [0-9]+ connect_ms=[0-9.]+ first_ms=[0-9.]+ bytes=1024 sha256=[0-9a-f]{64} ok$' "$T/client.out" || true)
  # Distinct RC QPs of connects over all samples (a QP number is unique on rxe0).
  distinct=$(awk '/ type RC / && / comm connects( |$)/ {
      for (i = 1; i < NF; i++) if ($i == "lqpn") seen[$(i + 1)] = 1 }
    END { n = 0; for (q in seen) n++; print n }' "$T/qp.samples")
  show "connects -n $CYCLES -b 1024 (rc=$rc): $ok cycles ok; $(grep -E '^(rate|FAIL)' "$T/client.out")" \
       "server (rc=$src): $(tail -2 "$T/server.log" | tr '\n' ';')" \
       "distinct RC QPs of connects seen: $distinct (at most $(( 2 * QP_MAX )))" "$(reasons)"
  [ "$rc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "$ok" -eq "$CYCLES" ]
  grep -qx "ok $CYCLES" "$T/client.out"
  grep -Eq '^rate cycles=[0-9]+ elapsed_ms=' "$T/client.out"
  grep -qx "server: $CYCLES connections, 0 failed" "$T/server.log"
  [ "$(stats_count comm=connects role=client)" -eq "$CYCLES" ]
  [ "$(stats_count comm=connects role=server)" -eq "$CYCLES" ]
  assert_all_rdma "$STATS" connects
  assert_exact_bytes "$STATS"
  [ "$distinct" -ge 1 ]
  [ "$distinct" -le $(( 2 * QP_MAX )) ]
}

# A link that fails as a connect posts its OPEN (SDPSHIM_DEBUG_FAIL_OPEN=2: the
# client's second OPEN) fails inside the app's connect(), which holds its
# socket's lock: that connect must go on on TCP with the reason, not deliver a
# fallback event to its own socket and wait for that lock for ever.  Blocking
# connects (connects), then non-blocking ones (tests/vm/nbconnects.py), each
# checked by echo before the next connects, so the stream open when the link
# fails is attached and moves to TCP byte-exact.
@test "scale: the link fails as a connect posts its OPEN: that connect goes on on TCP (rdma_cm_error), no call hangs, every byte checked" {
  local port rc=0 src=0 ok
  port=$(free_port)
  start_bg server timeout -k 5 120 "${PRE[@]}" "$PROGS/connects" -s "$port" -a "$RXE_IP" -n 4
  bg_wait_line server "^listening on $port\$" 60
  run_timeout 90 env SDPSHIM_DEBUG_FAIL_OPEN=2 "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" \
    -p "$port" -n 4 -b 4096 -g 80 >"$T/client.out" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || kill -TERM "$(cat "$T/server.pid")" 2>/dev/null || true
  wait_bg server || src=$?
  ok=$(grep -cE '^conn [0-9]+ connect_ms=[0-9.]+ first_ms=[0-9.]+ bytes=4096 sha256=[0-9a-f]{64} ok$' "$T/client.out" || true)
  show "connects (rc=$rc): $ok cycles ok; $(grep -E 'FAIL|DEBUG_FAIL_OPEN' "$T/client.out")" \
       "server (rc=$src): $(tail -2 "$T/server.log" | tr '\n' ';')" "$(reasons)"
  [ "$rc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "$ok" -eq 4 ]
  grep -q 'SDPSHIM_DEBUG_FAIL_OPEN: failing the link as OPEN 2 is posted' "$T/client.out"
  [ "$(stats_count comm=connects role=client)" -eq 4 ]
  [ "$(stats_count comm=connects role=client path=tcp reason=rdma_cm_error)" -eq 1 ]
  # The cycles before and after it ran on RDMA (after it, on a new link).
  [ "$(stats_count comm=connects role=client path=rdma)" -eq 3 ]
  assert_exact_bytes "$STATS"

  : >"$STATS"
  port=$(free_port)
  start_bg server timeout -k 5 120 "${PRE[@]}" "$PROGS/connects" -s "$port" -a "$RXE_IP" -n 4
  bg_wait_line server "^listening on $port\$" 60
  rc=0 src=0
  run_timeout 90 env SDPSHIM_DEBUG_FAIL_OPEN=2 "${PRE[@]}" "$PY" -S "$BATS_TEST_DIRNAME/nbconnects.py" \
    "$RXE_IP" "$port" 4 >"$T/nb.out" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || kill -TERM "$(cat "$T/server.pid")" 2>/dev/null || true
  wait_bg server || src=$?
  show "nbconnects (rc=$rc): $(tr '\n' ';' <"$T/nb.out")" \
       "server (rc=$src): $(tail -2 "$T/server.log" | tr '\n' ';')" "$(reasons)"
  [ "$rc" -eq 0 ]
  [ "$src" -eq 0 ]
  grep -qx 'nbconnects: ok 4' "$T/nb.out"
  grep -q 'SDPSHIM_DEBUG_FAIL_OPEN: failing the link as OPEN 2 is posted' "$T/nb.out"
  [ "$(stats_count role=client path=tcp reason=rdma_cm_error)" -eq 1 ]
  [ "$(stats_count role=client)" -eq 4 ]
  # The first one, open when the link failed, moved to TCP (or climbed back);
  # the two after it opened on a new link.
  [ "$(stats_count role=client path=rdma)" -ge 2 ]
  assert_exact_bytes "$STATS"
}

# open_commit_run FLAG N: N connect-echo-close cycles of 1 KiB, the client with
# SDPSHIM_OPEN_COMMITS=FLAG, the server logging at debug; sets OC_COMMITTED (streams the
# server opened committed, by OPEN_COMMIT) and OC_COMMITS (COMMIT messages it got).
open_commit_run() {
  local flag=$1 n=$2 port rc=0 src=0 ok
  port=$(free_port)
  start_bg "server$flag" env SDPSHIM_LOG=debug timeout -k 5 180 "${PRE[@]}" "$PROGS/connects" \
    -s "$port" -a "$RXE_IP" -n "$n"
  bg_wait_line "server$flag" "^listening on $port\$" 60
  run_timeout 180 env SDPSHIM_OPEN_COMMITS="$flag" "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" \
    -p "$port" -n "$n" -b 1024 -g 180 >"$T/client$flag.out" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || kill -TERM "$(cat "$T/server$flag.pid")" 2>/dev/null || true
  wait_bg "server$flag" || src=$?
  ok=$(grep -cE '^conn [0-9]+ connect_ms=[0-9.]+ first_ms=[0-9.]+ bytes=1024 sha256=[0-9a-f]{64} ok$' \
    "$T/client$flag.out" || true)
  OC_COMMITTED=$(grep -c 'opened a committed stream on a link' "$T/server$flag.log" || true)
  OC_COMMITS=$(grep -c 'bind: COMMIT from the client' "$T/server$flag.log" || true)
  show "SDPSHIM_OPEN_COMMITS=$flag: client rc=$rc, $ok of $n cycles ok, $(grep -E '^phases' "$T/client$flag.out")" \
       "server rc=$src: $OC_COMMITTED committed opens, $OC_COMMITS COMMITs; $(grep -E '^server:' "$T/server$flag.log")"
  [ "$rc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "$ok" -eq "$n" ]
  grep -qx "server: $n connections, 0 failed" "$T/server$flag.log"
}

@test "scale: a stream on a link opens and commits with one message (OPEN_COMMIT), no COMMIT follows; with SDPSHIM_OPEN_COMMITS=0 the client opens the old way; each cycle byte-exact, all on RDMA" {
  local n=40
  open_commit_run 1 "$n"
  [ "$OC_COMMITTED" -eq "$n" ]
  [ "$OC_COMMITS" -eq 0 ]
  open_commit_run 0 "$n"
  [ "$OC_COMMITTED" -eq 0 ]
  [ "$OC_COMMITS" -eq "$n" ]
  [ "$(stats_count comm=connects role=client)" -eq $(( 2 * n )) ]
  [ "$(stats_count comm=connects role=server)" -eq $(( 2 * n )) ]
  assert_all_rdma "$STATS" connects
  assert_exact_bytes "$STATS"
}

@test "scale: the first connection of 20 fresh process pairs, each on a link just made: its OPEN_COMMIT is the server's before accept() looks, all on RDMA, byte-exact" {
  # The client sends as soon as its link is ESTABLISHED, the server may
  # not have handled its own ESTABLISHED yet when the SYN's accept() comes:
  # accept() takes such a link in too (1 in 40 went to TCP without it).
  local i port rc
  for i in $(seq 1 20); do
    port=$(free_port)
    start_bg "fresh$i" timeout -k 5 60 "${PRE[@]}" "$PROGS/connects" -s "$port" -a "$RXE_IP" -n 1
    bg_wait_line "fresh$i" "^listening on $port\$" 60
    rc=0
    run_timeout 60 "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" -p "$port" -n 1 -b 4096 -g 60 \
      >"$T/fresh$i.out" 2>&1 || rc=$?
    wait_bg "fresh$i" || rc=$(( rc + 100 ))
    [ "$rc" -eq 0 ] || { show "pair $i: rc $rc: $(cat "$T/fresh$i.out")"; return 1; }
    grep -qx "ok 1" "$T/fresh$i.out"
  done
  show "$(reasons)"
  [ "$(stats_count comm=connects role=client)" -eq 20 ]
  [ "$(stats_count comm=connects role=server)" -eq 20 ]
  assert_all_rdma "$STATS" connects
  assert_exact_bytes "$STATS"
}

@test "scale: with SDPSHIM_SPIN_US a blocked reader on a link takes in the link's messages itself, byte-exact" {
  local port json
  port=$(free_port)
  # Both ends spin 5 ms in each blocking call: the echo's messages land while
  # the client's recv polls the link's CQ, so the app's thread, not only the
  # progress thread, takes some in (the link record counts them apart).
  start_bg server timeout -k 5 90 env SDPSHIM_SPIN_US=5000 "${PRE[@]}" "$PROGS/connects" \
    -s "$port" -a "$RXE_IP" -n 1
  bg_wait_line server "^listening on $port\$" 60
  start_bg client timeout -k 5 90 env SDPSHIM_SPIN_US=5000 "${PRE[@]}" "$PROGS/connects" \
    -c "$RXE_IP" -p "$port" -n 1 -b 1048576 -w "$T/release"
  wait_for_line "$T/client.log" '^holding$' 60
  json=$("$SDPSHIM_BIN" stat --json)
  show "$json"
  touch "$T/release"
  wait_bg client
  wait_bg server
  grep -Eq '^conn 1 connect_ms=[0-9.]+ first_ms=[0-9.]+ bytes=1048576 sha256=[0-9a-f]{64} ok$' "$T/client.log"
  grep -qx "ok 1" "$T/client.log"
  "$PY" -S -c '
import json, sys
doc = json.loads(sys.argv[1])
client = [p for p in doc["processes"] if p["comm"] == "connects"
          and any(c["role"] == "client" for c in p["connections"])]
assert len(client) == 1 and len(client[0]["links"]) == 1, doc
link = client[0]["links"][0]
assert link["msgs_received"] > 0 and 0 < link["msgs_received_by_app"] <= link["msgs_received"], link
assert [c["path"] for c in client[0]["connections"] if c["role"] == "client"] == ["rdma"], client' "$json"
  assert_exact_bytes "$STATS"
}

@test "scale: readers that stop on 16 streams (8 each way) do not stall a 4 MiB echo between the same two processes; every stopped stream resumes byte-exact" {
  local port rc=0 src=0 k=8 i
  port=$(free_port)
  start_bg server timeout -k 5 600 "${PRE[@]}" "$PROGS/hol" -s "$port" -a "$RXE_IP" -n $(( 2 * k + 1 ))
  bg_wait_line server "^listening on $port\$" 60
  qp_watch_start
  run_timeout 600 "${PRE[@]}" "$PROGS/hol" -c "$RXE_IP" -p "$port" -m hol -k "$k" -b 4194304 -t 60 \
    >"$T/client.out" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || kill -TERM "$(cat "$T/server.pid")" 2>/dev/null || true
  wait_bg server || src=$?
  qp_watch_stop
  show "hol -m hol -k $k -b 4194304 -t 60 (rc=$rc):" "$(cat "$T/client.out")" \
       "server (rc=$src):" "$(bg_log server)" \
       "most RC QPs seen in one sample: hol $(qp_seen hol)" "$(reasons)"
  [ "$rc" -eq 0 ]
  [ "$src" -eq 0 ]
  grep -qx "ok hol stopped=$k bytes=4194304" "$T/client.out"
  grep -Eq '^busy: echoed 4194304 bytes in [0-9]+ ms = [0-9.]+ MB/s sha256=[0-9a-f]{64} ok$' "$T/client.out"
  for i in $(seq 0 $(( k - 1 ))); do
    grep -Eq "^stopped S $i: window full after [1-9][0-9]* bytes\$" "$T/client.out"
    grep -Eq "^stopped S $i: server received [1-9][0-9]* bytes sha256=[0-9a-f]{64} ok\$" "$T/client.out"
    grep -Eq "^stopped W $i: received [1-9][0-9]* bytes sha256=[0-9a-f]{64} ok\$" "$T/client.out"
    grep -Eq "^server: W $i stalled after [1-9][0-9]* bytes\$" "$T/server.log"
  done
  [ "$(stats_count comm=hol role=client)" -eq $(( 2 * k + 1 )) ]
  [ "$(stats_count comm=hol role=server)" -eq $(( 2 * k + 1 )) ]
  assert_all_rdma "$STATS" hol
  assert_exact_bytes "$STATS"
}

@test "scale: a 64 MiB stream beside $IDLE_CONNS idle connections of the same two processes, every byte checked; each idle one echoes checked bytes after it" {
  # Once hung here: both ends of the busy stream at their last credit,
  # trading credit updates that each asked for an answer (tests/unit/test_credits.c).
  local port rc=0 src=0
  port=$(free_port)
  start_bg server timeout -k 5 600 prlimit --nofile="$NOFILE:$NOFILE" "${PRE[@]}" "$PROGS/hol" -s "$port" \
    -a "$RXE_IP" -n $(( IDLE_CONNS + 1 ))
  bg_wait_line server "^listening on $port\$" 60
  run_timeout 300 prlimit --nofile="$NOFILE:$NOFILE" "${PRE[@]}" "$PROGS/hol" -c "$RXE_IP" -p "$port" -m idle -k "$IDLE_CONNS" -b 67108864 \
    >"$T/client.out" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || kill -TERM "$(cat "$T/server.pid")" 2>/dev/null || true
  wait_bg server || src=$?
  show "hol -m idle -k $IDLE_CONNS -b 67108864 (rc=$rc):" "$(tail -5 "$T/client.out")" \
       "server (rc=$src):" "$(bg_log server | tail -5)" "$(reasons)"
  [ "$rc" -eq 0 ]
  [ "$src" -eq 0 ]
  grep -qx "ok idle=$IDLE_CONNS bytes=67108864" "$T/client.out"
  grep -Eq "^busy: 67108864 bytes in [0-9]+ ms = [0-9.]+ MB/s with $IDLE_CONNS idle connections, every byte checked ok\$" "$T/client.out"
  [ "$(stats_count comm=hol role=client)" -eq $(( IDLE_CONNS + 1 )) ]
  [ "$(stats_count comm=hol role=server)" -eq $(( IDLE_CONNS + 1 )) ]
  assert_all_rdma "$STATS" hol
  assert_exact_bytes "$STATS"
}

@test "scale: as nobody with RLIMIT_MEMLOCK 8 MiB, 100 concurrent connections all on RDMA, each echo checked" {
  manyconn_case 100 nobody
  grep -Eq '^start pid=[0-9]+ uid=65534 nofile=65536 memlock=8388608$' "$T/client.log"
  # What the kernel let them pin (RLIMIT_MEMLOCK) was enough for all 100.
  resource_bounds $((8 << 20))
}
