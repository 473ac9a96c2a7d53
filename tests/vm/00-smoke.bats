#!/usr/bin/env bats
# VM suite, part 1: the RDMA stack itself works (no sdpshim involved).
# Runs inside tests/vm/run-in-vm.sh (rxe0 on $RXE_IP); skips elsewhere unless
# SDPSHIM_STRICT=1, where a missing device is a failure.

load ../helpers

setup() {
  requires_rdma
  SMOKE=$PROGS/rdma_smoke
  [ -x "$SMOKE" ] || { echo "missing $SMOKE: run make first" >&2; return 1; }
}

teardown() {
  # Never leave a server behind for the next test.
  [ -n "${SRV_PID:-}" ] && kill "$SRV_PID" 2>/dev/null || true
  [ -n "${CLI_PID:-}" ] && kill "$CLI_PID" 2>/dev/null || true
}

@test "ibv_devices lists an rxe device" {
  run run_timeout 20 ibv_devices
  show "ibv_devices:" "$output"
  [ "$status" -eq 0 ]
  # Rows are "    <name>   <guid>"; the header is "device / node GUID".
  echo "$output" | grep -Eq '^[[:space:]]+rxe[0-9A-Za-z_]*[[:space:]]+[0-9a-f]{16}'
}

@test "rdma_smoke moves 64 MiB over rxe0 with matching SHA-256; RC QPs visible meanwhile" {
  local port srv cli qpfile
  port=$(free_port)
  srv=$BATS_TEST_TMPDIR/server.log
  cli=$BATS_TEST_TMPDIR/client.log
  qpfile=$BATS_TEST_TMPDIR/qp.txt

  run_timeout 90 "$SMOKE" server "$RXE_IP" "$port" >"$srv" 2>&1 3>&- &
  SRV_PID=$!
  wait_for_line "$srv" 'listening on' 20
  run_timeout 90 "$SMOKE" client "$RXE_IP" "$port" 64 >"$cli" 2>&1 3>&- &
  CLI_PID=$!

  # While the data moves, both ends' QPs must be listed as RC QPs owned by
  # rdma_smoke.  Poll until both show up or the client is gone.
  local seen=0
  while kill -0 "$CLI_PID" 2>/dev/null; do
    rdma resource show qp >"$qpfile" 2>&1 || true
    seen=$(grep -c 'type RC .*comm rdma_smoke' "$qpfile" || true)
    [ "$seen" -ge 2 ] && break
    sleep 0.05
  done

  local crc=0 src=0
  wait "$CLI_PID" || crc=$?
  # A client that failed early would leave the server waiting for its timeout.
  [ "$crc" -eq 0 ] || kill "$SRV_PID" 2>/dev/null || true
  wait "$SRV_PID" || src=$?
  CLI_PID= SRV_PID=
  show "rdma resource show qp (during the transfer):" "$(cat "$qpfile")" \
       "client (rc=$crc):" "$(cat "$cli")" "server (rc=$src):" "$(cat "$srv")"

  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "$seen" -ge 2 ]
  grep -q 'using device rxe' "$srv"
  grep -q 'using device rxe' "$cli"

  # The server's digest must equal the client's and an independent sha256sum
  # of the same seeded stream (so both ends agreeing on garbage cannot pass).
  local line got sent want
  line=$(grep -E '^rdma_smoke: received [0-9]+ bytes sha256=[0-9a-f]{64} MATCH$' "$srv")
  [ -n "$line" ]
  [[ "$line" == "rdma_smoke: received 67108864 bytes "* ]]
  got=$(sed -E 's/.*sha256=([0-9a-f]{64}).*/\1/' <<<"$line")
  sent=$(grep -oE 'sent 67108864 bytes sha256=[0-9a-f]{64}' "$cli" | sed 's/.*sha256=//')
  want=$("$SMOKE" gen 64 2>/dev/null | sha256sum | cut -d' ' -f1)
  show "digests: server $got, client $sent, sha256sum $want"
  [ "$got" = "$sent" ]
  [ "$got" = "$want" ]
}

@test "rdma_smoke reports MISMATCH and fails when the client corrupts one bit" {
  local port srv
  port=$(free_port)
  srv=$BATS_TEST_TMPDIR/server.log
  run_timeout 60 "$SMOKE" server "$RXE_IP" "$port" >"$srv" 2>&1 3>&- &
  SRV_PID=$!
  wait_for_line "$srv" 'listening on' 20
  run run_timeout 60 env RDMA_SMOKE_CORRUPT=1 "$SMOKE" client "$RXE_IP" "$port" 1
  local src=0
  wait "$SRV_PID" || src=$?
  SRV_PID=
  show "client (rc=$status): $output" "server (rc=$src):" "$(cat "$srv")"
  [ "$status" -ne 0 ]
  [ "$src" -ne 0 ]
  grep -Eq '^rdma_smoke: received 1048576 bytes sha256=[0-9a-f]{64} MISMATCH$' "$srv"
}
