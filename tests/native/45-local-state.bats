#!/usr/bin/env bats
# Native suite, part 45: what sdpshim keeps on the local host, attacked by
# another local user (issue 13, findings 5 and 7).  The attacker is `nobody`
# (setpriv); the victim is a preloaded python3 that connects to its own echo
# server many times.  Every case runs in a private sticky, world-writable
# directory under /dev/shm (SDPSHIM_RUN_DIR), as /dev/shm itself is.
#
#   - nobody plants a file under the victim's segment name, edits it, or
#     truncates whatever it can: the victim completes its TCP work byte-exact,
#     does not crash, and nobody's file never holds the victim's metadata;
#   - `sdpshim stat` (table and --json) on a FIFO, a symlink, a directory, a
#     truncated file, a huge slot_count, garbage, another user's forged
#     segment, and a segment rewritten and truncated while it reads: no crash,
#     no hang (timeout 10), a clear line per refused file, and the legitimate
#     process still shown;
#   - SDPSHIM_STATS_FILE that is a symlink: one warning, nothing written.

load ../helpers

setup_file() {
  write_scripts
}

setup() {
  [ -x "$SDPSHIM_BIN" ] || { echo "missing $SDPSHIM_BIN: run make first" >&2; return 1; }
  command -v setpriv >/dev/null || skip "setpriv is not installed"
  [ "$(id -u)" = 0 ] || skip "needs root, to act as another user with setpriv"
  RUN=$(mktemp -d /dev/shm/sdpshim-bats-XXXXXX)
  chmod 1777 "$RUN"
  export SDPSHIM_RUN_DIR=$RUN
  unset SDPSHIM_CONFIG SDPSHIM_MODE SDPSHIM_LOG SDPSHIM_STATS_FILE LD_PRELOAD
  T=$BATS_TEST_TMPDIR
  BIN=$RUN/bin                          # nobody runs these: bats' own dirs are 0700
  mkdir -m 755 "$BIN"
  cp "$BATS_FILE_TMPDIR"/*.py "$BATS_FILE_TMPDIR"/*.sh "$BIN/"
  export BIN
  UID0=$(id -u)
  nobody_python
}

teardown() {
  stop_recorded_pids
  if [ -n "${RUN:-}" ]; then rm -rf "$RUN"; fi
}

as_nobody() {
  setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"
}

# refute CMD...: fails when CMD succeeds (a bare `! CMD` never fails a bats test).
refute() {
  if "$@"; then
    echo "refute: '$*' succeeded" >&2
    return 1
  fi
}

# A python3 that nobody may run (root's may live under a 0700 home).
nobody_python() {
  local py
  for py in "$(command -v python3)" /usr/bin/python3 /usr/local/bin/python3; do
    if [ -x "$py" ] && as_nobody "$py" -c pass 2>/dev/null; then
      NPY=$py
      return 0
    fi
  done
  skip "no python3 that nobody can run"
}

write_scripts() {
  local d=$BATS_FILE_TMPDIR
  # victim.py READY GO N: a listener and an echo thread; writes its port to
  # READY, waits for GO, then N connections to itself, each 200000 random
  # bytes sent and echoed back, compared byte for byte.
  cat >"$d/victim.py" <<'EOF'
import hashlib, os, socket, sys, threading, time
ready, go, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(16)
port = lsock.getsockname()[1]

def echo():
    while True:
        s, _ = lsock.accept()
        while True:
            b = s.recv(65536)
            if not b:
                break
            s.sendall(b)
        s.close()

threading.Thread(target=echo, daemon=True).start()
with open(ready + ".tmp", "w") as f:
    f.write("%d\n" % port)
os.rename(ready + ".tmp", ready)
deadline = time.time() + 60
while not os.path.exists(go):
    if time.time() > deadline:
        sys.exit("victim: no go after 60 s")
    time.sleep(0.02)
total = hashlib.sha256()
for i in range(n):
    data = os.urandom(200000)
    c = socket.create_connection(("127.0.0.1", port))
    sender = threading.Thread(target=c.sendall, args=(data,))
    sender.start()
    got = bytearray()
    while len(got) < len(data):
        b = c.recv(65536)
        if not b:
            break
        got += b
    sender.join()
    c.close()
    if bytes(got) != data:
        sys.exit("victim: connection %d: %d bytes back, not byte-exact" % (i, len(got)))
    total.update(data)
print("victim ok: %d connections on port %d, sha256 of all bytes %s" % (n, port, total.hexdigest()))
EOF
  # attack.py edit|truncate FILE...: what nobody does to each file it can.
  cat >"$d/attack.py" <<'EOF'
import os, struct, sys
mode = sys.argv[1]
for path in sys.argv[2:]:
    try:
        if mode == "truncate":
            os.truncate(path, 0)
        else:
            with open(path, "r+b") as f:
                f.seek(12); f.write(struct.pack("<I", 0xffffffff))   # slot_count
                f.seek(400); f.write(struct.pack("<I", 0x7ffffff0))  # link_count
        print("%s: %s done" % (path, mode))
    except OSError as e:
        print("%s: %s refused: %s" % (path, mode, e.strerror))
EOF
  # mkseg.py PATH PID UID [SLOT_COUNT [TRUNCATE_TO]]: a segment image (layout
  # of base/stats_shm.h, version 6) with 8 slots, one live connection to
  # 6.6.6.6:666, and one free link record.
  cat >"$d/mkseg.py" <<'EOF'
import struct, sys

def image(pid, uid, slot_count=8, slots=8, links=1):
    by_reason = [0] * 32
    hdr = struct.pack("<QIIiIQ64s3Q32QQQQIIQQQQ", 0x3154415453504453, 6, slot_count, pid, uid,
                      1700000000000, b"forged", 0, 1, 0, *by_reason, 1, 1, 0, links, 0,
                      268435456, 0, 0, 0)
    addr = struct.pack("<HH16s", 2, 666, bytes((6, 6, 6, 6)))
    live = (struct.pack("<IIiBBHBBH", 1, 2, 7, 1, 1, 0, 0, 0, 0) + addr + addr + bytes(4) +
            struct.pack("<13Q", 1, 666, 666, *([0] * 10)) + bytes(40))
    assert len(hdr) == 440 and len(live) == 208
    return hdr + live + bytes(208 * (slots - 1)) + bytes(144 * links)

if __name__ == "__main__":
    path, pid, uid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    img = image(pid, uid, int(sys.argv[4]) if len(sys.argv) > 4 else 8)
    if len(sys.argv) > 5:
        img = img[:int(sys.argv[5])]
    with open(path, "wb") as f:
        f.write(img)
EOF
  # flipper.py DIR READY: as its own user, keeps a valid segment under its
  # own pid and name, and rewrites it in a tight loop: slot_count huge and
  # back, the file cut to 0 bytes and regrown (its slots zero), the header
  # written again.
  cat >"$d/flipper.py" <<'EOF'
import os, struct, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mkseg import image
run, ready = sys.argv[1], sys.argv[2]
path = "%s/sdpshim-%d-%d.stats" % (run, os.geteuid(), os.getpid())
img = image(os.getpid(), os.geteuid(), 1024, 1024)
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.pwrite(fd, img, 0)
with open(ready, "w") as f:
    f.write(path + "\n")
huge, normal = struct.pack("<I", 0xffffffff), struct.pack("<I", 1024)
end = time.time() + 120
while time.time() < end:
    os.pwrite(fd, huge, 12)
    os.pwrite(fd, normal, 12)
    os.ftruncate(fd, 0)
    os.ftruncate(fd, len(img))
    os.pwrite(fd, img[:440], 0)
EOF
  # pair.py READY [once]: a listener, one connection to itself, 5000 bytes
  # each way, its port in READY, then sleeps (tests/helpers.bash).
  write_pair_py "$d/pair.py"
  # victim.sh N: plants nobody's file under this process's segment name, then
  # execs (same pid) into the preloaded victim.
  cat >"$d/victim.sh" <<'EOF'
#!/bin/bash
seg=$SDPSHIM_RUN_DIR/sdpshim-$(id -u)-$$.stats
setpriv --reuid=nobody --regid=nogroup --clear-groups \
  sh -c 'umask 0; printf "planted by nobody\n" >"$1"' sh "$seg"
exec "$SDPSHIM_BIN" run -- python3 "$BIN/victim.py" "$T/ready" "$T/go" "$1"
EOF
  # conns.py N RENAME_AFTER: N connections of the process to itself, one at a
  # time, 64 bytes each way, checked; after connection RENAME_AFTER it renames
  # $SDPSHIM_STATS_FILE to $SDPSHIM_STATS_FILE.old (a rotation).
  cat >"$d/conns.py" <<'EOF'
import os, socket, sys
n, rename_after = int(sys.argv[1]), int(sys.argv[2])
stats = os.environ["SDPSHIM_STATS_FILE"]
for i in range(1, n + 1):
    l = socket.socket()
    l.bind(("127.0.0.1", 0))
    l.listen(1)
    c = socket.create_connection(l.getsockname())
    s, _ = l.accept()
    msg = os.urandom(64)
    c.sendall(msg)
    got = b""
    while len(got) < 64:
        got += s.recv(64 - len(got))
    s.sendall(got)
    back = b""
    while len(back) < 64:
        back += c.recv(64 - len(back))
    assert back == msg, "conn %d: the bytes differ" % i
    c.close(); s.close(); l.close()
    if i == rename_after:
        os.rename(stats, stats + ".old")
print("ok", n)
EOF
  chmod 755 "$d"/*.py "$d/victim.sh"
}

# --- the victim's segment ----------------------------------------------------

# start_victim N: the victim in the background; VPID, PLANTED, VPORT set.
start_victim() {
  T=$T "$BIN/victim.sh" "$1" >"$T/victim.out" 2>"$T/victim.err" 3>&- &
  VPID=$!
  echo "$VPID" >"$T/victim.pid"
  PLANTED=$RUN/sdpshim-$UID0-$VPID.stats
  wait_for_line "$T/ready" '^[0-9]+$' 30 || { cat "$T/victim.err" >&2; return 1; }
  VPORT=$(cat "$T/ready")
}

# finish_victim: lets the victim run its connections; checks it completed,
# byte-exact, without a crash.
finish_victim() {
  local rc=0
  touch "$T/go"
  wait "$VPID" || rc=$?
  rm -f "$T/victim.pid"
  show "victim rc=$rc: $(cat "$T/victim.out")" "victim stderr: $(head -5 "$T/victim.err")"
  [ "$rc" -eq 0 ]                       # 135 = SIGBUS, 139 = SIGSEGV
  grep -q "^victim ok: 40 connections on port $VPORT" "$T/victim.out"
}

# nobody's planted file holds nothing of the victim's.
planted_untouched() {
  local planted=$1
  show "planted file: $(stat -c '%U %s bytes' "$planted" 2>&1)"
  refute grep -aq 'SDPSTAT1' "$planted"
  refute grep -aq 'python3' "$planted"
  refute python3 -c '
import struct, sys
data = open(sys.argv[1], "rb").read()
sys.exit(0 if struct.pack("<H", int(sys.argv[2])) in data else 1)' "$planted" "$VPORT"
}

@test "nobody plants a file under the victim's segment name: never used, victim unharmed" {
  start_victim 40
  [ "$(stat -c %U "$PLANTED")" = nobody ]
  # The victim's segment went elsewhere, 0600 and its own; nobody cannot read it.
  local real
  real=$(ls "$RUN"/sdpshim-"$UID0"-"$VPID"-*.stats)
  show "planted: $PLANTED" "segment: $real" "$(stat -c '%a %U %h' "$real")"
  [ "$(stat -c '%a %U %h' "$real")" = "600 root 1" ]
  run as_nobody cat "$real"
  [ "$status" -ne 0 ]
  grep -q "stats segment name sdpshim-$UID0-$VPID.stats in $RUN is taken by a file of uid 65534; using $real" \
    "$T/victim.err"
  # sdpshim stat still shows the victim, and names the planted file.
  run run_timeout 10 "$SDPSHIM_BIN" stat --listeners -p "$VPID"
  show "$output"
  [ "$status" -eq 0 ]
  grep -Eq "^ *$VPID +python3 +[0-9]+ +listener +127\.0\.0\.1:$VPORT " <<<"$output"
  [[ "$output" == *"skipping $PLANTED: owned by uid 65534, not by uid $UID0 as its name says"* ]]
  finish_victim
  planted_untouched "$PLANTED"
  [ "$(cat "$PLANTED")" = "planted by nobody" ]
}

@test "nobody edits slot_count and the allocation hint while the victim runs: no crash" {
  start_victim 40
  run as_nobody "$NPY" "$BIN/attack.py" edit "$RUN"/sdpshim-"$UID0"-"$VPID"*.stats
  local attack=$output
  show "$attack"
  finish_victim
  planted_untouched "$PLANTED"
  # nobody could edit its own planted file, never the victim's segment.
  grep -qx "$PLANTED: edit done" <<<"$attack"
  grep -q -- "-$VPID-[0-9a-f]*\.stats: edit refused: Permission denied" <<<"$attack"
  refute grep -q -- "-$VPID-[0-9a-f]*\.stats: edit done" <<<"$attack"
}

@test "nobody truncates the victim's segment files while it runs: no SIGBUS" {
  start_victim 40
  run as_nobody "$NPY" "$BIN/attack.py" truncate "$RUN"/sdpshim-"$UID0"-"$VPID"*.stats
  local attack=$output
  show "$attack"
  finish_victim
  # nobody could cut its own planted file, never the victim's segment.
  grep -qx "$PLANTED: truncate done" <<<"$attack"
  grep -q -- "-$VPID-[0-9a-f]*\.stats: truncate refused: Permission denied" <<<"$attack"
  refute grep -q -- "-$VPID-[0-9a-f]*\.stats: truncate done" <<<"$attack"
}

@test "a stale file of the same user under the name is replaced, not a fallback" {
  # Same pid, same user: what a process leaves when it execs another
  # preloaded program, or dies and its pid comes back.
  cat >"$T/exec2.sh" <<'EOF'
#!/bin/bash
printf 'stale\n' >"$SDPSHIM_RUN_DIR/sdpshim-$(id -u)-$$.stats"
chmod 600 "$SDPSHIM_RUN_DIR/sdpshim-$(id -u)-$$.stats"
exec "$SDPSHIM_BIN" run -- python3 "$BIN/pair.py" "$T/ready"
EOF
  chmod 755 "$T/exec2.sh"
  T=$T "$T/exec2.sh" >"$T/pair.out" 2>&1 3>&- &
  local pid=$!
  echo "$pid" >"$T/pair.pid"
  wait_for_line "$T/ready" '^[0-9]+$' 30
  show "$(ls -l "$RUN")" "$(cat "$T/pair.out")"
  [ "$(ls "$RUN" | grep -c "^sdpshim-$UID0-$pid")" -eq 1 ]
  refute grep -q "is taken" "$T/pair.out"
  run run_timeout 10 "$SDPSHIM_BIN" stat -p "$pid"
  [ "$status" -eq 0 ]
  [[ "$output" == *"pid $pid python3: 0 rdma, 2 tcp"* ]]
}

# --- sdpshim stat on crafted files -------------------------------------------

# sleeper: a live process (not preloaded) whose pid names a crafted file.
sleeper() {
  sleep 120 3>&- &
  echo $! >"$T/sleep-$!.pid"
  SLEEPER=$!
}

@test "sdpshim stat: FIFO, symlink, directory, truncated, huge slot_count, garbage, forged: no crash, no hang" {
  local f legit_pid
  "$SDPSHIM_BIN" run -- python3 "$BIN/pair.py" "$T/ready" >"$T/pair.out" 2>&1 3>&- &
  legit_pid=$!
  echo "$legit_pid" >"$T/pair.pid"
  wait_for_line "$T/ready" '^[0-9]+$' 30
  local legit=$RUN/sdpshim-$UID0-$legit_pid.stats
  [ -f "$legit" ]

  declare -A why
  sleeper; f=$RUN/sdpshim-$UID0-$SLEEPER.stats
  as_nobody mkfifo -m 666 "$f";                            why[$f]="not a regular file (a fifo)"
  sleeper; f=$RUN/sdpshim-$UID0-$SLEEPER.stats
  as_nobody ln -s "$legit" "$f";                           why[$f]="not a regular file (a symbolic link)"
  sleeper; f=$RUN/sdpshim-$UID0-$SLEEPER.stats
  as_nobody mkdir "$f";                                    why[$f]="not a regular file (a directory)"
  sleeper; f=$RUN/sdpshim-$UID0-$SLEEPER.stats
  python3 "$BIN/mkseg.py" "$f" "$SLEEPER" "$UID0" 8 1000;    why[$f]="not a valid stats segment (a slot count that is 0, too large or past the end; 1000 bytes)"
  sleeper; f=$RUN/sdpshim-$UID0-$SLEEPER.stats
  python3 "$BIN/mkseg.py" "$f" "$SLEEPER" "$UID0" 4294967295; why[$f]="not a valid stats segment (a slot count"
  sleeper; f=$RUN/sdpshim-$UID0-$SLEEPER.stats
  head -c 4096 /dev/urandom >"$f";                         why[$f]="not a valid stats segment (no stats magic; 4096 bytes)"
  sleeper; f=$RUN/sdpshim-$UID0-$SLEEPER.stats
  as_nobody "$NPY" "$BIN/mkseg.py" "$f" "$SLEEPER" "$UID0"; why[$f]="owned by uid 65534, not by uid $UID0 as its name says"
  sleeper; f=$RUN/sdpshim-$UID0-$SLEEPER.stats
  python3 "$BIN/mkseg.py" "$f" "$legit_pid" "$UID0";         why[$f]="it names pid $legit_pid inside"
  show "$(ls -l "$RUN")"

  local json
  for json in "" --json; do
    run run_timeout 10 "$SDPSHIM_BIN" stat $json
    show "stat $json: rc=$status" "$output"
    [ "$status" -eq 0 ]
    for f in "${!why[@]}"; do
      grep -qF "sdpshim stat: skipping $f: ${why[$f]}" <<<"$output"
    done
    [[ "$output" != *6.6.6.6* && "$output" != *forged* ]]
  done
  run run_timeout 10 "$SDPSHIM_BIN" stat
  grep -Eq "^ *$legit_pid +python3 +[0-9]+ +client +127\.0\.0\.1:" <<<"$output"
  [[ "$output" == *"pid $legit_pid python3: 0 rdma, 2 tcp (loopback 2)"* ]]
  run bash -c '"$1" stat --json 2>/dev/null | python3 -c "
import json, sys
doc = json.load(sys.stdin)
print(sorted(p[\"pid\"] for p in doc[\"processes\"]))"' _ "$SDPSHIM_BIN"
  show "json pids: $output"
  [ "$output" = "[$legit_pid]" ]
}

@test "sdpshim stat --all-users: a segment rewritten and truncated while it reads" {
  as_nobody "$NPY" "$BIN/flipper.py" "$RUN" "$RUN/flipper.ready" >"$T/flipper.out" 2>&1 3>&- &
  echo $! >"$T/flipper.pid"
  wait_for_line "$RUN/flipper.ready" 'stats$' 30
  local i json bad=0 shown=0 skipped=0
  for i in $(seq 1 100); do
    for json in "" --json; do
      run run_timeout 10 "$SDPSHIM_BIN" stat --all-users $json
      if [ "$status" -ne 0 ]; then
        bad=$((bad + 1))
        show "run $i stat $json: rc=$status" "$output"
      fi
      [[ "$output" == *6.6.6.6* ]] && shown=$((shown + 1))
      [[ "$output" == *skipping* ]] && skipped=$((skipped + 1))
    done
  done
  show "200 runs: $bad failed, $shown showed its forged connection, $skipped skipped it"
  [ "$bad" -eq 0 ]
}

# --- SDPSHIM_STATS_FILE ------------------------------------------------------

@test "SDPSHIM_STATS_FILE that is a symlink: one warning, nothing written through it" {
  local target=$T/target link=$T/stats.jsonl
  : >"$target"
  ln -s "$target" "$link"
  SDPSHIM_STATS_FILE=$link run run_timeout 30 "$SDPSHIM_BIN" run -- \
    python3 "$BIN/pair.py" "$T/ready" once
  show "$output"
  [ "$status" -eq 0 ]
  [ "$(grep -c "SDPSHIM_STATS_FILE $link is a symbolic link; no stats lines are written through it" <<<"$output")" -eq 1 ]
  [ ! -s "$target" ]
  # A dangling link: its target is not created either.
  rm -f "$target" "$T/ready"
  SDPSHIM_STATS_FILE=$link run run_timeout 30 "$SDPSHIM_BIN" run -- \
    python3 "$BIN/pair.py" "$T/ready" once
  [ "$status" -eq 0 ]
  [ ! -e "$target" ]
  # A plain file still gets its lines.
  rm -f "$link" "$T/ready"
  SDPSHIM_STATS_FILE=$link run run_timeout 30 "$SDPSHIM_BIN" run -- \
    python3 "$BIN/pair.py" "$T/ready" once
  [ "$status" -eq 0 ]
  [ "$(wc -l <"$link")" -eq 2 ]
}

@test "SDPSHIM_STATS_FILE is opened once per process, and again after a rotation" {
  command -v strace >/dev/null || skip "strace is not installed"
  local stats=$T/stats.jsonl
  # 6 connections, the file renamed away after the 4th: its lines stay in
  # the renamed file (8: a client and a server line each), the last two
  # connections' go to a new file of the same name (4), and the process
  # opened the name twice, not once per line (12 before the file was kept).
  SDPSHIM_STATS_FILE=$stats run run_timeout 60 strace -f -qq -e trace=openat -o "$T/strace" \
    "$SDPSHIM_BIN" run -- python3 "$BIN/conns.py" 6 4
  show "$output" "old: $(wc -l <"$stats.old" 2>&1) new: $(wc -l <"$stats" 2>&1)" \
    "opens: $(grep -c "openat(AT_FDCWD, \"$stats\"" "$T/strace")"
  [ "$status" -eq 0 ]
  [[ "$output" == *"ok 6"* ]]
  [ "$(wc -l <"$stats.old")" -eq 8 ]
  [ "$(wc -l <"$stats")" -eq 4 ]
  [ "$(grep -c '"path":"tcp"' "$stats.old")" -eq 8 ]
  [ "$(grep -c "openat(AT_FDCWD, \"$stats\"" "$T/strace")" -eq 2 ]
}

@test "SDPSHIM_STATS_FILE planted by another user in a shared directory: one warning, nothing written" {
  local planted=$RUN/planted.jsonl linked=$RUN/linked.jsonl
  # nobody creates the file first, world-writable, where the victim will append.
  as_nobody sh -c "umask 0; : >'$planted'"
  [ "$(stat -c %U "$planted")" = nobody ]
  SDPSHIM_STATS_FILE=$planted run run_timeout 30 "$SDPSHIM_BIN" run -- \
    python3 "$BIN/pair.py" "$T/ready" once
  show "$output" "planted file: $(wc -c <"$planted") bytes"
  [ "$status" -eq 0 ]
  [ "$(grep -c "SDPSHIM_STATS_FILE $planted is not a regular file of this user (or root) with one link" <<<"$output")" -eq 1 ]
  [ ! -s "$planted" ]
  # A second name (hard link) for a file of ours is refused too.
  rm -f "$T/ready"
  : >"$RUN/own.jsonl"
  ln "$RUN/own.jsonl" "$linked"
  SDPSHIM_STATS_FILE=$linked run run_timeout 30 "$SDPSHIM_BIN" run -- \
    python3 "$BIN/pair.py" "$T/ready" once
  [ "$status" -eq 0 ]
  [ ! -s "$linked" ]
}
