#!/usr/bin/env bats
# VM suite, pair layout (run-in-vm.sh -n pair): rxe0 on rxenet0 = $RXE_IP and
# rxe1 on rxenet1 = $RXE_IP2, the two ends of a veth pair, with policy routing so
# that traffic between the two addresses crosses the veth: two RDMA "hosts".
#  - redis and a $BIG_STREAM stream from $RXE_IP to a server on $RXE_IP2 run over RDMA,
#    and the rxe0/rxe1 packet counters and the veth byte counters prove that the
#    traffic really crossed the wire (with the policy routes missing, rxe would
#    short-circuit it inside one device and these tests fail);
#  - RoCE packets dropped on the veth mid-stream (tc netem, UDP port 4791 only):
#    the end whose work requests stop completing notices within SDPSHIM_STALL_MS
#    and the stream finishes on TCP, byte-exact;
#  - a sender waiting for credits while the server's host stops answering RoCE
#    (its app stopped, then the client's RoCE packets dropped): the link's
#    probes, answered while the host was there, go unanswered, and the
#    stream moves to TCP within SDPSHIM_STALL_MS, before the server reads on
#    (on a link, and on a channel of its own);
#  - a peer host without RDMA (network namespace "norxe" behind its own veth, rxe
#    only on our end) gets plain TCP within one second of connect, every time,
#    with the default connect timeout;
#  - `rdma link delete rxe0` (the client's device) under a stream to rxe1: the
#    stream finishes on TCP byte-exact, the delete returns while both processes
#    run, and the server keeps rxe1; then rxe0 and rxe1 go one
#    after the other under a client and a server that live on, each delete
#    returns while they run, and once both are back the client's next
#    connection is on RDMA.  These two re-add what they delete.

load ../../helpers
load ../vm_helpers

# The first rdma_cm connection of a boot across the veth resolves neighbours
# and loads modules on demand; under TCG that has taken more than the suite's
# 10 s connect bound.  One plain verbs transfer (no sdpshim) warms the path, so
# the tests below measure sdpshim, not the first-use cost of the emulated bed.
setup_file() {
  [ -d /sys/class/infiniband/rxe1 ] || return 0
  local port=$((30000 + RANDOM % 20000))
  RDMA_SMOKE_TIMEOUT=60 timeout 90 "$PROGS/rdma_smoke" server "${RXE_IP2:-10.77.0.2}" "$port" \
    >/dev/null 2>&1 3>&- &
  sleep 1
  RDMA_SMOKE_TIMEOUT=60 timeout 90 "$PROGS/rdma_smoke" client "${RXE_IP2:-10.77.0.2}" "$port" 1 \
    >/dev/null 2>&1 3>&- || true
  wait || true
}

setup() {
  vm_setup
  RXE_IP2=${RXE_IP2:-10.77.0.2}
  if [ ! -d /sys/class/infiniband/rxe1 ]; then
    [ "${SDPSHIM_STRICT:-0}" = 1 ] && { echo "no rxe1: run with run-in-vm.sh -n pair" >&2; return 1; }
    skip "no rxe1: not the pair layout (run-in-vm.sh -n pair)"
  fi
}

teardown() {
  [ -z "${STOPPED_PID:-}" ] || kill -CONT "$STOPPED_PID" 2>/dev/null || true
  vm_teardown
  [ -z "${RESTORE_LINK:-}" ] || restore_link
  [ -z "${RXE1_GONE:-}" ] || rdma link add rxe1 type rxe netdev rxenet1 || true
  [ -z "${DROP_DEV:-}" ] || tc qdisc del dev "$DROP_DEV" root 2>/dev/null || true
  if [ -n "${NORXE_UP:-}" ]; then
    rdma link delete rxe_nrx 2>/dev/null || true
    ip link del nrx0 2>/dev/null || true
    ip netns del norxe 2>/dev/null || true
  fi
}

# counter DEV NAME: an rxe port counter (rdma statistic show link DEV/1)
counter() {
  rdma statistic show link "$1/1" | tr ' ' '\n' | awk -v k="$2" 'prev == k { print; exit } { prev = $0 }'
}

netstat_of() {   # netstat_of IFACE tx_bytes|rx_bytes
  cat "/sys/class/net/$1/statistics/$2"
}

snapshot() {   # snapshot FILE: the counters that prove the veth was crossed
  {
    echo "rxe0_sent $(counter rxe0 sent_pkts)"
    echo "rxe0_rcvd $(counter rxe0 rcvd_pkts)"
    echo "rxe1_sent $(counter rxe1 sent_pkts)"
    echo "rxe1_rcvd $(counter rxe1 rcvd_pkts)"
    echo "veth0_tx $(netstat_of rxenet0 tx_bytes)"
    echo "veth0_rx $(netstat_of rxenet0 rx_bytes)"
    echo "veth1_tx $(netstat_of rxenet1 tx_bytes)"
    echo "veth1_rx $(netstat_of rxenet1 rx_bytes)"
  } >"$1"
}

delta() {   # delta NAME: after - before
  local a b
  b=$(awk -v k="$1" '$1 == k { print $2 }' "$T/before")
  a=$(awk -v k="$1" '$1 == k { print $2 }' "$T/after")
  echo $(( a - b ))
}

show_deltas() {
  show "counter deltas: rxe0 sent $(delta rxe0_sent) rcvd $(delta rxe0_rcvd) pkts," \
       "                rxe1 sent $(delta rxe1_sent) rcvd $(delta rxe1_rcvd) pkts," \
       "                rxenet0 tx $(delta veth0_tx) rx $(delta veth0_rx) bytes, rxenet1 tx $(delta veth1_tx) rx $(delta veth1_rx) bytes"
}

@test "pair: the layout routes $RXE_IP <-> $RXE_IP2 over the veth, rxe0 and rxe1 active" {
  run rdma link show
  show "$output" "$(ip rule show)" "$(ip route show table 100)"
  grep -Eq 'link rxe0/1 state ACTIVE .*netdev rxenet0' <<<"$output"
  grep -Eq 'link rxe1/1 state ACTIVE .*netdev rxenet1' <<<"$output"
  ip route get "$RXE_IP2" from "$RXE_IP" iif lo 2>/dev/null | grep -q 'dev rxenet0' ||
    ip route get "$RXE_IP2" | grep -q 'dev rxenet0'
  [ -n "$(counter rxe0 sent_pkts)" ]
}

# pair_stream: one $BIG_STREAM upload to a server on $RXE_IP2; sets crc, src, ms and
# the before/after counter snapshots.
pair_stream() {
  local port t0
  crc=0 src=0
  port=$(free_port)
  start_bg server timeout -k 5 600 "${PRE[@]}" "$PROGS/stream" -s "$port" -n 1
  wait_port "$RXE_IP2" "$port"
  snapshot "$T/before"
  qp_watch_start
  t0=$(now_ms)
  run_timeout 600 "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP2" -p "$port" -b "$BIG_STREAM" -d up -m 1M \
    >"$T/client.out" 2>&1 || crc=$?
  wait_bg server || src=$?
  qp_watch_stop
  snapshot "$T/after"
  ms=$(( $(now_ms) - t0 ))
}

# carrier_failed_in_run: the last pair_stream's RDMA carrier failed, by the
# stats (a line moved for failover) or by either end's log
carrier_failed_in_run() {
  [ -n "$(stats_lines "$STATS" reason=failover)" ] ||
    grep -q "RDMA carrier failed\|no answer to .* within SDPSHIM_ZCOPY_ANSWER_MS" \
      "$T/client.out" "$T/server.log" 2>/dev/null
}

@test "pair: $(size_name "$BIG_STREAM") stream $RXE_IP -> server on $RXE_IP2 over RDMA, crossing the veth" {
  local crc src ms bytes=$BIG_BYTES got want run=1
  pair_stream
  while carrier_failed_in_run && [ "$run" -lt 3 ]; do
    # rxe of Linux 6.1 under emulation can exhaust its retries on the veth (an
    # RC QP error) or stall a queue pair silently (SDPSHIM_STALL_MS notices).
    # The stream then moves to TCP byte-exact (issue 6), which this test is not
    # about: say so, and run it again, up to 3 runs.  (About 1 run in 3 meets
    # the stall; twice in a row failed one CI run.)  A stall can also hold a
    # local window invalidate past SDPSHIM_ZCOPY_ANSWER_MS near the stream's
    # end (CI84): the logs say so, while both stats lines, written at the
    # apps' closes, may still read rdma.
    show "run $run: the RDMA carrier failed and the stream moved to TCP (client rc=$crc," \
         "server rc=$src) - running it again:" \
         "$(grep -h 'sdpshim' "$T/client.out" "$T/server.log")" "$(stats_lines "$STATS")"
    [ "$crc" -eq 0 ]
    [ "$src" -eq 0 ]
    rm -f "$STATS"
    run=$((run + 1))
    pair_stream
  done
  show "$(size_name "$BIG_STREAM") in $ms ms; client (rc=$crc): $(cat "$T/client.out")" \
       "server (rc=$src): $(bg_log server)" "RC QPs seen: stream $(qp_seen stream)" \
       "$(stats_lines "$STATS")"
  show_deltas
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  got=$(sed -nE "s/^stream: server received $bytes bytes sha256=([0-9a-f]{64}) OK$/\\1/p" "$T/server.log")
  want=$(ref_digest 1 "$BIG_STREAM")
  show "server received sha256 $got, reference $want"
  [ -n "$got" ]
  [ "$got" = "$want" ]
  [ "$(qp_seen stream)" -ge 2 ]
  assert_all_rdma "$STATS" stream
  assert_exact_bytes "$STATS"
  # The connection ran between the two "hosts": client on $RXE_IP, server on $RXE_IP2.
  [ "$(stats_lines "$STATS" role=client | awk '{ sub(/:[0-9]+$/, "", $3); sub(/:[0-9]+$/, "", $4); print $3, $4 }')" = "$RXE_IP $RXE_IP2" ]
  [ "$(stats_lines "$STATS" role=server | awk '{ sub(/:[0-9]+$/, "", $3); print $3 }')" = "$RXE_IP2" ]
  # At least one RoCE packet per 4096-byte MTU left rxe0 and arrived at rxe1, and
  # the veth carried at least the stream (rxe0 -> rxenet0 -> rxenet1 -> rxe1).
  local pkts=$(( bytes / 4096 ))
  [ "$(delta rxe0_sent)" -ge "$pkts" ]
  [ "$(delta rxe1_rcvd)" -ge "$pkts" ]
  [ "$(delta veth0_tx)" -ge "$bytes" ]
  [ "$(delta veth1_rx)" -ge "$bytes" ]
}

@test "pair: redis on $RXE_IP2, benchmark and data checks from $RXE_IP over RDMA, crossing the veth" {
  command -v redis-server >/dev/null || { [ "${SDPSHIM_STRICT:-0}" != 1 ] && skip "no redis-server"; }
  local port
  port=$(free_port)
  redis_start "$RXE_IP2" "$port"
  snapshot "$T/before"
  redis_bench "$RXE_IP2" "$port" 20000
  redis_bench "$RXE_IP2" "$port" 20000 -P 16
  redis_data "$RXE_IP2" "$port"
  snapshot "$T/after"
  redis_stop
  show_deltas
  # Both benchmarks (101 connections each) and redis-cli's, all paired on RDMA.
  [ "$(stats_lines "$STATS" role=client | wc -l)" -ge 202 ]
  assert_all_rdma "$STATS" redis-server redis-benchmark redis-cli
  # The 4 MiB value alone is 1024 packets of 4096 bytes each way; requests and
  # replies of 80000 operations add more.  All of it crossed the veth.
  [ "$(delta rxe0_sent)" -ge 1024 ]
  [ "$(delta rxe1_rcvd)" -ge 1024 ]
  [ "$(delta rxe1_sent)" -ge 1024 ]
  [ "$(delta rxe0_rcvd)" -ge 1024 ]
  [ "$(delta veth0_tx)" -ge $((8 << 20)) ]
  [ "$(delta veth1_tx)" -ge $((4 << 20)) ]
}

# A host without RDMA: namespace norxe behind veth nrx0 (10.80.0.1, with rxe_nrx on
# our end) <-> nrx1 (10.80.0.2, in norxe, no rxe).  rdma_cm never hears back from
# there, so only sdpshim's own connect timeout bounds the attempt.
make_norxe() {
  NORXE_UP=1
  modprobe veth 2>/dev/null || true
  ip netns add norxe
  ip link add nrx0 type veth peer name nrx1 netns norxe
  ip addr add 10.80.0.1/24 dev nrx0
  ip link set nrx0 up
  ip -n norxe addr add 10.80.0.2/24 dev nrx1
  ip -n norxe link set nrx1 up
  ip -n norxe link set lo up
  rdma link add rxe_nrx type rxe netdev nrx0
}

@test "pair: a peer host without RDMA gets TCP within 1 s of connect, every time (default timeout)" {
  local port i ms
  make_norxe
  unset SDPSHIM_CONNECT_TIMEOUT_MS           # the default bound is what is tested
  port=$(free_port)
  start_bg server timeout -k 5 120 ip netns exec norxe "$PROGS/connects" -s "$port" -a 10.80.0.2 -n 8
  wait_for_line "$T/server.log" "^listening on $port\$" 20
  # One process, five connects: the first pays the (bounded) RDMA attempt, the
  # next four hit the negative cache.
  run run_timeout 60 "${PRE[@]}" "$PROGS/connects" -c 10.80.0.2 -p "$port" -n 5
  show "one process, 5 connects:" "$output"
  [ "$status" -eq 0 ]
  grep -qx "ok 5" <<<"$output"
  local times
  times=$(sed -nE 's/^conn [0-9]+ connect_ms=([0-9.]+) .* ok$/\1/p' <<<"$output")
  [ "$(wc -l <<<"$times")" -eq 5 ]
  while read -r ms; do
    awk -v t="$ms" 'BEGIN { exit !(t < 1000) }'
  done <<<"$times"
  local lines
  lines=$(stats_lines "$STATS" role=client | sort -k10,10n)
  show "$lines"
  [ "$(wc -l <<<"$lines")" -eq 5 ]
  [ "$(awk '$5 != "tcp"' <<<"$lines")" = "" ]
  sed -n 1p <<<"$lines" | awk '{ exit !(($6 == "rdma_timeout" || $6 == "peer_unreachable") && $7 == "false") }'
  [ "$(sed -n '2,5p' <<<"$lines" | awk '$7 == "true"' | wc -l)" -eq 4 ]
  # Three more processes, one connect each: no cache to help, each must still be
  # on TCP within one second.
  rm -f "$STATS"
  for i in 1 2 3; do
    run run_timeout 60 "${PRE[@]}" "$PROGS/connects" -c 10.80.0.2 -p "$port" -n 1
    show "fresh process $i: $output"
    [ "$status" -eq 0 ]
    ms=$(sed -nE 's/^conn 1 connect_ms=([0-9.]+) .* ok$/\1/p' <<<"$output")
    [ -n "$ms" ]
    awk -v t="$ms" 'BEGIN { exit !(t < 1000) }'
  done
  wait_bg server
  lines=$(stats_lines "$STATS" role=client)
  show "$lines"
  [ "$(wc -l <<<"$lines")" -eq 3 ]
  [ "$(awk '$5 != "tcp" || ($6 != "rdma_timeout" && $6 != "peer_unreachable")' <<<"$lines")" = "" ]
}

# drop_roce DEV: every RoCEv2 packet (UDP port 4791) leaving DEV is dropped from
# now on; TCP on the same veth still flows.  teardown removes the qdisc.
drop_roce() {
  modprobe -a sch_prio sch_netem cls_u32 2>/dev/null || true
  tc qdisc add dev "$1" root handle 1: prio
  DROP_DEV=$1
  tc qdisc add dev "$1" parent 1:3 handle 30: netem loss 100%
  tc filter add dev "$1" parent 1: protocol ip prio 1 u32 \
    match ip protocol 17 0xff match ip dport 4791 0xffff flowid 1:3
}

@test "pair: RoCE dropped on the veth mid-stream: the stalled queue pair is noticed, the stream finishes on TCP" {
  local port crc=0 src=0 live got want bytes=$((128 << 20)) t_drop ms
  # 3 s: well under the transport's own retry time (ack timeout 19: 2.1 s x 8),
  # so the watchdog, not a retry-exceeded error, is what ends the RDMA carrier.
  # Buffer copy only: a zero-copy READ has a bound of its own, which can end the
  # carrier first (CI67, once large writes stopped falling back to copy).
  export SDPSHIM_STALL_MS=3000 SDPSHIM_ZCOPY_THRESH=0
  port=$(free_port)
  start_bg server timeout -k 5 300 "${PRE[@]}" "$PROGS/stream" -s "$port" -n 1
  wait_port "$RXE_IP2" "$port"
  # Paced to take at least 12 s: the drop (at 8 MiB) then comes well before
  # the end, however fast the bed runs.  Unpaced, a 128 MiB stream once ended
  # 730 ms after the drop, before any stall could be noticed.
  start_bg client timeout -k 5 300 "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP2" -p "$port" -b 128M -d up -m 1M -t 12
  live=$(live_rdma_wait "$port" bytes_received $((8 << 20)))
  show "before the drop: server connection path and bytes received: $live; RC QPs of stream: $(count_rc_qps stream)"
  if [ "${live% *}" != rdma ]; then
    show "client: $(bg_log client)" "server: $(bg_log server)" \
         "sdpshim stat: $("$SDPSHIM_BIN" stat 2>&1 | head -20)" "$(rdma resource show qp 2>&1 | head -10)"
  fi
  [ "${live% *}" = rdma ]
  [ "$(count_rc_qps stream)" -ge 2 ]
  t_drop=$(now_ms)
  drop_roce rxenet0
  wait_bg client || crc=$?
  wait_bg server || src=$?
  ms=$(( $(now_ms) - t_drop ))
  got=$(sed -nE "s/^stream: server received $bytes bytes sha256=([0-9a-f]{64}) OK$/\\1/p" "$T/server.log")
  want=$(ref_digest 1 128M)
  show "the stream ended $ms ms after the drop began" \
       "$(tc -s qdisc show dev rxenet0 | grep -A1 netem)" \
       "client (rc=$crc): $(bg_log client)" "server (rc=$src): $(bg_log server)" \
       "server received sha256 $got, reference $want" "$(stats_lines "$STATS")"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ -n "$got" ]
  [ "$got" = "$want" ]
  # RoCE packets really were dropped, and the stall is what moved the stream.
  [ "$(tc -s qdisc show dev rxenet0 | grep -A1 'netem 30:' | sed -nE 's/.*dropped ([0-9]+).*/\1/p')" -gt 0 ]
  cat "$T/client.log" "$T/server.log" |
    grep -q "RDMA carrier failed (send queue stalled: no completion within SDPSHIM_STALL_MS)"
  assert_switched failover 2
  assert_exact_bytes "$STATS"
}

# link_probes PORT: the probes_sent of the client link to PORT, or "none".
link_probes() {
  "$SDPSHIM_BIN" stat --json 2>/dev/null | "$PY" -S -c '
import json, sys
n = "none"
for p in json.load(sys.stdin).get("processes", []):
    for l in p.get("links", []):
        if l.get("role") == "client" and l.get("peer", "").rsplit(":", 1)[-1] == sys.argv[1]:
            n = l.get("probes_sent", "none")
print(n)' "$1"
}

# silent_host MODE (link: streams on a link; conn: a channel of its own).
# The server stops (SIGSTOP): its app reads nothing, the client's writes fill
# the stream's credits and wait, and nothing of the client's is outstanding.
# Its host still answers: probes (the peer silent for 1 s) are acknowledged
# and the stream stays on RDMA.  Then the client's RoCE packets are dropped,
# as if the server's host had died: the next probe goes unanswered, and after
# SDPSHIM_STALL_MS (4 s, under the transport's retry time of ack timeout 19:
# 2.1 s x 8) the carrier fails and the stream moves to TCP while the server
# is still stopped.  Buffer copy only.
silent_host() {
  local port crc=0 src=0 until live spid sent_a sent_b probes t_drop ms got want bytes=$((256 << 20))
  local gone_diag
  link_mode "$1"
  if [ "$1" = link ]; then
    gone_diag="the peer acknowledged nothing"
  else
    gone_diag="RDMA carrier failed (send queue stalled"
    export SDPSHIM_LOG=info   # a channel's probes say so at info
  fi
  export SDPSHIM_LINK_PROBE_MS=1000 SDPSHIM_STALL_MS=4000 SDPSHIM_ZCOPY_THRESH=0
  port=$(free_port)
  start_bg server timeout -k 5 300 "${PRE[@]}" "$PROGS/stream" -s "$port" -n 1
  wait_port "$RXE_IP2" "$port"
  start_bg client timeout -k 5 300 "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP2" -p "$port" -b 256M -d up -m 1M
  spid=$(pgrep -P "$(cat "$T/server.pid")" | head -n 1)
  [ -n "$spid" ]
  live=$(live_rdma_wait "$port" bytes_received $((1 << 20)))
  show "before the stop: server path and bytes received: $live"
  [ "${live% *}" = rdma ]
  kill -STOP "$spid"
  STOPPED_PID=$spid
  # The client's writes stop once its credits are spent; then probes.
  sleep 2
  sent_a=$(live_end client "$port" bytes_sent)
  sleep 4
  sent_b=$(live_end client "$port" bytes_sent)
  probes=$(link_probes "$port")
  show "client while the server is stopped: $sent_a, 4 s later $sent_b; link probes $probes"
  [ "${sent_b% *}" = rdma ]
  [ "$sent_a" = "$sent_b" ]   # the writer waits for credits
  if [ "$1" = link ]; then
    [ "$probes" != none ]
    [ "$probes" -ge 1 ]
  else
    grep -q "while we wait for credits; probing" "$T/client.log"
  fi
  # Answered probes leave the carrier up.
  run grep -qF "$gone_diag" "$T/client.log"
  [ "$status" -ne 0 ]
  t_drop=$(now_ms)
  drop_roce rxenet0
  until=$(( $(date +%s) + 40 ))
  until grep -qF "$gone_diag" "$T/client.log" || [ "$(date +%s)" -ge "$until" ]; do
    sleep 0.2
  done
  ms=$(( $(now_ms) - t_drop ))
  live=$(live_end client "$port" bytes_sent)
  show "after the drop: $ms ms; client path now $live" "client: $(bg_log client)"
  kill -CONT "$spid"
  STOPPED_PID=
  grep -qF "$gone_diag" "$T/client.log"
  [ "$ms" -lt 20000 ]
  wait_bg client || crc=$?
  wait_bg server || src=$?
  got=$(sed -nE "s/^stream: server received $bytes bytes sha256=([0-9a-f]{64}) OK$/\\1/p" "$T/server.log")
  want=$(ref_digest 1 256M)
  show "client (rc=$crc): $(bg_log client)" "server (rc=$src): $(bg_log server)" \
       "server received sha256 $got, reference $want" "$(stats_lines "$STATS")"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ -n "$got" ]
  [ "$got" = "$want" ]
  assert_switched failover 2
  assert_exact_bytes "$STATS"
}

@test "pair: a sender waiting for credits learns within a bound that the peer's host stopped answering RoCE, and finishes on TCP" {
  silent_host link
}

@test "pair: [conn] a sender waiting for credits on a channel of its own learns within a bound that the peer's host stopped answering RoCE, and finishes on TCP" {
  silent_host conn
}

@test "pair: rdma link delete of the client's device under a $(size_name "$BIG_STREAM") stream: byte-exact on TCP, the delete returns while both run" {
  local port crc=0 src=0 live del got want
  rxe_link_pick || true
  [ "$LINK_DEV" = rxe0 ]
  port=$(free_port)
  start_bg server timeout -k 5 600 "${PRE[@]}" "$PROGS/stream" -s "$port" -n 1
  wait_port "$RXE_IP2" "$port"
  start_bg client timeout -k 5 600 "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP2" -p "$port" \
    -b "$BIG_STREAM" -d up -m 1M
  live=$(live_rdma_wait "$port" bytes_received)
  link_delete_watch "$BATS_TEST_TMPDIR/linkdel.res" client server
  wait_bg client || crc=$?
  wait_bg server || src=$?
  del=$(cat "$BATS_TEST_TMPDIR/linkdel.res" 2>/dev/null)
  got=$(sed -nE "s/^stream: server received $BIG_BYTES bytes sha256=([0-9a-f]{64}) OK$/\\1/p" "$T/server.log")
  want=$(ref_digest 1 "$BIG_STREAM")
  show "before the delete: server path and bytes received: $live" \
       "rdma link delete rxe0: ${del:-still running}; when it returned: $DEL_RUNNING" \
       "rdma link show now: $(rdma link show 2>&1 | paste -sd ';' -)" \
       "client (rc=$crc): $(bg_log client)" "server (rc=$src): $(bg_log server)" \
       "server received sha256 ${got:-none}, reference $want" "$(stats_lines "$STATS")"
  [ "${live% *}" = rdma ]
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "${del%% *}" = rc=0 ]
  [ "$DEL_RUNNING" = "client running, server running" ]
  [ -n "$got" ]
  [ "$got" = "$want" ]
  ! grep -q "device rxe1 removed" "$T/server.log"
  assert_switched failover 2
  assert_exact_bytes "$STATS"
}

# Both devices go, one after the other, under processes that live on: each
# delete returns while they run (a process must not open, and so hold, a
# device it never used), and once both are back the same client's next
# connection is on RDMA, and the one it held climbs back.
@test "pair: rdma link delete of rxe0, then of rxe1, under live processes: each returns while they run; after both come back, RDMA again" {
  local port go c=0 src=0 del0 del1 run0 run1 paths i
  rxe_link_pick || true
  [ "$LINK_DEV" = rxe0 ]
  port=$(free_port)
  go=$BATS_TEST_TMPDIR/go
  start_bg server timeout -k 5 300 env SDPSHIM_LOG=info "${PRE[@]}" "$PROGS/connects" -s "$port" -a "$RXE_IP2" -n 2
  wait_port "$RXE_IP2" "$port"
  start_bg client timeout -k 5 300 "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP2" -p "$port" -n 2 -w "$go"
  wait_for_line "$BATS_TEST_TMPDIR/client.log" "^holding" 90
  link_delete_watch "$BATS_TEST_TMPDIR/linkdel0.res" client server
  run0=$DEL_RUNNING
  del0=$(cat "$BATS_TEST_TMPDIR/linkdel0.res" 2>/dev/null)
  RXE1_GONE=1
  LINK_DEV=rxe1 link_delete_watch "$BATS_TEST_TMPDIR/linkdel1.res" client server
  run1=$DEL_RUNNING
  del1=$(cat "$BATS_TEST_TMPDIR/linkdel1.res" 2>/dev/null)
  rdma link add rxe1 type rxe netdev rxenet1 && RXE1_GONE=
  restore_link "$BATS_TEST_TMPDIR/linkdel0.res"
  RESTORE_LINK=
  for i in $(seq 1 300); do
    rdma link show 2>/dev/null | grep -q "^link rxe1/1 state ACTIVE " && break
    sleep 0.1
  done
  wait_for_line "$BATS_TEST_TMPDIR/server.log" "port $port listens for RDMA channels again" 30 || true
  touch "$go"
  wait_bg client || c=$?
  wait_bg server || src=$?
  paths=$(stats_lines "$STATS" | awk '{ print $2, $5, $6 }' | sort | uniq -c | awk '{ print $1, $2, $3, $4 }' | paste -sd ';' -)
  show "rdma link delete rxe0: ${del0:-still running}; then: $run0" \
       "rdma link delete rxe1: ${del1:-still running}; then: $run1" \
       "rdma link show now: $(rdma link show 2>&1 | paste -sd ';' -)" \
       "client (rc=$c): $(bg_log client)" "server (rc=$src): $(bg_log server)" \
       "role, path, reason: $paths"
  [ "${del0%% *}" = rc=0 ]
  [ "$run0" = "client running, server running" ]
  [ "${del1%% *}" = rc=0 ]
  [ "$run1" = "client running, server running" ]
  [ "$c" -eq 0 ]
  [ "$src" -eq 0 ]
  grep -q "^ok 2$" "$BATS_TEST_TMPDIR/client.log"
  # The held connection moved to TCP and climbed back (core/climb.c).
  [ "$paths" = "2 client rdma none;2 server rdma none" ]
  [ "$("$PY" -S -c 'import json,sys; print(sorted(json.loads(l)["climbs"] for l in open(sys.argv[1])))' "$STATS")" = "[0, 0, 1, 1]" ]
}
