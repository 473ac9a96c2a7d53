#!/usr/bin/env bats
# VM suite, part 50: zero-copy (SrcAvail/RDMA READ, SinkAvail/RDMA WRITE) over
# rxe0.  Every case checks the bytes end to end and reads the per-connection
# counters from the stats file: a case that quietly fell back to buffer copy
# (or to TCP) fails.  Cancel cases also check that the surviving process holds
# no memory region afterwards (`rdma resource show mr`).

load ../helpers
load vm_helpers

setup_file() {
  requires_rdma
  ref_digests_start "1 $BIG_STREAM"
}

teardown_file() { ref_digests_stop; }

setup() {
  vm_setup
  unset SDPSHIM_ZCOPY_THRESH
}

teardown() { vm_teardown; }

# zc_sum FIELD [KEY=VALUE...]: FIELD summed over the stats lines that match
zc_sum() {
  "$PY" -S - "$STATS" "$@" <<'EOF'
import json, sys
path, field, conds = sys.argv[1], sys.argv[2], [a.split("=", 1) for a in sys.argv[3:]]
total = 0
for line in open(path):
    rec = json.loads(line)
    if all(str(rec.get(k)) == v for k, v in conds):
        total += rec[field]
print(total)
EOF
}

# mr_count COMM: memory regions of processes named COMM, now
mr_count() {
  rdma resource show mr 2>/dev/null | grep -c "comm $1\( \|$\)" || true
}

# zc_stream DIR BYTES [stream args...]: one preloaded stream run on rxe0
zc_stream() {
  local dir=$1 bytes=$2 port crc=0 src=0; shift 2
  port=$(free_port)
  start_bg server timeout -k 5 600 "${PRE[@]}" "$PROGS/stream" -s "$port" -n 1
  wait_port "$RXE_IP" "$port"
  run_timeout 600 "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP" -p "$port" -b "$bytes" -d "$dir" \
    "$@" >"$T/client.out" 2>&1 || crc=$?
  wait_bg server || src=$?
  show "client (rc=$crc): $(cat "$T/client.out")" "server (rc=$src): $(bg_log server)" \
       "$(cat "$STATS")"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  assert_all_rdma "$STATS" stream
  assert_exact_bytes "$STATS"
}

# zc_share ROLE: percent of the bytes ROLE sent that went by zero-copy
zc_share() {
  local zc all
  zc=$(zc_sum zcopy_bytes_sent role="$1")
  all=$(zc_sum bytes_sent role="$1")
  echo $(( all > 0 ? zc * 100 / all : 0 ))
}

@test "zero-copy: $(size_name "$BIG_STREAM") in 1 MiB writes, sha256 = reference, >= 90% of bytes zero-copied" {
  zc_stream up "$BIG_STREAM" -m 1M -F
  local got want share
  got=$(sed -nE "s/^stream: server received $BIG_BYTES bytes sha256=([0-9a-f]{64}) OK\$/\\1/p" "$T/server.log")
  want=$(ref_digest 1 "$BIG_STREAM")
  share=$(zc_share client)
  show "received sha256 $got, reference $want; client zero-copied $share% of its bytes," \
       "ops $(zc_sum zcopy_ops role=client), cache hits $(zc_sum mr_cache_hits role=client)" \
       "misses $(zc_sum mr_cache_misses role=client)"
  [ -n "$got" ]
  [ "$got" = "$want" ]
  [ "$share" -ge 90 ]
  # (The receiver counts as zero-copy only READs straight into the app's buffer;
  # READs into its staging buffer are followed by a copy and count as copied.)
  # One 1 MiB buffer, reused: registered once, then found in the cache (more
  # than 900 hits in 1,024 writes, at any size: 225 for 256 MiB).
  [ "$(zc_sum mr_cache_hits role=client)" -gt $(( BIG_BYTES / (1 << 20) * 900 / 1024 )) ]
}

@test "zero-copy: 64 MiB server -> client in 1 MiB writes, >= 90% zero-copied" {
  zc_stream down 64M -m 1M -F
  show "server zero-copied $(zc_share server)% of its bytes"
  grep -qE '^stream: client received 67108864 bytes sha256=[0-9a-f]{64} OK$' "$T/client.out"
  [ "$(zc_share server)" -ge 90 ]
}

@test "zero-copy: threshold above the write size moves 0 bytes by zero-copy, stream byte-exact" {
  export SDPSHIM_ZCOPY_THRESH=2097152
  zc_stream up 32M -m 1M -F
  grep -qE '^stream: server received 33554432 bytes sha256=[0-9a-f]{64} OK$' "$T/server.log"
  [ "$(zc_sum zcopy_bytes_sent)" -eq 0 ]
  [ "$(zc_sum zcopy_ops)" -eq 0 ]
  [ "$(zc_sum copy_bytes_sent role=client)" -eq "$(zc_sum bytes_sent role=client)" ]
}

@test "zero-copy: SDPSHIM_ZCOPY_THRESH=0 turns it off, stream byte-exact" {
  export SDPSHIM_ZCOPY_THRESH=0
  zc_stream both 16M -m 1M -F
  [ "$(zc_sum zcopy_bytes_sent)" -eq 0 ]
  [ "$(zc_sum zcopy_bytes_received)" -eq 0 ]
  [ "$(zc_sum mr_cache_misses)" -eq 0 ]
}

@test "zero-copy: a config rule sets the threshold per role (client off, server default)" {
  echo "use both client stream *:* zcopy_thresh=0" >"$T/sdpshim.conf"
  export SDPSHIM_CONFIG=$T/sdpshim.conf
  zc_stream both 16M -m 1M -F
  show "client zero-copied $(zc_sum zcopy_bytes_sent role=client), server $(zc_sum zcopy_bytes_sent role=server)"
  [ "$(zc_sum zcopy_bytes_sent role=client)" -eq 0 ]
  [ "$(zc_sum zcopy_bytes_sent role=server)" -gt 0 ]
}

@test "zero-copy: iperf3 -l 1M, received bytes sha256-equal to the file sent, >= 90% zero-copied" {
  local port in=$T/in.bin out=$T/out.bin crc=0
  head -c $((64 << 20)) /dev/urandom >"$in"
  port=$(free_port)
  start_bg iperfs timeout -k 5 120 "${PRE[@]}" iperf3 -s -1 -p "$port" -F "$out"
  wait_port "$RXE_IP" "$port"
  run_timeout 120 "${PRE[@]}" iperf3 -c "$RXE_IP" -p "$port" -l 1M -F "$in" >"$T/iperfc.out" 2>&1 || crc=$?
  wait_bg iperfs || true
  local a b
  a=$(sha256sum <"$in" | cut -c1-64); b=$(sha256sum <"$out" | cut -c1-64)
  show "client rc=$crc: $(tail -5 "$T/iperfc.out")" "sent $a" "got  $b ($(stat -c %s "$out") bytes)" \
       "$(stats_lines "$STATS")"
  [ "$crc" -eq 0 ]
  [ "$a" = "$b" ]
  assert_all_rdma "$STATS" iperf3
  # The data connection is the one that sent the most; its share must be >= 90%.
  local share
  share=$("$PY" -S - "$STATS" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
data = max((r for r in recs if r["role"] == "client"), key=lambda r: r["bytes_sent"])
print(data["zcopy_bytes_sent"] * 100 // max(data["bytes_sent"], 1))
EOF
)
  show "data connection zero-copied $share%"
  [ "$share" -ge 90 ]
}

# zc_cache_case CASE: 24 blocks of 1 MiB, the sender changes the buffer's pages
# between blocks as CASE says; the receiver checks every block's pattern.  The
# sender writes once its end shows path=rdma: blocks written before the channel
# opened go by copy on TCP, and under load that was up to five of them.
zc_cache_case() {
  local kase=$1 port crc=0 rrc=0 wrc=0
  port=$(free_port)
  start_bg recv timeout -k 5 300 "${PRE[@]}" "$PROGS/zctest" recv "$port" 24 1048576
  wait_port "$RXE_IP" "$port"
  start_bg send timeout -k 5 300 env ZCTEST_GO_FILE="$T/go" "${PRE[@]}" "$PROGS/zctest" send \
    "$RXE_IP" "$port" 24 1048576 "$kase"
  bg_wait_line send '^zctest: connected' 60 && wait_live_path client "$port" rdma 60 || wrc=$?
  touch "$T/go"
  wait_bg send || crc=$?
  wait_bg recv || rrc=$?
  show "sender (rc=$crc, path wait rc=$wrc): $(bg_log send)" "receiver (rc=$rrc): $(bg_log recv)" \
       "$(stats_lines "$STATS")" \
       "zero-copied $(zc_sum zcopy_bytes_sent role=client) of $(zc_sum bytes_sent role=client)," \
       "cache hits $(zc_sum mr_cache_hits role=client) misses $(zc_sum mr_cache_misses role=client)"
  [ "$wrc" -eq 0 ]
  [ "$crc" -eq 0 ]
  [ "$rrc" -eq 0 ]
  grep -q "received 24 blocks of 1048576 bytes: OK" "$T/recv.log"
  assert_all_rdma "$STATS" zctest
  [ "$(zc_sum zcopy_bytes_sent role=client)" -ge $((20 << 20)) ]
}

# No send found old pages in the cache (no hit), and zero-copy carried the
# blocks (a miss each).  The sender starts on the open channel, so each of the
# 24 blocks is one zero-copy operation; 22 leaves room for a block that a short
# send window splits into copy and zero-copy.
no_stale_hits() {
  [ "$(zc_sum mr_cache_hits role=client)" -eq 0 ]
  [ "$(zc_sum mr_cache_misses role=client)" -ge 22 ]
}

@test "zero-copy cache: the same buffer reused hits the cache" {
  zc_cache_case same
  [ "$(zc_sum mr_cache_hits role=client)" -ge 22 ]
}

@test "zero-copy cache: munmap and mmap again at the same address: every block correct, no stale hit" {
  zc_cache_case munmap
  # Each munmap dropped the registration: every zero-copied block needed a new
  # one, and no send found the old pages in the cache.
  no_stale_hits
}

@test "zero-copy cache: free and malloc again (same address reused): every block correct" {
  zc_cache_case free
  no_stale_hits
}

@test "zero-copy cache: realloc of a buffer just sent: every block correct" {
  zc_cache_case realloc
  no_stale_hits
}

@test "zero-copy cache: madvise(MADV_DONTNEED) between sends: every block correct" {
  zc_cache_case madvise
  no_stale_hits
}

# cancel_case HOW: a 128 MiB single write (one SrcAvail) to a receiver that
# either closes after reading 1 MiB (HOW=close) or is SIGKILLed while READs run
# (HOW=kill).  The sender must fail its write with EPIPE/ECONNRESET promptly,
# and once it closed, hold no MR.
cancel_case() {
  local how=$1 port t0 ms crc=0 args=()
  [ "$how" = close ] && args=(1048576)
  port=$(free_port)
  # 32 KiB reads, below the threshold: the receiver never offers a sink, so the
  # sender's SrcAvail is served by RDMA READs into the receiver's staging buffer.
  # HOW=kill paces the reader (1 ms a read, 128 MiB in 4 s or more): unpaced,
  # the receiver once had all but a few MB when the kill landed, the sender's
  # rest fit in its TCP send buffer after the failover, and the reset came at
  # its read of the verdict instead (kernel TCP does the same; not this case).
  local pace=()
  [ "$how" = kill ] && pace=(ZCTEST_READ_PAUSE_US=1000)
  start_bg recv timeout -k 5 120 env ZCTEST_READ_CHUNK=32768 "${pace[@]}" "${PRE[@]}" "$PROGS/zctest" recv "$port" 1 134217728 "${args[@]}"
  wait_port "$RXE_IP" "$port"
  start_bg send timeout -k 5 120 env ZCTEST_HOLD_S=6 "${PRE[@]}" "$PROGS/zctest" send "$RXE_IP" "$port" 1 134217728 same
  if [ "$how" = kill ]; then
    # Wait until the receiver holds the connection on RDMA and has taken its
    # first bytes, then kill it mid-transfer.  (A fixed second was too long
    # once: the receiver had 122 MB of the 128 MiB, and a receiver that dies
    # after the last READ is not this case.)
    local i
    for i in $(seq 1 100); do
      "$SDPSHIM_BIN" stat --json 2>/dev/null | grep -q '"role":"server","local":"[0-9.]*:'"$port"'".*"path":"rdma"' && break
      sleep 0.1
    done
    # The receiving stream's own count (a link's record counts its control
    # messages too, from the start).
    for i in $(seq 1 200); do
      "$SDPSHIM_BIN" stat --json 2>/dev/null | "$PY" -S -c '
import json, sys
port = sys.argv[1]
for p in json.load(sys.stdin)["processes"]:
    for c in p["connections"]:
        if c.get("role") == "server" and c.get("local", "").endswith(":" + port) and c["bytes_received"] > 0:
            sys.exit(0)
sys.exit(1)' "$port" 2>/dev/null && break
      sleep 0.05
    done
    show "live before kill: $("$SDPSHIM_BIN" stat --json 2>/dev/null)"
    pkill -9 -f "^[^ ]*zctest recv $port"
  fi
  t0=$(now_ms)
  wait_for_line "$T/send.log" 'write of block 0 failed' 30 >/dev/null || true
  ms=$(( $(now_ms) - t0 ))
  sleep 1
  local mrs
  mrs=$(mr_count zctest)
  show "sender: $(bg_log send)" "receiver: $(bg_log recv)" "error after $ms ms; MRs of zctest now: $mrs" \
       "$(rdma resource show mr 2>&1 | head -20)"
  grep -qE 'write of block 0 failed: (Connection reset by peer|Broken pipe)' "$T/send.log"
  [ "$ms" -lt 10000 ]
  # The sender is still alive (holding for 6 s), its socket closed: no MR left.
  kill -0 "$(cat "$T/send.pid")"
  [ "$mrs" -eq 0 ]
  wait_bg send || crc=$?
  [ "$crc" -eq 3 ]
  [ "$(zc_sum zcopy_ops role=client)" -ge 1 ]
  # Killed mid-READ: the sender's buffer was not (fully) taken.
  if [ "$how" = kill ]; then
    [ "$(zc_sum zcopy_bytes_sent role=client)" -lt 134217728 ]
  fi
}

@test "zero-copy cancel: the receiver closes with a SrcAvail pending: sender gets a reset, no MR left" {
  cancel_case close
  grep -q "read 1048576 bytes, closing with data unread" "$T/recv.log"
}

@test "zero-copy cancel: the receiver is killed during RDMA READs: sender gets a reset, no MR left" {
  cancel_case kill
}

# zcpair_case MODE BYTES: tests/vm/zcpair.py server and client, both preloaded,
# BYTES from the client once its connection is on RDMA.  Checks both exit 0 and
# that neither end moved to TCP (a link failed by the zero-copy answer bound
# would move it, and still deliver every byte).
zcpair_case() {
  local mode=$1 bytes=$2 port src=0 crc=0 wrc=0
  port=$(free_port)
  start_bg server timeout -k 5 120 "${PRE[@]}" "$PY" -S "$BATS_TEST_DIRNAME/zcpair.py" \
    server "$RXE_IP" "$port" "$mode"
  wait_port "$RXE_IP" "$port"
  start_bg client timeout -k 5 120 env ZCPAIR_GO_FILE="$T/go" "${PRE[@]}" "$PY" -S \
    "$BATS_TEST_DIRNAME/zcpair.py" client "$RXE_IP" "$port" "$mode" "$bytes"
  wait_live_path server "$port" rdma 60 || wrc=$?
  touch "$T/go"
  wait_bg client || crc=$?
  wait_bg server || src=$?
  show "zcpair $mode: path wait rc=$wrc" "server (rc=$src): $(bg_log server)" \
       "client (rc=$crc): $(bg_log client)" "$(stats_lines "$STATS")"
  [ "$wrc" -eq 0 ]
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  grep -q "^zcpair: client $mode ok" "$T/client.log"
  run grep -h "failing the RDMA channel\|moving the stream to TCP" "$T/client.log" "$T/server.log"
  [ "$status" -eq 1 ] # no such line (bats does not fail on a negated command)
  assert_all_rdma "$STATS" python3
  [ "$(zc_sum switches)" -eq 0 ]
}

# A client that writes 1 MiB in one blocking send before it reads, to a server
# that echoes it in 64 KiB reads: kernel TCP's buffers absorb it.  Here the
# server's echo fills the client's receive ring while the client's send waits
# for the server to take its SrcAvail; the server's answer (RdmaRdCompl) may
# take its last credit.  Before, the pair waited for each other forever.
# (2 MiB still waits: README, limits.)
@test "zero-copy: a blocking 1 MiB send to an echo server that answers before the client reads: no deadlock, byte-exact" {
  zcpair_case echo 1048576
  [ "$(zc_sum zcopy_ops role=client)" -ge 1 ]
}

# Issue 13, finding 1: a SrcAvailCancel that crosses a direct READ.  The
# non-blocking writer cancels 5 ms after each SrcAvail, while the blocking
# reader's 1 MiB reads READ straight into its buffer; the receiver must answer
# with exactly the bytes it READ, so no byte arrives twice or goes missing.
# (A 1 MiB READ takes over 10 ms on this bed, so the cancel still crosses it.
# With 1 ms, on an idle host the cancel won before the reader's thread woke:
# 0 of 245 sources READ, where loaded hosts READ 65-88 MB.  With 5 ms a loaded
# host sometimes READ nothing either: CI54 and CI67, 58 sources all cancelled
# unread.  Such a run has not tested the crossing, so the case runs again with
# a longer wait, still shorter than a READ; every run must be byte-exact.)
@test "zero-copy cancel: a non-blocking writer cancelling after 5 ms (8, then 12, if it READ nothing) against a blocking reader, $(size_name "$BIG_STREAM") byte-exact" {
  local got want wait_ms
  want=$(ref_digest 1 "$BIG_STREAM")
  for wait_ms in 5 8 12; do
    : >"$STATS"
    export SDPSHIM_ZCOPY_NB_WAIT_MS=$wait_ms
    zc_stream up "$BIG_STREAM" -m 4M -e epoll
    got=$(sed -nE "s/^stream: server received $BIG_BYTES bytes sha256=([0-9a-f]{64}) OK\$/\\1/p" \
      "$T/server.log")
    show "cancel after $wait_ms ms: received sha256 ${got:-none}, reference $want;" \
         "client: ops $(zc_sum zcopy_ops role=client), cancels $(zc_sum zcopy_cancels role=client)," \
         "zero-copy bytes $(zc_sum zcopy_bytes_sent role=client); server: READ bytes" \
         "$(zc_sum zcopy_bytes_received role=server)"
    [ -n "$got" ]
    [ "$got" = "$want" ]
    [ "$(zc_sum zcopy_bytes_sent role=client)" -eq 0 ] || break
  done
  # The case is the crossing: cancels happened, and the reader READ bytes of the
  # sources they cancelled.  (Under TCG the cancel often lands before the
  # reader's thread wakes, so most of its READs go to the staging buffer; the
  # unit harness, tests/unit/test_zcopy.c, times the direct READ exactly.)
  [ "$(zc_sum zcopy_cancels role=client)" -ge 1 ]
  [ "$(zc_sum zcopy_bytes_sent role=client)" -gt 0 ]
}

# bad_peer_case N WHO: the end WHO (send|recv) runs with SDPSHIM_DEBUG_ZC_CORRUPT=N
# and advertises a range the protocol forbids; the other end must abort with a
# logged reason, both ends must fail promptly (no hang), and no block may be
# delivered wrong.
bad_peer_case() {
  local n=$1 who=$2 want=$3 port rrc=0 src=0 renv=() senv=()
  [ "$who" = recv ] && renv=(SDPSHIM_DEBUG_ZC_CORRUPT="$n") || senv=(SDPSHIM_DEBUG_ZC_CORRUPT="$n")
  # SrcAvail cases: 32 KiB reads (no sink), so the sender announces a source.
  [ "$who" = send ] && renv+=(ZCTEST_READ_CHUNK=32768)
  # The sender waits a moment before its first write.  SinkAvail case: the
  # receiver's blocking 1 MiB read must offer its sink first (the channel
  # opens for both at about the same moment since the binding handshake;
  # before it, the server had a round trip's head start).  SrcAvail cases:
  # blocks written before the channel is open go by copy, so under load all
  # 8 could, and no SrcAvail would carry the lie (seen once: rc 0 both ends).
  senv+=(ZCTEST_SEND_DELAY_MS=500)
  port=$(free_port)
  start_bg recv timeout -k 5 60 env "${renv[@]}" "${PRE[@]}" "$PROGS/zctest" recv "$port" 8 1048576
  wait_port "$RXE_IP" "$port"
  run_timeout 60 env "${senv[@]}" "${PRE[@]}" "$PROGS/zctest" send "$RXE_IP" "$port" 8 1048576 same \
    >"$T/send.out" 2>&1 || src=$?
  wait_bg recv || rrc=$?
  show "sender rc=$src: $(cat "$T/send.out")" "receiver rc=$rrc: $(bg_log recv)"
  [ "$src" -ne 0 ]
  [ "$src" -ne 124 ]
  [ "$rrc" -ne 0 ]
  [ "$rrc" -ne 124 ]
  cat "$T/send.out" "$T/recv.log" | grep -q "peer violated the zero-copy protocol ($want); aborting"
  if grep -q "wrong" "$T/recv.log"; then return 1; fi
}

@test "zero-copy validation: a SrcAvail ahead of the stream aborts the connection with a logged reason" {
  bad_peer_case 1 send "SrcAvail out of place"
}

@test "zero-copy validation: a SrcAvail longer than 1 GiB aborts the connection with a logged reason" {
  bad_peer_case 2 send "SrcAvail out of place"
}

@test "zero-copy validation: a SinkAvail ahead of the stream aborts the connection with a logged reason" {
  bad_peer_case 3 recv "SinkAvail out of place"
}
