#!/usr/bin/env bats
# VM suite, part 30: mixed peers on rxe0 ($RXE_IP).  Where only one end runs
# sdpshim the connection must stay on kernel TCP, with the reason
# peer_no_sdpshim on the preloaded end, and work byte for byte; one listening
# port must serve a plain client (TCP) and a preloaded client (RDMA) at once; a
# second connect to a plain-TCP peer must hit the negative cache; a pre-fork
# server's workers accept connections the listening process got channels for,
# while the listening process's own accept(), held back after the kernel's,
# keeps its channels.
# tests/progs/connects: an echo server, and a client that times connect() and
# checks the echo of what it sent by SHA-256.

load ../helpers
load vm_helpers

setup() {
  vm_setup
  CONNECTS=$PROGS/connects
  [ -x "$CONNECTS" ] || { echo "missing $CONNECTS: run make" >&2; return 1; }
}

teardown() { vm_teardown; }

# connect_ms N FILE: the connect time of connection N in a connects client's output
connect_ms() {
  sed -nE "s/^conn $1 connect_ms=([0-9.]+) .* ok$/\\1/p" "$2"
}

@test "sdpshim client -> plain server: client stays TCP (peer_no_sdpshim), bytes verified" {
  local port
  port=$(free_port)
  start_bg server timeout -k 5 60 "$CONNECTS" -s "$port" -a "$RXE_IP" -n 1
  wait_port "$RXE_IP" "$port"
  run run_timeout 60 "${PRE[@]}" "$CONNECTS" -c "$RXE_IP" -p "$port" -n 1 -b 1048576
  show "$output" "$(stats_lines "$STATS")"
  [ "$status" -eq 0 ]
  grep -qx "ok 1" <<<"$output"
  wait_bg server
  # One line, from the preloaded client; the plain server writes none.
  [ "$(stats_lines "$STATS" | wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" role=client path=tcp reason=peer_no_sdpshim negcached=false | wc -l)" -eq 1 ]
  # Everything it sent came back: 1 MiB each way on that TCP connection.
  [ "$(stats_lines "$STATS" role=client | awk '{ print $8, $9 }')" = "1048576 1048576" ]
}

@test "plain client -> sdpshim server: server stays TCP (peer_no_sdpshim), bytes verified" {
  local port
  port=$(free_port)
  start_bg server timeout -k 5 60 "${PRE[@]}" "$CONNECTS" -s "$port" -a "$RXE_IP" -n 1
  wait_port "$RXE_IP" "$port"
  run run_timeout 60 "$CONNECTS" -c "$RXE_IP" -p "$port" -n 1 -b 1048576
  show "$output"
  [ "$status" -eq 0 ]
  grep -qx "ok 1" <<<"$output"
  wait_bg server
  show "$(stats_lines "$STATS")"
  [ "$(stats_lines "$STATS" | wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" role=server path=tcp reason=peer_no_sdpshim | wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" role=server | awk '{ print $8, $9 }')" = "1048576 1048576" ]
}

@test "one port, at the same time: a plain client on TCP and a preloaded client on RDMA" {
  local port release=$T/release
  port=$(free_port)
  start_bg server timeout -k 5 120 "${PRE[@]}" "$CONNECTS" -s "$port" -a "$RXE_IP" -n 2
  wait_port "$RXE_IP" "$port"
  # Each client verifies 256 KiB of echo, then holds its connection open until
  # $release exists: both connections are up together on the one listener.
  start_bg plain timeout -k 5 90 "$CONNECTS" -c "$RXE_IP" -p "$port" -n 1 -b 262144 -w "$release"
  wait_for_line "$T/plain.log" '^holding$' 60
  start_bg shim timeout -k 5 90 "${PRE[@]}" "$CONNECTS" -c "$RXE_IP" -p "$port" -n 1 -b 262144 -w "$release"
  wait_for_line "$T/shim.log" '^holding$' 60
  local qps
  qps=$(count_rc_qps connects)
  touch "$release"
  wait_bg plain
  wait_bg shim
  wait_bg server
  show "plain client: $(bg_log plain)" "preloaded client: $(bg_log shim)" \
       "RC QPs of connects while both were open: $qps" "$(stats_lines "$STATS")"
  grep -qx "ok 1" "$T/plain.log"
  grep -qx "ok 1" "$T/shim.log"
  # The RDMA connection's two ends (client and server QP), and only those.
  [ "$qps" -eq 2 ]
  [ "$(stats_lines "$STATS" role=server path=tcp reason=peer_no_sdpshim | wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" role=server path=rdma reason=none | wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" role=client path=rdma reason=none | wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" | wc -l)" -eq 3 ]
  # Both server-side connections were open at the same time (opened/closed overlap).
  stats_lines "$STATS" role=server | awk '
    { o[NR] = $10; c[NR] = $11 }
    END { exit !(NR == 2 && o[1] < c[2] && o[2] < c[1]) }'
}

@test "negative cache: the second connect to a plain-TCP peer is cached (negcached) and fast" {
  local port out=$T/client.out base
  port=$(free_port)
  start_bg server timeout -k 5 60 "$CONNECTS" -s "$port" -a "$RXE_IP" -n 3
  wait_port "$RXE_IP" "$port"
  # Baseline: a plain client's connect time to the same server.
  run run_timeout 30 "$CONNECTS" -c "$RXE_IP" -p "$port" -n 1
  [ "$status" -eq 0 ]
  base=$(connect_ms 1 <(echo "$output"))
  # One preloaded process, two connects: the first detects that the peer runs no
  # sdpshim, the second must take TCP straight from the cache.
  run_timeout 60 "${PRE[@]}" "$CONNECTS" -c "$RXE_IP" -p "$port" -n 2 >"$out" 2>&1
  wait_bg server
  show "plain connect: $base ms" "$(cat "$out")" "$(stats_lines "$STATS")"
  grep -qx "ok 2" "$out"
  local lines first second
  lines=$(stats_lines "$STATS" role=client)
  [ "$(wc -l <<<"$lines")" -eq 2 ]
  # In connect order (one process, sequential): the lines carry opened_ms.
  lines=$(sort -k10,10n <<<"$lines")
  [ "$(sed -n 1p <<<"$lines" | awk '{ print $5, $6, $7 }')" = "tcp peer_no_sdpshim false" ]
  [ "$(sed -n 2p <<<"$lines" | awk '{ print $5, $6, $7 }')" = "tcp peer_no_sdpshim true" ]
  first=$(connect_ms 1 "$out"); second=$(connect_ms 2 "$out")
  show "connect 1 (detection): $first ms, connect 2 (cached): $second ms, plain: $base ms"
  # No detection cost: as fast as a plain connect, give or take scheduling noise.
  awk -v s="$second" -v b="$base" 'BEGIN { exit !(s < b + 50 && s < 100) }'
}

@test "pre-fork server (workers accept on the inherited socket): clients use TCP at once, bytes verified" {
  # The listening process owns the RDMA listener, so its channels can never be
  # attached by a worker's accept(): the owner notices (sock_diag: the TCP
  # connection has been accepted by someone) and DETACHes them, and the client,
  # which speaks first, moves on within milliseconds instead of the 30 s
  # SDPSHIM_PENDING_TTL_MS.
  local port t0 ms crc=0 src=0 okl
  port=$(free_port)
  start_bg server timeout -k 5 120 "${PRE[@]}" "$PROGS/forkecho" -s "$port" -a "$RXE_IP" -w 3 -n 20
  wait_port "$RXE_IP" "$port"
  t0=$(now_ms)
  # No negative cache on the client: every connection goes through the detection
  # (with it, the first one would and the others would skip RDMA).
  run_timeout 60 env SDPSHIM_NEGCACHE_TTL_MS=0 "${PRE[@]}" "$PROGS/forkecho" -c "$RXE_IP" \
    -p "$port" -n 20 -j 4 >"$T/client.out" 2>"$T/client.err" || crc=$?
  ms=$(( $(now_ms) - t0 ))
  wait_bg server || src=$?
  okl=$(grep -cE '^conn [0-9]+ bytes=65536 sha256=[0-9a-f]{64} ok$' "$T/client.out" || true)
  show "20 connections to 3 pre-forked workers: $okl ok in $ms ms (client rc=$crc, server rc=$src)" \
       "client stderr: $(head -5 "$T/client.err")" "server: $(bg_log server | tail -5)" \
       "$(stats_lines "$STATS" | head -12)"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "$okl" -eq 20 ]
  # Every client connection: TCP, because another process accepted it.
  [ "$(stats_lines "$STATS" role=client | wc -l)" -eq 20 ]
  [ "$(stats_lines "$STATS" role=client path=tcp reason=accepted_elsewhere negcached=false | wc -l)" -eq 20 ]
  # No client waited for the pending TTL: 20 connections, 4 at a time, well
  # under one TTL in all.
  [ "$ms" -lt 20000 ]
}

# own_accept_held_back MODE: the other side of the pre-fork test.  The
# server's own accept() is held back 600 ms between the kernel's accept and
# claiming the channel (SDPSHIM_DEBUG_ACCEPT_DELAY_MS), as a thread the
# scheduler or an emulator holds back would be, or one that waits for a
# busy link's completions.  sock_diag sees the connection accepted all that
# while; the socket is this process's own, so the channel is not taken for
# another process's, and every connection opens on RDMA.
own_accept_held_back() {
  local port rc=0 src=0
  link_mode "$1"
  port=$(free_port)
  start_bg server timeout -k 5 120 env SDPSHIM_DEBUG_ACCEPT_DELAY_MS=600 "${PRE[@]}" "$CONNECTS" \
    -s "$port" -a "$RXE_IP" -n 3
  wait_port "$RXE_IP" "$port"
  run_timeout 60 "${PRE[@]}" "$CONNECTS" -c "$RXE_IP" -p "$port" -n 3 -b 65536 \
    >"$T/client.out" 2>&1 || rc=$?
  wait_bg server || src=$?
  show "client (rc=$rc): $(tr '\n' ';' <"$T/client.out")" "server (rc=$src): $(bg_log server | tail -4)" \
       "$(stats_lines "$STATS")"
  [ "$rc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "$(grep -cE '^conn [0-9]+ connect_ms=.* ok$' "$T/client.out")" -eq 3 ]
  assert_all_rdma "$STATS" connects
  assert_exact_bytes "$STATS"
}

@test "a server's own accept() held back 600 ms after the kernel's: its channels are not taken for another process's, all on RDMA, bytes verified" {
  own_accept_held_back conn
}

@test "[link] a server's own accept() held back 600 ms after the kernel's: its streams are not taken for another process's, all on RDMA, bytes verified" {
  own_accept_held_back link
}

# --- the pinned-memory budget (issue 15) ----------------------------------------
# One connection pins 2134016 bytes (core/geometry.c: 32 x 32 KiB receive
# buffers and 32 control slots, 33 send slots, in whole pages): a budget of
# 1 MiB cannot hold its receive buffers.

@test "a client's pin budget below one connection: TCP with reason resources, said once, bytes verified" {
  local port out=$T/client.out
  port=$(free_port)
  start_bg server timeout -k 5 90 "${PRE[@]}" "$CONNECTS" -s "$port" -a "$RXE_IP" -n 3
  wait_port "$RXE_IP" "$port"
  run_timeout 60 env SDPSHIM_PIN_BUDGET=1M "${PRE[@]}" "$CONNECTS" -c "$RXE_IP" -p "$port" \
    -n 3 -b 262144 >"$out" 2>&1
  wait_bg server
  show "$(cat "$out")" "$(stats_lines "$STATS")"
  grep -qx "ok 3" "$out"
  # Not remembered against the peer: each connect meets the budget again.
  [ "$(stats_lines "$STATS" role=client path=tcp reason=resources negcached=false | wc -l)" -eq 3 ]
  [ "$(stats_lines "$STATS" role=server path=tcp | wc -l)" -eq 3 ]
  [ "$(grep -c "pinned-memory budget of 1048576 bytes (SDPSHIM_PIN_BUDGET) has no room" "$out")" -eq 1 ]
  [ "$(grep -c "cannot set up an RDMA channel" "$out")" -eq 0 ]   # not once per connection
}

@test "a server's pin budget below one connection: the client is refused (resources), bytes verified" {
  local port
  port=$(free_port)
  start_bg server timeout -k 5 90 env SDPSHIM_PIN_BUDGET=1M "${PRE[@]}" "$CONNECTS" -s "$port" \
    -a "$RXE_IP" -n 1
  wait_port "$RXE_IP" "$port"
  run run_timeout 60 "${PRE[@]}" "$CONNECTS" -c "$RXE_IP" -p "$port" -n 1 -b 262144
  show "$output" "server: $(bg_log server)" "$(stats_lines "$STATS")"
  [ "$status" -eq 0 ]
  grep -qx "ok 1" <<<"$output"
  wait_bg server
  [ "$(stats_lines "$STATS" role=client path=tcp reason=resources | wc -l)" -eq 1 ]
  [ "$(bg_log server | grep -c "pinned-memory budget of 1048576 bytes")" -eq 1 ]
}

@test "a live process's budget and pinned bytes in sdpshim stat" {
  local port json
  port=$(free_port)
  export SDPSHIM_LINKS=1 # the link's record in the stats (whatever the default)
  start_bg server timeout -k 5 90 "${PRE[@]}" "$CONNECTS" -s "$port" -a "$RXE_IP" -n 1
  wait_port "$RXE_IP" "$port"
  # 5 MiB holds one link (4202496 bytes: 64 receive buffers and 64 send
  # slots of 32 KiB + 16, each area in whole pages; docs/links.md); 64 KiB
  # writes stay under the zero-copy threshold, so nothing else is registered.
  start_bg client timeout -k 5 90 env SDPSHIM_PIN_BUDGET=5M "${PRE[@]}" "$CONNECTS" \
    -c "$RXE_IP" -p "$port" -n 1 -b 65536 -w "$T/release"
  wait_for_line "$T/client.log" '^holding$' 60
  json=$("$SDPSHIM_BIN" stat --json)
  show "$json"
  touch "$T/release"
  wait_bg client
  wait_bg server
  "$PY" -S -c '
import json, sys
doc = json.loads(sys.argv[1])
p = [p for p in doc["processes"] if p["pin_budget"] == 5242880]
assert len(p) == 1, doc
p = p[0]
assert p["pinned_bytes"] == 4202496, p
assert p["budget_refusals"] == 0 and len(p["links"]) == 1, p
assert p["links"][0]["pinned_bytes"] == 4202496 and p["links"][0]["streams"] == 1, p["links"]
assert [c["path"] for c in p["connections"] if c["role"] == "client"] == ["rdma"], p' "$json"
  grep -qx "ok 1" "$T/client.log"
}
