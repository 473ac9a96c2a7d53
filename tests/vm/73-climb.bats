#!/usr/bin/env bats
# VM suite, part 73: a stream that a failover moved to TCP climbs back to RDMA
# (issue 17, core/climb.c, docs/upgrade.md), both ends preloaded, on rxe0.
#
#  - link delete, then add: `rdma link delete` of the device under a paced
#    $BIG_STREAM stream (tests/progs/stream, up and down) moves it to TCP; the
#    delete must return within 1 s; `rdma link add` brings the device back and
#    both ends of the stream must be on RDMA again within 2 s of the add's
#    return (their stats' moved_ms, the wall clock of the climb, so the
#    measure does not hang on how fast a poll of `sdpshim stat` runs under
#    TCG), on a new RC QP (`rdma resource show qp`), and end byte-exact (SHA-256 against
#    tests/progs/streamref) with switches 2 (there and back) and climbs 1 on
#    both ends.
#  - refusal: the same with SDPSHIM_CLIMB=0 on the server: it answers the
#    client's climb with a NAK, the stream ends on TCP byte-exact, climbs 0.
#  - a forced QP error (SDPSHIM_DEBUG_FAIL_AFTER on the sender) with the device
#    still there: the stream climbs back at once, byte-exact.
#  - rules: climb=no on a server rule refuses as SDPSHIM_CLIMB=0 does; on a
#    client rule the client never tries; climb=yes beats SDPSHIM_CLIMB=0.
#  - liars (SDPSHIM_DEBUG_CLIMB_LIE on one end, the failure forced as above):
#    a server whose MAC is wrong, or that never answers, leaves the client's
#    stream on TCP, byte-exact; a client whose MAC is wrong, or a server whose
#    cut is out of the stream's window, is refused and its connection reset:
#    no byte is guessed (the receiver never reports a MISMATCH) and nothing
#    hangs.

load ../helpers
load vm_helpers

setup_file() {
  requires_rdma
  ref_digests_start "1 $BIG_STREAM"
}

teardown_file() { ref_digests_stop; }

setup() {
  vm_setup
  unset SDPSHIM_DEBUG_FAIL_AFTER SDPSHIM_CLIMB
  RESTORE_LINK=
}

teardown() {
  vm_teardown
  [ -z "${RESTORE_LINK:-}" ] || restore_link
}

stats_field_of() {
  "$PY" -S -c '
import json, os, sys
path, role, field = sys.argv[1:4]
lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
print(" ".join(str(c.get(field, "-")) for c in lines if c["role"] == role))' "$STATS" "$1" "$2"
}

# climb_case up|down [SERVER_ENV...]: the delete-then-add case; with server
# env (SDPSHIM_CLIMB=0) the stream must stay on TCP instead.
climb_case() {
  local dir=$1 field receiver port live crc=0 src=0 del back back_line got want refused=; shift
  [ $# -gt 0 ] && refused=1
  if [ "$dir" = up ]; then field=bytes_received receiver=server; else field=bytes_sent receiver=client; fi
  rxe_link_pick || true
  [ -n "$LINK_DEV" ]
  [ -n "$LINK_NETDEV" ]
  port=$(free_port)
  # A paced reader: the stream lasts long enough for the device to go and come back.
  start_bg server timeout -k 5 600 env SDPSHIM_LOG=info STREAM_READ_MAX=65536 STREAM_READ_PAUSE_US=4000 \
    "$@" "${PRE[@]}" "$PROGS/stream" -s "$port" -n 1
  stream_listening server "$port"
  qp_watch_start
  start_bg client timeout -k 5 600 env SDPSHIM_LOG=info STREAM_READ_MAX=65536 STREAM_READ_PAUSE_US=4000 \
    "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP" -p "$port" -b "$BIG_STREAM" -d "$dir" -m 64K
  live=$(live_rdma_wait "$port" "$field")
  show "before the delete: server path and $field: $live; RC QPs of stream: $(count_rc_qps stream)"
  [ "${live% *}" = rdma ]
  RESTORE_LINK=1
  LINK_ADDED_MS=
  link_delete_start "$T/linkdel.res"
  restore_link "$T/linkdel.res"
  RESTORE_LINK=
  del=$(cat "$T/linkdel.res" 2>/dev/null)
  if [ -z "$refused" ]; then
    wait_live server "$port" "rdma 1" 30 || true
  else
    sleep 5
  fi
  live="server: $(live_end server "$port" climbs switches), client: $(live_end client "$port" climbs switches)"
  wait_bg client || crc=$?
  wait_bg server || src=$?
  qp_watch_stop
  got=$(stream_digest "$receiver" "$T/$receiver.log" "$BIG_BYTES")
  want=$(ref_digest 1 "$BIG_STREAM")
  # Back on RDMA: the later of the two ends' last move (moved_ms, the wall
  # clock of the climb), against the moment `rdma link add` returned.
  back=$("$PY" -S -c 'import sys; m = [int(x) for x in sys.argv[2:] if x.isdigit()]
print(max(m) - int(sys.argv[1]) if len(m) == 2 and sys.argv[1].isdigit() else "none")' \
    "${LINK_ADDED_MS:-}" "$(stats_field_of client moved_ms)" "$(stats_field_of server moved_ms)")
  if [ -n "$refused" ]; then back_line="refused: both ends stay on TCP; live: $live"
  else back_line="both ends back on RDMA ${back} ms after rdma link add returned; live: $live"; fi
  show "rdma link delete $LINK_DEV: ${del:-none}" "$back_line" \
       "client (rc=$crc): $(bg_log client)" "server (rc=$src): $(bg_log server)" \
       "$receiver received sha256 ${got:-none}, reference $want" \
       "RC QPs of stream seen: $(qp_seen stream)" \
       "$(stats_lines "$STATS")" \
       "switches: client $(stats_field_of client switches), server $(stats_field_of server switches);" \
       "climbs: client $(stats_field_of client climbs), server $(stats_field_of server climbs);" \
       "$receiver received on TCP $(stats_field_of "$receiver" tcp_bytes_received)," \
       "by copy $(stats_field_of "$receiver" copy_bytes_received)," \
       "by zero-copy $(stats_field_of "$receiver" zcopy_bytes_received) of $BIG_BYTES"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "${del%% *}" = rc=0 ]
  del=${del#*ms=}
  [ "$del" -le 1000 ]
  [ -n "$got" ]
  [ "$got" = "$want" ]
  assert_exact_bytes "$STATS"
  if [ -z "$refused" ]; then
    [ "$(stats_field_of client switches)" = 2 ]
    [ "$(stats_field_of server switches)" = 2 ]
    # Bytes went each way on each path: RDMA before and after, TCP between.
    [ "$(stats_field_of "$receiver" tcp_bytes_received)" -gt 0 ]
    [ "$(stats_field_of "$receiver" tcp_bytes_received)" -lt "$BIG_BYTES" ]
    [ "$(stats_field_of "$receiver" copy_bytes_received)" -gt 0 ]
    [ "$back" != none ] && [ "$back" -ge 0 ] && [ "$back" -le 2000 ]
    [ "$(stats_field_of client climbs)" = 1 ]
    [ "$(stats_field_of server climbs)" = 1 ]
    [ "$(stats_lines "$STATS" path=rdma reason=none | wc -l)" -eq 2 ]
  else
    [ "$(stats_field_of client switches)" = 1 ]
    [ "$(stats_field_of server switches)" = 1 ]
    [ "$(stats_field_of client climbs)" = 0 ]
    [ "$(stats_field_of server climbs)" = 0 ]
    [ "$(stats_lines "$STATS" path=tcp reason=failover | wc -l)" -eq 2 ]
    grep -q "will not move this stream back to RDMA (refused)" "$T/client.log"
  fi
}

@test "climb: rdma link delete then add during a $(size_name "$BIG_STREAM") upload: back on RDMA within 2 s, byte-exact" {
  climb_case up
}

@test "climb: rdma link delete then add during a $(size_name "$BIG_STREAM") download: back on RDMA within 2 s, byte-exact" {
  climb_case down
}

@test "climb: a server with SDPSHIM_CLIMB=0 refuses: the stream stays on TCP, byte-exact" {
  climb_case up SDPSHIM_CLIMB=0
}

# fail_case EXPECT SERVER_ENV CLIENT_ENV [IO]: a $BIG_STREAM upload (writes of
# up to $FAIL_MSG, 64K by default; IO a stream -e mode) whose client
# forces its QP into the error state after 16 MiB; each *_ENV is a list of
# VAR=VALUE words (or "-").  With FAIL_DIR=down, a download whose server
# fails its QP so.  EXPECT: climb (back on RDMA, byte-exact), tcp (stays on
# TCP, byte-exact), reset (the connection is reset, no byte guessed).
fail_case() {
  local expect=$1 senv=() cenv=() io=() port crc=0 src=0 got want dir=${FAIL_DIR:-up} receiver=server
  local fail_after=SDPSHIM_DEBUG_FAIL_AFTER=$((16 << 20))
  [ "$2" = - ] || read -ra senv <<<"$2"
  [ "$3" = - ] || read -ra cenv <<<"$3"
  [ -z "${4:-}" ] || io=(-e "$4")
  if [ "$dir" = down ]; then  # the client reads, paced as the server is for an upload
    receiver=client senv+=("$fail_after") cenv+=(STREAM_READ_MAX=65536 STREAM_READ_PAUSE_US=2000)
  else
    cenv+=("$fail_after")
  fi
  port=$(free_port)
  start_bg server timeout -k 5 300 env SDPSHIM_LOG=info STREAM_READ_MAX=65536 STREAM_READ_PAUSE_US=2000 \
    "${senv[@]}" "${PRE[@]}" "$PROGS/stream" "${io[@]}" -s "$port" -n 1
  stream_listening server "$port"
  start_bg client timeout -k 5 300 env SDPSHIM_LOG=info \
    "${cenv[@]}" "${PRE[@]}" "$PROGS/stream" "${io[@]}" -c "$RXE_IP" -p "$port" -b "$BIG_STREAM" -d "$dir" \
    -m "${FAIL_MSG:-64K}"
  wait_bg client || crc=$?
  wait_bg server || src=$?
  got=$(stream_digest "$receiver" "$T/$receiver.log" "$BIG_BYTES")
  want=$(ref_digest 1 "$BIG_STREAM")
  show "expect: $expect" "client (rc=$crc): $(bg_log client)" "server (rc=$src): $(bg_log server)" \
       "$receiver received sha256 ${got:-none}, reference $want" "$(stats_lines "$STATS")" \
       "switches: client $(stats_field_of client switches), server $(stats_field_of server switches);" \
       "climbs: client $(stats_field_of client climbs), server $(stats_field_of server climbs)"
  run grep -q MISMATCH "$T/$receiver.log"
  [ "$status" -eq 1 ]
  case $expect in
    climb|tcp)
      [ "$crc" -eq 0 ]
      [ "$src" -eq 0 ]
      [ "$got" = "$want" ]
      assert_exact_bytes "$STATS"
      if [ "$expect" = climb ]; then
        [ "$(stats_field_of client switches)" = 2 ]
        [ "$(stats_field_of server switches)" = 2 ]
        [ "$(stats_field_of client climbs)" = 1 ]
        [ "$(stats_field_of server climbs)" = 1 ]
      else
        [ "$(stats_field_of client switches)" = 1 ]
        [ "$(stats_field_of server switches)" = 1 ]
        [ "$(stats_field_of client climbs)" = 0 ]
        [ "$(stats_field_of server climbs)" = 0 ]
      fi ;;
    reset)
      [ "$crc" -ne 0 ]
      [ "$src" -ne 0 ]
      [ -z "$got" ]
      [ "$(stats_field_of client climbs)" = 0 ]
      [ "$(stats_field_of server climbs)" = 0 ] ;;
  esac
}

@test "climb: a forced QP error with the device still there: the stream climbs back at once, byte-exact" {
  fail_case climb - -
  grep -q "the stream is back on RDMA" "$T/client.log"
}

@test "climb: the same with both ends in edge-triggered epoll: readiness follows the stream there and back" {
  fail_case climb - - epollet
}

@test "climb: the same with writes of up to 1 MiB (zero-copy before the failure and after the climb)" {
  FAIL_MSG=1M fail_case climb - -
  [ "$(stats_field_of client zcopy_bytes_sent)" -gt 0 ]
}

@test "climb: the same with both ends in poll()" {
  fail_case climb - - poll
}

@test "climb: a server whose climb MAC is wrong: the client keeps the stream on TCP, byte-exact" {
  fail_case tcp SDPSHIM_DEBUG_CLIMB_LIE=1 -
  grep -q "could not prove it holds this stream" "$T/client.log"
}

@test "climb: a server that never answers the climb: bounded attempts, the stream stays on TCP, byte-exact" {
  fail_case tcp SDPSHIM_DEBUG_CLIMB_LIE=3 "SDPSHIM_CONNECT_TIMEOUT_MS=1000 SDPSHIM_LOG=debug"
  grep -q "climb attempt over: no answer" "$T/client.log"
}

# The held carrier reads TCP, and so reports TCP's errors: a reset of the
# held stream's TCP connection makes poll() say POLLERR, and SO_ERROR must
# say ECONNRESET, once, as on a plain socket (before, SO_ERROR said 0 while
# poll() kept saying POLLERR: an event loop that asks SO_ERROR spun).
@test "climb: a stream held on TCP while the device is gone, whose TCP connection is reset: poll() says POLLERR, SO_ERROR says ECONNRESET once" {
  local port crc=0 src=0 before held killed line
  rxe_link_pick || true
  [ -n "$LINK_DEV" ]
  port=$(free_port)
  start_bg server timeout -k 5 200 env SDPSHIM_LOG=info "${PRE[@]}" "$PY" -S \
    "$BATS_TEST_DIRNAME/heldreset.py" server "$RXE_IP" "$port" "$T"
  wait_for_line "$T/server.log" '^heldreset: listening$' 30
  start_bg client timeout -k 5 200 env SDPSHIM_LOG=info "${PRE[@]}" "$PY" -S \
    "$BATS_TEST_DIRNAME/heldreset.py" client "$RXE_IP" "$port" "$T"
  wait_for_line "$T/server.log" '^heldreset: echoed$' 60
  before=$(live_channel client "$port")
  RESTORE_LINK=1
  link_delete_start "$T/linkdel.res"
  wait_live_channel client "$port" held 30 || true
  held=$(live_channel client "$port")
  killed=$(ss -K -t -n state established "( sport = :$port )" | grep -c ":$port" || true)
  touch "$T/go"
  wait_bg client || crc=$?
  wait_bg server || src=$?
  restore_link "$T/linkdel.res"
  RESTORE_LINK=
  line=$(bg_log client | grep '^heldreset: poll ' || true)
  show "client channel: '$before', after rdma link delete '$held'; ss -K: $killed socket(s)" \
       "client (rc=$crc): $(bg_log client | tr '\n' ';')" "server (rc=$src): $(bg_log server | tr '\n' ';')" \
       "$(stats_lines "$STATS")"
  [ "$before" = open ]
  [ "$held" = held ]
  [ "$killed" -eq 1 ]
  [ "$crc" -eq 0 ]
  [ "$line" = "heldreset: poll POLLERR=1 so_error=ECONNRESET then 0" ]
}

# A server that lets the attempt go when the PROVE arrives, as one that closed
# or forked with its CHAL out does: its release says it never took the PROVE.
# The client, reading a download, has put nothing on the new channel since
# its cut: it stays on TCP (before: it reset the connection).
@test "climb: a server that lets the attempt go at the PROVE: a client with nothing sent since its cut stays on TCP, byte-exact" {
  FAIL_DIR=down fail_case tcp SDPSHIM_DEBUG_CLIMB_LIE=4 -
  grep -q "let the stream's move back to RDMA go before answering" "$T/client.log"
}

# A server whose CHAL claims buffers larger than its link's slots (4 KiB):
# the client's messages on the new link are sized to the link's slots, not
# to the claim (before: 32 KiB messages copied into 4 KiB slots).
@test "climb: a server whose CHAL claims 1 MiB buffers over a link of 4 KiB slots: the stream climbs back, byte-exact" {
  fail_case climb "SDPSHIM_DEBUG_CLIMB_LIE=5 SDPSHIM_BUF_SIZE=4096" -
  grep -q "the stream is back on RDMA" "$T/client.log"
}

@test "climb: a client whose climb MAC is wrong is refused and its connection reset: no byte guessed" {
  fail_case reset - SDPSHIM_DEBUG_CLIMB_LIE=1
  grep -q "named this stream without its key; refused" "$T/server.log"
}

@test "climb: a server whose cut lies outside the stream's window: the client resets, no byte guessed" {
  fail_case reset SDPSHIM_DEBUG_CLIMB_LIE=2 -
  grep -q "is not in this stream's window" "$T/client.log"
}

# The rule option climb=yes|no (README "Configuration"): a server rule answers
# for its listener, a client rule for its connections; either beats
# SDPSHIM_CLIMB.
@test "climb: a server rule climb=no refuses the peer's climb: the stream stays on TCP, byte-exact" {
  printf 'use both server * *:* climb=no\n' >"$T/server.conf"
  fail_case tcp "SDPSHIM_CONFIG=$T/server.conf" -
  grep -q "will not move this stream back to RDMA (refused)" "$T/client.log"
}

@test "climb: a client rule climb=no: the client never tries, the stream stays on TCP, byte-exact" {
  printf 'use both client * *:* climb=no\n' >"$T/client.conf"
  fail_case tcp - "SDPSHIM_CONFIG=$T/client.conf"
  run grep -q "goes back to RDMA when it can" "$T/client.log"
  [ "$status" -eq 1 ]
  run grep -q "will not move this stream back to RDMA" "$T/client.log"
  [ "$status" -eq 1 ]
  # doctor's verdict for that peer says so; without the rule, the default.
  run env SDPSHIM_CONFIG="$T/client.conf" "$SDPSHIM_BIN" doctor "$RXE_IP"
  show "doctor with the rule: $(grep verdict <<<"$output")"
  [[ "$output" == *"verdict: try RDMA first"*"stays on TCP after a failover"* ]]
  run "$SDPSHIM_BIN" doctor "$RXE_IP"
  show "doctor without: $(grep verdict <<<"$output")"
  [[ "$output" == *"verdict: try RDMA first"*"back to RDMA after a failover"* ]]
}

@test "climb: a server rule climb=yes beats SDPSHIM_CLIMB=0: the stream climbs back, byte-exact" {
  printf 'use both server * *:* climb=yes\n' >"$T/server.conf"
  fail_case climb "SDPSHIM_CLIMB=0 SDPSHIM_CONFIG=$T/server.conf" -
}
