#!/usr/bin/env bats
# VM suite, part 35: a channel is bound to a TCP connection only on proof, never
# on the peer's word.  tests/progs/rogue plays a lying peer with the wire
# format's own encoders, run by an unprivileged user (nobody): anyone on a host
# can open rdma_cm and bind a port of its RDMA_PS_TCP port space, which is not
# the kernel's TCP port space.
#   1-3  a rogue rdma_cm listener on the port of a TCP server (a plain one, and
#        a preloaded one that starts after the rogue) must never receive a
#        preloaded client's stream, nor stall it past SDPSHIM_CONNECT_TIMEOUT_MS;
#        and when the TCP connection is reset as the client's bytes, which
#        waited for the rogue's ATTACH, drain into it, the app sees the reset;
#        while they drain, poll() sleeps and sees the server's bytes;
#   4    a forged, committed Hello naming a plain client's source port must not
#        get that client's connection (its echo comes back intact);
#   5    16 Hellos asking for the most buffers (1024 x 1 MiB), then 16 asking
#        for 1024 x 64 KiB (what a 1 GiB guest can pin), must not pin the
#        server's memory while pending, nor keep honest clients off RDMA;
#   6    an uncommitted forged Hello must not stall a non-blocking accept4().
# Each of 1-6 runs twice: per connection (SDPSHIM_LINKS=0: one rdma_cm
# connection per TCP connection, the rogue's as well), and "[link]": over
# links (core/link.c), the default, where a client's streams share one rdma_cm
# connection per server listener and the rogue speaks the link framing
# (--link): a link Hello, then an OPEN per stream naming its 4-tuple, whose
# OPEN_ACK carries the nonce.  Then the lies only a link can tell:
#   7    20 OPENs naming another host's address (tuples the link does not own):
#        each refused, and the server logs a burst of 5 (a peer may repeat a
#        refusal at will, so its diagnostics are limited);
#   8    a rogue listener's RELEASED for an index past the client's stream table
#        (the client runs the ASan build: it must not write past it);
#   9    links held without a stream: the server must not keep them (and their
#        pinned buffers) for ever, so honest clients get a link again;
#   10   a process with no random source for its nonces binds nothing: a
#        guessable nonce would let anyone answer for the channel.
# And a peer that breaks the protocol before its channel is bound (a rogue
# listener's sequence gap before ATTACH; a forger's while the server binds
# its channel to a stranger's connection) costs only that channel: the
# stream goes on over TCP, with one diagnostic line and no reset.
# Every data check is by SHA-256.  To show these reproduce the findings on a
# build of the version-1 protocol (commit ad1ce48), run this file with
# BUILD=<that build> SDPSHIM_TRUST_PROGS=<this tree's build>/tests/progs
# SDPSHIM_ROGUE_ARGS=--v1 (see vm_helpers.bash; the [link] cases skip).

load ../helpers
load vm_helpers
load ../sanitize

setup() {
  vm_setup
  for p in rogue acceptwait; do
    [ -x "$TRUST_PROGS/$p" ] || { echo "missing $TRUST_PROGS/$p: run make" >&2; return 1; }
  done
  CONNECTS=$PROGS/connects
  [ -x "$CONNECTS" ] || { echo "missing $CONNECTS: run make" >&2; return 1; }
  MEMCG=
}

teardown() {
  pin_watch_stop
  vm_teardown
  memcg_remove "$MEMCG"
}

# plain_redis PORT: a redis-server that is not preloaded, on $RXE_IP:PORT.
plain_redis() {
  start_bg plainredis timeout -k 5 300 redis-server --port "$1" --bind "$RXE_IP" \
    --protected-mode no --save '' --appendonly no --daemonize no
  wait_port "$RXE_IP" "$1" 30 || { bg_log plainredis >&2; return 1; }
}

# random_value FILE BYTES: BYTES of random base64 (one word) in FILE.
random_value() {
  head -c "$2" /dev/urandom | base64 -w0 | head -c "$2" >"$1"
}

# redis_get_sha PORT KEY: SHA-256 of KEY's value, read by a plain redis-cli
# (which prints the raw value and a newline).
redis_get_sha() {
  local out=$T/get.$2
  run_timeout 30 redis-cli -h "$RXE_IP" -p "$1" --raw get "$2" >"$out" || return 1
  head -c -1 "$out" | sha256sum | cut -c1-64
}

# timed_set PORT KEY FILE: a preloaded redis-cli -x set KEY <FILE; sets
# SET_OUT (its stdout), SET_ERR (its stderr: the shim's warnings), SET_RC and
# SET_MS (wall clock of the command).
timed_set() {
  local t0 t1
  SET_RC=0
  t0=$(date +%s%N)
  SET_OUT=$(run_timeout 20 "${PRE[@]}" redis-cli -h "$RXE_IP" -p "$1" -x set "$2" <"$3" \
    2>"$T/set.err") || SET_RC=$?
  t1=$(date +%s%N)
  SET_MS=$(( (t1 - t0) / 1000000 ))
  SET_ERR=$(cat "$T/set.err")
}

# client_life_ms: how long the preloaded redis-cli's connection lived, from
# its socket() to its close (its stats line), or "none".  This, not the
# process's wall time, is what a connect bound holds: under TCG on a busy
# host, starting redis-cli and the library took up to 1.9 s before socket().
client_life_ms() {
  stats_lines "$STATS" comm=redis-cli role=client |
    awk 'NR == 1 && $NF ~ /^[0-9]+$/ { print $NF - $(NF - 1); f = 1 } END { if (!f) print "none" }'
}

# set_beside_rogue MODE KEY ROGUE_ARGS...: a plain redis-server and a rogue
# rdma_cm listener (rogue listen ROGUE_ARGS, as nobody) on one port, with
# SDPSHIM_CONNECT_TIMEOUT_MS=3000; a preloaded redis-cli SETs KEY to 3000
# random bytes (timed_set), and a plain one reads it back.  Sets WANT (the
# value's SHA-256), GOT (the real redis's) and LIFE (client_life_ms), besides
# timed_set's SET_*.
set_beside_rogue() {
  local mode=$1 key=$2 port
  shift 2
  link_mode "$mode"
  port=$(free_port)
  export SDPSHIM_CONNECT_TIMEOUT_MS=3000
  plain_redis "$port"
  rogue_start rogue listen --port "$port" --addr "$RXE_IP" "$@" "${LINK_ARG[@]}"
  wait_for_line "$T/rogue.log" '^listening ' 30
  random_value "$T/value" 3000
  WANT=$(sha256_of "$T/value")
  timed_set "$port" "$key" "$T/value"
  GOT=$(redis_get_sha "$port" "$key") || true
  rogue_stop rogue || true
  LIFE=$(client_life_ms)
}

# listener_beside_plain MODE
listener_beside_plain() {
  local want got
  set_beside_rogue "$1" trust:k1
  want=$WANT; got=$GOT
  show "preloaded redis-cli: rc=$SET_RC in $SET_MS ms: $SET_OUT" "  stderr: $SET_ERR" \
       "value sha256 $want, real redis has ${got:-nothing}" \
       "rogue (rdma_cm listener on the same port):" "$(grep -v '^msg ' "$T/rogue.log" | head -20)" \
       "$(stats_lines "$STATS")"
  grep -q 'uid=65534' "$T/rogue.log"
  # The client did offer its channel to the rogue (else this proves nothing).
  [ "$(rogue_field rogue hellos)" -ge 1 ]
  [ "$SET_RC" -eq 0 ]
  [ "$SET_OUT" = OK ]
  [ "$got" = "$want" ]
  [ "$(rogue_field rogue data_bytes)" = 0 ]
  [ "$(stats_lines "$STATS" role=client path=tcp | wc -l)" -eq 1 ]
  # Over a link the client opened its stream there too (the lie was heard).
  [ "$1" = conn ] || [ "$(rogue_field rogue opens)" -ge 1 ]
}

@test "rogue rdma_cm listener beside a plain redis-server: the preloaded SET reaches the real redis, not the rogue" {
  listener_beside_plain conn
}

@test "[link] rogue rdma_cm listener beside a plain redis-server: the preloaded SET reaches the real redis, not the rogue" {
  listener_beside_plain link
}

# listener_never_attaches MODE
listener_never_attaches() {
  local want got life bound=$((3000 + 1000))
  set_beside_rogue "$1" trust:k2 --attach never
  want=$WANT; got=$GOT; life=$LIFE
  show "preloaded redis-cli (SDPSHIM_CONNECT_TIMEOUT_MS=3000): rc=$SET_RC in $SET_MS ms, its connection lived $life ms (bound $bound ms): $SET_OUT" \
       "  stderr: $SET_ERR" \
       "value sha256 $want, real redis has ${got:-nothing}" \
       "rogue:" "$(grep -v '^msg ' "$T/rogue.log" | head -20)" "$(stats_lines "$STATS")"
  [ "$(rogue_field rogue hellos)" -ge 1 ]
  [ "$SET_RC" -eq 0 ]
  [ "$SET_OUT" = OK ]
  [ "$life" -lt "$bound" ]
  [ "$got" = "$want" ]
  [ "$(rogue_field rogue data_bytes)" = 0 ]
  [ "$(stats_lines "$STATS" role=client path=tcp | wc -l)" -eq 1 ]
  [ "$1" = conn ] || [ "$(rogue_field rogue opens)" -ge 1 ]
}

@test "rogue listener that never sends ATTACH: the preloaded client is not held past SDPSHIM_CONNECT_TIMEOUT_MS + 1 s" {
  listener_never_attaches conn
}

@test "[link] rogue listener that never sends ATTACH: the preloaded client is not held past SDPSHIM_CONNECT_TIMEOUT_MS + 1 s" {
  listener_never_attaches link
}

# stuck_drain MODE SCRIPT ARGS...: tests/vm/SCRIPT.py's plain server, which
# reads nothing, a rogue listener on its port that never sends ATTACH, and
# SCRIPT's preloaded client (both given ARGS), whose bytes wait for that
# ATTACH and then drain into TCP until the server's window stops them.
# Sets PORT, STATE (the client's channel once it moved) and STUCK (1 s later);
# with DRAIN_UNWATCHED set (a client that closes as it binds: no live
# entry to watch), neither.
stuck_drain() {
  local mode=$1 script=$2
  shift 2
  link_mode "$mode"
  PORT=$(free_port)
  export SDPSHIM_CONNECT_TIMEOUT_MS=2000
  start_bg server timeout -k 5 120 "$PY" -S "$BATS_TEST_DIRNAME/$script.py" server \
    "$RXE_IP" "$PORT" "$@"
  wait_for_line "$T/server.log" "^$script: listening\$" 30
  rogue_start rogue listen --port "$PORT" --addr "$RXE_IP" --attach never "${LINK_ARG[@]}"
  wait_for_line "$T/rogue.log" '^listening ' 30
  start_bg client timeout -k 5 120 "${PRE[@]}" "$PY" -S "$BATS_TEST_DIRNAME/$script.py" \
    client "$RXE_IP" "$PORT" "$@"
  wait_for_line "$T/server.log" "^$script: accepted\$" 30
  [ -z "${DRAIN_UNWATCHED:-}" ] || return 0
  wait_live_channel client "$PORT" moving 30 || true
  STATE=$(live_channel client "$PORT")
  sleep 1
  STUCK=$(live_channel client "$PORT")
}

# stuck_drain_ended CLIENT_RC SERVER_RC HEADLINE: shows the stuck drain's
# logs under HEADLINE and checks what each such test needs: the rogue got
# no byte, the client's channel was moving and still was 1 s later, and
# both ends exited 0.
stuck_drain_ended() {
  show "$3" \
       "client (rc=$1): $(bg_log client | tr '\n' ';')" "server (rc=$2): $(bg_log server | tr '\n' ';')" \
       "rogue:" "$(grep -v '^msg ' "$T/rogue.log" | head -10)" "$(stats_lines "$STATS")"
  [ "$(rogue_field rogue data_bytes)" = 0 ]
  [ -n "${DRAIN_UNWATCHED:-}" ] || [ "$STATE" = moving ]
  [ -n "${DRAIN_UNWATCHED:-}" ] || [ "$STUCK" = moving ]
  [ "$1" -eq 0 ]
  [ "$2" -eq 0 ]
}

# drain_meets_reset MODE
drain_meets_reset() {
  # The client's 4 MiB wait in its channel's send slots for an ATTACH that
  # never comes; at SDPSHIM_CONNECT_TIMEOUT_MS it gives up, and they move to
  # TCP, where the server's full window (it never reads) stops them.  Then
  # ss -K resets the connection at the server.  The library's own send into
  # TCP meets the reset and so takes the kernel's error: the app must still
  # see ECONNRESET, as over plain TCP, not the EPIPE left after it.
  local port rc=0 killed state stuck
  stuck_drain "$1" drainreset
  port=$PORT; state=$STATE; stuck=$STUCK
  killed=$(ss -K -t -n state established "( sport = :$port )" | grep -c ":$port" || true)
  wait_bg client || rc=$?
  kill -TERM "$(cat "$T/server.pid")" 2>/dev/null || true
  wait_bg server || true
  rogue_stop rogue || true
  show "client channel: '$state', then '$stuck' 1 s later; ss -K: $killed socket(s)" \
       "client (rc=$rc): $(bg_log client | tr '\n' ';')" \
       "rogue:" "$(grep -v '^msg ' "$T/rogue.log" | head -20)" "$(stats_lines "$STATS")"
  [ "$(rogue_field rogue hellos)" -ge 1 ]
  [ "$(rogue_field rogue data_bytes)" = 0 ]
  # The bytes were draining into TCP, stopped, when the reset came.
  [ "$state" = moving ]
  [ "$stuck" = moving ]
  [ "$killed" -eq 1 ]
  [ "$rc" -eq 0 ]
  bg_log client | grep -qx 'drainreset: reset on send'
  # Its stats say where the stream was (TCP: no byte went over RDMA), and why.
  [ "$(stats_lines "$STATS" role=client comm=python3 path=tcp reason=rdma_timeout | wc -l)" -eq 1 ]
}

@test "rogue listener that never sends ATTACH, and the connection is reset as the client's waiting bytes drain into TCP: send() says ECONNRESET, not EPIPE" {
  drain_meets_reset conn
}

@test "[link] rogue listener that never sends ATTACH, and the connection is reset as the client's waiting bytes drain into TCP: send() says ECONNRESET, not EPIPE" {
  drain_meets_reset link
}

# drain_polls MODE
drain_polls() {
  # The same stuck drain as above, with no reset: the client polls.  A plain
  # TCP socket with a full send buffer and nothing to read is neither
  # readable nor writable, and poll() sleeps; when the server writes, it is
  # readable at once.  So must this one be while its bytes drain (before,
  # its indicators always said "look again": poll() spun a CPU for its whole
  # timeout and never reported the server's bytes).  Then every byte of
  # the client's stream reaches the server, checked.
  local rc=0 src=0 idle reply
  stuck_drain "$1" drainpoll "$T"
  touch "$T/stuck"
  wait_bg client || rc=$?
  wait_bg server || src=$?
  rogue_stop rogue || true
  idle=$(bg_log client | sed -nE 's/^drainpoll: idle poll rc=0 cpu_ms=([0-9]+)$/\1/p')
  reply=$(bg_log client | sed -nE 's/^drainpoll: reply 4096 bytes ok, poll cpu_ms=([0-9]+)$/\1/p')
  stuck_drain_ended "$rc" "$src" "client channel: '$STATE', then '$STUCK' 1 s later"
  # Nothing ready, and the 1 s poll slept: a spin costs about its length.
  [ -n "$idle" ] && [ "$idle" -lt 300 ]
  # The server's bytes were readable while the drain was stuck.
  [ -n "$reply" ] && [ "$reply" -lt 300 ]
  bg_log client | grep -qx 'drainpoll: sent 2097152 bytes'
  bg_log server | grep -qx 'drainpoll: server received 2097152 bytes ok'
  [ "$(stats_lines "$STATS" role=client comm=python3 path=tcp reason=rdma_timeout | wc -l)" -eq 1 ]
}

@test "rogue listener that never sends ATTACH, the client's waiting bytes stuck draining into TCP: poll() sleeps, then sees the server's bytes; every byte arrives" {
  drain_polls conn
}

@test "[link] rogue listener that never sends ATTACH, the client's waiting bytes stuck draining into TCP: poll() sleeps, then sees the server's bytes; every byte arrives" {
  drain_polls link
}

# drain_closed MODE HOW: the same stuck drain, and the app closes its socket
# while its bytes wait (HOW, tests/vm/drainclose.py): the library drains
# them on in the background, as the kernel does for a closed socket, as long
# as the server takes bytes (pauses: two pauses, each shorter than
# SDPSHIM_LINGER_MS, together longer: every byte, then EOF); a server that
# takes none for SDPSHIM_LINGER_MS gets a reset (stops: before, the drain
# and its connection stayed for as long as the process lived); the same
# for a socket closed as its channel still binds, whose drain begins after
# the close (early: the bound starts when the drain does; late: the drain
# begins at the binding's own bound, not the close's linger bound);
# SO_LINGER 0 resets at once (abort: before, the drain went on as if it
# were not set).
# The drain and its bound are the same code for a stream of a link and a
# channel of its own (drain_polls and drain_meets_reset run both): only the
# close as it binds (late), where the binding differs, runs on a link too.
drain_closed() {
  local rc=0 src=0 queued got end after first
  export SDPSHIM_LINGER_MS=3000 SDPSHIM_LOG=info
  [ "$2" != late ] || SDPSHIM_LINGER_MS=20000
  [ "$2" != early ] && [ "$2" != late ] || DRAIN_UNWATCHED=1
  stuck_drain "$1" drainclose "$T" "$2"
  touch "$T/stuck"
  wait_bg server || src=$?
  touch "$T/done"
  wait_bg client || rc=$?
  rogue_stop rogue || true
  queued=$(bg_log client | sed -nE 's/^drainclose: queued ([0-9]+)$/\1/p')
  got=$(bg_log server | sed -nE 's/^drainclose: server received ([0-9]+) bytes ok, then .*$/\1/p')
  end=$(bg_log server | sed -nE 's/^drainclose: server received [0-9]+ bytes ok, then (.*)$/\1/p')
  after=$(bg_log server | sed -nE 's/^drainclose: reset after ([0-9]+) ms$/\1/p')
  first=$(bg_log server | sed -nE 's/^drainclose: first bytes after ([0-9]+) ms$/\1/p')
  stuck_drain_ended "$rc" "$src" \
    "client channel: '$STATE', then '$STUCK' 1 s later; queued ${queued:-?}; server got ${got:-?}, then ${end:-?}"
  [ -n "$queued" ] && [ -n "$got" ]
  case $2 in
    pauses)
      [ "$end" = EOF ]
      [ "$got" -eq "$queued" ] ;;
    stops)
      [ "$end" = reset ]
      [ "$got" -lt "$queued" ]
      # One or two SDPSHIM_LINGER_MS (3 s) after the close.
      [ -n "$after" ] && [ "$after" -ge 2000 ] && [ "$after" -le 7500 ]
      bg_log client | grep -q 'linger bound reached with [0-9]* unsent bytes that the TCP peer does not take' ;;
    early|late)
      # The close came first, and the channel gave up after it.
      bg_log client | sed -n '/^drainclose: closed$/,$p' |
        grep -q 'no RDMA channel binding within the connect bound' ;;&
    early)
      [ "$end" = reset ]
      [ "$got" -lt "$queued" ]
      # The binding's bound (2 s from the connect), then one or two linger
      # looks (the first may still see the drain's first bytes acknowledged).
      [ -n "$after" ] && [ "$after" -ge 3000 ] && [ "$after" -le 10000 ]
      bg_log client | grep -q 'linger bound reached with [0-9]* unsent bytes that the TCP peer does not take' ;;
    late)
      # The drain began at the binding's bound (SDPSHIM_CONNECT_TIMEOUT_MS,
      # 2 s from the connect), not at the close's linger bound (20 s here):
      # the bytes reach the reader then, every one of them.
      [ -n "$first" ] && [ "$first" -le 6000 ]
      [ "$end" = EOF ]
      [ "$got" -eq "$queued" ] ;;
    abort)
      [ "$end" = reset ]
      [ "$got" -lt "$queued" ] ;;
  esac
  # Its path, settled when the drain began (one closed as it bound had none yet).
  [ -n "${DRAIN_UNWATCHED:-}" ] ||
    [ "$(stats_lines "$STATS" role=client comm=python3 path=tcp reason=rdma_timeout | wc -l)" -eq 1 ]
}

@test "the app closes while its bytes are stuck draining into TCP, and the server reads with pauses longer than the linger bound together: every byte arrives, then EOF" {
  drain_closed conn pauses
}

@test "the app closes while its bytes are stuck draining into TCP, and the server never reads: reset after SDPSHIM_LINGER_MS, not held for the process's life" {
  drain_closed conn stops
}

@test "the app closes as its channel binds, its bytes then stuck draining into TCP, and the server never reads: reset after the linger bound" {
  drain_closed conn early
}

@test "the app writes and closes as its channel binds, and no ATTACH comes: the bytes reach the reader at the connect bound, not a linger bound later" {
  drain_closed conn late
}

@test "[link] the app writes and closes as its stream binds, and no ATTACH comes: the bytes reach the reader at the connect bound, not a linger bound later" {
  drain_closed link late
}

@test "the app closes with SO_LINGER 0 while its bytes are stuck draining into TCP: the connection is reset at once, as TCP's would be" {
  drain_closed conn abort
}

# listener_gap_before_attach MODE
listener_gap_before_attach() {
  # The rogue answers the client's COMMIT with a CREDIT_UPDATE whose mseq
  # skips one, on a channel not bound yet.  Its peer is not proven to be the
  # TCP server: the lie costs the channel, never the stream, which goes on
  # over TCP to the real server (before, the app's connection was reset).
  local want got life bound=$((3000 + 1000))
  set_beside_rogue "$1" trust:k4 --attach never --lie bad-mseq
  want=$WANT; got=$GOT; life=$LIFE
  show "preloaded redis-cli: rc=$SET_RC in $SET_MS ms, its connection lived $life ms: $SET_OUT" \
       "  stderr: $SET_ERR" \
       "value sha256 $want, real redis has ${got:-nothing}" \
       "rogue:" "$(grep -v '^msg ' "$T/rogue.log" | head -20)" "$(stats_lines "$STATS")"
  grep -q '^mseq_lie conn=0 ' "$T/rogue.log"
  [ "$SET_RC" -eq 0 ]
  [ "$SET_OUT" = OK ]
  [ "$got" = "$want" ]
  [ "$life" -lt "$bound" ]
  [ "$(rogue_field rogue data_bytes)" = 0 ]
  [ "$(stats_lines "$STATS" role=client path=tcp reason=protocol | wc -l)" -eq 1 ]
  # One line says why, and no reset was made of it.
  [ "$(grep -c 'broke the protocol before the channel was bound (sequence gap)' <<<"$SET_ERR")" -eq 1 ]
  ! grep -q 'aborting the connection' <<<"$SET_ERR"
}

@test "rogue listener whose first message skips a sequence number, before ATTACH: the client's stream goes on over TCP to the real server, one diagnostic, no reset" {
  listener_gap_before_attach conn
}

@test "[link] rogue listener whose first message skips a sequence number, before ATTACH: the client's stream goes on over TCP to the real server, one diagnostic, no reset" {
  listener_gap_before_attach link
}

# listener_holds_port MODE
listener_holds_port() {
  local port want got life bound=$((3000 + 1000))
  link_mode "$1"
  port=$(free_port)
  export SDPSHIM_CONNECT_TIMEOUT_MS=3000
  # Every address: the server's own rdma_cm bind on $RXE_IP:PORT then fails.
  rogue_start rogue listen --port "$port" "${LINK_ARG[@]}"
  wait_for_line "$T/rogue.log" '^listening ' 30
  redis_start "$RXE_IP" "$port"
  random_value "$T/value" 3000
  want=$(sha256_of "$T/value")
  timed_set "$port" trust:k3 "$T/value"
  got=$(redis_get_sha "$port" trust:k3) || true
  redis_stop || true
  rogue_stop rogue || true
  life=$(client_life_ms)
  show "preloaded redis-cli: rc=$SET_RC in $SET_MS ms, its connection lived $life ms (bound $bound ms): $SET_OUT" \
       "  stderr: $SET_ERR" \
       "value sha256 $want, redis has ${got:-nothing}" \
       "rogue:" "$(grep -v '^msg ' "$T/rogue.log" | head -20)" "$(stats_lines "$STATS")"
  [ "$(rogue_field rogue hellos)" -ge 1 ]
  [ "$SET_RC" -eq 0 ]
  [ "$SET_OUT" = OK ]
  [ "$life" -lt "$bound" ]
  [ "$got" = "$want" ]
  [ "$(rogue_field rogue data_bytes)" = 0 ]
  [ "$(stats_lines "$STATS" role=client path=tcp | wc -l)" -eq 1 ]
  # The server had no RDMA listener: every connection it accepted is TCP.
  [ "$(stats_lines "$STATS" comm=redis-server | wc -l)" -ge 1 ]
  [ "$(stats_lines "$STATS" comm=redis-server path=rdma | wc -l)" -eq 0 ]
  [ "$1" = conn ] || [ "$(rogue_field rogue opens)" -ge 1 ]
}

@test "rogue binds the rdma_cm port before a preloaded redis-server starts: the server serves TCP, its clients reach it" {
  listener_holds_port conn
}

@test "[link] rogue binds the rdma_cm port before a preloaded redis-server starts: the server serves TCP, its clients reach it" {
  listener_holds_port link
}

# forged_committed MODE: over a link the Hello is the link's own, and the OPEN
# names the plain client's tuple.
forged_committed() {
  local port sport sent got
  link_mode "$1"
  port=$(free_port); sport=$(free_port)
  start_bg server timeout -k 5 120 "${PRE[@]}" "$CONNECTS" -s "$port" -a "$RXE_IP" -n 1
  wait_port "$RXE_IP" "$port"
  rogue_start rogue hello --to "$RXE_IP:$port" --src-port "$sport" --hold 120 "${LINK_ARG[@]}"
  wait_for_line "$T/rogue.log" '^(commit_sent|rejected|error|open_nak) conn=0' 60
  plain_echo_client "$RXE_IP" "$port" "$sport" 65536 >"$T/plain.out" 2>&1 || true
  sleep 1 # whatever the server sends the rogue after the accept arrives meanwhile
  rogue_stop rogue || true
  local src=0
  wait_bg server || src=$?
  sent=$(sed -n 's/^sent=//p' "$T/plain.out"); got=$(sed -n 's/^got=//p' "$T/plain.out")
  show "plain client from port $sport: $(tr '\n' ' ' <"$T/plain.out")" "server rc=$src" \
       "rogue (Hello naming $RXE_IP:$sport -> $RXE_IP:$port):" "$(head -20 "$T/rogue.log")" \
       "$(stats_lines "$STATS")"
  grep -q 'uid=65534' "$T/rogue.log"
  # The server accepted the forged channel (the scenario happened) ...
  grep -q '^established conn=0' "$T/rogue.log"
  grep -q '^commit_sent conn=0' "$T/rogue.log"
  # ... and still the plain client got exactly its own bytes back.
  [ -n "$sent" ]
  [ "$got" = "$sent" ]
  [ "$(rogue_field rogue attach)" = 0 ]
  [ "$(rogue_field rogue data_bytes)" = 0 ]
  [ "$src" -eq 0 ]
  [ "$(stats_lines "$STATS" role=server path=tcp | wc -l)" -eq 1 ]
  [ "$1" = conn ] || grep -q '^open_ack conn=0 stream=0 ' "$T/rogue.log"
}

@test "forged committed Hello naming a plain client's source port: the plain client gets its own echo, the rogue nothing" {
  forged_committed conn
}

@test "[link] forged committed OPEN naming a plain client's source port: the plain client gets its own echo, the rogue nothing" {
  forged_committed link
}

# forged_gap_while_binding MODE: a forged committed Hello (OPEN) names a
# plain client's source port; the server accepts that client's connection
# and binds the forged channel to it (it asks the client for a proof, which
# a plain client never sends).  Meanwhile the forger breaks the protocol (a
# sequence gap).  It must cost only the forged channel: the stranger's
# stream goes on over TCP, byte-exact, not reset by someone else's lie.
forged_gap_while_binding() {
  local port sport state=none src=0 sent got until plain_pid
  link_mode "$1"
  port=$(free_port); sport=$(free_port)
  export SDPSHIM_CONNECT_TIMEOUT_MS=20000 # the binding outlives the lie
  start_bg server timeout -k 5 120 "${PRE[@]}" "$CONNECTS" -s "$port" -a "$RXE_IP" -n 1
  wait_port "$RXE_IP" "$port"
  rogue_start rogue hello --to "$RXE_IP:$port" --src-port "$sport" --hold 120 --lie bad-mseq \
    "${LINK_ARG[@]}"
  wait_for_line "$T/rogue.log" '^(commit_sent|rejected|error|open_nak) conn=0' 60
  plain_echo_client "$RXE_IP" "$port" "$sport" 65536 "$T/go" >"$T/plain.out" 2>&1 3>&- &
  plain_pid=$!
  until=$(( $(date +%s) + 30 ))
  while state=$(live_channel server "$port"); [ "$state" != binding ]; do
    [ "$(date +%s)" -lt "$until" ] || break
    sleep 0.1
  done
  pkill -USR1 -u nobody -x rogue || true
  wait_for_line "$T/rogue.log" '^mseq_lie conn=0' 10 || true
  sleep 1 # the server takes the lie in while the stream is still binding
  touch "$T/go"
  wait "$plain_pid" || true
  wait_bg server || src=$?
  rogue_stop rogue || true
  sent=$(sed -n 's/^sent=//p' "$T/plain.out"); got=$(sed -n 's/^got=//p' "$T/plain.out")
  show "server channel before the lie: '$state'" \
       "plain client from port $sport: $(tr '\n' ' ' <"$T/plain.out")" \
       "server rc=$src: $(bg_log server | tail -5)" \
       "rogue:" "$(grep -v '^msg ' "$T/rogue.log" | head -20)" "$(stats_lines "$STATS")"
  grep -q 'uid=65534' "$T/rogue.log"
  # The server was binding the forged channel to the stranger's connection
  # when the lie came ...
  [ "$state" = binding ]
  grep -q '^mseq_lie conn=0 ' "$T/rogue.log"
  # ... and the stranger still got exactly its own bytes back.
  [ -n "$sent" ]
  [ "$got" = "$sent" ]
  [ "$src" -eq 0 ]
  [ "$(rogue_field rogue data_bytes)" = 0 ]
  [ "$(stats_lines "$STATS" role=server path=tcp | wc -l)" -eq 1 ]
  [ "$(bg_log server | grep -c 'broke the protocol before the channel was bound (sequence gap)')" -eq 1 ]
  ! bg_log server | grep -q 'aborting the connection'
}

@test "forged committed Hello whose peer skips a sequence number while the server binds it to a plain client's connection: that client's stream goes on over TCP, byte-exact" {
  forged_gap_while_binding conn
}

@test "[link] forged committed OPEN whose peer skips a sequence number while the server binds it to a plain client's connection: that client's stream goes on over TCP, byte-exact" {
  forged_gap_while_binding link
}

# flood_phase NAME SPORT BUF_SIZE: 16 Hellos (source ports SPORT..SPORT+15)
# asking for 1024 receive buffers of BUF_SIZE, held open while one honest
# preloaded connection echoes 256 KiB (checked by SHA-256 in the client);
# then the rogue hangs up.  The pin samples of the phase follow a mark.
flood_phase() {
  local name=$1 rc=0
  pin_watch_mark "$name"
  rogue_start "$name" hello --to "$RXE_IP:$FLOOD_PORT" --src-port "$2" --count 16 \
    --buf-count 1024 --buf-size "$3" --hold 300 "${LINK_ARG[@]}"
  wait_for_line "$T/$name.log" '^holding ' 120 || rc=1
  run_timeout 120 "${PRE[@]}" "$CONNECTS" -c "$RXE_IP" -p "$FLOOD_PORT" -n 1 -b 262144 \
    >"$T/$name.honest" 2>&1 || rc=1
  sleep 0.5 # one more sample with everything still open
  rogue_stop "$name" || true
  return "$rc"
}

# hello_flood MODE: over links, 16 link Hellos (each opening one stream whose
# OPEN asks the same); a link pins its own geometry whatever it is asked,
# 2 x SDPSHIM_LINK_BUFS x (SDPSHIM_BUF_SIZE + 16) = 4 MiB by default, so the
# bound is 17 of those (the honest client's link too) + 16 MiB, not 64 MiB.
hello_flood() {
  local spid base_pin base_mr base_peak= peak= oom= src=0 r1=0 r2=0 ph
  local limit=$((64 << 20)) max_pin max_mr grow_pin grow_mr
  link_mode "$1"
  [ "$1" = conn ] || limit=$(( 17 * 2 * 64 * (32768 + 16) + (16 << 20) ))
  FLOOD_PORT=$(free_port)
  # The server runs in a memory cgroup where the kernel has one: a server
  # that pins what such Hellos ask for runs out there, not in the whole guest.
  MEMCG=$(memcg_create "sdpshim-trust-$$-$BATS_TEST_NUMBER" 512M)
  if [ -n "$MEMCG" ]; then
    start_bg server sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$MEMCG" \
      timeout -k 5 300 "${PRE[@]}" "$CONNECTS" -s "$FLOOD_PORT" -a "$RXE_IP" -n 2
  else
    start_bg server timeout -k 5 300 "${PRE[@]}" "$CONNECTS" -s "$FLOOD_PORT" -a "$RXE_IP" -n 2
  fi
  wait_port "$RXE_IP" "$FLOOD_PORT"
  spid=$(pgrep -n -P "$(cat "$T/server.pid")")
  [ -n "$spid" ]
  base_pin=$(proc_vmpin_kb "$spid"); base_mr=$(proc_mr_bytes "$spid")
  [ -n "$MEMCG" ] && base_peak=$(cat "$MEMCG/memory.peak" 2>/dev/null)
  pin_watch_start "$spid"
  # The most a Hello may ask for: 16 GiB in all.
  flood_phase big "$(free_port)" 1048576 || r1=$?
  # 1 GiB in all: a server that pins what it is asked for can pin this much
  # in the test guest (1 GiB of RAM refuses a single 1 GiB mapping outright,
  # under the kernel's overcommit heuristic, so the phase above cannot show it).
  flood_phase mid "$(free_port)" 65536 || r2=$?
  pin_watch_stop
  read -r max_pin max_mr < <(pin_watch_max)
  if [ -n "$MEMCG" ]; then
    peak=$(cat "$MEMCG/memory.peak" 2>/dev/null) || true
    oom=$(tr '\n' ' ' <"$MEMCG/memory.events") || true
  fi
  wait_bg server || src=$?
  grow_pin=$(( (max_pin - base_pin) * 1024 )); grow_mr=$(( max_mr - base_mr ))
  for ph in big mid; do
    show "phase $ph: rogue $(grep -c '^established conn' "$T/$ph.log") established, $(grep -c '^rejected conn' "$T/$ph.log") rejected: $(rogue_summary "$ph")" \
         "  while held (VmPin kB, MR bytes): at most $(pin_watch_max "$ph")" \
         "  honest client: $(tr '\n' ' ' <"$T/$ph.honest")"
  done
  show "server pid $spid: VmPin $base_pin kB before, at most $max_pin kB ($((grow_pin >> 20)) MiB more)" \
       "server MRs (rdma resource show mr): $base_mr bytes before, at most $max_mr ($((grow_mr >> 20)) MiB more)" \
       "memory cgroup: ${MEMCG:-none}; memory.peak ${base_peak:-?} before, ${peak:-?} after; events: ${oom:-?}" \
       "server rc=$src: $(bg_log server | tail -4)" "$(stats_lines "$STATS")"
  [ "$(grep -c '^\(established\|rejected\|error\) ' "$T/big.log")" -eq 16 ]
  [ "$(grep -c '^\(established\|rejected\|error\) ' "$T/mid.log")" -eq 16 ]
  grep -q 'uid=65534' "$T/big.log"
  [ "$grow_pin" -lt "$limit" ]
  [ "$grow_mr" -lt "$limit" ]
  if [ -n "$MEMCG" ] && [ -n "$base_peak" ]; then
    [ -n "$peak" ]
    [ $(( peak - base_peak )) -lt "$limit" ]
    grep -Eq '(^| )oom_kill 0( |$)' <<<"$oom"
  fi
  [ "$r1" -eq 0 ]
  [ "$r2" -eq 0 ]
  grep -qE '^conn 1 connect_ms=.* ok$' "$T/big.honest"
  grep -qE '^conn 1 connect_ms=.* ok$' "$T/mid.honest"
  [ "$(stats_lines "$STATS" role=client comm=connects | wc -l)" -eq 2 ]
  [ "$(stats_lines "$STATS" role=client comm=connects path=rdma reason=none | wc -l)" -eq 2 ]
  [ "$src" -eq 0 ]
  [ "$1" = conn ] || [ "$(grep -c '^open_ack ' "$T/big.log")" -eq 16 ]
}

@test "16 Hellos asking for 1024 x 1 MiB (and 1024 x 64 KiB) buffers: the server pins < 64 MiB for them, honest clients stay on RDMA" {
  hello_flood conn
}

@test "[link] 16 link Hellos and OPENs asking for 1024 x 1 MiB (and 1024 x 64 KiB) buffers: the server pins its own link geometry for them, honest clients stay on RDMA" {
  hello_flood link
}

# uncommitted_forged MODE: over a link the pending stream exists once its
# OPEN_ACK came.
uncommitted_forged() {
  local port sport sent got ms ready='^(established|rejected|error) conn=0'
  link_mode "$1"
  [ "$1" = conn ] || ready='^(open_ack|open_nak|rejected|error) conn=0'
  port=$(free_port); sport=$(free_port)
  start_bg server timeout -k 5 120 "${PRE[@]}" "$TRUST_PROGS/acceptwait" -s "$port" -a "$RXE_IP" -n 1
  wait_for_line "$T/server.log" '^listening ' 30
  rogue_start rogue hello --to "$RXE_IP:$port" --src-port "$sport" --no-commit --hold 120 "${LINK_ARG[@]}"
  wait_for_line "$T/rogue.log" "$ready" 60
  plain_echo_client "$RXE_IP" "$port" "$sport" 65536 >"$T/plain.out" 2>&1 || true
  local src=0
  wait_bg server || src=$?
  rogue_stop rogue || true
  ms=$(sed -n 's/^accept_ms=//p' "$T/server.log")
  sent=$(sed -n 's/^sent=//p' "$T/plain.out"); got=$(sed -n 's/^got=//p' "$T/plain.out")
  show "preloaded acceptwait: $(tr '\n' ' ' <"$T/server.log")(rc=$src)" \
       "plain client from port $sport: $(tr '\n' ' ' <"$T/plain.out")" \
       "rogue:" "$(head -12 "$T/rogue.log")" "$(stats_lines "$STATS")"
  grep -q 'uid=65534' "$T/rogue.log"
  grep -q '^established conn=0' "$T/rogue.log"   # the pending channel existed
  [ "$1" = conn ] || grep -q '^open_ack conn=0' "$T/rogue.log"
  [ "$src" -eq 0 ]
  [ -n "$ms" ]
  awk -v ms="$ms" 'BEGIN { exit !(ms < 500) }'
  [ -n "$sent" ]
  [ "$got" = "$sent" ]
  [ "$(rogue_field rogue data_bytes)" = 0 ]
}

@test "uncommitted forged Hello naming a plain client's source port: a non-blocking accept4() is not stalled" {
  uncommitted_forged conn
}

@test "[link] uncommitted forged OPEN naming a plain client's source port: a non-blocking accept4() is not stalled" {
  uncommitted_forged link
}

# --- lies only a link can tell ----------------------------------------------

# honest_connects PORT NAME: a preloaded `connects` client echoing 64 KiB,
# checked by SHA-256 in the client; output in $T/NAME.out
honest_connects() {
  run_timeout 60 "${PRE[@]}" "$CONNECTS" -c "$RXE_IP" -p "$1" -n 1 -b 65536 >"$T/$2.out" 2>&1
}

@test "[link] 20 OPENs naming another host's address (tuples its link does not own): 20 OPEN_NAKs, 5 diagnostics (the rest left out), no stream; the server lives, an honest client stays on RDMA" {
  local port sport src=0 hrc=0
  link_mode link
  port=$(free_port); sport=$(free_port)
  start_bg server timeout -k 5 120 "${PRE[@]}" "$CONNECTS" -s "$port" -a "$RXE_IP" -n 1
  wait_port "$RXE_IP" "$port"
  # The link's own Hello is honest; its 20 OPENs name 10.77.0.99:SPORT..SPORT+19.
  # A peer may repeat a refusal at will: the server logs a burst of 5 of them.
  rogue_start rogue hello --to "$RXE_IP:$port" --src-port "$sport" --src-addr 10.77.0.99 \
    --hold 120 --link --streams 20
  wait_for_line "$T/rogue.log" '^(open_ack|open_nak|rejected|error) conn=0 stream=19' 60 || true
  honest_connects "$port" honest || hrc=$?
  rogue_stop rogue || true
  wait_bg server || src=$?
  show "rogue (OPEN naming 10.77.0.99:$sport -> $RXE_IP:$port):" "$(head -12 "$T/rogue.log")" \
       "honest client (rc=$hrc): $(tr '\n' ' ' <"$T/honest.out")" \
       "server (rc=$src):" "$(bg_log server | tail -6)" "$(stats_lines "$STATS")"
  grep -q 'uid=65534' "$T/rogue.log"
  grep -q '^established conn=0 link=1 ' "$T/rogue.log"
  [ "$(grep -c '^open_nak conn=0 stream=[0-9]* code=5 ' "$T/rogue.log")" -eq 20 ]   # SDP_REJECT_TUPLE
  [ "$(rogue_field rogue opened)" = 0 ]
  [ "$(rogue_field rogue attach)" = 0 ]
  [ "$(rogue_field rogue data_bytes)" = 0 ]
  [ "$(link_diags "$T/server.log" 'OPEN names a TCP tuple this listener does not serve')" -eq 5 ]
  [ "$hrc" -eq 0 ]
  grep -qE '^conn 1 connect_ms=.* ok$' "$T/honest.out"
  [ "$src" -eq 0 ]
  [ "$(stats_lines "$STATS" role=client comm=connects path=rdma reason=none | wc -l)" -eq 1 ]
}

@test "[link] rogue listener's RELEASED for a stream index past the client's table: the client (ASan build) writes nothing past it and gets its echo from the real server over TCP" {
  local port crc=0 src=0
  san_setup
  link_mode link
  # 1024 streams per link is the default; the rogue names index 1024, the
  # first one past the client's table.
  export SDPSHIM_CONNECT_TIMEOUT_MS=3000 SDPSHIM_LINK_STREAMS=1024
  port=$(free_port)
  start_bg server timeout -k 5 120 "$CONNECTS" -s "$port" -a "$RXE_IP" -n 1   # plain TCP
  wait_port "$RXE_IP" "$port"
  rogue_start rogue listen --port "$port" --addr "$RXE_IP" --link --lie released-oob \
    --stream-index 1024
  wait_for_line "$T/rogue.log" '^listening ' 30
  run_timeout 60 env "${SAN_ENV[@]}" "$CONNECTS" -c "$RXE_IP" -p "$port" -n 1 -b 65536 \
    >"$T/client.out" 2>&1 || crc=$?
  rogue_stop rogue || true
  wait_bg server || src=$?
  show "client, ASan build preloaded (rc=$crc; 99: ASan report):" "$(head -40 "$T/client.out")" \
       "rogue:" "$(grep -v '^msg ' "$T/rogue.log" | head -20)" "server rc=$src" \
       "$(stats_lines "$STATS")"
  grep -q 'uid=65534' "$T/rogue.log"
  # The lie was told to the client's link.
  grep -q '^released_lie conn=0 stream=1024 ' "$T/rogue.log"
  [ "$(rogue_field rogue lies)" = 1 ]
  san_clean <"$T/client.out"
  [ "$crc" -eq 0 ]
  grep -qE '^conn 1 connect_ms=.* ok$' "$T/client.out"
  [ "$(rogue_field rogue data_bytes)" = 0 ]
  [ "$src" -eq 0 ]
}

@test "[link] links held open without a stream (SDPSHIM_LINK_MAX of them): the server lets them go within SDPSHIM_PENDING_TTL_MS, and an honest client then gets RDMA again" {
  local port src=0 hrc=0 ttl=3000
  link_mode link
  port=$(free_port)
  # A small link budget stands for the default 64 (4 MiB pinned each): the
  # rogue needs one QP and 128 KiB per link it holds.
  start_bg server env SDPSHIM_LINK_MAX=4 SDPSHIM_PENDING_TTL_MS=$ttl timeout -k 5 120 \
    "${PRE[@]}" "$CONNECTS" -s "$port" -a "$RXE_IP" -n 1
  wait_port "$RXE_IP" "$port"
  rogue_start rogue hello --to "$RXE_IP:$port" --src-port 1 --count 4 --link --streams 0 --hold 120
  wait_for_line "$T/rogue.log" '^holding ' 60
  sleep $(( ttl / 1000 + 3 ))   # the pending TTL, and some
  honest_connects "$port" honest || hrc=$?
  rogue_stop rogue || true
  wait_bg server || src=$?
  show "rogue (4 links, no stream):" "$(head -14 "$T/rogue.log")" "$(rogue_summary rogue)" \
       "honest client $(( ttl / 1000 + 3 )) s later (rc=$hrc): $(tr '\n' ' ' <"$T/honest.out")" \
       "server (rc=$src):" "$(bg_log server | tail -6)" "$(stats_lines "$STATS")"
  grep -q 'uid=65534' "$T/rogue.log"
  [ "$(grep -c '^established conn=[0-9]* link=1 ' "$T/rogue.log")" -eq 4 ]
  [ "$hrc" -eq 0 ]
  grep -qE '^conn 1 connect_ms=.* ok$' "$T/honest.out"
  [ "$src" -eq 0 ]
  [ "$(stats_lines "$STATS" role=client comm=connects path=rdma reason=none | wc -l)" -eq 1 ]
}

# A peer that acknowledges nothing (its link headers' lack stays 0, no
# CREDIT) while it keeps asking: every answer the server owes it can only
# queue behind link credits that never come back.  The queue is bounded
# (a small SDPSHIM_DEBUG_LINK_JOBS_MAX stands for the default, its streams'
# credits' worth): the link fails, once, and the server lives on.
@test "[link] a linked peer that returns no link credits and sends 64 OPENs: the server's queue of answers stays bounded, the link fails with one diagnostic, and an honest client then gets RDMA" {
  local port src=0 hrc=0
  link_mode link
  port=$(free_port)
  start_bg server env SDPSHIM_DEBUG_LINK_JOBS_MAX=32 timeout -k 5 120 \
    "${PRE[@]}" "$CONNECTS" -s "$port" -a "$RXE_IP" -n 1
  wait_port "$RXE_IP" "$port"
  rogue_start rogue hello --to "$RXE_IP:$port" --src-port 2000 --link --streams 64 --no-commit \
    --hold 120 --lie withhold-lack
  wait_for_line "$T/server.log" 'takes no more messages' 60 || true
  rogue_stop rogue || true
  honest_connects "$port" honest || hrc=$?
  wait_bg server || src=$?
  show "rogue (64 OPENs, no credits back):" "$(grep -vE '^(open_sent|open_ack|open_nak) ' "$T/rogue.log" | head -12)" \
       "open answers the rogue got: $(grep -cE '^open_(ack|nak) ' "$T/rogue.log")" "$(rogue_summary rogue)" \
       "honest client (rc=$hrc): $(tr '\n' ' ' <"$T/honest.out")" \
       "server (rc=$src):" "$(bg_log server | tail -6)" "$(stats_lines "$STATS")"
  grep -q 'uid=65534' "$T/rogue.log"
  grep -q '^established conn=0 link=1 ' "$T/rogue.log"
  [ "$(grep -c 'a linked peer takes no more messages' "$T/server.log")" -eq 1 ]
  [ "$(grep -cE '^open_(ack|nak) ' "$T/rogue.log")" -lt 64 ]
  [ "$hrc" -eq 0 ]
  grep -qE '^conn 1 connect_ms=.* ok$' "$T/honest.out"
  [ "$src" -eq 0 ]
  [ "$(stats_lines "$STATS" role=client comm=connects path=rdma reason=none | wc -l)" -eq 1 ]
}

@test "[link] a local user opens a stream on a process's rendezvous port (docs/upgrade.md, \"Fork\"): OPEN_NAK tuple, no stream; the process's own stream stays on RDMA, echo checked" {
  local port sport rdv src=0 crc=0
  link_mode link
  port=$(free_port); sport=$(free_port)
  start_bg server timeout -k 5 120 "${PRE[@]}" "$CONNECTS" -s "$port" -a "$RXE_IP" -n 1
  wait_port "$RXE_IP" "$port"
  start_bg client timeout -k 5 120 env SDPSHIM_LOG=debug "${PRE[@]}" "$CONNECTS" \
    -c "$RXE_IP" -p "$port" -n 1 -w "$T/release"
  wait_for_line "$T/client.log" '^holding' 60
  rdv=$(sed -n 's/.*debug: rendezvous port \([0-9]*\)$/\1/p' "$T/client.log" | head -1)
  # Its link Hello names the port it dials (the rendezvous port); its OPEN a
  # TCP connection no listener there serves.
  rogue_start rogue hello --to "$RXE_IP:${rdv:-1}" --src-port "$sport" --hold 2 --link
  wait_for_line "$T/rogue.log" '^(open_ack|open_nak|rejected|error) conn=0' 60 || true
  rogue_stop rogue || true
  touch "$T/release"
  wait_bg client || crc=$?
  wait_bg server || src=$?
  show "client's rendezvous port: ${rdv:-none}" "rogue:" "$(head -12 "$T/rogue.log")" \
       "client (rc=$crc): $(grep -v debug "$T/client.log" | tail -4)" "server (rc=$src)" \
       "$(stats_lines "$STATS")"
  [ -n "$rdv" ]
  grep -q 'uid=65534' "$T/rogue.log"
  grep -q '^established conn=0 link=1 ' "$T/rogue.log"
  grep -q '^open_nak conn=0 stream=0 code=5 ' "$T/rogue.log"   # SDP_REJECT_TUPLE
  [ "$(rogue_field rogue opened)" = 0 ]
  [ "$(rogue_field rogue data_bytes)" = 0 ]
  [ "$crc" -eq 0 ]
  grep -qE '^conn 1 connect_ms=.* ok$' "$T/client.log"
  [ "$src" -eq 0 ]
  [ "$(stats_lines "$STATS" role=client comm=connects path=rdma reason=none | wc -l)" -eq 1 ]
}

# A process with no random source for its nonces (SDPSHIM_DEBUG_NO_RANDOM=1:
# getrandom and /dev/urandom count as failed) must not bind a channel by a
# nonce anyone could guess (the library once fell back to a constant): as the
# client or as the server, per connection and on links, each connection stays
# on TCP with the diagnostic, its echo checked, and no stream or channel opens.
no_random_case() {   # no_random_case client|server conn|link
  local side=$1 port src=0 crc=0 cenv=() senv=()
  link_mode "$2"
  if [ "$side" = client ]; then cenv=(SDPSHIM_DEBUG_NO_RANDOM=1); else senv=(SDPSHIM_DEBUG_NO_RANDOM=1); fi
  port=$(free_port)
  start_bg server timeout -k 5 120 env "${senv[@]}" "${PRE[@]}" "$CONNECTS" -s "$port" -a "$RXE_IP" -n 3
  wait_port "$RXE_IP" "$port"
  start_bg client timeout -k 5 120 env "${cenv[@]}" "${PRE[@]}" "$CONNECTS" -c "$RXE_IP" -p "$port" -n 3
  wait_bg client || crc=$?
  wait_bg server || src=$?
  show "client (rc=$crc): $(tail -3 "$T/client.log")" "server (rc=$src): $(tail -3 "$T/server.log")" \
       "$(stats_lines "$STATS")"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "$(grep -cE '^conn [0-9]+ connect_ms=.* ok$' "$T/client.log")" -eq 3 ]
  grep -q 'no random source for a channel nonce' "$T/$side.log"
  [ "$(stats_lines "$STATS" role=client comm=connects path=tcp | wc -l)" -eq 3 ]
  [ "$(stats_lines "$STATS" path=rdma | wc -l)" -eq 0 ]
}

@test "no random source for a nonce at the client (SDPSHIM_DEBUG_NO_RANDOM): each connection stays on TCP, echo checked" {
  no_random_case client conn
}

@test "[link] no random source for a nonce at the client: each stream stays on TCP, echo checked" {
  no_random_case client link
}

@test "no random source for a nonce at the server: it refuses each channel, the client uses TCP, echo checked" {
  no_random_case server conn
}

@test "[link] no random source for a nonce at the server: it refuses each OPEN, the client uses TCP, echo checked" {
  no_random_case server link
}
