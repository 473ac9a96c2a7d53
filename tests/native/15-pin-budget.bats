#!/usr/bin/env bats
# Native suite, part 15: the pinned-memory budget (issue 15) where no RDMA
# device is needed.  `sdpshim doctor` says how many connections
# RLIMIT_MEMLOCK allows with per-connection channels, counted from the
# geometry the way core/setup.c registers it, and which budget is in effect;
# SDPSHIM_PIN_BUDGET takes K/M/G, and a bad value gets one diagnostic line
# while the program runs on; `sdpshim stat` shows a live process's budget,
# pinned bytes and refusals (and no links here).  Refusals themselves need
# RDMA: tests/vm/30-fallback.bats.

load ../helpers

# The system interpreter: a version manager's shim on PATH would exec several
# programs, each a new preloaded process image with its own diagnostics.
if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=$(command -v python3); fi

setup() {
  [ -x "$SDPSHIM_BIN" ] || { echo "missing $SDPSHIM_BIN: run make first" >&2; return 1; }
  export SDPSHIM_RUN_DIR=$BATS_TEST_TMPDIR/run
  mkdir -p "$SDPSHIM_RUN_DIR"
  unset SDPSHIM_CONFIG SDPSHIM_MODE SDPSHIM_PIN_BUDGET SDPSHIM_BUF_SIZE SDPSHIM_BUF_COUNT \
        SDPSHIM_LOG LD_PRELOAD
}

teardown() {
  stop_recorded_pids
}

# no_ipc_lock CMD...: CMD without CAP_IPC_LOCK, so RLIMIT_MEMLOCK binds it
# (root holds the capability, and for it the limit does not apply).
no_ipc_lock() {
  if [ "$(id -u)" = 0 ]; then
    setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock -- "$@"
  else
    "$@"
  fi
}

# conn_bytes SIZE COUNT: what one connection pins, as core/setup.c registers
# it: receive buffers and 32 control slots of 64 bytes, then COUNT + 1 send
# slots, each registration in whole pages.
conn_bytes() {
  local page rx tx
  page=$(getconf PAGESIZE)
  rx=$(( $1 * $2 + 32 * 64 ))
  tx=$(( $1 * ($2 + 1) ))
  echo $(( (rx + page - 1) / page * page + (tx + page - 1) / page * page ))
}

# link_bytes BUF_SIZE LINK_BUFS: what one link registers (core/link.c: as
# many receive buffers as send slots, each BUF_SIZE plus the 16-byte link
# header, each area in whole pages).
link_bytes() {
  local page area
  page=$(getconf PAGESIZE)
  area=$(( ($1 + 16) * $2 ))
  echo $(( 2 * ((area + page - 1) / page * page) ))
}

# pair READY [PREFIX...]: a preloaded python3 (started as PREFIX sdpshim run
# -- python3 ...) with a loopback connection to itself, 5000 bytes each way,
# its port in READY, then asleep; PAIR_PID.
pair() {
  local ready=$1; shift
  write_pair_py "$BATS_TEST_TMPDIR/pair.py"
  "$@" "$SDPSHIM_BIN" run -- "$PY" "$BATS_TEST_TMPDIR/pair.py" "$ready" \
    2>"$BATS_TEST_TMPDIR/pair.err" 3>&- &
  PAIR_PID=$!
  echo "$PAIR_PID" >"$BATS_TEST_TMPDIR/pair.pid"
  wait_for_line "$ready" '^[0-9]+$' 30
}

# stat_field PID FIELD: the process's FIELD from `sdpshim stat --json`.
stat_field() {
  "$SDPSHIM_BIN" stat --json | python3 -c '
import json, sys
pid, field = int(sys.argv[1]), sys.argv[2]
procs = [p for p in json.load(sys.stdin)["processes"] if p["pid"] == pid]
assert len(procs) == 1, procs
print(json.dumps(procs[0][field]))' "$1" "$2"
}

@test "doctor under ulimit -l 8192: the connections it allows with per-connection channels, and the capped budget" {
  command -v setpriv >/dev/null || skip "setpriv is not installed"
  local per want out
  per=$(conn_bytes 32768 32)
  want=$(( 8388608 / per ))
  out=$(ulimit -S -l 8192 && no_ipc_lock "$SDPSHIM_BIN" doctor)
  show "one connection: $per bytes, so $want connections" "$(grep -A12 '^Memory locking' <<<"$out")"
  [ "$want" -eq 3 ]                                       # 4 KiB pages: 2134016 bytes each
  grep -qx "  CAP_IPC_LOCK: not held" <<<"$out"
  grep -qx "  per-connection channels: one connection pins 2.0 MiB ($per bytes: its buffers, control slots and spare send slot, in whole pages)" <<<"$out"
  grep -qx "  RLIMIT_MEMLOCK allows $want connections with per-connection channels" <<<"$out"
  grep -qx "  pin budget: 8.0 MiB (8388608 bytes; the default 256.0 MiB, capped at the soft RLIMIT_MEMLOCK), $(( 8388608 / $(link_bytes 32768 64) )) links or $want connections with per-connection channels; past it new connections use TCP, reason resources" <<<"$out"
  # Links: one pins the same whatever it carries (docs/links.md).
  grep -qx "  links (SDPSHIM_LINKS=1): one link pins 4.0 MiB ($(link_bytes 32768 64) bytes) and carries up to 1024 connections to one server" <<<"$out"
  grep -qx "  RLIMIT_MEMLOCK allows 1 links: 1024 connections to one server with links ($want with per-connection channels)" <<<"$out"
  # The lines that were there before are unchanged.
  grep -qx "  one RDMA connection pins 2.0 MiB (2 x SDPSHIM_BUF_SIZE 32768 x SDPSHIM_BUF_COUNT 32)" <<<"$out"
  grep -qx "  connections per process: 4" <<<"$out"
}

@test "doctor: the count follows the geometry and the limit; a smaller SDPSHIM_PIN_BUDGET is not capped" {
  command -v setpriv >/dev/null || skip "setpriv is not installed"
  local per out
  per=$(conn_bytes 65536 16)
  out=$(ulimit -S -l 6000 && SDPSHIM_BUF_SIZE=65536 SDPSHIM_BUF_COUNT=16 SDPSHIM_PIN_BUDGET=3M \
        no_ipc_lock "$SDPSHIM_BIN" doctor)
  show "one connection: $per bytes" "$(grep -A12 '^Memory locking' <<<"$out")"
  [ "$per" -gt 2134016 ]                                  # not the default geometry's
  grep -qx "  RLIMIT_MEMLOCK allows $(( 6000 * 1024 / per )) connections with per-connection channels" <<<"$out"
  grep -qx "  pin budget: 3.0 MiB (3145728 bytes; SDPSHIM_PIN_BUDGET 3.0 MiB), $(( 3145728 / $(link_bytes 65536 64) )) links or $(( 3145728 / per )) connections with per-connection channels; past it new connections use TCP, reason resources" <<<"$out"
}

@test "doctor with CAP_IPC_LOCK: memlock allows any number, the budget is the default" {
  [ "$(id -u)" = 0 ] || skip "needs root for CAP_IPC_LOCK"
  local out
  out=$(ulimit -S -l 8192 && "$SDPSHIM_BIN" doctor)
  grep -qx "  RLIMIT_MEMLOCK allows unlimited connections with per-connection channels (CAP_IPC_LOCK)" <<<"$out"
  grep -q "^  pin budget: 256.0 MiB (268435456 bytes; the default 256.0 MiB), $(( 268435456 / $(link_bytes 32768 64) )) links or $(( 268435456 / $(conn_bytes 32768 32) )) connections" <<<"$out"
  grep -qx "  RLIMIT_MEMLOCK allows unlimited links" <<<"$out"
}

@test "SDPSHIM_PIN_BUDGET=bogus: one diagnostic line, the default, and the program runs" {
  run run_timeout 30 env SDPSHIM_PIN_BUDGET=bogus "$SDPSHIM_BIN" run -- "$PY" -c '
import socket
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
c.sendall(b"x" * 1000); got = b""
while len(got) < 1000: got += s.recv(4096)
print("ran", len(got))'
  show "$output"
  [ "$status" -eq 0 ]
  [ "$(grep -c . <<<"$output")" -eq 2 ]
  grep -qx "ran 1000" <<<"$output"
  grep -qx "sdpshim\[[0-9]*\]: warn: SDPSHIM_PIN_BUDGET='bogus' is not a size in bytes in \[0, 1125899906842624\] (a K, M or G suffix may follow the digits); using 268435456" <<<"$output"
  # doctor says the same once, and shows the default in effect.
  run run_timeout 30 env SDPSHIM_PIN_BUDGET=bogus "$SDPSHIM_BIN" doctor
  [ "$status" -eq 0 ]
  [ "$(grep -c "SDPSHIM_PIN_BUDGET='bogus'" <<<"$output")" -eq 1 ]
  grep -q "^  pin budget: .*; the default 256.0 MiB" <<<"$output"
}

@test "stat shows a live process's pin budget, pinned bytes and refusals (--json and the table)" {
  pair "$BATS_TEST_TMPDIR/ready" env SDPSHIM_PIN_BUDGET=3M
  show "$(cat "$BATS_TEST_TMPDIR/pair.err")"
  [ ! -s "$BATS_TEST_TMPDIR/pair.err" ]
  [ "$(stat_field "$PAIR_PID" pin_budget)" = 3145728 ]
  [ "$(stat_field "$PAIR_PID" pinned_bytes)" = 0 ]      # no RDMA here: nothing registered
  [ "$(stat_field "$PAIR_PID" budget_refusals)" = 0 ]
  [ "$(stat_field "$PAIR_PID" links)" = "[]" ]
  run run_timeout 30 "$SDPSHIM_BIN" stat -p "$PAIR_PID"
  show "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"pid $PAIR_PID $(basename "$PY"): 0 rdma, 2 tcp (loopback 2), negcache hits 0, pinned 0 of 3.0M, budget refusals 0"* ]]
  [[ "$output" != *"links:"* ]]                          # no live link: no links table
  run run_timeout 30 "$SDPSHIM_BIN" stat -p "$PAIR_PID" --bytes
  [[ "$output" == *", pinned 0 of 3145728, budget refusals 0"* ]]
}

@test "stat: a preloaded process under ulimit -l 8192 without CAP_IPC_LOCK has its budget capped at 8 MiB" {
  command -v setpriv >/dev/null || skip "setpriv is not installed"
  local ready=$BATS_TEST_TMPDIR/ready
  # capped.sh CMD...: CMD under an 8 MiB RLIMIT_MEMLOCK, without CAP_IPC_LOCK.
  cat >"$BATS_TEST_TMPDIR/capped.sh" <<'EOF'
#!/bin/bash
ulimit -S -l 8192 || exit 3
[ "$(id -u)" = 0 ] && exec setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock -- "$@"
exec "$@"
EOF
  chmod 755 "$BATS_TEST_TMPDIR/capped.sh"
  pair "$ready" "$BATS_TEST_TMPDIR/capped.sh"
  [ "$(stat_field "$PAIR_PID" pin_budget)" = 8388608 ]
  run run_timeout 30 "$SDPSHIM_BIN" stat -p "$PAIR_PID"
  [[ "$output" == *", pinned 0 of 8.0M, budget refusals 0"* ]]
}

# seg.py PATH PID UID: a segment image (base/stats_shm.h, version 6) for a
# live process that is not preloaded: one live connection, a budget of
# 8 MiB with 4268032 bytes pinned and 3 refusals, a live client link to
# 10.0.0.2:6379, and a link record with a role no writer uses.
write_seg_py() {
  cat >"$1" <<'PY'
import struct, sys
path, pid, uid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
by_reason = [0] * 32
hdr = struct.pack("<QIIiIQ64s3Q32QQQQIIQQQQ", 0x3154415453504453, 6, 2, pid, uid, 1700000000000,
                  b"linked", 0, 0, 1, *by_reason, 0, 0, 0, 3, 0, 8388608, 4268032, 3, 77)
def addr(a, port):
    return struct.pack("<HH16s", 2, port, bytes(a))
conn = (struct.pack("<IIiBBHBBH", 1, 2, 7, 1, 2, 0, 0, 0, 0) + addr((10, 0, 0, 1), 40000) +
        addr((10, 0, 0, 2), 6379) + bytes(4) + struct.pack("<13Q", 1, *([0] * 12)) + bytes(40))
def link(role, state=1):
    return (struct.pack("<IIBBH", 1, 2, role, state, 0) + addr((10, 0, 0, 1), 40001) +
            addr((10, 0, 0, 2), 6379) +
            struct.pack("<IQIIQIIQQQQQQQ", 0, 1700000000002, 3, 255, 1 << 20, 64, 5, 1000, 999,
                        123456, 654321, 9, 400, 2))
img = hdr + conn + bytes(208) + link(1) + link(9) + bytes(144)
assert len(hdr) == 440 and len(conn) == 208 and len(link(1)) == 144
with open(path, "wb") as f:
    f.write(img)
PY
}

@test "stat: a process's live links as a table and in --json; a link record out of range is skipped" {
  local seg pid
  sleep 60 3>&- &
  pid=$!
  echo "$pid" >"$BATS_TEST_TMPDIR/sleep.pid"
  write_seg_py "$BATS_TEST_TMPDIR/seg.py"
  seg=$SDPSHIM_RUN_DIR/sdpshim-$(id -u)-$pid.stats
  "$PY" "$BATS_TEST_TMPDIR/seg.py" "$seg" "$pid" "$(id -u)"
  chmod 600 "$seg"
  run run_timeout 30 "$SDPSHIM_BIN" stat -p "$pid"
  show "$output"
  [ "$status" -eq 0 ]
  [[ "$output" != *skipping* ]]
  grep -qx "links:" <<<"$output"
  grep -Eq "^ *PID +COMM +PEER +ROLE +STATE +STREAMS +PINNED +CREDITS +MSGS$" <<<"$output"
  grep -Eq "^ *$pid +linked +10\.0\.0\.2:6379 +client +up +3/255 +1\.0M +5/64 +1000/999$" <<<"$output"
  [ "$(grep -c "10.0.0.2:6379" <<<"$output")" -eq 2 ]     # the connection and one link
  [[ "$output" == *"pid $pid linked: 1 rdma, 0 tcp, negcache hits 0, pinned 4.1M of 8.0M, budget refusals 3, progress wakeups 77"* ]]
  run run_timeout 30 "$SDPSHIM_BIN" stat -p "$pid" --json
  [ "$status" -eq 0 ]
  "$PY" -c '
import json, sys
p = json.loads(sys.argv[1])["processes"][0]
assert (p["pin_budget"], p["pinned_bytes"], p["budget_refusals"]) == (8388608, 4268032, 3), p
assert p["progress_wakeups"] == 77, p
assert len(p["links"]) == 1, p["links"]
l = p["links"][0]
want = dict(role="client", state="up", local="10.0.0.1:40001", peer="10.0.0.2:6379", streams=3,
            streams_max=255, streams_opened=9, pinned_bytes=1048576, credits_total=64,
            credits_in_use=5, msgs_sent=1000, msgs_received=999, msgs_received_by_app=400,
            probes_sent=2,
            bytes_sent=123456,
            bytes_received=654321, opened_ms=1700000000002)
assert l == want, l' "$output"
}
