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

# A preloaded python3 (or the interpreter $PY) that listens on 127.0.0.1,
# connects to itself, sends SENT bytes from the client and RECV from the
# server, reads them, writes the port to $BATS_TEST_TMPDIR/NAME.ready and
# sleeps.  With GO, it then waits for the file GO, opens a second connection
# (100 bytes each way), closes the first, writes NAME.moved and sleeps.
# Sets FLOW_PID and FLOW_PORT.
start_flow() {
  local name=$1 sent=$2 recv=$3 go=${4:-} script=$BATS_TEST_TMPDIR/flow.py
  cat >"$script" <<'EOF'
import os, socket, sys, time
ready, sent, recv, go = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def pair(lsock, a, b):
    client = socket.create_connection(lsock.getsockname())
    server, _ = lsock.accept()
    for src, dst, n in ((client, server, a), (server, client, b)):
        src.sendall(b"x" * n)
        got = 0
        while got < n:
            got += len(dst.recv(65536))
    return client, server
def done(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text + "\n")
    os.rename(path + ".tmp", path)
lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(2)
first = pair(lsock, sent, recv)
done(ready, str(lsock.getsockname()[1]))
if go:
    while not os.path.exists(go):
        time.sleep(0.05)
    second = pair(lsock, 100, 100)
    for s in first:
        s.close()
    done(ready[:-len(".ready")] + ".moved", "moved")
time.sleep(120)
EOF
  "$SDPSHIM_BIN" run -- "${PY:-python3}" "$script" "$BATS_TEST_TMPDIR/$name.ready" "$sent" "$recv" "$go" 3>&- &
  echo $! >"$BATS_TEST_TMPDIR/$name.pid"
  disown
  wait_for_line "$BATS_TEST_TMPDIR/$name.ready" '^[0-9]+$' 20
  FLOW_PID=$(cat "$BATS_TEST_TMPDIR/$name.pid")
  FLOW_PORT=$(cat "$BATS_TEST_TMPDIR/$name.ready")
}

# A preloaded python3 whose client sends RATE bytes/s to its server in 50 ms
# steps (paced on a monotonic clock) for SECS seconds, then sleeps.  Sets PACED_PID.
start_paced() {
  local rate=$1 secs=$2 script=$BATS_TEST_TMPDIR/paced.py ready=$BATS_TEST_TMPDIR/paced.ready
  cat >"$script" <<'EOF'
import os, socket, sys, time
ready, rate, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(1)
client = socket.create_connection(lsock.getsockname())
server, _ = lsock.accept()
with open(ready + ".tmp", "w") as f:
    f.write("%d\n" % lsock.getsockname()[1])
os.rename(ready + ".tmp", ready)
step = 0.05
chunk = int(rate * step)
start, n = time.monotonic(), 0
while time.monotonic() - start < secs:
    client.sendall(b"p" * chunk)
    got = 0
    while got < chunk:
        got += len(server.recv(chunk - got))
    n += 1
    time.sleep(max(0, start + n * step - time.monotonic()))
time.sleep(120)
EOF
  "$SDPSHIM_BIN" run -- python3 "$script" "$ready" "$rate" "$secs" 3>&- &
  echo $! >"$BATS_TEST_TMPDIR/paced.pid"
  disown
  wait_for_line "$ready" '^[0-9]+$' 20
  PACED_PID=$(cat "$BATS_TEST_TMPDIR/paced.pid")
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

# --- stat: --prom, -i, --totals, filters (issue 18) -------------------------

# check_prom.py PROM JSON PID: the exposition's shape (families once, HELP and
# TYPE before the samples, counters ending in _total, one family's samples
# together) and, for process PID, the same numbers as the JSON document.
write_check_prom() {
  cat >"$BATS_TEST_TMPDIR/check_prom.py" <<'EOF'
import json, re, sys
prom, doc, pid = open(sys.argv[1]).read(), json.load(open(sys.argv[2])), sys.argv[3]
help_, type_, samples, order = {}, {}, [], []
label_re = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
for line in prom.splitlines():
    m = re.match(r'# (HELP|TYPE) (\S+) (.*)$', line)
    if m:
        d = help_ if m.group(1) == "HELP" else type_
        assert m.group(2) not in d, "second %s for %s" % (m.group(1), m.group(2))
        d[m.group(2)] = m.group(3)
        continue
    m = re.match(r'(\w+)(?:\{(.*)\})? (\d+)$', line)
    assert m, "not a sample: %r" % line
    name = m.group(1)
    assert name in type_ and name in help_, "no HELP/TYPE before " + name
    assert not order or order[-1] == name or name not in order, name + " split"
    order.append(name)
    samples.append((name, dict(label_re.findall(m.group(2) or "")), int(m.group(3))))
for name, t in type_.items():
    assert name.startswith("sdpshim_"), name
    assert (t == "counter") == name.endswith("_total"), (name, t)
def one(name, **labels):
    got = [v for n, l, v in samples if n == name and all(l.get(k) == v2 for k, v2 in labels.items())]
    assert len(got) == 1, (name, labels, got)
    return got[0]
p = [x for x in doc["processes"] if str(x["pid"]) == pid][0]
assert one("sdpshim_processes") == len(doc["processes"])
assert one("sdpshim_process_sent_bytes_total", pid=pid, comm=p["comm"]) == p["bytes_sent"]
assert one("sdpshim_process_received_bytes_total", pid=pid) == p["bytes_received"]
assert one("sdpshim_process_negcache_hits_total", pid=pid) == p["negcache_hits"]
assert one("sdpshim_process_pin_budget_bytes", pid=pid) == p["pin_budget"]
for path, n in p["conns_by_path"].items():
    assert one("sdpshim_process_connections_by_path_total", pid=pid, path=path) == n
for reason, n in p["conns_by_reason"].items():
    assert one("sdpshim_process_connections_by_reason_total", pid=pid, reason=reason) == n
for c in p["connections"]:
    ident = dict(pid=pid, fd=str(c["fd"]), role=c["role"], local=c["local"],
                 remote=c["remote"], path=c["path"], reason=c["reason"], comm=c["comm"])
    for key in ("bytes_sent", "bytes_received", "zcopy_bytes_sent", "credit_stalls"):
        name = "sdpshim_connection_" + key.replace("bytes_", "") + ("_bytes" if "bytes" in key else "") + "_total"
        assert one(name, **ident) == c[key], (name, c)
    assert one("sdpshim_connection_switches_total", **ident) == c["switches"]
live = len([c for c in p["connections"] if c["path"] == "tcp" and c["reason"] == "loopback"])
assert one("sdpshim_connections", pid=pid, path="tcp", reason="loopback") == live
print("ok %d samples, %d families" % (len(samples), len(type_)))
EOF
}

@test "stat --prom: the --json numbers of a live process, promtool check metrics clean, only metrics on stdout" {
  requires_tool promtool prometheus
  write_check_prom
  start_flow a 7000 3000
  local prom=$BATS_TEST_TMPDIR/sdpshim.prom err=$BATS_TEST_TMPDIR/prom.err junk
  junk=$SDPSHIM_RUN_DIR/sdpshim-$(id -u)-$$.stats
  echo junk >"$junk"                                  # its complaint goes to stderr only
  run_timeout 30 "$SDPSHIM_BIN" stat --prom >"$prom" 2>"$err"
  run_timeout 30 "$SDPSHIM_BIN" stat --json >"$BATS_TEST_TMPDIR/doc.json" 2>/dev/null
  show "$(head -c 1500 "$prom")"
  grep -qF "sdpshim stat: skipping $junk:" "$err"
  # The known transfer: the client sent 7000 and got 3000.
  grep -Eq "^sdpshim_connection_sent_bytes_total\{pid=\"$FLOW_PID\",comm=\"python3\",fd=\"[0-9]+\",role=\"client\",local=\"127\.0\.0\.1:[0-9]+\",remote=\"127\.0\.0\.1:$FLOW_PORT\",path=\"tcp\",reason=\"loopback\"\} 7000$" "$prom"
  grep -Eq "^sdpshim_connection_received_bytes_total\{pid=\"$FLOW_PID\",.*role=\"client\".*\} 3000$" "$prom"
  grep -Eq "^sdpshim_process_sent_bytes_total\{pid=\"$FLOW_PID\",comm=\"python3\"\} 10000$" "$prom"
  run python3 "$BATS_TEST_TMPDIR/check_prom.py" "$prom" "$BATS_TEST_TMPDIR/doc.json" "$FLOW_PID"
  show "$output"
  [ "$status" -eq 0 ]
  run promtool check metrics <"$prom"
  show "promtool: rc=$status $output"
  [ "$status" -eq 0 ]
  [ -z "$output" ]
  # A directory it cannot read: a line on stderr, nothing on stdout, exit 1.
  SDPSHIM_RUN_DIR=$prom run_timeout 30 "$SDPSHIM_BIN" stat --prom >"$BATS_TEST_TMPDIR/bad.prom" 2>"$err" || true
  SDPSHIM_RUN_DIR=$prom run run_timeout 30 "$SDPSHIM_BIN" stat --prom
  [ "$status" -eq 1 ]
  [ ! -s "$BATS_TEST_TMPDIR/bad.prom" ]
  [ "$(wc -l <"$err")" -eq 1 ]
}

@test "stat -i 1 -n 3: a paced 200000 B/s transfer's rate and deltas, a timestamp header per refresh, no escapes off a tty" {
  start_paced 200000 60
  run run_timeout 30 "$SDPSHIM_BIN" stat -i 1 -n 3 --bytes -p "$PACED_PID"
  show "$output"
  [ "$status" -eq 0 ]
  [[ "$output" != *$'\033'* ]]
  [ "$(grep -cE '^sdpshim stat [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{4}  refresh [1-3]/3, measured [0-9.]+ s$' <<<"$output")" -eq 3 ]
  local live=$output
  cat >"$BATS_TEST_TMPDIR/check_live.py" <<'EOF'
import re, sys
pid, blocks, prev = sys.argv[1], [], None
for line in sys.stdin.read().splitlines():
    m = re.match(r'sdpshim stat \S+  refresh (\d)/3, measured ([0-9.]+) s$', line)
    if m:
        blocks.append({"secs": float(m.group(2))})
        continue
    f = line.split()
    if blocks and len(f) >= 13 and f[0] == pid:
        assert len(f) == 13, "a note on a connection that stayed: %r" % line
        blocks[-1][f[3]] = [int(x) for x in f[7:13]]  # rate s/r, delta s/r, total s/r
assert len(blocks) == 3, blocks
for k, b in enumerate(blocks):
    rate, _, delta, _, total, _ = b["client"]
    assert 100000 <= rate <= 300000, ("client rate", b)
    assert abs(rate * b["secs"] - delta) <= delta * 0.01 + 2, ("rate is not delta/secs", b)
    assert 100000 <= b["server"][1] <= 300000, ("server receive rate", b)
    assert b["client"][1] == 0 and b["server"][0] == 0, b
    if k:
        assert total - blocks[k - 1]["client"][4] == delta, ("delta is not the growth", b)
        srv = b["server"]
        assert srv[5] - blocks[k - 1]["server"][5] == srv[3], ("server delta", b)
print("ok", [b["client"][0] for b in blocks])
EOF
  run python3 "$BATS_TEST_TMPDIR/check_live.py" "$PACED_PID" <<<"$live"
  show "$output"
  [ "$status" -eq 0 ]
}

@test "stat -i on a terminal clears the screen before each refresh" {
  command -v script >/dev/null || skip "no script(1) (bsdutils) for a pseudo-terminal"
  run run_timeout 30 script -qec "$SDPSHIM_BIN stat -i 0.1 -n 2" /dev/null
  [ "$status" -eq 0 ]
  [ "$(grep -o $'\033\[H\033\[2J' <<<"$output" | wc -l)" -eq 2 ]
  [ "$(grep -c 'refresh [12]/2' <<<"$output")" -eq 2 ]
}

@test "stat -i marks a connection that appeared as new and one that went away as closed" {
  start_flow a 1000 1000 "$BATS_TEST_TMPDIR/go"
  local out=$BATS_TEST_TMPDIR/live.out spid
  run_timeout 30 "$SDPSHIM_BIN" stat -i 0.5 -n 6 --bytes -p "$FLOW_PID" >"$out" 2>&1 3>&- &
  spid=$!
  wait_for_line "$out" 'refresh 1/6' 10
  touch "$BATS_TEST_TMPDIR/go"
  wait_for_line "$BATS_TEST_TMPDIR/a.moved" moved 10
  wait "$spid"
  show "$(cat "$out")"
  # Refresh 1: the first pair, neither new nor closed.
  sed -n '/refresh 1\/6/,/^all:/p' "$out" | grep -Eq " client +127\.0\.0\.1:$FLOW_PORT +tcp +loopback +0 +0 +0 +0 +1000 +1000$"
  grep -Eq " client +127\.0\.0\.1:$FLOW_PORT +tcp +loopback +- +- +- +- +1000 +1000 +closed$" "$out"
  grep -Eq " server +127\.0\.0\.1:[0-9]+ +tcp +loopback +- +- +- +- +1000 +1000 +closed$" "$out"
  grep -Eq " client +127\.0\.0\.1:$FLOW_PORT +tcp +loopback +[0-9]+ +[0-9]+ +100 +100 +100 +100 +new$" "$out"
  # The refresh after: the new pair is no longer new, and nothing moved.
  sed -n '/refresh 6\/6/,/^all:/p' "$out" | grep -Eq " client +127\.0\.0\.1:$FLOW_PORT +tcp +loopback +0 +0 +0 +0 +100 +100$"
  [ "$(grep -c closed "$out")" -eq 2 ]
}

@test "stat --totals adds up connections and bytes per process and per path and reason" {
  local a b first
  start_flow a 7000 3000; a=$FLOW_PID
  start_flow b 20000 5000; b=$FLOW_PID
  run run_timeout 30 "$SDPSHIM_BIN" stat --totals --bytes
  show "$output"
  [ "$status" -eq 0 ]
  grep -Eq "^ *$a +python3 +2 +10000 +10000 +0 +2$" <<<"$output"
  grep -Eq "^ *$b +python3 +2 +25000 +25000 +0 +2$" <<<"$output"
  grep -Eq "^tcp +loopback +4 +35000 +35000 +2$" <<<"$output"
  [[ "$output" == *"all: 4 connections in 2 processes, sent 35000, received 35000"* ]]
  # --sort bytes: the larger process first; pid order otherwise.
  run run_timeout 30 "$SDPSHIM_BIN" stat --totals --bytes --sort bytes
  first=$(sed -n '/^per process:/{n;n;p;q}' <<<"$output" | awk '{print $1}')
  [ "$first" = "$b" ]
  run run_timeout 30 "$SDPSHIM_BIN" stat --totals --bytes --sort pid
  first=$(sed -n '/^per process:/{n;n;p;q}' <<<"$output" | awk '{print $1}')
  [ "$first" = "$(( a < b ? a : b ))" ]
  run run_timeout 30 "$SDPSHIM_BIN" stat --totals --bytes --pid "$a"
  [[ "$output" == *"all: 2 connections in 1 processes, sent 10000, received 10000"* ]]
  run run_timeout 30 "$SDPSHIM_BIN" stat --totals --path rdma
  [[ "$output" == *"all: 0 connections in 2 processes"* ]]
}

@test "stat filters (--pid, --comm, --path, --reason) and --sort apply to the table, --json, --prom and --totals" {
  local a b n
  # comm "pyalt" (the real interpreter: a pyenv shim would dispatch on the name)
  ln -s "$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')" "$BATS_TEST_TMPDIR/pyalt"
  start_flow a 7000 3000; a=$FLOW_PID
  PY=$BATS_TEST_TMPDIR/pyalt start_flow b 100 20000; b=$FLOW_PID
  # --comm: only b, in every output.
  run run_timeout 30 "$SDPSHIM_BIN" stat --comm pyalt
  show "$output"
  grep -Eq "^ *$b +pyalt +" <<<"$output"
  ! grep -q python3 <<<"$output"
  run run_timeout 30 "$SDPSHIM_BIN" stat --comm pyalt --json
  [ "$(python3 -c 'import json,sys; print([p["pid"] for p in json.load(sys.stdin)["processes"]])' <<<"$output")" = "[$b]" ]
  run run_timeout 30 "$SDPSHIM_BIN" stat --comm pyalt --prom
  [ "$(grep -oE 'pid="[0-9]+"' <<<"$output" | sort -u)" = "pid=\"$b\"" ]
  run run_timeout 30 "$SDPSHIM_BIN" stat --comm pyalt --totals
  [[ "$output" == *"all: 2 connections in 1 processes"* ]]
  # --pid in --prom.
  run run_timeout 30 "$SDPSHIM_BIN" stat --pid "$a" --prom
  [ "$(grep -oE 'pid="[0-9]+"' <<<"$output" | sort -u)" = "pid=\"$a\"" ]
  # --path and --reason: connections of another path or reason are left out.
  run run_timeout 30 "$SDPSHIM_BIN" stat --path rdma --json
  n=$(python3 -c 'import json,sys; print(sum(len(p["connections"]) for p in json.load(sys.stdin)["processes"]))' <<<"$output")
  [ "$n" -eq 0 ]
  run run_timeout 30 "$SDPSHIM_BIN" stat --path rdma --prom
  ! grep -q '^sdpshim_connection_' <<<"$output"
  grep -q '^sdpshim_process_sent_bytes_total' <<<"$output"   # the processes stay
  run run_timeout 30 "$SDPSHIM_BIN" stat --path rdma
  ! grep -Eq " (client|server) " <<<"$output"
  run run_timeout 30 "$SDPSHIM_BIN" stat --reason loopback --path tcp --json
  n=$(python3 -c 'import json,sys; print(sum(len(p["connections"]) for p in json.load(sys.stdin)["processes"]))' <<<"$output")
  [ "$n" -eq 4 ]
  run run_timeout 30 "$SDPSHIM_BIN" stat --reason no_device --prom
  ! grep -q '^sdpshim_connection_' <<<"$output"
  ! grep -q 'reason="loopback"' <<<"$output"
  # --sort: the largest receiver first in the table; comm order; pid order.
  run run_timeout 30 "$SDPSHIM_BIN" stat --sort recv --bytes
  show "$output"
  sed -n 2p <<<"$output" | grep -Eq "^ *$b +pyalt +[0-9]+ +client .* 100 +20000 "
  run run_timeout 30 "$SDPSHIM_BIN" stat --sort comm
  sed -n 2p <<<"$output" | grep -Eq "^ *$b +pyalt "
  sed -n 4p <<<"$output" | grep -Eq "^ *$a +python3 "
  run run_timeout 30 "$SDPSHIM_BIN" stat --sort sent --json --pid "$b"
  [ "$(python3 -c 'import json,sys; print([c["role"] for c in json.load(sys.stdin)["processes"][0]["connections"]])' <<<"$output")" = "['server', 'client']" ]
  run run_timeout 30 "$SDPSHIM_BIN" stat --sort recv --json --pid "$b"
  [ "$(python3 -c 'import json,sys; print([c["role"] for c in json.load(sys.stdin)["processes"][0]["connections"]])' <<<"$output")" = "['client', 'server']" ]
}

@test "stat: bad -i, -n, --path, --reason, --sort, --comm and mixed modes give one line on stderr and exit 2" {
  local args
  while IFS= read -r args; do
    run run_timeout 10 "$SDPSHIM_BIN" stat $args        # split into words on purpose
    show "stat $args -> rc=$status: $output"
    [ "$status" -eq 2 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "${lines[0]}" == "sdpshim stat: "* ]]
    [ -z "$(run_timeout 10 "$SDPSHIM_BIN" stat $args 2>/dev/null)" ]
  done <<'EOF'
-i 0
-i abc
-i -1
-i 0.001
-i nan
-n 3
-i 1 -n 0
-i 1 -n x
--path carrier-pigeon
--reason bogus
--sort size
--sort rate
--comm=
--prom --json
--totals --prom
-i 1 --prom
-i 1 -w 1
-i
--pid
--frobnicate
EOF
}

@test "stat --help documents -i, -n, --totals, --prom, the filters and --sort" {
  run run_timeout 10 "$SDPSHIM_BIN" stat --help
  [ "$status" -eq 0 ]
  local opt
  for opt in "-i SECS" "-n COUNT" --totals --prom --json "--pid PID" "--comm NAME" \
             "--path PATH" "--reason R" "--sort FIELD" "0.0.4" "textfile"; do
    [[ "$output" == *"$opt"* ]] || { echo "missing: $opt"; return 1; }
  done
}
