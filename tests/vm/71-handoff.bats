#!/usr/bin/env bats
# VM suite, part 71: the fork handoff (SDPSHIM_FORK=handoff, the default;
# preload/fork_handoff.c).  A fork leaves the parent's streams on RDMA; one
# moves to TCP only when a process that inherited it uses it, or when the
# parent closes it or exits while a child holds it.
#
#  - tests/vm/forkshare.py: one accepted connection, on RDMA (the test waits
#    for path=rdma in `sdpshim stat` before it lets the server fork), then
#    (childclimbs) the child, alone with it once the parent closed its copy,
#    brings it back to RDMA on a channel of its own (docs/upgrade.md, "Fork"),
#    unless the peer lies in the challenge or refuses (no rendezvous port);
#    parent and child both write (every record once, in its writer's order);
#    a child that never touches it (the parent's stream stays on RDMA, no
#    switch); the child serves and the parent closes (the stream moves);
#    the parent exits (exit handlers move it) and the child serves; the
#    parent is SIGKILLed (the child's use fails with EIO, no byte arrives
#    that no one wrote).
#  - redis-server with `save 1 1` under redis-benchmark: BGSAVE forks every
#    second, and every client connection stays on RDMA.
#  - SDPSHIM_FORK=switch still moves every stream at the fork.

load ../helpers
load vm_helpers

setup_file() { requires_rdma; }

setup() { vm_setup; }

teardown() { vm_teardown; }

# forkshare_case MODE: tests/vm/forkshare.py server and client, both preloaded.
# Sets SRV_LOG and CLI_LOG (their outputs); checks both exit 0.
forkshare_case() {
  local mode=$1 port src=0 crc=0 wrc=0
  port=$(free_port)
  local senv=(${SERVER_ENV:-}) # the server's own settings
  start_bg server timeout -k 5 180 env "${senv[@]}" "${PRE[@]}" "$PY" -S "$BATS_TEST_DIRNAME/forkshare.py" \
    server "$RXE_IP" "$port" "$T" "$mode"
  wait_port "$RXE_IP" "$port"
  local cenv=(${CLIENT_ENV:-}) # the client's own settings (a liar, a refusal)
  start_bg client timeout -k 5 180 env "${cenv[@]}" "${PRE[@]}" "$PY" -S \
    "$BATS_TEST_DIRNAME/forkshare.py" client "$RXE_IP" "$port" "$mode"
  bg_wait_for_file "$T/accepted" 60 && wait_live_path server "$port" rdma 60 || wrc=$?
  touch "$T/go"
  if [ "$mode" = parentkill ]; then
    bg_wait_for_file "$T/parent.pid" 30 || true
    sleep 0.5 # the fork is done and the child waits for go2
    kill -KILL "$(cat "$T/parent.pid")" 2>/dev/null || true
    touch "$T/go2"
  fi
  wait_bg server || src=$?
  wait_bg client || crc=$?
  # A killed parent's child still runs: its last line ends the case.
  [ "$mode" != parentkill ] || wait_count "$T/server.log" '^forkshare: ' 1 60 ||
    true
  SRV_LOG=$(bg_log server)
  CLI_LOG=$(bg_log client)
  show "forkshare $mode: path wait rc=$wrc" "server (rc=$src): $SRV_LOG" "client (rc=$crc): $CLI_LOG" \
       "$(stats_lines "$STATS")"
  [ "$wrc" -eq 0 ]
  [ "$crc" -eq 0 ]
  if [ "$mode" = parentkill ]; then
    [ "$src" -eq 137 ] || [ "$src" -eq 0 ] # the parent was killed; its child printed below
  else
    [ "$src" -eq 0 ]
  fi
}

# child_on_tcp: the forked child's one stats line is on TCP, moved there
# for the fork (its counters start at the fork: no switch of its own)
child_on_tcp() {
  local lines
  lines=$(stats_lines "$STATS" role=server path=tcp reason=forked climbs=0)
  show "the child's line: $lines"
  [ "$(grep -c . <<<"$lines")" -eq 1 ]
}

# claim_waited_for_close: the owner's one claim came before the fork that
# made the claimer had returned, waited for that, then for the owner's
# close, which came (SDPSHIM_LOG=debug in the server)
claim_waited_for_close() {
  local line fork_ms
  line=$(grep "fork: a claim waited" <<<"$SRV_LOG")
  show "the claim's wait: $line"
  [ "$(grep -c . <<<"$line")" -eq 1 ]
  grep -q ": closed$" <<<"$line"
  fork_ms=$(sed -n 's/.*claim waited \([0-9]*\) ms for the fork.*/\1/p' <<<"$line")
  [ "${fork_ms:-0}" -gt 0 ]
}

# child_climbs_case [waited]: childclimbs (SERVER_ENV as set): the client
# and the child end back on RDMA, most bytes there (the parent's line,
# written at its close, is the one without a climb); "waited": the claim
# waited for the fork's return and the close (claim_waited_for_close)
child_climbs_case() {
  forkshare_case childclimbs
  grep -q "^forkshare: client childclimbs ok" <<<"$CLI_LOG"
  grep -q "^forkshare: server childclimbs ok (child)" <<<"$SRV_LOG"
  [ "${1:-}" != waited ] || claim_waited_for_close
  assert_climbed_share 1 80 role=client
  assert_climbed_share 1 80 role=server climbs=1
}

# bg_wait_for_file PATH SECS
bg_wait_for_file() {
  local until=$(( $(date +%s) + $2 ))
  until [ -e "$1" ]; do
    [ "$(date +%s)" -lt "$until" ] || { echo "no $1 after $2 s" >&2; return 1; }
    sleep 0.05
  done
}

# client_line FIELD: FIELD of the client's one stats line
client_line() {
  "$PY" -S -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cl = [c for c in lines if c["role"] == "client"]
print(cl[0].get(sys.argv[2]) if len(cl) == 1 else "lines=%d" % len(cl))' "$STATS" "$1"
}

# assert_stayed_on_rdma: the client's one stats line is on RDMA with no
# switch, and every line of python3 is on RDMA, paired
assert_stayed_on_rdma() {
  [ "$(client_line path)" = rdma ]
  [ "$(client_line switches)" = 0 ]
  assert_all_rdma "$STATS" python3
}

@test "handoff: parent and child both write on one socket after fork: every record once, in writer order" {
  # The fork climb is on (the default): the stream could climb, were it not shared.
  SERVER_ENV=SDPSHIM_LOG=info forkshare_case both
  grep -q "^forkshare: client both ok: 4000 records each, in writer order" <<<"$CLI_LOG"
  # The first write of the child moved the stream to TCP, from the parent,
  # which still held it: no climb, and the parent says why.
  assert_switched forked 1 role=client climbs=0
  grep -q "fork: a child's stream stays on TCP: this process still held its copy" <<<"$SRV_LOG"
}

@test "handoff: a child that never touches the socket (redis BGSAVE) leaves it on RDMA, no switch" {
  forkshare_case childonly
  grep -q "^forkshare: client childonly ok" <<<"$CLI_LOG"
  assert_stayed_on_rdma
}

# A rogue descendant: any process forked from the owner can write to its
# request socket.  What it gains by lying there: nothing.  Malformed
# messages are dropped with one diagnostic, forged claims are refused, a
# flood of holder reports costs the owner no descriptors, and the owner's
# stream stays on RDMA, byte-exact.
@test "handoff: a child that lies on the owner's request socket (junk, forged claims, 3000 holder reports) gains nothing" {
  forkshare_case rogue
  grep -q "^forkshare: server rogue child: 1 request socket(s), 4 forged claims refused" <<<"$SRV_LOG"
  grep -q "^forkshare: server rogue ok" <<<"$SRV_LOG"
  grep -q "a malformed request on the fork handoff socket was ignored" <<<"$SRV_LOG"
  [ "$(grep -c "malformed request on the fork handoff socket" <<<"$SRV_LOG")" -eq 1 ]
  grep -q "^forkshare: client rogue ok" <<<"$CLI_LOG"
  assert_stayed_on_rdma
}

@test "handoff: fork-per-connection (the parent closes, the child takes 1 MiB at once, SHA-256 checked): byte-exact on TCP with SDPSHIM_CLIMB_FORK=0" {
  export SDPSHIM_CLIMB_FORK=0
  forkshare_case childserves
  grep -q "^forkshare: client childserves ok" <<<"$CLI_LOG"
  grep -q "^forkshare: server childserves ok (child)" <<<"$SRV_LOG"
  # Without the fork climb it stays on TCP, moved there for the fork.
  assert_switched forked 1 role=client
}

@test "handoff: fork-per-connection, a long-lived stream: the child, alone with it, brings it back to RDMA (climb), every echo round compared" {
  child_climbs_case
}

@test "handoff: the child claims before its parent's fork() has returned (a late fork handler, 400 ms): it still gets the ticket and climbs, every echo round compared" {
  # The parent's fork() returns 400 ms after the child is about to use the
  # socket: past the owner's 250 ms wait for its close, which counts from
  # the fork's return, waited for first.  The parent closes right after.
  SERVER_ENV="FORKSHARE_FORK_RETURN_MS=400 SDPSHIM_LOG=debug" child_climbs_case waited
}

@test "handoff: the claim finds the socket mid-close, out of the parent's fd table and not yet kept for the child: it looks again, and the child gets the ticket and climbs" {
  # The claim comes during the late fork return (300 ms after the child
  # is about to use the socket) and waits; the
  # parent's close then spends 60 ms between its descriptor and the orphan
  # the child's stream is kept as (SDPSHIM_DEBUG_ORPHAN_DELAY_MS).
  SERVER_ENV="FORKSHARE_FORK_RETURN_MS=300 SDPSHIM_DEBUG_ORPHAN_DELAY_MS=60 SDPSHIM_LOG=debug" \
    child_climbs_case waited
}

@test "handoff: a peer that lies in the fork climb's challenge (its MAC): the child refuses it, the stream stays on TCP, every echo round compared" {
  CLIENT_ENV="SDPSHIM_DEBUG_CLIMB_LIE=1" forkshare_case childclimbs
  grep -q "^forkshare: client childclimbs ok" <<<"$CLI_LOG"
  grep -q "^forkshare: server childclimbs ok (child)" <<<"$SRV_LOG"
  grep -q "could not prove it holds this stream" <<<"$SRV_LOG"
  # Nobody climbed: the child asked once, found the answer forged, and stayed.
  assert_switched forked 1 role=client climbs=0
  child_on_tcp
}

@test "handoff: a peer that refuses climbs (SDPSHIM_CLIMB=0: no rendezvous port) keeps a forked child's stream on TCP, every echo round compared" {
  CLIENT_ENV="SDPSHIM_CLIMB=0" forkshare_case childclimbs
  grep -q "^forkshare: client childclimbs ok" <<<"$CLI_LOG"
  grep -q "^forkshare: server childclimbs ok (child)" <<<"$SRV_LOG"
  assert_switched forked 1 role=client climbs=0
  child_on_tcp
}

@test "handoff: a grandchild claims before its parent's report of it arrives, the parent still holding the socket: no ticket (by pid, not by count), every echo round compared" {
  # The child's report of its own child to the owner goes 400 ms late: the
  # grandchild's claim comes first, when the owner's one live sharer is the
  # child.  Counted, that one sharer was taken for the claimer.
  SERVER_ENV="SDPSHIM_LOG=info SDPSHIM_DEBUG_HOLDER_DELAY_MS=400" forkshare_case grandchild
  grep -q "^forkshare: client grandchild ok" <<<"$CLI_LOG"
  grep -q "^forkshare: server grandchild ok (grandchild)" <<<"$SRV_LOG"
  grep -q "another process may hold the socket" <<<"$SRV_LOG"
  assert_switched forked 1 role=client climbs=0
  # The grandchild's line (it took the echo) is on TCP, and nobody climbed.
  [ "$(stats_lines "$STATS" role=server path=tcp reason=forked climbs=0 bytes_received=6553600 |
       wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" climbs=1 | wc -l)" -eq 0 ]
}

@test "handoff: a forked child execs on the inherited socket while the parent keeps its copy: moved for the exec without waiting for a ticket, 1 MiB SHA-256 checked" {
  # The fork climb is on (the default): a forked child's claim would wait.
  SERVER_ENV=SDPSHIM_LOG=info forkshare_case childexec
  grep -q "^forkshare: client childexec ok" <<<"$CLI_LOG"
  grep -q "^forkshare: server childexec ok (exec'd child)" <<<"$SRV_LOG"
  grep -q "^forkshare: server childexec ok$" <<<"$SRV_LOG"
  assert_switched forked 1 role=client climbs=0
  # An exec takes no ticket (CLAIM_TCP): the owner did not wait for its
  # close for one, so it says nothing of a climb that could not be.
  ! grep -q "fork: a child's stream stays on TCP" <<<"$SRV_LOG"
}

@test "handoff: the parent exits after fork (exit moves the stream), the child takes 1 MiB, SHA-256 checked: byte-exact" {
  forkshare_case parentexit
  grep -q "^forkshare: client parentexit ok" <<<"$CLI_LOG"
  grep -q "^forkshare: server parentexit ok (child)" <<<"$SRV_LOG"
  assert_switched forked 1 role=client
}

@test "handoff: the parent is SIGKILLed after fork: the child's recv fails with EIO, no byte arrives that no one wrote" {
  forkshare_case parentkill
  grep -q "^forkshare: server parentkill ok (child): recv failed with EIO" <<<"$SRV_LOG"
  grep -q "could not move to TCP" <<<"$SRV_LOG"
  grep -q "^forkshare: client parentkill ok: no byte after the echo" <<<"$CLI_LOG"
}

@test "handoff: redis-server with save 1 1 under redis-benchmark: BGSAVE forks, every client connection stays on RDMA" {
  need redis-server redis-benchmark redis-cli
  local port forks rc=0
  port=$(free_port)
  start_bg redis timeout -k 5 900 "${PRE[@]}" redis-server --port "$port" --bind "$RXE_IP" \
    --protected-mode no --save '1 1' --appendonly no --daemonize no --dir "$T"
  wait_port "$RXE_IP" "$port" 30
  run_timeout 600 "${PRE[@]}" redis-benchmark -h "$RXE_IP" -p "$port" -c 10 -n 20000 -t set \
    -r 100000 -q >"$T/bench.out" 2>&1 || rc=$?
  forks=$(run_timeout 30 "${PRE[@]}" redis-cli -h "$RXE_IP" -p "$port" info stats |
          tr -d '\r' | sed -nE 's/^total_forks:([0-9]+)$/\1/p')
  redis_stop
  show "redis-benchmark -c 10 -n 20000 -t set (rc=$rc): $(tr '\r' '\n' <"$T/bench.out" | grep -E 'requests per second')" \
       "BGSAVE forks: ${forks:-none}" "$(grep -c 'Background saving terminated with success' "$T/redis.log") saves ended"
  [ "$rc" -eq 0 ]
  ! grep -qi error "$T/bench.out"
  [ "${forks:-0}" -ge 2 ]
  # Every connection, of the benchmark (10 and its CONFIG one) and of redis-cli,
  # on RDMA at both ends, paired; no switch.
  show "$(stats_lines "$STATS")"
  [ "$(stats_lines "$STATS" role=client | wc -l)" -eq 12 ]
  assert_all_rdma "$STATS" redis-server redis-benchmark redis-cli
}

@test "handoff: SDPSHIM_FORK=switch moves the stream at the fork, even for a child that never touches it" {
  SDPSHIM_FORK=switch forkshare_case childonly
  grep -q "^forkshare: client childonly ok" <<<"$CLI_LOG"
  assert_switched forked 1 role=client
}

@test "a forked child that closes its copy of the listening socket leaves the parent's RDMA listener up: each new client process still starts on RDMA" {
  local port src=0 n=3 i crc bad
  port=$(free_port)
  start_bg server timeout -k 5 240 "${PRE[@]}" "$PY" -S "$BATS_TEST_DIRNAME/forkclose.py" \
    server "$RXE_IP" "$port" "$n"
  wait_port "$RXE_IP" "$port"
  for i in $(seq "$n"); do
    crc=0
    run_timeout 90 env SDPSHIM_NEGCACHE_TTL_MS=0 "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" -p "$port" \
      -n 1 -b 262144 >"$T/client$i.out" 2>&1 || crc=$?
    show "client $i (rc=$crc): $(cat "$T/client$i.out")"
    [ "$crc" -eq 0 ]
  done
  wait_bg server || src=$?
  show "server (rc=$src): $(bg_log server)" "$(stats_lines "$STATS")"
  [ "$src" -eq 0 ]
  grep -qx "forkclose: served $n" "$T/server.log"
  # Every client connection found an sdpshim listener and went on RDMA at
  # its connect (the child's use may move it later: reason forked); a
  # listener torn down by a child's close sends the next client to TCP at
  # once (peer_no_sdpshim, rdma_timeout).
  [ "$(stats_lines "$STATS" comm=connects | wc -l)" -eq "$n" ]
  bad=$(stats_lines "$STATS" comm=connects | awk '$6 != "none" && $6 != "forked"')
  [ -z "$bad" ]
}

@test "a server that exits while its forked child holds 3 streams whose peers do not answer: the exit's moves to TCP share one SDPSHIM_SWITCH_TIMEOUT_MS, not one each" {
  local port i ms t0 pids src=0
  port=$(free_port)
  start_bg server timeout -k 5 120 env SDPSHIM_SWITCH_TIMEOUT_MS=2000 "${PRE[@]}" "$PY" -S \
    "$BATS_TEST_DIRNAME/forkexit.py" server "$RXE_IP" "$port" "$T" 3
  wait_for_line "$T/server.log" '^forkexit: listening$' 30
  for i in 1 2 3; do
    start_bg "client$i" timeout -k 5 120 "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" -p "$port" \
      -n 1 -b 16384 -w "$T/release"
    wait_for_line "$T/client$i.log" '^holding' 60
  done
  wait_for_line "$T/server.log" '^forkexit: echoed 3$' 30
  pids=$(pgrep -x connects | tr '\n' ' ')
  kill -STOP $pids   # the peers answer no SWITCH now
  t0=$(now_ms)
  touch "$T/go"
  wait_bg server || src=$?
  ms=$(( $(now_ms) - t0 ))
  kill -CONT $pids
  touch "$T/release" "$T/done"
  for i in 1 2 3; do wait_bg "client$i" || true; done
  show "the server's exit took $ms ms (rc=$src)" "$(bg_log server)" "$(stats_lines "$STATS")"
  [ "$src" -eq 0 ]
  grep -q '^forkexit: exiting$' "$T/server.log"
  # Each client's stream was on RDMA, and followed the move once it ran again.
  [ "$(stats_lines "$STATS" role=client comm=connects reason=forked | wc -l)" -eq 3 ]
  # One 2 s bound for the three moves, and a margin; a bound each is 6 s and more.
  [ "$ms" -lt 4500 ]
}

