#!/usr/bin/env bats
# VM suite, part 10: byte-exact streams and readiness semantics over RDMA, both
# ends preloaded, on rxe0 ($RXE_IP; 127.0.0.1 would stay on TCP by design).
# Every received stream must have the SHA-256 that tests/progs/streamref computes
# without any socket, the stats file must say path=rdma for every connection and
# the two ends' byte counts must agree, and `rdma resource show qp` must list the
# programs' RC QPs while they run.

load ../helpers
load vm_helpers

# Reference digests: ref_digests_start in vm_helpers.bash.
setup_file() {
  requires_rdma
  ref_digests_start "1 $BIG_STREAM" "0 32M" "3 32M" "0 16M" "3 16M" "0 2M" "3 2M"
}

teardown_file() { ref_digests_stop; }

setup() {
  vm_setup
  [ -x "$PROGS/streamref" ] || { echo "missing $PROGS/streamref: run make" >&2; return 1; }
}

teardown() { vm_teardown; }

# stream_case DIR BYTES MAXMSG MODE SECS: one stream run, both ends preloaded.
stream_case() {
  local dir=$1 bytes=$2 maxmsg=$3 mode=$4 secs=$5 port t0 crc=0 src=0
  local cli=$T/client.out
  port=$(free_port)
  start_bg server timeout -k 5 "$secs" "${PRE[@]}" "$PROGS/stream" -s "$port" -n 1 -e "$mode"
  wait_port "$RXE_IP" "$port"
  qp_watch_start
  t0=$(now_ms)
  run_timeout "$secs" "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP" -p "$port" -b "$bytes" \
    -d "$dir" -m "$maxmsg" -e "$mode" >"$cli" 2>&1 || crc=$?
  wait_bg server || src=$?
  local ms=$(( $(now_ms) - t0 ))
  qp_watch_stop
  show "stream -d $dir -b $bytes -m $maxmsg -e $mode: $ms ms" \
       "client (rc=$crc): $(cat "$cli")" "server (rc=$src): $(bg_log server)" \
       "RC QPs of stream seen while it ran: $(qp_seen stream)"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "$(qp_seen stream)" -ge 2 ]
  assert_all_rdma "$STATS" stream
  assert_exact_bytes "$STATS"
}

# received_digest WHO FILE BYTES: the digest WHO (client|server) printed for BYTES bytes
received_digest() {
  grep -E "^stream: $1 received $3 bytes sha256=[0-9a-f]{64} OK$" "$2" | sed -E 's/.*sha256=([0-9a-f]{64}).*/\1/'
}

# The sender's line in the stats file: what it sent, header (32 bytes) included.
sent_by() {   # sent_by ROLE
  stats_lines "$STATS" role="$1" | awk '{ print $8 }'
}

@test "stream: $(size_name "$BIG_STREAM") client -> server, messages 1 B..1 MiB, sha256 = reference, path=rdma" {
  stream_case up "$BIG_STREAM" 1M block 600
  local got want
  got=$(received_digest server "$T/server.log" "$BIG_BYTES")
  want=$(ref_digest 1 "$BIG_STREAM")
  show "server received sha256 $got, reference $want"
  [ -n "$got" ]
  [ "$got" = "$want" ]
  [ "$(sent_by client)" -eq $(( BIG_BYTES + 32 )) ]
}

@test "stream: $(size_name "$BIG_STREAM") server -> client, messages 1 B..1 MiB, sha256 = reference, path=rdma" {
  stream_case down "$BIG_STREAM" 1M block 600
  local got want
  got=$(received_digest client "$T/client.out" "$BIG_BYTES")
  want=$(ref_digest 1 "$BIG_STREAM")
  show "client received sha256 $got, reference $want"
  [ -n "$got" ]
  [ "$got" = "$want" ]
  [ "$(sent_by server)" -eq "$BIG_BYTES" ]
}

# -d both: the client sends the stream of seed 1^1 = 0, the server that of 1^2 = 3.
both_case() {   # both_case BYTES MAXMSG MODE SECS
  stream_case both "$1" "$2" "$3" "$4"
  local to_server to_client n
  n=$(size_bytes "$1")
  to_server=$(received_digest server "$T/server.log" "$n")
  to_client=$(received_digest client "$T/client.out" "$n")
  show "server received $to_server (reference $(ref_digest 0 "$1"))" \
       "client received $to_client (reference $(ref_digest 3 "$1"))"
  [ -n "$to_server" ]
  [ -n "$to_client" ]
  [ "$to_server" = "$(ref_digest 0 "$1")" ]
  [ "$to_client" = "$(ref_digest 3 "$1")" ]
}

@test "stream: 32 MiB each way at once (-d both), -e block" { both_case 32M 1M block 300; }
@test "stream: 16 MiB each way at once (-d both), -e poll" { both_case 16M 1M poll 300; }
@test "stream: 16 MiB each way at once (-d both), -e select" { both_case 16M 1M select 300; }
@test "stream: 16 MiB each way at once (-d both), -e epoll" { both_case 16M 1M epoll 300; }
@test "stream: 16 MiB each way at once (-d both), -e epollet" { both_case 16M 1M epollet 300; }

@test "stream: 2 MiB each way at once in writes of 1..16 bytes (-m 16 -d both)" {
  both_case 2M 16 block 300
  # Tiny writes: at least one write per 16 bytes, so far more than the 32 receive
  # buffers; the credit machinery must have run (updates sent by the receivers).
  local updates
  updates=$("$PY" -S -c '
import json, sys
print(sum(json.loads(l)["credit_updates_sent"] for l in open(sys.argv[1])))' "$STATS")
  show "credit updates sent, both ends: $updates"
  [ "$updates" -gt 0 ]
}

# --- readiness over RDMA: the listener and the connected pair in one process ----

readiness_rdma() {   # readiness_rdma CASE
  local case=$1
  run run_timeout 90 "${PRE[@]}" "$PROGS/readiness" "$RXE_IP" "$(free_port)" "$case"
  show "$output"
  [ "$status" -eq 0 ]
  grep -qx "ok $case" <<<"$output"
  show "$(stats_lines "$STATS")"
  assert_all_rdma "$STATS" readiness
}

@test "readiness epoll_lt over RDMA" { readiness_rdma epoll_lt; }
@test "readiness epoll_et over RDMA" { readiness_rdma epoll_et; }
@test "readiness epoll_oneshot over RDMA" { readiness_rdma epoll_oneshot; }
@test "readiness epoll_rdhup over RDMA" { readiness_rdma epoll_rdhup; }
# A thread asleep in a set before the socket joins it (an event loop thread
# while another thread registers a new connection): it wakes with the
# socket's event and the app's data, with no set having the library's
# records yet (epoll_wait's open route) and with another one having them.
@test "readiness epoll_joined_asleep over RDMA: a thread asleep in a set before the socket joined it wakes with the app's event, never the library's" { readiness_rdma epoll_joined_asleep; }

# A blocking connect() waits for the server's answer on its stream's condition
# variable; the wait first drops the stream's lock to make the owed CQ arms.
# SDPSHIM_DEBUG_WAIT_GAP_MS holds that gap open, so the answer (taken in by the
# progress thread) lands in it.  A wake-up there was once lost: the connect
# slept until its bound and ended on TCP (with OPEN_COMMIT), or for good (the
# plain OPEN's wait has no timer).  The listener is in the same process, as
# in every readiness case, so nothing else wakes the connect.
@test "a blocking connect whose answer lands while its wait has the stream unlocked returns at once, on RDMA (OPEN_COMMIT and plain OPEN)" {
  local commits t0 ms
  for commits in 1 0; do
    t0=$(now_ms)
    run run_timeout 40 env SDPSHIM_DEBUG_WAIT_GAP_MS=300 SDPSHIM_OPEN_COMMITS=$commits \
      "${PRE[@]}" "$PROGS/readiness" "$RXE_IP" "$(free_port)" epoll_lt
    ms=$(( $(now_ms) - t0 ))
    show "SDPSHIM_OPEN_COMMITS=$commits: ${ms} ms" "$output"
    [ "$status" -eq 0 ]
    grep -qx "ok epoll_lt" <<<"$output"
    [ "$ms" -lt 8000 ]   # the connect's bound is 10 s; a lost wake-up waits it out
  done
  show "$(stats_lines "$STATS")"
  assert_all_rdma "$STATS" readiness
}

@test "a thread cancelled while its blocking connect() waits for the server's answer ends, and the process's next connects echo over RDMA" {
  local port go=$T/go cont=$T/cont spid rc=0
  port=$(free_port)
  start_bg server timeout -k 5 150 "${PRE[@]}" "$PROGS/connects" -s "$port" -a "$RXE_IP"
  wait_port "$RXE_IP" "$port"
  start_bg cancel timeout -k 5 120 env SDPSHIM_CONNECT_TIMEOUT_MS=3000 SDPSHIM_NEGCACHE_TTL_MS=0 \
    "${PRE[@]}" "$PROGS/cancelconn" "$RXE_IP" "$port" "$go" "$cont"
  wait_count "$T/cancel.log" '^linked$' 1 60
  # The server stops: the next connect's OPEN gets no answer, and the thread
  # is cancelled while it waits for one.
  spid=$(pgrep -x connects)
  kill -STOP "$spid"
  touch "$go"
  wait_count "$T/cancel.log" '^(cancelled|FAIL)' 1 60 || true
  kill -CONT "$spid"
  touch "$cont"
  wait_bg cancel || rc=$?
  kill "$(cat "$T/server.pid")" 2>/dev/null || true
  show "cancelconn (rc=$rc): $(bg_log cancel)" "$(stats_lines "$STATS")"
  [ "$rc" -eq 0 ]
  grep -qx "ok" "$T/cancel.log"
  grep -Eq '^cancelled ms=[0-9]+$' "$T/cancel.log"
  # The first connection and the one after the cancel went over RDMA.
  [ "$(stats_lines "$STATS" comm=cancelconn path=rdma | wc -l)" -ge 2 ]
}

@test "readiness epoll_mod_toggle over RDMA: 400 EPOLL_CTL_MODs of EPOLLOUT, and each costs one epoll_ctl (the readable indicator is left alone)" {
  local log=$T/mod_toggle.strace calls
  run run_timeout 120 strace -f -qq -c -e trace=epoll_ctl -o "$log" \
    "${PRE[@]}" "$PROGS/readiness" "$RXE_IP" "$(free_port)" epoll_mod_toggle
  show "$output" "$(cat "$log")"
  [ "$status" -eq 0 ]
  grep -qx "ok epoll_mod_toggle" <<<"$output"
  assert_all_rdma "$STATS" readiness
  # The app's 400 MODs plus its few ADDs: one shadow epoll_ctl per MOD for
  # the writable indicator (added, then removed).  Re-making the unchanged
  # readable indicator too would double it (800+).
  calls=$(awk '$NF == "epoll_ctl" { print $4 }' "$log")   # % time, seconds, usecs/call, calls
  show "epoll_ctl calls: $calls"
  [ -n "$calls" ] && [ "$calls" -ge 400 ] && [ "$calls" -le 520 ]
}
@test "readiness epoll_watchers over RDMA: poll on the set, on the socket, a second set, beside an epoll_wait thread" { readiness_rdma epoll_watchers; }
@test "readiness epoll_unwanted over RDMA: unread bytes on a socket watched without EPOLLIN (events 0, EPOLLRDHUP alone) wake no one, and the half-close is still reported" { readiness_rdma epoll_unwanted; }
@test "readiness poll_unwanted over RDMA: the same with poll() (events 0, POLLRDHUP alone) and select() (exceptfds alone)" { readiness_rdma poll_unwanted; }
@test "readiness epoll_starve over RDMA: a readable socket listed by the library is reported in turn beside an always readable pipe, with maxevents 1" { readiness_rdma epoll_starve; }
@test "readiness bad_timeout over RDMA: ppoll, pselect and select refuse a timeout the kernel refuses (EINVAL), never wait forever" { readiness_rdma bad_timeout; }
@test "readiness select_big over RDMA: select past FD_SETSIZE (a socket at fd 2000) is taken as the kernel takes it, and EINTR leaves the time left in the timeval" { readiness_rdma select_big; }
@test "readiness epoll_dup over RDMA: a set under dup, dup2 and F_DUPFD numbers reports the app's data, not the library's, and lives on after its first number closes" { readiness_rdma epoll_dup; }
@test "readiness poll over RDMA" { readiness_rdma poll; }
@test "readiness ppoll over RDMA" { readiness_rdma ppoll; }
@test "readiness select over RDMA" { readiness_rdma select; }
@test "readiness pselect over RDMA" { readiness_rdma pselect; }
@test "readiness mixed (socket, pipe, eventfd, timerfd) over RDMA" { readiness_rdma mixed; }
@test "readiness nbconnect over RDMA" { readiness_rdma nbconnect; }

@test "readiness refused on $RXE_IP: stays TCP with a fallback reason" {
  run run_timeout 90 "${PRE[@]}" "$PROGS/readiness" "$RXE_IP" "$(free_port)" refused
  show "$output" "$(stats_lines "$STATS")"
  [ "$status" -eq 0 ]
  grep -qx "ok refused" <<<"$output"
  # No listener: nothing can go over RDMA, and the reason must say the peer has no
  # sdpshim listener there (or is unreachable), never a local failure.
  [ "$(stats_lines "$STATS" | wc -l)" -ge 1 ]
  [ "$(stats_lines "$STATS" path=rdma | wc -l)" -eq 0 ]
  local bad
  bad=$(stats_lines "$STATS" | awk '$6 != "peer_no_sdpshim" && $6 != "peer_unreachable"')
  [ -z "$bad" ]
}
