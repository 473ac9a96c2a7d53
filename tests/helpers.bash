# Shared helpers for the bats suites (tests/native, tests/vm, tests/vm/pair).
# Load with `load ../helpers` (or `load ../../helpers` from tests/vm/pair).
#
#   REPO            absolute path of the repository
#   BUILD           build directory (env BUILD, default build; relative = under REPO)
#   SDPSHIM_LIB     $BUILD/libsdpshim.so        SDPSHIM_BIN  $BUILD/sdpshim
#   PROGS           $BUILD/tests/progs          RXE_IP       default 10.77.0.1
#   run_timeout SECS CMD...   run CMD, kill it after SECS (rc 124), never hang a suite
#   free_port                 print a TCP port nobody listens on or was handed out
#   wait_port HOST PORT [S]   wait (default 15 s) until a TCP listener is up, without
#                             connecting to it (a probe would eat one-shot servers)
#   wait_for_line FILE REGEX [S]  wait until FILE has a line matching REGEX
#   requires_rdma             skip without an RDMA device; fail instead if SDPSHIM_STRICT=1
#   requires_tool CMD PKG     skip when CMD is not installed (Debian package PKG, listed in
#                             tests/setup-debian.sh); fail instead if SDPSHIM_STRICT=1
#   sha256_of FILE            print the SHA-256 hex digest of FILE
#   show TEXT...              print lines into the TAP stream as "# ..." comments (visible
#                             even when the test passes)
#   stop_recorded_pids        TERM every pid in $BATS_TEST_TMPDIR/*.pid, SIGKILL what is
#                             still alive 5 s later (teardown of start_bg-style tests)
#   write_pair_py FILE        write pair.py: `python3 FILE READY [once]` listens on
#                             127.0.0.1, connects to itself, 5000 bytes each way, writes
#                             the port to READY, then sleeps 120 s (not with `once`)

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-build}
case "$BUILD" in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
SDPSHIM_LIB=$BUILD/libsdpshim.so
SDPSHIM_BIN=$BUILD/sdpshim
PROGS=$BUILD/tests/progs
RXE_IP=${RXE_IP:-10.77.0.1}
export REPO BUILD SDPSHIM_LIB SDPSHIM_BIN PROGS RXE_IP

run_timeout() {
  local secs=$1; shift
  local rc=0
  timeout -k 5 "$secs" "$@" || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "run_timeout: '$*' still running after ${secs}s, killed" >&2
  fi
  return "$rc"
}

# Ports in use in any TCP state, from /proc (column 2 = local addr:port, hex).
_used_ports() {
  local f h
  for f in /proc/net/tcp /proc/net/tcp6; do
    [ -r "$f" ] || continue
    for h in $(awk 'NR > 1 { n = split($2, a, ":"); print a[n] }' "$f"); do
      echo $(( 16#$h ))
    done
  done
}

free_port() {
  # Handed-out ports are remembered for the whole bats run, because each test
  # runs in its own subshell and a port may not be bound yet when the next asks.
  local book=${BATS_RUN_TMPDIR:-${TMPDIR:-/tmp}}/sdpshim-ports
  local used p i
  used=" $(_used_ports | tr '\n' ' ') $(cat "$book" 2>/dev/null | tr '\n' ' ') "
  for i in $(seq 1 200); do
    p=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
    case "$used" in *" $p "*) continue ;; esac
    echo "$p" >> "$book"
    echo "$p"
    return 0
  done
  echo "free_port: no free port found" >&2
  return 1
}

wait_port() {
  local host=$1 port=$2 secs=${3:-15}
  local until=$(( $(date +%s) + secs )) hexport f st
  hexport=$(printf '%04X' "$port")
  while :; do
    # State 0A = LISTEN.  Any listener on that port counts: a wildcard bind
    # serves every HOST, and a specific bind is what the caller just started.
    for f in /proc/net/tcp /proc/net/tcp6; do
      [ -r "$f" ] || continue
      st=$(awk -v p=":$hexport" 'NR > 1 && substr($2, length($2) - 4) == p && $4 == "0A" { print "up"; exit }' "$f")
      [ "$st" = up ] && return 0
    done
    if [ "$(date +%s)" -ge "$until" ]; then
      echo "wait_port: nothing listens on $host:$port after ${secs}s" >&2
      return 1
    fi
    sleep 0.1
  done
}

wait_for_line() {
  local file=$1 re=$2 secs=${3:-15}
  local until=$(( $(date +%s) + secs ))
  until grep -Eq -- "$re" "$file" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$until" ]; then
      echo "wait_for_line: no line matching '$re' in $file after ${secs}s; it has:" >&2
      cat "$file" >&2 2>/dev/null
      return 1
    fi
    sleep 0.1
  done
}

requires_rdma() {
  local devs
  devs=$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')
  if [ -n "$devs" ] && [ -e /dev/infiniband/rdma_cm ]; then
    return 0
  fi
  local why="no RDMA device (/sys/class/infiniband: '${devs% }'; /dev/infiniband/rdma_cm $( [ -e /dev/infiniband/rdma_cm ] && echo present || echo missing))"
  if [ "${SDPSHIM_STRICT:-0}" = 1 ]; then
    echo "requires_rdma: $why, and SDPSHIM_STRICT=1 forbids skipping: run this suite inside tests/vm/run-in-vm.sh" >&2
    return 1
  fi
  skip "$why"
}

requires_tool() {
  command -v "$1" >/dev/null 2>&1 && return 0
  local why="$1 is not installed (Debian package $2; tests/setup-debian.sh installs it)"
  if [ "${SDPSHIM_STRICT:-0}" = 1 ]; then
    echo "requires_tool: $why, and SDPSHIM_STRICT=1 forbids skipping" >&2
    return 1
  fi
  skip "$why"
}

sha256_of() {
  sha256sum "$1" | cut -d' ' -f1
}

show() {
  local line
  printf '%s\n' "$@" | while IFS= read -r line; do echo "# $line" >&3; done
}

# TERM first: a `timeout` wrapper passes it on to its command (SIGKILL would
# orphan the command); whatever is still alive after 5 s gets SIGKILL.
stop_recorded_pids() {
  local pids pid
  pids=$(cat "$BATS_TEST_TMPDIR"/*.pid 2>/dev/null) || return 0
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && break; pid=; done
    [ -z "$pid" ] && return 0
    sleep 0.1
  done
  for pid in $pids; do kill -9 "$pid" 2>/dev/null || true; done
}

write_pair_py() {
  cat >"$1" <<'EOF'
import os, socket, sys, time
lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(1)
client = socket.create_connection(lsock.getsockname())
server, _ = lsock.accept()
client.sendall(b"c" * 5000)
server.sendall(b"s" * 5000)
for sock in (client, server):
    got = 0
    while got < 5000:
        got += len(sock.recv(65536))
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write("%d\n" % lsock.getsockname()[1])
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
if len(sys.argv) < 3:
    time.sleep(120)
EOF
}
