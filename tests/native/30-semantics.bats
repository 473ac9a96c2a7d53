#!/usr/bin/env bats
# Native suite, part 30: socket semantics under the shim.  Every readiness case
# and every sockcheck scenario runs preloaded, stream runs in each I/O mode and
# fortified, and the stats file, the info log and `sdpshim stat --json` must
# name the right fallback reason for each kind of connection.

load ../helpers

STREAM_BYTES=$((16 << 20))
STREAM_HEADER=32          # sizeof(struct header) in tests/progs/stream.c

setup_file() {
  write_checker
  # Reference digests of the "-d both" streams, from a run without the shim.
  local port out=$BATS_FILE_TMPDIR/ref.out
  port=$(free_port)
  timeout -k 5 60 "$PROGS/stream" -s "$port" -n 1 >"$out.server" 2>&1 3>&- &
  local spid=$!
  wait_port 127.0.0.1 "$port"
  run_timeout 60 "$PROGS/stream" -c 127.0.0.1 -p "$port" -b "$STREAM_BYTES" -d both -m 1M \
    >"$out.client" 2>&1
  wait "$spid"
  grep -oE 'sha256=[0-9a-f]{64}' "$out.server" | cut -d= -f2 >"$BATS_FILE_TMPDIR/ref.server"
  grep -oE 'sha256=[0-9a-f]{64}' "$out.client" | cut -d= -f2 >"$BATS_FILE_TMPDIR/ref.client"
}

# check_lines.py FILE [--min N] [--reason COMM=REASON]... [--exact-bytes]
# Every line must be a connection on kernel TCP with the reason expected for its
# program (default loopback).  --exact-bytes: for every connection both ends
# logged, what one end sent (summed over its lines) is what the other received.
write_checker() {
  cat >"$BATS_FILE_TMPDIR/check_lines.py" <<'EOF'
import argparse, collections, json, os, re, sys

ap = argparse.ArgumentParser()
ap.add_argument("file")
ap.add_argument("--min", type=int, default=1)
ap.add_argument("--reason", action="append", default=[])
ap.add_argument("--exact-bytes", action="store_true")
args = ap.parse_args()
reasons = dict(r.split("=", 1) for r in args.reason)
fields = ("pid", "comm", "fd", "role", "local", "remote", "path", "reason", "bytes_sent", "bytes_received")
lines = []
if os.path.exists(args.file):
    with open(args.file) as f:
        lines = [json.loads(line) for line in f]
errors = []
if len(lines) < args.min:
    errors.append("%d lines, expected at least %d" % (len(lines), args.min))
for c in lines:
    missing = [k for k in fields if k not in c]
    want = reasons.get(c.get("comm"), "loopback")
    if missing:
        errors.append("fields %s missing: %s" % (missing, c))
    elif c["path"] != "tcp" or c["reason"] != want:
        errors.append("%s fd %d %s: path/reason %s/%s, expected tcp/%s" % (
            c["comm"], c["fd"], c["role"], c["path"], c["reason"], want))
    elif c["role"] not in ("client", "server"):
        errors.append("role %s: %s" % (c["role"], c))

def plain(addr):
    return re.sub(r"^\[::ffff:([0-9.]+)\]", r"\1", addr)

if args.exact_bytes and not errors:
    ends = collections.defaultdict(lambda: [0, 0])     # (role, local, remote) -> [sent, received]
    for c in lines:
        key = (c["role"], plain(c["local"]), plain(c["remote"]))
        ends[key][0] += c["bytes_sent"]
        ends[key][1] += c["bytes_received"]
    for (role, local, remote), (sent, received) in ends.items():
        if role != "client" or "-" in (local, remote):
            continue
        other = ends.get(("server", remote, local))
        if other is None and sent == received == 0:
            continue                                    # a refused connect: no server end
        if other is None:
            errors.append("client %s -> %s: no server line" % (local, remote))
        elif other != [received, sent]:
            errors.append("client %s -> %s sent/received %d/%d, server received/sent %d/%d" % (
                local, remote, sent, received, other[1], other[0]))
print("%d lines ok" % len(lines) if not errors else "%d lines" % len(lines))
for e in errors[:10]:
    print("ERROR: " + e)
sys.exit(1 if errors else 0)
EOF
}

setup() {
  [ -x "$SDPSHIM_BIN" ] || { echo "missing $SDPSHIM_BIN: run make first" >&2; return 1; }
  export SDPSHIM_RUN_DIR=$BATS_TEST_TMPDIR/run
  mkdir -p "$SDPSHIM_RUN_DIR"
  unset SDPSHIM_CONFIG SDPSHIM_MODE SDPSHIM_LOG LD_PRELOAD
  export TMPDIR=$BATS_TEST_TMPDIR
  STATS=$BATS_TEST_TMPDIR/stats.jsonl
  PRELOADED=(env SDPSHIM_STATS_FILE="$STATS" "$SDPSHIM_BIN" run --)   # prefix: CMD preloaded
}

teardown() { stop_recorded_pids; }

have_ipv6_loopback() {
  grep -q '^00000000000000000000000000000001 ' /proc/net/if_inet6 2>/dev/null
}

# This host's first global IPv4 address, if any.
host_ipv4() {
  ip -4 -o addr show scope global 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }'
}


check_lines() {
  run python3 "$BATS_FILE_TMPDIR/check_lines.py" "$STATS" "$@"
  show "stats: $output"
  [ "$status" -eq 0 ]
}

# Prints the stats lines as "comm fd role local remote path reason sent received".
stats_table() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    c = json.loads(line)
    print(c["comm"], c["fd"], c["role"], c["local"], c["remote"], c["path"], c["reason"],
          c["bytes_sent"], c["bytes_received"])' "$STATS"
}

# --- readiness: both ends in one preloaded process ----------------------------

readiness_case() {   # readiness_case CASE
  local case=$1 addr addrs="127.0.0.1"
  have_ipv6_loopback && addrs="$addrs ::1"
  for addr in $addrs; do
    run run_timeout 60 "${PRELOADED[@]}" "$PROGS/readiness" "$addr" "$(free_port)" "$case"
    show "$addr: $output"
    [ "$status" -eq 0 ]
    grep -qx "ok $case" <<<"$output"
  done
  check_lines --min 2 --exact-bytes
}

@test "readiness epoll_lt under the shim" { readiness_case epoll_lt; }
@test "readiness epoll_et under the shim" { readiness_case epoll_et; }
@test "readiness epoll_oneshot under the shim" { readiness_case epoll_oneshot; }
@test "readiness epoll_rdhup under the shim" { readiness_case epoll_rdhup; }
@test "readiness epoll_mod_toggle under the shim: EPOLLOUT switched by EPOLL_CTL_MOD 400 times" { readiness_case epoll_mod_toggle; }
@test "readiness epoll_joined_asleep under the shim: a thread asleep in a set before the socket joined it wakes with the app's event" { readiness_case epoll_joined_asleep; }
@test "readiness epoll_unwanted under the shim: unread bytes on a socket watched without EPOLLIN wake no one" { readiness_case epoll_unwanted; }
@test "readiness poll_unwanted under the shim: the same with poll() and select()" { readiness_case poll_unwanted; }
@test "readiness epoll_starve under the shim: a readable socket is reported in turn beside an always readable pipe, with maxevents 1" { readiness_case epoll_starve; }
@test "readiness bad_timeout under the shim: ppoll, pselect and select refuse a timeout the kernel refuses" { readiness_case bad_timeout; }
@test "readiness select_big under the shim: select past FD_SETSIZE (fds 1500 and 2000), with the fd table spanning a library fd past the fd_set, and the time left after EINTR" { READINESS_LIB_FD_HIGH=1 readiness_case select_big; }
@test "readiness epoll_dup under the shim: a set under dup, dup2 and F_DUPFD numbers reports the app's data, and lives on after its first number closes" { readiness_case epoll_dup; }
@test "readiness poll under the shim" { readiness_case poll; }
@test "readiness ppoll under the shim" { readiness_case ppoll; }
@test "readiness select under the shim" { readiness_case select; }
@test "readiness pselect under the shim" { readiness_case pselect; }
@test "readiness mixed (socket, pipe, eventfd, timerfd) under the shim" { readiness_case mixed; }
@test "readiness nbconnect under the shim" { readiness_case nbconnect; }
@test "readiness refused under the shim" { readiness_case refused; }
@test "readiness lifecycle (epoll set before connect, beside an unconnected socket, after it) under the shim" {
  readiness_case lifecycle
}

# --- sockcheck: the whole program preloaded -----------------------------------

sockcheck() {   # sockcheck SCENARIO ADDR : runs it preloaded, expects "ok SCENARIO"
  run run_timeout 90 "${PRELOADED[@]}" "$PROGS/sockcheck" "$1" "$2" "$(free_port)"
  show "$output"
  [ "$status" -eq 0 ]
  grep -qx "ok $1" <<<"$output"
}

@test "sockcheck halfclose under the shim" {
  sockcheck halfclose 127.0.0.1
  check_lines --min 4 --exact-bytes
}

@test "sockcheck forkserver (20 sequential + 5 concurrent) under the shim" {
  sockcheck forkserver 127.0.0.1
  check_lines --min 50 --exact-bytes
}

@test "sockcheck threadserver (8 concurrent) under the shim" {
  sockcheck threadserver 127.0.0.1
  check_lines --min 16 --exact-bytes
}

@test "sockcheck sendfile and sendfile64 (64 MiB) under the shim" {
  nm -D --undefined-only "$PROGS/sockcheck" | grep -qw sendfile64
  sockcheck sendfile 127.0.0.1
  check_lines --min 4 --exact-bytes
}

@test "sockcheck inetd (sh -c sha256sum, cat on stdin/stdout) under the shim" {
  sockcheck inetd 127.0.0.1
  check_lines --min 4 --reason sh=inherited --reason sha256sum=inherited --reason cat=inherited
}

@test "sockcheck execinherit (re-exec with fd 3, sh <&3 >&3) under the shim" {
  sockcheck execinherit 127.0.0.1
  check_lines --min 4 --reason sockcheck-child=inherited --reason sh=inherited \
    --reason sha256sum=inherited
}

@test "sockcheck execnofork (exec by each of glibc's 8 exec functions, no fork) under the shim" {
  sockcheck execnofork 127.0.0.1
  check_lines --min 8 --reason cat=inherited
}

# posix_spawn and system() children (no fork handlers run) echo on the
# socket they inherit; on kernel TCP the hooks move nothing, and break nothing.
spawn_echo_case() {   # spawn_echo_case spawn|system
  local port src=0
  port=$(free_port)
  "${PRELOADED[@]}" "$PROGS/forkecho" -s "$port" -a 127.0.0.1 -X "$1" -n 6 >"$BATS_TEST_TMPDIR/server.out" 2>&1 3>&- &
  local spid=$!
  wait_port 127.0.0.1 "$port"
  run run_timeout 60 "${PRELOADED[@]}" "$PROGS/forkecho" -c 127.0.0.1 -p "$port" -n 6 -j 3 -b 100000
  wait "$spid" || src=$?
  show "$output" "server (rc=$src): $(cat "$BATS_TEST_TMPDIR/server.out")"
  [ "$status" -eq 0 ]
  [ "$src" -eq 0 ]
  grep -qx "forkecho: 6/6 ok" <<<"$output"
  [ "$(grep -cE '^conn [0-9]+ bytes=100000 sha256=[0-9a-f]{64} ok$' <<<"$output")" -eq 6 ]
  grep -q "forkecho: server: 6 connections, 0 children failed, 0 forks failed" "$BATS_TEST_TMPDIR/server.out"
}

@test "forkecho -X spawn: posix_spawn children (a dup2 action) echo on the inherited socket under the shim" {
  spawn_echo_case spawn
}

@test "forkecho -X system: system() children echo on the inherited socket under the shim" {
  spawn_echo_case system
}

@test "sockcheck trunc (recv with MSG_TRUNC: NULL buffer, MSG_WAITALL, untouched buffer) under the shim" {
  sockcheck trunc 127.0.0.1
  check_lines --min 2 --exact-bytes
}

@test "sockcheck ipv6 (::1 and a v4-mapped peer) under the shim" {
  have_ipv6_loopback || skip "no ::1 on this host"
  sockcheck ipv6 ::1
  check_lines --min 4 --exact-bytes
  run stats_table
  show "$output"
  grep -Eq '^sockcheck [0-9]+ client \[::1\]:[0-9]+ \[::1\]:[0-9]+ tcp loopback ' <<<"$output"
  grep -Eq '^sockcheck [0-9]+ server \[::ffff:127\.0\.0\.1\]:[0-9]+ \[::ffff:127\.0\.0\.1\]:[0-9]+ tcp loopback ' <<<"$output"
}

# --- stream: every I/O mode, and the fortified build ---------------------------

# stream_pair CLIENT_PROG MODE [HOST [SERVER_FLAGS]]: a preloaded stream server and
# a preloaded client move 16 MiB each way; both digests must match the reference.
stream_pair() {
  local client=$1 mode=$2 host=${3:-127.0.0.1} flags=${4:-} port spid rc=0
  local out=$BATS_TEST_TMPDIR/stream
  port=$(free_port)
  # shellcheck disable=SC2086   # flags is empty or -6
  timeout -k 5 60 "${PRELOADED[@]}" "$PROGS/stream" -s "$port" -n 1 -e "$mode" $flags \
    >"$out.server" 2>&1 3>&- &
  spid=$!
  echo "$spid" >"$BATS_TEST_TMPDIR/server.pid"
  wait_port "$host" "$port"
  run_timeout 60 "${PRELOADED[@]}" "$client" -c "$host" -p "$port" -b "$STREAM_BYTES" -d both \
    -m 1M -e "$mode" >"$out.client" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || kill "$spid" 2>/dev/null || true   # no client: do not wait 60 s
  wait "$spid" || rc=$?
  show "$(cat "$out.server" "$out.client")"
  [ "$rc" -eq 0 ]
  grep -q "server received $STREAM_BYTES bytes sha256=$(cat "$BATS_FILE_TMPDIR/ref.server") OK" "$out.server"
  grep -q "client received $STREAM_BYTES bytes sha256=$(cat "$BATS_FILE_TMPDIR/ref.client") OK" "$out.client"
  STREAM_PORT=$port
}

# The client's stats line must count every byte it moved (so every read and
# write went through the shim): the header and 16 MiB out, 16 MiB in.
check_stream_client_bytes() {   # check_stream_client_bytes COMM
  run stats_table
  show "$output"
  grep -Eq "^$1 [0-9]+ client [^ ]+ [^ ]+:$STREAM_PORT tcp loopback $((STREAM_BYTES + STREAM_HEADER)) $STREAM_BYTES\$" <<<"$output"
}

@test "stream -e block: 16 MiB both ways, preloaded on both ends" {
  stream_pair "$PROGS/stream" block
  check_lines --min 2 --exact-bytes
  check_stream_client_bytes stream
}

@test "stream -e poll: 16 MiB both ways, preloaded on both ends" {
  stream_pair "$PROGS/stream" poll
  check_lines --min 2 --exact-bytes
}

@test "stream -e select: 16 MiB both ways, preloaded on both ends" {
  stream_pair "$PROGS/stream" select
  check_lines --min 2 --exact-bytes
}

@test "stream -e epoll: 16 MiB both ways, preloaded on both ends" {
  stream_pair "$PROGS/stream" epoll
  check_lines --min 2 --exact-bytes
}

@test "stream -e epollet: 16 MiB both ways, preloaded on both ends" {
  stream_pair "$PROGS/stream" epollet
  check_lines --min 2 --exact-bytes
}

@test "stream_fortify imports __read_chk, __recv_chk and __poll_chk, and the shim exports them" {
  local f=$PROGS/stream_fortify sym
  [ -x "$f" ] || { echo "missing $f: run make first" >&2; return 1; }
  run nm -D --undefined-only "$f"
  for sym in __read_chk __recv_chk __poll_chk; do
    grep -Eq " $sym(@|\$)" <<<"$output" || { echo "$f does not import $sym" >&2; return 1; }
  done
  # Its data path must not fall back to the plain entry points.
  if grep -Eq ' (read|recv|poll)(@|$)' <<<"$output"; then
    echo "$f still imports plain read/recv/poll" >&2
    return 1
  fi
  run nm -D --defined-only "$SDPSHIM_LIB"
  for sym in __read_chk __recv_chk __poll_chk; do
    grep -Eq " $sym(@|\$)" <<<"$output" || { echo "$SDPSHIM_LIB does not export $sym" >&2; return 1; }
  done
}

@test "stream_fortify client (-e block and -e poll) against a preloaded server" {
  local mode
  for mode in block poll; do
    rm -f "$STATS"
    stream_pair "$PROGS/stream_fortify" "$mode"
    check_lines --min 2 --exact-bytes
    check_stream_client_bytes stream_fortify
  done
}

# --- reasons ---------------------------------------------------------------------

@test "reason: 127.0.0.1 is loopback (stats file and SDPSHIM_LOG=info)" {
  export SDPSHIM_LOG=info
  stream_pair "$PROGS/stream" block
  run stats_table
  show "$output"
  [ "${#lines[@]}" -eq 2 ]
  grep -Eq "^stream [0-9]+ client 127\.0\.0\.1:[0-9]+ 127\.0\.0\.1:$STREAM_PORT tcp loopback " <<<"$output"
  grep -Eq "^stream [0-9]+ server 127\.0\.0\.1:$STREAM_PORT 127\.0\.0\.1:[0-9]+ tcp loopback " <<<"$output"
  # One info line per connection, on each side.
  local out=$BATS_TEST_TMPDIR/stream
  [ "$(grep -c 'path=tcp' "$out.client")" -eq 1 ]
  [ "$(grep -c 'path=tcp' "$out.server")" -eq 1 ]
  grep -Eq "client 127\.0\.0\.1:[0-9]+ -> 127\.0\.0\.1:$STREAM_PORT: path=tcp reason=loopback" "$out.client"
  grep -Eq "server 127\.0\.0\.1:$STREAM_PORT -> 127\.0\.0\.1:[0-9]+: path=tcp reason=loopback" "$out.server"
}

@test "reason: ::1 is loopback" {
  have_ipv6_loopback || skip "no ::1 on this host"
  stream_pair "$PROGS/stream" block ::1 -6
  run stats_table
  show "$output"
  [ "${#lines[@]}" -eq 2 ]
  grep -Eq "^stream [0-9]+ client \[::1\]:[0-9]+ \[::1\]:$STREAM_PORT tcp loopback " <<<"$output"
  grep -Eq "^stream [0-9]+ server \[::1\]:$STREAM_PORT \[::1\]:[0-9]+ tcp loopback " <<<"$output"
}

@test "reason: this host's own non-loopback IPv4 address is no_device" {
  local ip
  ip=$(host_ipv4)
  [ -n "$ip" ] || skip "this host has no global IPv4 address"
  [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ] || skip "this host has an RDMA device"
  stream_pair "$PROGS/stream" block "$ip"
  run stats_table
  show "$output"
  [ "${#lines[@]}" -eq 2 ]
  grep -Eq "^stream [0-9]+ client ${ip//./\\.}:[0-9]+ ${ip//./\\.}:$STREAM_PORT tcp no_device " <<<"$output"
  grep -Eq "^stream [0-9]+ server ${ip//./\\.}:$STREAM_PORT ${ip//./\\.}:[0-9]+ tcp no_device " <<<"$output"
}

@test "reason: a 'use tcp' config rule gives rule_tcp, only for the programs it names" {
  local conf=$BATS_TEST_TMPDIR/rules.conf
  printf 'use tcp client * *:*\n' >"$conf"
  SDPSHIM_CONFIG=$conf run run_timeout 60 "${PRELOADED[@]}" "$PROGS/readiness" 127.0.0.1 "$(free_port)" poll
  [ "$status" -eq 0 ]
  run stats_table
  show "$output"
  [ "${#lines[@]}" -eq 2 ]
  grep -Eq '^readiness [0-9]+ client .* tcp rule_tcp ' <<<"$output"
  grep -Eq '^readiness [0-9]+ server .* tcp loopback ' <<<"$output"   # the rule is client-only

  rm -f "$STATS"
  printf 'use tcp client nosuchprogram *:*\n' >"$conf"
  SDPSHIM_CONFIG=$conf run run_timeout 60 "${PRELOADED[@]}" "$PROGS/readiness" 127.0.0.1 "$(free_port)" poll
  [ "$status" -eq 0 ]
  run stats_table
  show "$output"
  grep -Eq '^readiness [0-9]+ client .* tcp loopback ' <<<"$output"
}

# A config file with a bad line, or one that cannot be read, fails closed:
# none of its rules apply and every connection is rule_tcp (README,
# Configuration).  Without the file's verdict a loopback client would show
# reason loopback, and one to this host's address no_device.  An accepted
# loopback connection shows loopback whatever the rules; on this host's
# address it shows its listener's rule_tcp.
broken_config_case() {   # broken_config_case CONF DIAG : one warning, rule_tcp, per address
  local conf=$1 diag=$2 addr server_reason ip
  ip=$(host_ipv4)
  for addr in 127.0.0.1 $ip; do
    rm -f "$STATS"
    SDPSHIM_CONFIG=$conf run run_timeout 60 "${PRELOADED[@]}" "$PROGS/readiness" "$addr" "$(free_port)" poll
    show "$addr: $output"
    [ "$status" -eq 0 ]
    grep -qx "ok poll" <<<"$output"
    # One warning line, naming the file (and line), saying what now applies.
    [ "$(grep -c 'ignoring its rules' <<<"$output")" -eq 1 ]
    grep -F "sdpshim[" <<<"$output" |
      grep -qF "warn: $diag; ignoring its rules: every connection uses TCP (fail closed)"
    run stats_table
    show "$output"
    [ "${#lines[@]}" -eq 2 ]
    server_reason=rule_tcp; [ "$addr" = 127.0.0.1 ] && server_reason=loopback
    grep -Eq '^readiness [0-9]+ client .* tcp rule_tcp ' <<<"$output"
    grep -Eq "^readiness [0-9]+ server .* tcp $server_reason " <<<"$output"
  done
}

@test "reason: a config with a bad line fails closed: its 'use tcp' still applies, and every connection is rule_tcp" {
  local conf=$BATS_TEST_TMPDIR/broken.conf
  # The admin's 'use tcp' for loopback clients, then a typo on line 3.
  printf '# loopback stays on TCP\nuse tcp client * 127.0.0.0/8:*\nuse rdmaa server * *:*\n' >"$conf"
  broken_config_case "$conf" "$conf:3: unknown use 'rdmaa' (expected rdma|tcp|both)"
  # The typo in the 'use tcp' line itself: TCP still, for everything.
  printf 'use tcp client * 127.0.0.0/88:*\n' >"$conf"
  broken_config_case "$conf" "$conf:1: bad prefix '88' (expected 0..32 for IPv4)"
}

@test "reason: a config file that cannot be read (a directory, a missing SDPSHIM_CONFIG) fails closed: rule_tcp" {
  local dir=$BATS_TEST_TMPDIR/conf.d
  mkdir -p "$dir"
  broken_config_case "$dir" "$dir: not a regular file (expected a text file)"
  broken_config_case "$BATS_TEST_TMPDIR/absent.conf" \
    "$BATS_TEST_TMPDIR/absent.conf: cannot open: No such file or directory"
}

@test "reason: execinherit's exec'd program logs its fd 3 as inherited, with its bytes" {
  sockcheck execinherit 127.0.0.1
  run stats_table
  show "$output"
  # seed 600 in sockcheck: 1 MiB + (600 * 4099 % 65521) bytes in, a 65-byte digest line out.
  local payload=$(( (1 << 20) + 600 * 4099 % 65521 ))
  grep -Eq "^sockcheck-child 3 server 127\.0\.0\.1:[0-9]+ 127\.0\.0\.1:[0-9]+ tcp inherited 65 $payload\$" <<<"$output"
  grep -Eq '^sha256sum [0-9]+ server .* tcp inherited ' <<<"$output"
}

@test "an inherited socket on several fds (inetd: stdin and stdout) is one connection" {
  sockcheck inetd 127.0.0.1
  run stats_table
  show "$output"
  local n
  n=$(grep -c '^cat ' <<<"$output" || true)
  [ "$n" -eq 1 ] || { echo "cat logged its one connection as $n connections" >&2; return 1; }
}

@test "a subprocess (fork + exec) does not log its parent's open connections" {
  local script=$BATS_TEST_TMPDIR/spawn.py parent
  cat >"$script" <<'EOF'
import os, socket, subprocess
lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(1)
client = socket.create_connection(lsock.getsockname())
server, _ = lsock.accept()
client.sendall(b"x" * 1000)
got = 0
while got < 1000:
    got += len(server.recv(4096))
subprocess.run(["/bin/true"], check=True)    # Python's sockets are FD_CLOEXEC
print(os.getpid())
EOF
  run run_timeout 30 "${PRELOADED[@]}" python3 "$script"
  [ "$status" -eq 0 ]
  parent=$(tail -n 1 <<<"$output")
  run stats_table
  show "python3 pid $parent; stats:" "$output"
  run python3 -c '
import json, sys
pids = [json.loads(line)["pid"] for line in open(sys.argv[1])]
sys.exit(0 if pids == [int(sys.argv[2])] * 2 else
         "lines from pids %s; both connections belong to pid %s" % (pids, sys.argv[2]))' \
    "$STATS" "$parent"
  echo "$output"
  [ "$status" -eq 0 ]
}

# --- sdpshim stat --json while connections are open ---------------------------

# A preloaded python3 that, for each ADDR, listens on ADDR, connects to itself,
# accepts, exchanges 1000 bytes, then writes "ADDR PORT" lines and sleeps.
start_holder() {   # start_holder ADDR...
  local ready=$BATS_TEST_TMPDIR/ready script=$BATS_TEST_TMPDIR/hold.py
  cat >"$script" <<'EOF'
import os, socket, sys, time
held, out = [], []
for addr in sys.argv[2:]:
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    lsock = socket.socket(fam)
    lsock.bind((addr, 0))
    lsock.listen(1)
    client = socket.create_connection(lsock.getsockname()[:2])
    server, _ = lsock.accept()
    client.sendall(b"c" * 1000)
    server.sendall(b"s" * 1000)
    for sock in (client, server):
        got = 0
        while got < 1000:
            got += len(sock.recv(4096))
    held += [lsock, client, server]
    out.append("%s %d" % (addr, lsock.getsockname()[1]))
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("\n".join(out) + "\n")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
EOF
  # No timeout wrapper: HOLDER_PID must be python3's own pid.  It exits by
  # itself after 120 s, and teardown kills it sooner.
  "$SDPSHIM_BIN" run -- python3 "$script" "$ready" "$@" 3>&- &
  HOLDER_PID=$!
  echo "$HOLDER_PID" >"$BATS_TEST_TMPDIR/holder.pid"
  disown                                  # teardown's kill is not news
  wait_for_line "$ready" "^$(printf '%s' "${!#}" | sed 's/\./\\./g') [0-9]+$" 20
}

@test "stat --json lists a held connection per address with path tcp and its reason" {
  local addrs="127.0.0.1" expect="127.0.0.1=loopback" ip
  if have_ipv6_loopback; then addrs="$addrs ::1"; expect="$expect ::1=loopback"; fi
  ip=$(host_ipv4)
  if [ -n "$ip" ] && [ -z "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
    addrs="$addrs $ip"; expect="$expect $ip=no_device"
  fi
  # shellcheck disable=SC2086
  start_holder $addrs
  run run_timeout 30 "$SDPSHIM_BIN" stat --json
  [ "$status" -eq 0 ]
  local doc=$output
  # shellcheck disable=SC2086
  run python3 -c '
import json, sys
doc = json.loads(sys.stdin.read())
pid, ports = int(sys.argv[1]), dict(l.split() for l in open(sys.argv[2]))
procs = [p for p in doc["processes"] if p["pid"] == pid]
assert len(procs) == 1, "holder pid %d not listed: %s" % (pid, doc)
conns = procs[0]["connections"]
def fmt(addr, port):
    return ("[%s]:%s" if ":" in addr else "%s:%s") % (addr, port)
for spec in sys.argv[3:]:
    addr, reason = spec.split("=")
    where = fmt(addr, ports[addr])
    for role, key in (("client", "remote"), ("server", "local")):
        found = [c for c in conns if c["role"] == role and c[key] == where]
        assert len(found) == 1, "%s %s %s: %s" % (role, key, where, conns)
        c = found[0]
        assert c["path"] == "tcp" and c["reason"] == reason, c
        assert c["bytes_sent"] == 1000 and c["bytes_received"] == 1000, c
        print("%s %s %s: tcp %s" % (role, key, where, c["reason"]))
' "$HOLDER_PID" "$BATS_TEST_TMPDIR/ready" $expect <<<"$doc"
  show "$output"
  [ "$status" -eq 0 ]
}

@test "_exit from a signal handler and _Exit keep their status under the shim (TCP sockets: no flush to wait for)" {
  local port rounds=3 crc=0 src=0
  port=$(free_port)
  timeout -k 5 60 "${PRELOADED[@]}" "$PROGS/exitsig" server 127.0.0.1 "$port" "$rounds" \
    >"$BATS_TEST_TMPDIR/server.log" 2>&1 3>&- &
  local spid=$!
  wait_port 127.0.0.1 "$port"
  run_timeout 60 "${PRELOADED[@]}" "$PROGS/exitsig" client 127.0.0.1 "$port" "$rounds" \
    >"$BATS_TEST_TMPDIR/client.log" 2>&1 || crc=$?
  wait "$spid" || src=$?
  show "client (rc=$crc): $(cat "$BATS_TEST_TMPDIR/client.log")" "server (rc=$src): $(cat "$BATS_TEST_TMPDIR/server.log")"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ "$(grep -c '^client round .*: rc 7 ' "$BATS_TEST_TMPDIR/client.log")" -eq "$rounds" ]
  # _Exit, and os._exit from Python (glibc's _exit), with its status.
  run "${PRELOADED[@]}" python3 -c 'import ctypes, os; ctypes.CDLL(None)._Exit(5)'
  [ "$status" -eq 5 ]
  run "${PRELOADED[@]}" python3 -c 'import os; os._exit(23)'
  [ "$status" -eq 23 ]
}
