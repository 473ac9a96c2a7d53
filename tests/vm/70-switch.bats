#!/usr/bin/env bats
# VM suite, part 70: moving an established connection from RDMA to the kernel
# TCP socket ("switch", issue 6), both ends preloaded, on rxe0 ($RXE_IP).
#
#  - fork: tests/progs/forkecho is a fork-per-connection echo server (the parent
#    accepts, forks, closes its copy at once; the child echoes until EOF) and a
#    client that sends a seeded pattern on CONNS connections, PARALLEL at once,
#    and checks each echo by length and SHA-256.  The child's first use of the
#    socket it inherited on RDMA moves the stream (the fork handoff; under
#    SDPSHIM_FORK=switch the parent moves it before fork), so every client
#    stats line must say path=tcp, reason=forked, switches >= 1; 200 sequential connections, 20 concurrent ones
#    of 1 MiB, and 20 where the child execs `sh -c 'exec cat <&3 >&3'` on the
#    inherited socket (fd 3) so an exec'd image does the echo; then 10 each
#    where posix_spawn (a dup2 action) or system() makes that child instead.
#  - failover (SDPSHIM_CLIMB=0: the move alone; tests/vm/73-climb.bats has the
#    way back): SDPSHIM_DEBUG_FAIL_AFTER=N makes a process force the QP of each of
#    its RDMA connections into the error state once it has sent N bytes over
#    RDMA; a $BIG_STREAM stream (tests/progs/stream) with the failure on the sending
#    end, up and down, must finish byte-exact on TCP (SHA-256 = tests/progs/
#    streamref), both stats lines reason=failover, switches >= 1, with the
#    sender's RDMA byte counters between N and the stream's length.
#  - soak: for SDPSHIM_SOAK_S seconds (default 30; 600 for the 10-minute run:
#    `SDPSHIM_SOAK_S=600 make vm`, run-bats.sh forwards SDPSHIM_* into the
#    guest), batches of forkecho clients (10 connections, 5 at once) against one
#    long-running preloaded forkecho server, each followed by an 8 MiB stream
#    that fails over after 1 MiB (alternately up with the failure on the client
#    and down with it on the server).  Every batch and stream must be
#    sha-correct; the server parent's fd count may not grow by more than 2 from
#    after the first batch to the end, it must hold no RC QP and no more MRs
#    than after the first batch once idle, and after the programs exit the RC
#    QP and MR counts (`rdma resource show`) are back to their baseline.
#  - link delete (last, as it removes rxe0): `rdma link delete` of the device
#    under a running $BIG_STREAM stream, up and down; it must finish on TCP with the
#    reference SHA-256 and reason=failover on both ends, and the delete must
#    return, with status 0, while both processes still run (rxe cannot
#    disassociate user contexts: the kernel waits until every process has
#    closed the device's files, so the library releases them).  Its duration
#    is printed.  Teardown re-adds the link on the same netdev and waits for
#    it to be ACTIVE again.
#  - delete, then add: a server listening on the device's address and a client
#    holding a connection live through `rdma link delete` and `rdma link add`;
#    the held connection moves to TCP, and once the server says it listens
#    again, the same client process's next connection and a new client's are
#    on RDMA; every echo checked.
#  - delete with no connection on the device: a server whose one client came
#    and went (so it holds no rdma_cm id, no QP) still lets the device go
#    (the verbs file's uevent), the delete returns while it runs, and its
#    next connection, once the device is back, is on RDMA.

load ../helpers
load vm_helpers

FAIL_AFTER=$(( BIG_BYTES / 8 ))   # the forced QP error comes an eighth of the way into a $BIG_STREAM stream

# Reference digests: ref_digests_start in vm_helpers.bash.
setup_file() {
  requires_rdma
  ref_digests_start "1 8M" "1 $BIG_STREAM"
}

teardown_file() { ref_digests_stop; }

setup() {
  vm_setup
  # run-bats.sh forwards every SDPSHIM_* variable: only the process a test
  # names may carry the forced failure.
  unset SDPSHIM_DEBUG_FAIL_AFTER
  FORKECHO=$PROGS/forkecho
  [ -x "$FORKECHO" ] || { echo "missing $FORKECHO: run make progs" >&2; return 1; }
  [ -x "$PROGS/streamref" ] || { echo "missing $PROGS/streamref: run make progs" >&2; return 1; }
  RESTORE_LINK=
}

teardown() {
  vm_teardown
  [ -z "${RESTORE_LINK:-}" ] || restore_link
}

# stats_summary: the stats file grouped by comm, role, path, reason, switches
stats_summary() {
  "$PY" -S - "$STATS" <<'EOF'
import collections, json, os, sys
path = sys.argv[1]
lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
groups = collections.Counter((c["comm"], c["role"], c["path"], c["reason"], c.get("switches", "-"))
                             for c in lines)
print("stats: %d lines" % len(lines))
for (comm, role, p, reason, sw), n in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
    print("  %4d x %s %s path=%s reason=%s switches=%s" % (n, comm, role, p, reason, sw))
EOF
}

# stats_field ROLE FIELD: FIELD summed over the stats lines of ROLE (0 if none)
stats_field() {
  "$PY" -S -c '
import json, os, sys
path, role, field = sys.argv[1:4]
lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
print(sum(c.get(field, 0) for c in lines if c["role"] == role))' "$STATS" "$1" "$2"
}

mr_total() { rdma resource show mr 2>/dev/null | wc -l; }
mr_count() { rdma resource show mr 2>/dev/null | grep -c "comm $1\( \|$\)" || true; }
fd_count() { ls "/proc/$1/fd" | wc -l; }

# --- fork and exec: tests/progs/forkecho -----------------------------------------

# forkecho_case CONNS PARALLEL BYTES SECS [SERVER ARGS...]: a preloaded forkecho
# server (-n CONNS) and a preloaded client; every connection sha-checked, RC QPs
# seen while it ran, every client line switched with reason=forked (a forked
# child's, alone with its stream, may have climbed back since).  With -x or -X
# the server end's lines come from cat, whose role for an inherited socket is
# only guessed from the ports: the client lines are then taken by comm as well,
# and none climbs (an exec'd image has no ticket).
# FORKECHO_SERVER_ENV: VAR=VALUE words for the server only.
forkecho_case() {
  local conns=$1 par=$2 bytes=$3 secs=$4 port t0 ms crc=0 src=0 okl filter=(role=client); shift 4
  local senv moved=forked-or-climbed
  read -ra senv <<<"${FORKECHO_SERVER_ENV:-}"
  case " $* " in *" -x "* | *" -X "*) filter=(comm=forkecho role=client) moved=forked ;; esac
  port=$(free_port)
  start_bg server timeout -k 5 "$secs" "${PRE[@]}" env "${senv[@]}" "$FORKECHO" -s "$port" \
    -a "$RXE_IP" -n "$conns" "$@"
  wait_port "$RXE_IP" "$port"
  qp_watch_start
  t0=$(now_ms)
  run_timeout "$secs" "${PRE[@]}" "$FORKECHO" -c "$RXE_IP" -p "$port" -n "$conns" -j "$par" \
    -b "$bytes" >"$T/client.out" 2>"$T/client.err" || crc=$?
  # A client that could not make all its connections leaves the server waiting.
  [ "$crc" -eq 0 ] || kill -TERM "$(cat "$T/server.pid")" 2>/dev/null || true
  wait_bg server || src=$?
  ms=$(( $(now_ms) - t0 ))
  qp_watch_stop
  okl=$(grep -cE "^conn [0-9]+ bytes=$bytes sha256=[0-9a-f]{64} ok\$" "$T/client.out" || true)
  show "forkecho server${*:+ $*} -n $conns, client -n $conns -j $par -b $bytes: $ms ms" \
       "  ($(( ms / conns )) ms per connection), $okl of $conns connections ok" \
       "client (rc=$crc): $(tail -1 "$T/client.out")" \
       "$(grep -v ' ok$' "$T/client.out" | grep -v '^forkecho: ' | head -10)" \
       "client stderr: $(head -20 "$T/client.err")" \
       "server (rc=$src): $(bg_log server | tail -20)" \
       "RC QPs of forkecho seen while it ran: $(qp_seen forkecho)" \
       "$(stats_summary)"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "$okl" -eq "$conns" ]
  grep -qx "forkecho: $conns/$conns ok" "$T/client.out"
  [ "$(qp_seen forkecho)" -ge 1 ]
  # One client line per connection, each moved to TCP by the fork.
  assert_switched "$moved" "$conns" "${filter[@]}"
}

@test "switch: fork-per-connection server, 200 sequential connections, sha-checked" {
  forkecho_case 200 1 65536 900
  # The server's lines come from the children that echoed (the parent moved no
  # bytes); they and the client lines must add up.
  assert_exact_bytes "$STATS"
}

@test "switch: fork-per-connection server, 20 concurrent connections of 1 MiB, sha-checked" {
  forkecho_case 20 20 $((1 << 20)) 600
  assert_exact_bytes "$STATS"
}

@test "switch: a fork while the server's ATTACH is still in flight waits for it, 20 connections" {
  # The server holds each ATTACH 300 ms (a test hook), so the parent's fork right
  # after accept finds the channel attached on its side only: moving the stream
  # then must wait until the client has the ATTACH, or the client takes the
  # SWITCH record on TCP for a plain-TCP server's bytes (PostgreSQL hit this).
  FORKECHO_SERVER_ENV=SDPSHIM_DEBUG_ATTACH_DELAY_MS=300 forkecho_case 20 4 65536 600
  assert_exact_bytes "$STATS"
}

@test "switch: inherited socket used after exec (sh -c on fd 3), 20 connections, sha-checked" {
  # (No byte pairing here: the server end's lines come from cat, which inherited
  # the socket through exec, and its role is only guessed from the ports.)
  # The parent holds each connection 300 ms before it forks: short-lived queue
  # pairs can otherwise fall between two samples of `rdma resource show qp`.
  forkecho_case 20 4 $((256 << 10)) 600 -x -d 300
}

# posix_spawn and system() make their child without fork handlers (glibc's
# clone(CLONE_VFORK)): the hooks move what the child inherits first.
@test "switch: a posix_spawn child (dup2 action of a close-on-exec socket to fd 3) echoes, 10 connections, sha-checked" {
  forkecho_case 10 2 $((256 << 10)) 600 -X spawn -d 300
}

@test "switch: a system() child (cat in the background on the inherited fd) echoes, 10 connections, sha-checked" {
  forkecho_case 10 2 $((256 << 10)) 600 -X system -d 300
}

# An exec with no fork before it: the process that holds the RDMA socket
# becomes sh -c 'exec cat <&3 >&3' through each of glibc's exec functions
# (execv, execvp, execvpe, execl, execlp, execle, fexecve, execveat; all but
# execve reach the kernel by a call inside libc, which no preload sees).
@test "switch: exec without fork, by each of glibc's 8 exec functions, moves the socket first, sha-checked" {
  local port
  port=$(free_port)
  qp_watch_start
  run run_timeout 300 "${PRE[@]}" "$PROGS/sockcheck" execnofork "$RXE_IP" "$port"
  qp_watch_stop
  show "sockcheck execnofork (rc=$status): $output" \
       "RC QPs of sockcheck seen while it ran: $(qp_seen sockcheck)" "$(stats_summary)"
  [ "$status" -eq 0 ]
  [[ "$output" == *"ok execnofork"* ]]
  [ "$(qp_seen sockcheck)" -ge 1 ]
  # Each of the 8 connections carried its first bytes on RDMA, then moved.
  assert_switched forked 8 comm=sockcheck role=client
}

# A forked child cannot use the device contexts librdmacm opened in its
# parent (the kernel refuses the child's commands on them: rxe's post_send
# doorbell fails with EACCES); its records open contexts of their own.
# forkchild_case [ENV...]: sockcheck forkchild preloaded, with ENV.
forkchild_case() {
  local port pids
  port=$(free_port)
  qp_watch_start
  run run_timeout 300 env "$@" "${PRE[@]}" "$PROGS/sockcheck" forkchild "$RXE_IP" "$port"
  qp_watch_stop
  show "sockcheck forkchild ${*} (rc=$status): $output" \
       "RC QPs of sockcheck seen while it ran: $(qp_seen sockcheck)" "$(stats_summary)"
  [ "$status" -eq 0 ]
  [[ "$output" == *"ok forkchild"* ]]
  [ "$(qp_seen sockcheck)" -ge 1 ]
  # 3 generations, 2 connections each, both ends in the process: 12 lines,
  # from 3 processes, every one on RDMA and paired by its 4-tuple.
  [ "$(wc -l <"$STATS")" -eq 12 ]
  pids=$("$PY" -S -c 'import json,sys; print(len({json.loads(l)["pid"] for l in open(sys.argv[1])}))' "$STATS")
  [ "$pids" -eq 3 ]
  assert_all_rdma "$STATS" sockcheck
  assert_exact_bytes "$STATS"
}

@test "fork: a child and a grandchild of a process that used RDMA make and accept RDMA connections of their own, sha-checked" {
  forkchild_case SDPSHIM_LINKS=1
}

@test "fork: the same with a channel per connection (SDPSHIM_LINKS=0)" {
  forkchild_case SDPSHIM_LINKS=0
}

# --- forced QP error: SDPSHIM_DEBUG_FAIL_AFTER -----------------------------------

# failover_stream up|down: a $BIG_STREAM stream whose SENDING end (client for up,
# server for down) forces its QP into the error state after $FAIL_AFTER bytes sent
# over RDMA.
failover_stream() {
  local dir=$1 port t0 ms crc=0 src=0 senv=() cenv=() sender receiver out got want
  local total=$BIG_BYTES rdma_sent
  # The move to TCP alone: SDPSHIM_CLIMB=0 (73-climb.bats has the way back).
  if [ "$dir" = up ]; then
    cenv=("SDPSHIM_DEBUG_FAIL_AFTER=$FAIL_AFTER" SDPSHIM_CLIMB=0); sender=client; receiver=server
    senv=(SDPSHIM_CLIMB=0); out=$T/server.log
  else
    senv=("SDPSHIM_DEBUG_FAIL_AFTER=$FAIL_AFTER" SDPSHIM_CLIMB=0); sender=server; receiver=client
    cenv=(SDPSHIM_CLIMB=0); out=$T/client.out
  fi
  port=$(free_port)
  start_bg server timeout -k 5 600 env "${senv[@]}" "${PRE[@]}" "$PROGS/stream" -s "$port" -n 1
  stream_listening server "$port"
  qp_watch_start
  t0=$(now_ms)
  run_timeout 600 env "${cenv[@]}" "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP" -p "$port" -b "$BIG_STREAM" \
    -d "$dir" -m 1M >"$T/client.out" 2>&1 || crc=$?
  wait_bg server || src=$?
  ms=$(( $(now_ms) - t0 ))
  qp_watch_stop
  got=$(stream_digest "$receiver" "$out" "$total")
  want=$(ref_digest 1 "$BIG_STREAM")
  rdma_sent=$(( $(stats_field "$sender" copy_bytes_sent) + $(stats_field "$sender" zcopy_bytes_sent) ))
  show "stream -d $dir -b $BIG_STREAM, SDPSHIM_DEBUG_FAIL_AFTER=$FAIL_AFTER on the $sender: $ms ms" \
       "client (rc=$crc): $(cat "$T/client.out")" "server (rc=$src): $(bg_log server)" \
       "$receiver received sha256 ${got:-none}, reference $want" \
       "RC QPs of stream seen while it ran: $(qp_seen stream)" \
       "the $sender sent $rdma_sent bytes over RDMA (copy + zero-copy) of $(stats_field "$sender" bytes_sent)" \
       "$(stats_lines "$STATS")" "$(stats_summary)"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ -n "$got" ]
  [ "$got" = "$want" ]
  [ "$(qp_seen stream)" -ge 2 ]
  [ "$(stats_lines "$STATS" role=client | wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" role=server | wc -l)" -eq 1 ]
  assert_switched failover 2
  assert_exact_bytes "$STATS"
  # The failure came after FAIL_AFTER bytes entered the stream (all but the last
  # unposted slots of them counted as sent on RDMA), and the rest went over TCP.
  [ "$rdma_sent" -ge $(( FAIL_AFTER - (2 << 20) )) ]
  [ "$rdma_sent" -lt "$total" ]
}

@test "switch: forced QP error during $(size_name "$BIG_STREAM") upload, stream continues on TCP byte-exact" {
  failover_stream up
  [ "$(stats_field client bytes_sent)" -eq $(( BIG_BYTES + 32 )) ]
}

@test "switch: forced QP error during $(size_name "$BIG_STREAM") download, stream continues on TCP byte-exact" {
  failover_stream down
  [ "$(stats_field server bytes_sent)" -eq "$BIG_BYTES" ]
}

@test "switch: the QP fails with the server's ATTACH in flight: a clean reset on both ends, no byte guessed" {
  # SDPSHIM_DEBUG_FAIL_ATTACH: the server forces its QP into the error state as it
  # posts ATTACH, which is flushed: the server cannot know the client lacks it.  A
  # switch would be a guess (the client may read the SWITCH record as data): the
  # server must reset the connection, and both apps see an error, never bytes.  The
  # client sees the reset as a plain TCP client would (ECONNRESET), though the shim's
  # own peek at the socket took the kernel's pending error first.
  local port crc=0 src=0
  port=$(free_port)
  start_bg server timeout -k 5 120 env SDPSHIM_DEBUG_FAIL_ATTACH=1 "${PRE[@]}" \
    "$PROGS/stream" -s "$port" -n 1
  stream_listening server "$port"
  run_timeout 120 "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP" -p "$port" -b 4M -d down -m 64k \
    >"$T/client.out" 2>&1 || crc=$?
  wait_bg server || src=$?
  show "client (rc=$crc): $(cat "$T/client.out")" "server (rc=$src): $(bg_log server)" \
       "$(stats_lines "$STATS")"
  bg_log server | grep -q 'SDPSHIM_DEBUG_FAIL_ATTACH: forcing'
  bg_log server | grep -q 'failed before the client confirmed it'
  # Both ends fail, with a reset or an early EOF, and no data was taken for good.
  [ "$crc" -ne 0 ]
  [ "$src" -ne 0 ]
  ! grep -q 'MISMATCH\|sha256=.* OK' "$T/client.out"
  grep -qi 'reset by peer' "$T/client.out"
  [ "$(stats_lines "$STATS" role=server switches=1 | wc -l)" -eq 0 ]
  # The client's stream never went over RDMA: its stats say TCP, and why.
  [ "$(stats_lines "$STATS" role=client path=tcp reason=unproven | wc -l)" -eq 1 ]
}

# reset_under_channel THEN: resetunder.py's run (THEN: recv or send) against a
# preloaded echo server, whose TCP socket ss -K destroys while the stream is on
# the channel; the client's channel then fails.
reset_under_channel() {
  # ss -K destroys the server's TCP socket, so the client's gets an RST while
  # its stream runs on the channel: the library's own watch of that socket
  # peeks at it and so takes the kernel's pending error.  Then the client's
  # channel fails (SDPSHIM_DEBUG_FAIL_AFTER) and the stream moves to that
  # reset connection: the app must see the reset, as over plain TCP, not the
  # clean EOF (or EPIPE) left once the error was taken.
  local port rc=0 killed
  port=$(free_port)
  start_bg server timeout -k 5 90 "${PRE[@]}" "$PROGS/connects" -s "$port" -a "$RXE_IP" -n 1
  bg_wait_line server "^listening on $port\$" 60
  start_bg client timeout -k 5 90 env SDPSHIM_DEBUG_FAIL_AFTER=6000 "${PRE[@]}" "$PY" -S \
    "$BATS_TEST_DIRNAME/resetunder.py" "$RXE_IP" "$port" "$T/release" "$1"
  wait_for_line "$T/client.log" '^resetunder: ready$' 60
  killed=$(ss -K -t -n state established "( sport = :$port )" | grep -c ":$port" || true)
  sleep 1
  touch "$T/release"
  wait_bg client || rc=$?
  wait_bg server || true
  show "ss -K: $killed socket(s)" "client (rc=$rc): $(bg_log client | tr '\n' ';')" \
       "server: $(bg_log server | tail -3 | tr '\n' ';')" "$(stats_lines "$STATS")"
  [ "$killed" -eq 1 ]
  bg_log client | grep -q 'SDPSHIM_DEBUG_FAIL_AFTER: forcing'
  [ "$rc" -eq 0 ]
  bg_log client | grep -qx "resetunder: reset on $1"
  # The server's socket was destroyed under it: its app sees that error too.
  bg_log server | grep -q 'read: Software caused connection abort'
}

@test "switch: the TCP connection is reset under an open channel, then the channel fails: recv() says ECONNRESET, not EOF" {
  reset_under_channel recv
}

@test "switch: the same, and send() after the move says ECONNRESET, not EPIPE" {
  reset_under_channel send
}

# --- soak ------------------------------------------------------------------------

# assert_moved_over N FILTER...: N stats lines match, each moved to TCP by a
# failover and either still there (path tcp, reason failover, switches 1) or
# back on RDMA (path rdma, climbs 1, switches 2: core/climb.c); the soak's
# streams end before or after their climb, as it happens.
assert_moved_over() {
  run "$PY" -S - "$STATS" "$@" <<'EOF'
import json, os, sys
path, want = sys.argv[1], int(sys.argv[2])
filters = [a.split("=", 1) for a in sys.argv[3:]]
lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
sel = [c for c in lines if all(str(c.get(k)) == v for k, v in filters)]
bad = [c for c in sel if not (
    (c["path"] == "tcp" and c["reason"] == "failover" and c.get("switches") == 1
     and c.get("climbs") == 0) or
    (c["path"] == "rdma" and c["reason"] == "none" and c.get("switches") == 2
     and c.get("climbs") == 1))]
climbed = sum(1 for c in sel if c.get("climbs") == 1)
print("%d lines (%d expected), %d back on RDMA, %d wrong" % (len(sel), want, climbed, len(bad)))
for c in bad[:12]:
    print("ERROR: %s %s %s -> %s: path=%s reason=%s switches=%s climbs=%s" % (
        c["comm"], c["role"], c["local"], c["remote"], c["path"], c["reason"],
        c.get("switches"), c.get("climbs")))
sys.exit(1 if bad or len(sel) != want else 0)
EOF
  show "moved over: $output"
  [ "$status" -eq 0 ]
}

# soak_stream N: an 8 MiB stream failing over after 1 MiB; odd N up (failure on
# the client), even N down (failure on the server); checks rc and sha256.
soak_stream() {
  local n=$1 port crc=0 src=0 dir=up senv=() cenv=() got
  if (( n % 2 )); then
    cenv=(SDPSHIM_DEBUG_FAIL_AFTER=1048576)
  else
    dir=down; senv=(SDPSHIM_DEBUG_FAIL_AFTER=1048576)
  fi
  port=$(free_port)
  start_bg sserver timeout -k 5 300 env "${senv[@]}" "${PRE[@]}" "$PROGS/stream" -s "$port" -n 1
  stream_listening sserver "$port"
  run_timeout 300 env "${cenv[@]}" "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP" -p "$port" -b 8M \
    -d "$dir" -m 1M >"$T/sclient.out" 2>&1 || crc=$?
  wait_bg sserver || src=$?
  if [ "$dir" = up ]; then
    got=$(stream_digest server "$T/sserver.log" 8388608)
  else
    got=$(stream_digest client "$T/sclient.out" 8388608)
  fi
  if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ] || [ "$got" != "$SOAK_REF" ]; then
    show "soak stream $n (-d $dir) failed: client rc=$crc, server rc=$src," \
         "received ${got:-none}, reference $SOAK_REF" \
         "client: $(cat "$T/sclient.out")" "server: $(bg_log sserver)"
    return 1
  fi
}

# wait_no_children PID [S]: until PID has no child process (default 15 s)
wait_no_children() {
  local until=$(( $(date +%s) + ${2:-15} ))
  while pgrep -P "$1" >/dev/null; do
    if [ "$(date +%s)" -ge "$until" ]; then
      echo "process $1 still has children after ${2:-15} s:" >&2
      ps -o pid,stat,etime,args --ppid "$1" >&2
      return 1
    fi
    sleep 0.1
  done
}

# wait_le CMD... -- N [S]: until the output of CMD is at most N (default 30 s); prints it
wait_le() {
  local cmd=() n v until
  while [ "$1" != -- ]; do cmd+=("$1"); shift; done
  n=$2; until=$(( $(date +%s) + ${3:-30} ))
  while :; do
    v=$("${cmd[@]}")
    if [ "$v" -le "$n" ] || [ "$(date +%s)" -ge "$until" ]; then echo "$v"; return 0; fi
    sleep 0.2
  done
}

@test "switch: on a link, 24 streams of 8 MiB fail over after 1 MiB with zero-copy in flight: none sees a reset, every byte checked" {
  # On a link that already failed, the next zero-copy bind fails at once in
  # the app's own send or recv; the switch it starts carries the bytes, and
  # the call once reported ECONNRESET instead (1 run in 30-40).
  local i
  export SDPSHIM_LINKS=1
  SOAK_REF=$(ref_digest 1 8M)
  for i in $(seq 1 24); do
    soak_stream "$i"
  done
  assert_moved_over 48 comm=stream
}

@test "switch: fork and failover load for ${SDPSHIM_SOAK_S:-30} s leaks no fd, MR or QP" {
  local secs=${SDPSHIM_SOAK_S:-30} port spid deadline t0 i=0 crc
  local base_qps base_mrs fds1 fds2 smrs1 smrs2 sqps2 end_qps end_mrs conns=0
  SOAK_REF=$(ref_digest 1 8M)
  base_qps=$(count_rc_qps)
  base_mrs=$(mr_total)
  port=$(free_port)
  start_bg server timeout -k 5 $(( secs + 1200 )) "${PRE[@]}" "$FORKECHO" -s "$port" -a "$RXE_IP"
  wait_port "$RXE_IP" "$port"
  wait_for_line "$T/server.log" '^forkecho: server pid [0-9]+$'
  spid=$(sed -nE 's/^forkecho: server pid ([0-9]+)$/\1/p' "$T/server.log")
  t0=$(now_ms)
  deadline=$(( $(date +%s) + secs ))
  while :; do
    i=$(( i + 1 ))
    crc=0
    run_timeout 300 "${PRE[@]}" "$FORKECHO" -c "$RXE_IP" -p "$port" -n 10 -j 5 -b 262144 -S "$i" \
      >"$T/batch.out" 2>&1 || crc=$?
    if [ "$crc" -ne 0 ] || ! grep -qx 'forkecho: 10/10 ok' "$T/batch.out"; then
      show "batch $i failed (rc=$crc):" "$(cat "$T/batch.out")" "server: $(bg_log server | tail -20)"
      false
    fi
    conns=$(( conns + 10 ))
    if [ "$i" -eq 1 ]; then
      # The parent's own state after its first connections: the baseline for growth.
      wait_no_children "$spid"
      fds1=$(fd_count "$spid")
      smrs1=$(mr_count forkecho)
    fi
    soak_stream "$i"
    [ "$(date +%s)" -lt "$deadline" ] || break
  done
  # The server, alive and idle: no child left, no RC QP, fds and MRs not grown.
  wait_no_children "$spid"
  fds2=$(fd_count "$spid")
  sqps2=$(wait_le count_rc_qps forkecho -- 0 30)
  smrs2=$(wait_le mr_count forkecho -- "$smrs1" 30)
  show "soak: $i rounds in $(( $(now_ms) - t0 )) ms: $conns forkecho connections (batches of 10," \
       "  5 at once), $i streams of 8 MiB failing over after 1 MiB" \
       "server parent pid $spid: fds $fds1 after the first batch, $fds2 at the end;" \
       "  RC QPs at the end $sqps2; MRs $smrs1 after the first batch, $smrs2 at the end" \
       "$(ls -l "/proc/$spid/fd" 2>&1 | tail -n +2)" \
       "$(stats_summary)"
  [ "$fds2" -le $(( fds1 + 2 )) ]
  [ "$sqps2" -eq 0 ]
  [ "$smrs2" -le "$smrs1" ]
  assert_switched forked-or-climbed "$conns" comm=forkecho role=client
  assert_moved_over $(( 2 * i )) comm=stream
  # Everything exits: RC QPs and MRs back to where they were before the test.
  kill -TERM "$(cat "$T/server.pid")"
  wait_bg server || true
  wait_rc_qps_at_most "$base_qps" 30
  end_qps=$(count_rc_qps)
  end_mrs=$(wait_le mr_total -- "$base_mrs" 30)
  show "RC QPs: $base_qps before, $end_qps after; MRs: $base_mrs before, $end_mrs after" \
       "$(rdma resource show mr 2>&1 | head -10)"
  [ "$end_qps" -le "$base_qps" ]
  [ "$end_mrs" -le "$base_mrs" ]
}

# --- device removal (last: it deletes and re-adds the rxe link) -------------------

# link_delete_case up|down: `rdma link delete` of the device under a running
# $BIG_STREAM stream (up: client -> server, down: server -> client); the receiver's
# digest must match the reference and both ends must have moved to TCP.
link_delete_case() {
  local dir=$1 field receiver link port pkts0 pkts live i crc=0 src=0 t_del t_end del got want
  if [ "$dir" = up ]; then field=bytes_received receiver=server; else field=bytes_sent receiver=client; fi
  rxe_link_pick || true
  show "rdma link show: $RXE_LINKS" "using link ${LINK_DEV:-?} on netdev ${LINK_NETDEV:-?}"
  [ -n "$LINK_DEV" ]
  [ -n "$LINK_NETDEV" ]
  link=$RXE_LINK
  port=$(free_port)
  start_bg server timeout -k 5 600 "${PRE[@]}" "$PROGS/stream" -s "$port" -n 1
  stream_listening server "$port"
  qp_watch_start
  pkts0=$(rxe_counter "$link" sent_pkts)
  start_bg client timeout -k 5 600 "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP" -p "$port" -b "$BIG_STREAM" -d "$dir" -m 1M
  # Data is flowing over RDMA: the server's live counters show 16 MiB moved.
  live=$(live_rdma_wait "$port" "$field")
  pkts=$(rxe_counter "$link" sent_pkts)
  show "before the delete: server connection path and $field: $live;" \
       "  sent_pkts of $link: ${pkts0:-?} before the stream, ${pkts:-?} now; RC QPs of stream: $(count_rc_qps stream)"
  [ "${live% *}" = rdma ]
  [ "${live#* }" -ge $((16 << 20)) ]
  [ "$(count_rc_qps stream)" -ge 2 ]
  t_del=$(now_ms)
  link_delete_watch "$T/linkdel.res" client server
  wait_bg client || crc=$?
  wait_bg server || src=$?
  t_end=$(now_ms)
  qp_watch_stop
  # How long the delete took, relative to the stream's end (up to 90 s more).
  for i in $(seq 1 900); do
    [ -f "$T/linkdel.res" ] && break
    sleep 0.1
  done
  del=$(cat "$T/linkdel.res" 2>/dev/null)
  got=$(stream_digest "$receiver" "$T/$receiver.log" "$BIG_BYTES")
  want=$(ref_digest 1 "$BIG_STREAM")
  show "rdma link delete $LINK_DEV: ${del:-still running 90 s after the stream ended}" \
       "  output: $(cat "$T/linkdel.res.out" 2>/dev/null)" \
       "  when it returned (or 10 s after it began): $DEL_RUNNING" \
       "  the stream ended $(( t_end - t_del )) ms after the delete began" \
       "  rdma link show now: $(rdma link show 2>&1)" \
       "client (rc=$crc): $(bg_log client)" "server (rc=$src): $(bg_log server)" \
       "$receiver received sha256 ${got:-none}, reference $want" \
       "RC QPs of stream seen: $(qp_seen stream)" \
       "$(stats_lines "$STATS")" "$(stats_summary)"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "${del%% *}" = rc=0 ]
  [ "$DEL_RUNNING" = "client running, server running" ]
  [ -n "$got" ]
  [ "$got" = "$want" ]
  [ "$(stats_lines "$STATS" role=client | wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" role=server | wc -l)" -eq 1 ]
  assert_switched failover 2
  assert_exact_bytes "$STATS"
}

@test "switch: rdma link delete during a $(size_name "$BIG_STREAM") upload: the stream finishes on TCP" {
  link_delete_case up
}

@test "switch: rdma link delete during a $(size_name "$BIG_STREAM") download: the stream finishes on TCP" {
  link_delete_case down
}

# A listener bound to the device's address, and a client process, live
# through the device's removal and return: what they open afterwards is on
# RDMA again, and so is the connection they held (it climbs back:
# core/climb.c, tests/vm/73-climb.bats).
@test "switch: rdma link delete, then add: the same server and client processes open RDMA channels again" {
  local port go crc=0 src=0 c2=0 del paths
  rxe_link_pick || true
  [ -n "$LINK_DEV" ]
  [ -n "$LINK_NETDEV" ]
  port=$(free_port)
  go=$T/go
  start_bg server timeout -k 5 300 env SDPSHIM_LOG=info "${PRE[@]}" "$PROGS/connects" -s "$port" -a "$RXE_IP" -n 3
  wait_port "$RXE_IP" "$port"
  start_bg client timeout -k 5 300 "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" -p "$port" -n 2 -w "$go"
  wait_for_line "$T/client.log" "^holding" 90
  RESTORE_LINK=1
  link_delete_start "$T/linkdel.res"
  restore_link "$T/linkdel.res"
  RESTORE_LINK=
  del=$(cat "$T/linkdel.res" 2>/dev/null)
  # The server's rdma_cm listener went with the device; it listens again
  # (a backoff of at most 8 s) before the next connection comes.
  wait_for_line "$T/server.log" "port $port listens for RDMA channels again" 30 || true
  # The held connection climbs back (a backoff of at most 1 s) before the
  # client is let go: a close while still held would end it on TCP.
  wait_live client "$port" "rdma 1" 30 || true
  touch "$go"
  wait_bg client || crc=$?
  run_timeout 90 "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" -p "$port" -n 1 >"$T/client2.log" 2>&1 || c2=$?
  wait_bg server || src=$?
  paths=$(stats_lines "$STATS" | awk '{ print $2, $5, $6 }' | sort | uniq -c | awk '{ print $1, $2, $3, $4 }' | paste -sd ';' -)
  show "rdma link delete: ${del:-none}" "client (rc=$crc): $(bg_log client)" \
       "second client (rc=$c2): $(cat "$T/client2.log")" "server (rc=$src): $(bg_log server)" \
       "role, path, reason: $paths" "$(stats_lines "$STATS")"
  [ "${del%% *}" = rc=0 ]
  [ "$crc" -eq 0 ]
  [ "$c2" -eq 0 ]
  [ "$src" -eq 0 ]
  grep -q "^ok 2$" "$T/client.log"
  grep -q "^ok 1$" "$T/client2.log"
  # The held connection moved and came back; the two made after the return are on RDMA.
  [ "$paths" = "3 client rdma none;3 server rdma none" ]
  [ "$(stats_lines "$STATS" | wc -l)" -eq 6 ]
  [ "$("$PY" -S -c 'import json,sys; print(sorted(json.loads(l)["climbs"] for l in open(sys.argv[1])))' "$STATS")" = "[0, 0, 0, 0, 1, 1]" ]
}

# The echo children of a fork-per-connection server hold the files they
# inherited of the device (the parent's context and completion channels):
# they watch for its removal and let their copies go (core/dev.c).  The
# client (tests/vm/holdecho.py) holds two connections open over the delete.
# children_hold_case [ENV...]: a preloaded forkecho server (-n 2) with ENV,
# and tests/vm/holdecho.py holding its two connections open over a `rdma
# link delete`; sets DEL, DEL_RUNNING and KIDS; checks every echo.
children_hold_case() {
  local port fpid i holders f p crc=0 src=0
  rxe_link_pick || true
  [ -n "$LINK_DEV" ]
  [ -n "$LINK_NETDEV" ]
  port=$(free_port)
  start_bg server timeout -k 5 300 env "$@" "${PRE[@]}" "$FORKECHO" -s "$port" -a "$RXE_IP" -n 2
  wait_port "$RXE_IP" "$port"
  start_bg client timeout -k 5 300 "${PRE[@]}" "$PY" -S "$BATS_TEST_DIRNAME/holdecho.py" \
    "$RXE_IP" "$port" "$T"
  for i in $(seq 1 600); do
    [ -f "$T/phase1" ] && break
    bg_running client || break
    sleep 0.1
  done
  [ -f "$T/phase1" ]
  fpid=$(sed -n 's/^forkecho: server pid \([0-9]*\)$/\1/p' "$BATS_TEST_TMPDIR/server.log")
  link_delete_watch "$T/linkdel.res" server client
  KIDS=$(pgrep -c -P "$fpid" || true)
  DEL=$(cat "$T/linkdel.res" 2>/dev/null || true)
  holders=$(for f in /proc/[0-9]*/fd/*; do
              case $(readlink "$f" 2>/dev/null) in
                /dev/infiniband/uverbs* | 'anon_inode:[infinibandevent]')
                  p=${f#/proc/}; echo "${p%%/*} $(cat "/proc/${p%%/*}/comm" 2>/dev/null)" ;;
              esac
            done | sort | uniq -c | tr '\n' ';')
  touch "$T/go"
  wait_bg client || crc=$?
  wait_bg server || src=$?
  restore_link "$T/linkdel.res"
  RESTORE_LINK=
  show "${*:-default}: rdma link delete: ${DEL:-none}; then: $DEL_RUNNING; echo children of forkecho ($fpid) then: $KIDS" \
       "holders of verbs files just after: ${holders:-none}" \
       "client (rc=$crc): $(bg_log client)" "server (rc=$src): $(bg_log server)" "$(stats_summary)"
  [ "$DEL_RUNNING" = "server running, client running" ]
  [ "$KIDS" -eq 2 ]
  [ "$crc" -eq 0 ]
  [ "$(bg_log client | tail -1)" = "holdecho: ok" ]
  [ "$src" -eq 0 ]
  # Both connections began on RDMA and moved to TCP at the server's fork
  # (and, where the children climbed back, to TCP again at the delete).
  assert_switched "${CHILDREN_END:-forked}" 2 role=client
}

@test "switch: rdma link delete while fork-per-connection children hold their connections on TCP (SDPSHIM_CLIMB_FORK=0): the delete returns while they run, and their echoes go on" {
  export SDPSHIM_CLIMB_FORK=0 # the children hold the parent's device files only
  children_hold_case SDPSHIM_CHILD_DEVICE_WATCH=1
  [ "${DEL%% *}" = rc=0 ]
}

@test "switch: rdma link delete while fork-per-connection children that climbed back to RDMA hold their connections: the delete returns while they run" {
  export CHILDREN_END=failover # the default SDPSHIM_CLIMB_FORK=1
  children_hold_case SDPSHIM_CHILD_DEVICE_WATCH=1
  [ "${DEL%% *}" = rc=0 ]
}

@test "switch: the same with SDPSHIM_CHILD_DEVICE_WATCH=0: the delete waits for the children (what the watch saves)" {
  export SDPSHIM_CLIMB_FORK=0
  children_hold_case SDPSHIM_CHILD_DEVICE_WATCH=0
  [ -z "$DEL" ]
}

# A process with no rdma_cm id on the device when it goes (its one client
# came and went, and the link went with it) gets no DEVICE_REMOVAL: the
# kernel's uevent for the verbs file makes it let go (core/dev_watch.c).
@test "switch: rdma link delete while a server has no connection on the device: the delete returns while it runs, and its next connection is on RDMA" {
  local port i qps del paths c1=0 c2=0 src=0
  rxe_link_pick || true
  [ -n "$LINK_DEV" ]
  [ -n "$LINK_NETDEV" ]
  port=$(free_port)
  start_bg server timeout -k 5 300 "${PRE[@]}" "$PROGS/connects" -s "$port" -n 2
  wait_port "$RXE_IP" "$port"
  run_timeout 90 "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" -p "$port" -n 1 >"$T/client1.log" 2>&1 || c1=$?
  for i in $(seq 1 100); do
    qps=$(count_rc_qps connects)
    [ "$qps" -eq 0 ] && break
    sleep 0.1
  done
  link_delete_watch "$T/linkdel.res" server
  restore_link "$T/linkdel.res"
  RESTORE_LINK=
  del=$(cat "$T/linkdel.res" 2>/dev/null)
  run_timeout 90 "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" -p "$port" -n 1 >"$T/client2.log" 2>&1 || c2=$?
  wait_bg server || src=$?
  paths=$(stats_lines "$STATS" | awk '{ print $2, $5, $6 }' | sort | uniq -c | awk '{ print $1, $2, $3, $4 }' | paste -sd ';' -)
  show "RC QPs of connects before the delete: $qps" "rdma link delete: ${del:-none}; then: $DEL_RUNNING" \
       "first client (rc=$c1): $(cat "$T/client1.log")" "second client (rc=$c2): $(cat "$T/client2.log")" \
       "server (rc=$src): $(bg_log server)" "role, path, reason: $paths"
  [ "$c1" -eq 0 ]
  [ "$qps" -eq 0 ]
  [ "${del%% *}" = rc=0 ]
  [ "$DEL_RUNNING" = "server running" ]
  [ "$c2" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "$paths" = "2 client rdma none;2 server rdma none" ]
}
