#!/usr/bin/env bats
# VM suite, part 60: the ASan+UBSan build of the library (build-san/) on the
# RDMA path: streams with buffer copy and zero-copy both ways, the readiness
# cases, the cache cases, and app threads polling a link while its streams
# and the link itself are torn down, and a stream that fails over and climbs
# back.  Every connection must be on RDMA at the end, the bytes must match
# a run without any preload, and no sanitizer may report.

load ../helpers
load vm_helpers
load ../sanitize

setup() {
  vm_setup
  san_setup
}

teardown() { vm_teardown; }

san_stats_rdma() {
  show "$(stats_lines "$STATS")"
  assert_all_rdma "$STATS" "$@"
}

@test "ASan+UBSan library over RDMA: stream -d both 16 MiB, writes up to 1 MiB (copy and zero-copy), sha256, no report" {
  local mode
  for mode in block epoll; do
    : >"$STATS"
    san_run_pair "$mode" "$(free_port)" "$RXE_IP" 16M
    san_stats_rdma stream
  done
  local zc
  zc=$("$PY" -S -c 'import json,sys; print(sum(json.loads(l)["zcopy_bytes_sent"] for l in open(sys.argv[1])))' "$STATS")
  show "zero-copied bytes in the last run: $zc"
  [ "$zc" -gt 0 ]
}

@test "ASan+UBSan library over RDMA: readiness cases, no report" {
  local c
  for c in epoll_lt epoll_et epoll_oneshot epoll_joined_asleep epoll_unwanted poll_unwanted epoll_starve bad_timeout select_big epoll_dup poll select mixed nbconnect; do
    : >"$STATS"
    run run_timeout 90 env "${SAN_ENV[@]}" "$PROGS/readiness" "$RXE_IP" "$(free_port)" "$c"
    show "$c: rc=$status $(tail -1 <<<"$output")"
    [ "$status" -eq 0 ]
    grep -qx "ok $c" <<<"$output"
    san_clean <<<"$output"
    san_stats_rdma readiness
  done
}

@test "ASan+UBSan library over RDMA: zero-copy cache cases (munmap, free, realloc), no report" {
  local kase port crc rrc
  for kase in munmap free realloc; do
    : >"$STATS"
    port=$(free_port); crc=0; rrc=0
    env "${SAN_ENV[@]}" timeout -k 5 300 "$PROGS/zctest" recv "$port" 12 1048576 >"$T/recv.log" 2>&1 3>&- &
    local rpid=$!
    wait_port "$RXE_IP" "$port"
    run_timeout 300 env "${SAN_ENV[@]}" "$PROGS/zctest" send "$RXE_IP" "$port" 12 1048576 "$kase" \
      >"$T/send.log" 2>&1 || crc=$?
    wait "$rpid" || rrc=$?
    show "$kase: sender rc=$crc $(tail -1 "$T/send.log"); receiver rc=$rrc $(tail -1 "$T/recv.log")"
    san_clean <"$T/send.log"
    san_clean <"$T/recv.log"
    [ "$crc" -eq 0 ]
    [ "$rrc" -eq 0 ]
    grep -q "received 12 blocks of 1048576 bytes: OK" "$T/recv.log"
    san_stats_rdma zctest
  done
}

# Issue 13: recv with MSG_TRUNC on an RDMA channel discards into no buffer;
# the library made a NULL-based pointer sum there.  (gcc's UBSan, which this
# build uses, does not flag a zero offset on NULL; clang's does.  The case
# checks the discarded bytes, the bytes after them, and a clean report.)
@test "ASan+UBSan library over RDMA: recv with MSG_TRUNC (sockcheck trunc), no report" {
  : >"$STATS"
  run run_timeout 90 env "${SAN_ENV[@]}" "$PROGS/sockcheck" trunc "$RXE_IP" "$(free_port)"
  show "rc=$status $(tail -1 <<<"$output")"
  [ "$status" -eq 0 ]
  grep -qx "ok trunc" <<<"$output"
  san_clean <<<"$output"
  san_stats_rdma sockcheck
}

@test "ASan+UBSan library over RDMA, links: app threads poll a link (SDPSHIM_SPIN_US) while its streams close and while it fails over and climbs back, no report" {
  local port crc=0 src=0 got ref
  # More than one thread polls a link's CQ (the progress thread, and an app
  # thread in a blocking call): its streams' and its own teardown go through
  # the link's poll lock.  100 connect-echo-close cycles, each server thread
  # spinning in recv on the link while other streams of it close.
  port=$(free_port)
  start_bg server timeout -k 5 400 env "${SAN_ENV[@]}" SDPSHIM_SPIN_US=2000 \
    "$PROGS/connects" -s "$port" -a "$RXE_IP" -n 100
  bg_wait_line server "^listening on $port\$" 120
  run_timeout 400 env "${SAN_ENV[@]}" SDPSHIM_SPIN_US=2000 \
    "$PROGS/connects" -c "$RXE_IP" -p "$port" -n 100 -b 4096 >"$T/client.log" 2>&1 || crc=$?
  wait_bg server || src=$?
  show "cycles: client rc=$crc $(tail -1 "$T/client.log"); server rc=$src $(bg_log server | tail -1)"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  grep -qx "ok 100" "$T/client.log"
  san_clean <"$T/client.log"
  bg_log server | san_clean
  san_stats_rdma connects
  # The client's QP fails after 1 MiB of an 8 MiB upload, the server's
  # recv spinning on the link: the link fails and goes while that thread
  # may be polling it; the stream moves to TCP, held, and climbs back to
  # RDMA on a new link (core/climb.c; the paced reader gives it the time),
  # byte-exact.
  : >"$STATS"
  port=$(free_port); crc=0; src=0
  start_bg sserver timeout -k 5 400 env "${SAN_ENV[@]}" SDPSHIM_SPIN_US=2000 \
    STREAM_READ_MAX=65536 STREAM_READ_PAUSE_US=40000 "$PROGS/stream" -s "$port" -n 1
  stream_listening sserver "$port"
  run_timeout 400 env "${SAN_ENV[@]}" SDPSHIM_SPIN_US=2000 SDPSHIM_DEBUG_FAIL_AFTER=1048576 \
    "$PROGS/stream" -c "$RXE_IP" -p "$port" -b 8M -d up -m 1M >"$T/sclient.out" 2>&1 || crc=$?
  wait_bg sserver || src=$?
  got=$(stream_digest server "$T/sserver.log" 8388608)
  ref=$(ref_digest 1 8M)
  show "failover: client rc=$crc $(tail -1 "$T/sclient.out"); server rc=$src $(bg_log sserver | tail -1)" \
       "client: $(head -c 20000 "$T/sclient.out")" \
       "received ${got:-none}, reference $ref" "$(stats_lines "$STATS")"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ -n "$got" ] && [ "$got" = "$ref" ]
  san_clean <"$T/sclient.out"
  bg_log sserver | san_clean
  [ "$(stats_lines "$STATS" comm=stream path=rdma reason=none | wc -l)" -eq 2 ]
  [ "$("$PY" -S -c 'import json,sys; print(" ".join(str(json.loads(l)["climbs"]) for l in open(sys.argv[1])))' "$STATS")" = "1 1" ]
}
