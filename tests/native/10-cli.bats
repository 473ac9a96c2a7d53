#!/usr/bin/env bats
# Native suite, part 10: the launcher's `doctor` and `stat` sub-commands on a
# host without an RDMA device.  Every preloaded process here keeps its stats
# segment in a private SDPSHIM_RUN_DIR, so nothing else on the host shows up.

load ../helpers

setup() {
  [ -x "$SDPSHIM_BIN" ] || { echo "missing $SDPSHIM_BIN: run make first" >&2; return 1; }
  export SDPSHIM_RUN_DIR=$BATS_TEST_TMPDIR/run
  mkdir -p "$SDPSHIM_RUN_DIR"
  unset SDPSHIM_CONFIG SDPSHIM_MODE
}

teardown() {
  local pid
  for pid in $(cat "$BATS_TEST_TMPDIR"/*.pid 2>/dev/null); do
    kill -9 "$pid" 2>/dev/null || true
  done
}

no_rdma_here() {
  if [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
    skip "this host has an RDMA device; the test is about hosts without one"
  fi
}

# A preloaded python3 that listens on 127.0.0.1, connects to itself, accepts,
# sends 5000 bytes each way, writes the listener's port to READY_FILE and sleeps.
start_loopback_pair() {
  local ready=$BATS_TEST_TMPDIR/ready script=$BATS_TEST_TMPDIR/pair.py
  write_pair_py "$script"
  "$SDPSHIM_BIN" run -- python3 "$script" "$ready" 3>&- &
  echo $! >"$BATS_TEST_TMPDIR/pair.pid"
  disown                                  # teardown's kill -9 is not news
  wait_for_line "$ready" '^[0-9]+$' 20
  PAIR_PID=$(cat "$BATS_TEST_TMPDIR/pair.pid")
  PAIR_PORT=$(cat "$ready")
}

# --- doctor ----------------------------------------------------------------

@test "doctor without an RDMA device says so, reports memlock, and exits 0" {
  no_rdma_here
  run run_timeout 30 "$SDPSHIM_BIN" doctor
  echo "$output"                                      # shown if the test fails
  [ "$status" -eq 0 ]
  [[ "$output" == *"no RDMA device: every connection will use kernel TCP, reason no_device"* ]]
  [[ "$output" =~ "RLIMIT_MEMLOCK: soft "(unlimited|[0-9.]+" "[KMGTP]?i?B) ]]
  [[ "$output" =~ "CAP_IPC_LOCK: "(held|not\ held) ]]
  [[ "$output" == *"one RDMA connection pins 2.0 MiB"* ]]
  [[ "$output" == *"/dev/infiniband/rdma_cm: missing"* ]]
}

@test "doctor counts what one connection pins from SDPSHIM_BUF_SIZE and SDPSHIM_BUF_COUNT" {
  SDPSHIM_BUF_SIZE=65536 SDPSHIM_BUF_COUNT=16 run run_timeout 30 "$SDPSHIM_BIN" doctor
  [ "$status" -eq 0 ]
  [[ "$output" == *"pins 2.0 MiB (2 x SDPSHIM_BUF_SIZE 65536 x SDPSHIM_BUF_COUNT 16)"* ]]
  SDPSHIM_BUF_SIZE=1048576 SDPSHIM_BUF_COUNT=8 run run_timeout 30 "$SDPSHIM_BIN" doctor
  [ "$status" -eq 0 ]
  [[ "$output" == *"pins 16.0 MiB"* ]]
  [[ "$output" == *"SDPSHIM_BUF_COUNT=8"* ]]          # listed under environment
}

@test "doctor 127.0.0.1 finds lo and the loopback verdict" {
  run run_timeout 30 "$SDPSHIM_BIN" doctor 127.0.0.1
  echo "$output"                                      # shown if the test fails
  [ "$status" -eq 0 ]
  [[ "$output" == *"source address: 127.0.0.1"* ]]
  [[ "$output" == *"interface: lo is loopback"* ]]
  [[ "$output" == *"verdict: kernel TCP, reason loopback"* ]]
}

@test "doctor [::1]:22 parses the bracketed IPv6 form" {
  [ -e /proc/net/if_inet6 ] || skip "no IPv6 in this kernel"
  run run_timeout 30 "$SDPSHIM_BIN" doctor '[::1]:22'
  echo "$output"                                      # shown if the test fails
  [ "$status" -eq 0 ]
  [[ "$output" == *"Path to [::1]:22"* ]]
  [[ "$output" == *"verdict: kernel TCP, reason loopback"* ]]
}

@test "doctor rejects an unparsable ADDR and bad usage with exit 2" {
  local bad
  for bad in 999.1.1.1 1.2.3.4:70000 '[::1' 1.2 not-an-address; do
    run run_timeout 30 "$SDPSHIM_BIN" doctor "$bad"
    show "$bad -> rc=$status: $output"
    [ "$status" -eq 2 ]
    [[ "$output" == *"'$bad' is not an IPv4 or IPv6 address"* ]]
  done
  run run_timeout 30 "$SDPSHIM_BIN" doctor 10.0.0.1 10.0.0.2
  [ "$status" -eq 2 ]
  run run_timeout 30 "$SDPSHIM_BIN" doctor --no-such-option
  [ "$status" -eq 2 ]
}

@test "doctor reports a bad SDPSHIM_CONFIG with file:line" {
  local conf=$BATS_TEST_TMPDIR/bad.conf
  printf 'use tcp client * *:*\nuse sometimes client * *:*\n' >"$conf"
  SDPSHIM_CONFIG=$conf run run_timeout 30 "$SDPSHIM_BIN" doctor
  echo "$output"                                      # shown if the test fails
  [ "$status" -eq 0 ]
  [[ "$output" == *"file: $conf (from SDPSHIM_CONFIG)"* ]]
  [[ "$output" == *"$conf:2:"* ]]
  [[ "$output" == *"rejected: none of its rules apply, every connection uses TCP"* ]]
  [[ "$output" == *"SDPSHIM_CONFIG=$conf"* ]]
}

@test "doctor's verdict under a bad SDPSHIM_CONFIG is rule_tcp for any address (fail closed)" {
  local conf=$BATS_TEST_TMPDIR/bad.conf
  printf 'use tcp client * 10.0.0.0/8:*\nuse sometimes client * *:*\n' >"$conf"
  SDPSHIM_CONFIG=$conf run run_timeout 30 "$SDPSHIM_BIN" doctor 10.1.2.3:6379
  echo "$output"                                      # shown if the test fails
  [ "$status" -eq 0 ]
  [[ "$output" == *"verdict: kernel TCP, reason rule_tcp"* ]]
  SDPSHIM_CONFIG=$conf run run_timeout 30 "$SDPSHIM_BIN" doctor 192.0.2.1:6379
  [[ "$output" == *"verdict: kernel TCP, reason rule_tcp"* ]]
}

@test "doctor reports a missing SDPSHIM_CONFIG file" {
  SDPSHIM_CONFIG=$BATS_TEST_TMPDIR/absent.conf run run_timeout 30 "$SDPSHIM_BIN" doctor
  [ "$status" -eq 0 ]
  [[ "$output" == *"$BATS_TEST_TMPDIR/absent.conf"*"No such file"* ]]
}

@test "doctor's verdict for ADDR follows the config rules and --prog" {
  no_rdma_here
  local conf=$BATS_TEST_TMPDIR/rules.conf
  printf 'use tcp client redis* 10.0.0.0/8:*\n' >"$conf"
  SDPSHIM_CONFIG=$conf run run_timeout 30 "$SDPSHIM_BIN" doctor --prog redis-server 10.1.2.3:6379
  echo "$output"                                      # shown if the test fails
  [ "$status" -eq 0 ]
  [[ "$output" == *"parses: 1 rule(s)"* ]]
  [[ "$output" == *"verdict: kernel TCP, reason rule_tcp"* ]]
  # Another program, or another network: the rule does not match.
  SDPSHIM_CONFIG=$conf run run_timeout 30 "$SDPSHIM_BIN" doctor --prog nginx 10.1.2.3:6379
  [[ "$output" == *"verdict: kernel TCP, reason no_device"* ]]
  SDPSHIM_CONFIG=$conf run run_timeout 30 "$SDPSHIM_BIN" doctor --prog redis-server 192.0.2.1:6379
  [[ "$output" == *"verdict: kernel TCP, reason no_device"* ]]
}

# --- stat ------------------------------------------------------------------

@test "stat with no preloaded process says so and exits 0" {
  run run_timeout 30 "$SDPSHIM_BIN" stat
  [ "$status" -eq 0 ]
  [ "$output" = "no sdpshim processes" ]
  run run_timeout 30 "$SDPSHIM_BIN" stat --json
  [ "$status" -eq 0 ]
  [ "$(python3 -c 'import json,sys; print(json.load(sys.stdin))' <<<"$output")" = "{'processes': []}" ]
}

@test "stat shows a preloaded process's loopback connections as tcp/loopback" {
  start_loopback_pair
  run run_timeout 30 "$SDPSHIM_BIN" stat
  show "$output"
  [ "$status" -eq 0 ]
  # PID COMM FD ROLE LOCAL REMOTE PATH REASON SENT RECV ...
  grep -Eq "^ *$PAIR_PID +python3 +[0-9]+ +client +127\.0\.0\.1:[0-9]+ +127\.0\.0\.1:$PAIR_PORT +tcp +loopback +4\.9K +4\.9K +" <<<"$output"
  grep -Eq "^ *$PAIR_PID +python3 +[0-9]+ +server +127\.0\.0\.1:$PAIR_PORT +127\.0\.0\.1:[0-9]+ +tcp +loopback +" <<<"$output"
  [[ "$output" != *listener* ]]                       # hidden by default
  [[ "$output" == *"pid $PAIR_PID python3: 0 rdma, 2 tcp (loopback 2), negcache hits 0"* ]]

  run run_timeout 30 "$SDPSHIM_BIN" stat --listeners --bytes -p "$PAIR_PID"
  show "$output"
  grep -Eq "^ *$PAIR_PID +python3 +[0-9]+ +listener +127\.0\.0\.1:$PAIR_PORT +- +tcp " <<<"$output"
  grep -Eq " client .* loopback +5000 +5000 " <<<"$output"

  run run_timeout 30 "$SDPSHIM_BIN" stat -p 1
  [ "$status" -eq 0 ]
  [ "$output" = "no sdpshim processes" ]
}

@test "stat --json parses and holds the connection with the stats-file field names" {
  start_loopback_pair
  run run_timeout 30 "$SDPSHIM_BIN" stat --json
  [ "$status" -eq 0 ]
  python3 -m json.tool <<<"$output" >/dev/null
  local check=$BATS_TEST_TMPDIR/check.py doc=$output
  cat >"$check" <<'EOF'
import json, sys
pid, port = int(sys.argv[1]), sys.argv[2]
doc = json.load(sys.stdin)
procs = [p for p in doc["processes"] if p["pid"] == pid]
assert len(procs) == 1, doc
p = procs[0]
assert p["comm"] == "python3", p
assert p["conns_by_path"] == {"tcp": 2, "rdma": 0}, p
assert p["conns_by_reason"] == {"loopback": 2}, p
assert p["negcache_hits"] == 0 and p["bytes_sent"] >= 10000 and p["bytes_received"] >= 10000, p
clients = [c for c in p["connections"] if c["role"] == "client"]
assert len(clients) == 1, p["connections"]
c = clients[0]
assert c["remote"] == "127.0.0.1:" + port and c["path"] == "tcp" and c["reason"] == "loopback", c
assert c["pid"] == pid and c["bytes_sent"] == 5000 and c["negcached"] is False, c
for key in ("zcopy_bytes_sent", "tx_credits", "rx_posted", "switches", "opened_ms", "fd"):
    assert key in c, key
assert not [x for x in p["connections"] if x["role"] == "listener"], "listener shown"
print("ok")
EOF
  run python3 "$check" "$PAIR_PID" "$PAIR_PORT" <<<"$doc"
  show "$output"
  [ "$status" -eq 0 ]
  [ "$output" = ok ]
}

@test "stat removes the segments of dead processes and skips invalid files" {
  local script=$BATS_TEST_TMPDIR/hold.py pid seg i
  printf 'import socket, time\ns = socket.socket()\ns.bind(("127.0.0.1", 0))\ns.listen(1)\ntime.sleep(120)\n' >"$script"
  "$SDPSHIM_BIN" run -- python3 "$script" 3>&- &
  pid=$!
  echo "$pid" >"$BATS_TEST_TMPDIR/hold.pid"
  seg=$SDPSHIM_RUN_DIR/sdpshim-$(id -u)-$pid.stats
  for i in $(seq 1 100); do [ -e "$seg" ] && break; sleep 0.1; done
  [ -e "$seg" ]
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  [ -e "$seg" ]                                       # SIGKILL left it behind
  # A file with a live pid but no valid header: noted, never removed.
  echo junk >"$SDPSHIM_RUN_DIR/sdpshim-$(id -u)-$$.stats"

  run run_timeout 30 "$SDPSHIM_BIN" stat
  show "$output"
  [ "$status" -eq 0 ]
  [ ! -e "$seg" ]
  [[ "$output" == *"skipping $SDPSHIM_RUN_DIR/sdpshim-$(id -u)-$$.stats: not a valid stats segment"* ]]
  [[ "$output" == *"no sdpshim processes"* ]]
  [ -e "$SDPSHIM_RUN_DIR/sdpshim-$(id -u)-$$.stats" ]
}

@test "stat -w repeats until interrupted and exits 0" {
  local out=$BATS_TEST_TMPDIR/watch.out pid
  "$SDPSHIM_BIN" stat -w 1 >"$out" 2>&1 3>&- &
  pid=$!
  sleep 2.5
  kill -INT "$pid"
  local rc=0
  wait "$pid" || rc=$?
  show "rc=$rc, $(grep -c 'no sdpshim processes' "$out") screens"
  [ "$rc" -eq 0 ]
  [ "$(grep -c 'no sdpshim processes' "$out")" -ge 2 ]
}

@test "stat rejects bad options with exit 2" {
  run run_timeout 30 "$SDPSHIM_BIN" stat -p notapid
  [ "$status" -eq 2 ]
  run run_timeout 30 "$SDPSHIM_BIN" stat -w 0
  [ "$status" -eq 2 ]
  run run_timeout 30 "$SDPSHIM_BIN" stat --frobnicate
  [ "$status" -eq 2 ]
}
