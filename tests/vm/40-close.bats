#!/usr/bin/env bats
# VM suite, part 40: closing over RDMA behaves like TCP.  Half-close keeps the
# other direction open; a peer killed with SIGKILL mid-stream is noticed within
# seconds (EOF, ECONNRESET or EPIPE, never a hang), in both directions and with
# either end killed; and once the processes are gone, `rdma resource show qp`
# is back to the RC QP count it had before the test (no leaked QPs).
# tests/progs/peerkill: one end of an endless stream that reports how it ended.

load ../helpers
load vm_helpers

DETECT_MS=5000     # "within a few seconds"

setup() {
  vm_setup
  PEERKILL=$PROGS/peerkill
  [ -x "$PEERKILL" ] || { echo "missing $PEERKILL: run make" >&2; return 1; }
  BASE_QPS=$(count_rc_qps)
}

teardown() { vm_teardown; }

qps_back_to_baseline() {
  wait_rc_qps_at_most "$BASE_QPS" 15
  show "RC QPs: $(count_rc_qps) now, $BASE_QPS before the test"
}

@test "half-close over RDMA: the peer reads EOF after shutdown(SHUT_WR) and still replies" {
  run run_timeout 90 "${PRE[@]}" "$PROGS/sockcheck" halfclose "$RXE_IP" "$(free_port)"
  show "$output" "$(stats_lines "$STATS")"
  [ "$status" -eq 0 ]
  grep -qx "ok halfclose" <<<"$output"
  # Two connections (client and server ends in one process), all on RDMA, and each
  # end received exactly what the other sent (the replies after the half-close too).
  [ "$(stats_lines "$STATS" | wc -l)" -eq 4 ]
  assert_all_rdma "$STATS" sockcheck
  assert_exact_bytes "$STATS"
  qps_back_to_baseline
}

# kill_case VICTIM_ROLE VICTIM_DIR: a peerkill server and client over RDMA; once
# data flows, SIGKILL the VICTIM (server|client, which sends or receives: DIR) and
# time how long the survivor takes to see the end of the stream.
kill_case() {
  local victim=$1 vdir=$2 survivor sdir port vpid killed_ms end_ms src=0
  if [ "$victim" = server ]; then survivor=client; else survivor=server; fi
  if [ "$vdir" = send ]; then sdir=recv; else sdir=send; fi
  port=$(free_port)
  local -A dir=([$victim]=$vdir [$survivor]=$sdir)
  start_bg server timeout -k 5 90 "${PRE[@]}" "$PEERKILL" server "$RXE_IP" "$port" "${dir[server]}"
  wait_port "$RXE_IP" "$port"
  start_bg client timeout -k 5 90 "${PRE[@]}" "$PEERKILL" client "$RXE_IP" "$port" "${dir[client]}"
  # Data is flowing: the receiving end has seen 8 MiB.
  local receiver=server
  [ "${dir[client]}" = recv ] && receiver=client
  wait_for_line "$T/$receiver.log" '^streaming ' 60
  [ "$(count_rc_qps peerkill)" -eq 2 ]
  vpid=$(sed -nE 's/^connected pid=([0-9]+)$/\1/p' "$T/$victim.log")
  [ -n "$vpid" ]
  killed_ms=$(now_ms)
  kill -KILL "$vpid"
  wait_bg "$survivor" || src=$?
  wait_bg "$victim" || true
  end_ms=$(sed -nE 's/^end .*end_ms=([0-9]+)$/\1/p' "$T/$survivor.log")
  show "$victim ($vdir) killed; $survivor ($sdir, rc=$src): $(grep -E '^(end|error)' "$T/$survivor.log")" \
       "detected $(( ${end_ms:-0} - killed_ms )) ms after the SIGKILL" "$(stats_lines "$STATS")"
  # The survivor ended by EOF, ECONNRESET or EPIPE (rc 0), not by an I/O error
  # (rc 1) or its own guard against hangs (rc 3), and soon.
  [ "$src" -eq 0 ]
  grep -Eq '^end (eof|errno=(ECONNRESET|EPIPE|ECONNABORTED)) ' "$T/$survivor.log"
  [ -n "$end_ms" ]
  [ $(( end_ms - killed_ms )) -lt "$DETECT_MS" ]
  # The killed process wrote no stats line; the survivor's connection was on
  # RDMA, and stayed there, or (bytes were still in flight when the carrier
  # died) tried to move the stream to TCP, where it found the peer gone.
  [ "$(stats_lines "$STATS" | wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" role="$survivor" path=rdma reason=none | wc -l)" -eq 1 ] ||
    [ "$(stats_lines "$STATS" role="$survivor" path=tcp reason=failover | wc -l)" -eq 1 ]
  qps_back_to_baseline
}

@test "SIGKILL mid-stream: killed sending client -> the receiving server sees EOF/ECONNRESET within 5 s" {
  kill_case client send
}

@test "SIGKILL mid-stream: killed receiving server -> the sending client sees EPIPE/ECONNRESET within 5 s" {
  kill_case server recv
}

@test "SIGKILL mid-stream: killed sending server -> the receiving client sees EOF/ECONNRESET within 5 s" {
  kill_case server send
}

@test "SIGKILL mid-stream: killed receiving client -> the sending server sees EPIPE/ECONNRESET within 5 s" {
  kill_case client recv
}

@test "no leaked QPs: 8 connections opened and closed leave the RC QP count at its baseline" {
  local port
  port=$(free_port)
  start_bg server timeout -k 5 120 "${PRE[@]}" "$PROGS/connects" -s "$port" -a "$RXE_IP" -n 8
  wait_port "$RXE_IP" "$port"
  run run_timeout 120 "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" -p "$port" -n 8 -b 262144
  show "$output"
  [ "$status" -eq 0 ]
  grep -qx "ok 8" <<<"$output"
  wait_bg server
  assert_all_rdma "$STATS" connects
  [ "$(stats_lines "$STATS" | wc -l)" -eq 16 ]
  qps_back_to_baseline
}

# exit_case HOW: the server writes 4 MiB in one sendall, ends as HOW says
# (tests/vm/exitwrite.py) and leaves by _exit at once.  Over TCP the kernel
# sends every byte and then the FIN; over RDMA the process's QP dies with it,
# so the library must have sent them first.  The client checks every byte.
exit_case() {
  local how=$1 delay=${2:-0} port bytes=$((4 << 20)) crc=0
  port=$(free_port)
  start_bg server timeout -k 5 60 "${PRE[@]}" "$PY" "$BATS_TEST_DIRNAME/exitwrite.py" \
    server "$RXE_IP" "$port" "$bytes" "$how"
  wait_port "$RXE_IP" "$port"
  EXITWRITE_READ_DELAY_S=$delay run_timeout 60 "${PRE[@]}" "$PY" "$BATS_TEST_DIRNAME/exitwrite.py" client "$RXE_IP" "$port" \
    "$bytes" >"$T/client.log" 2>&1 || crc=$?
  wait_bg server || true
  show "client (rc=$crc): $(cat "$T/client.log")" "server: $(bg_log server)" "$(stats_lines "$STATS")"
  [ "$crc" -eq 0 ]
  grep -q "^exitwrite: $bytes bytes" "$T/client.log"
  # Both ends stayed on RDMA and closed in order: the server's _exit flushed
  # its socket (DisConn, then its stats line) as exit() would.
  [ "$(stats_lines "$STATS" role=client path=rdma | wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" role=server path=rdma | wc -l)" -eq 1 ]
  assert_exact_bytes "$STATS"
  qps_back_to_baseline
}

@test "_exit right after close(): the peer reads every byte written before it (4 MiB, SHA-256), as over TCP" {
  exit_case close
}

@test "_exit with the socket still open: the peer reads every byte, then EOF, as over TCP" {
  exit_case open
}

@test "_exit right after shutdown(SHUT_WR) and close(): the peer reads every byte" {
  exit_case shutdown
}

@test "_exit right after close() while the reader is 1 s behind: the peer reads every byte" {
  exit_case close 1
}

@test "_exit with the socket open while the reader is 1 s behind: the peer reads every byte" {
  exit_case open 1
}

@test "_exit from a signal handler that interrupts send(): every child leaves within its bound, the server never hangs" {
  local port rounds=6 crc=0
  port=$(free_port)
  start_bg server timeout -k 5 120 "${PRE[@]}" "$PROGS/exitsig" server "$RXE_IP" "$port" "$rounds"
  wait_port "$RXE_IP" "$port"
  SDPSHIM_LINGER_MS=1000 run_timeout 100 "${PRE[@]}" "$PROGS/exitsig" client "$RXE_IP" "$port" \
    "$rounds" >"$T/client.log" 2>&1 || crc=$?
  local src=0
  wait_bg server || src=$?
  show "client (rc=$crc): $(cat "$T/client.log")" "server (rc=$src): $(bg_log server)" \
       "$(stats_lines "$STATS")"
  # Each child left by its own _exit(7), within the flush's bound (exitsig's
  # BOUND_MS), and the server saw each connection end.
  [ "$crc" -eq 0 ]
  [ "$(grep -c '^client round .*: rc 7 ' "$T/client.log")" -eq "$rounds" ]
  [ "$src" -eq 0 ]
  [ "$(grep -c '^server conn ' "$T/server.log")" -eq "$rounds" ]
  # Every connection was on RDMA at the server: closed in order (the child's
  # flush ran) or moved to TCP when the child's QP died first (its flush was
  # still waiting for a lock the interrupted send() held).
  local orderly moved
  orderly=$(stats_lines "$STATS" role=server path=rdma reason=none | wc -l)
  moved=$(stats_lines "$STATS" role=server path=tcp reason=failover | wc -l)
  show "server ends: $orderly closed in order, $moved moved to TCP"
  [ $((orderly + moved)) -eq "$rounds" ]
  qps_back_to_baseline
}
