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
