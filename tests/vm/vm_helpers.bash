# VM-only helpers for tests/vm/*.bats and tests/vm/pair/*.bats (soft-RoCE guest).
# Load after the shared helpers:   load ../helpers; load vm_helpers
#                  (from pair/):   load ../../helpers; load ../vm_helpers
#
#   vm_setup                  per-test setup: requires_rdma, fresh SDPSHIM_RUN_DIR and
#                             STATS file (exported as SDPSHIM_STATS_FILE for every process:
#                             a process that is not preloaded writes nothing there),
#                             SDPSHIM_CONNECT_TIMEOUT_MS=10000 (TCG connects are slow)
#   vm_teardown               stops every start_bg process and the QP watcher
#   PRE                       array: prefix that runs a command preloaded, e.g.
#                             timeout -k 5 60 "${PRE[@]}" redis-server ...
#   start_bg NAME CMD...      runs CMD in the background, output in $T/NAME.log, pid in
#                             $T/NAME.pid (T = $BATS_TEST_TMPDIR); wrap CMD in timeout
#   wait_bg NAME              waits for it and returns its exit status
#   bg_log NAME               prints its log
#   count_rc_qps [COMM]       number of RC QPs now (of processes named COMM)
#   qp_watch_start / qp_watch_stop   sample `rdma resource show qp` in the background
#   qp_seen COMM              the most RC QPs of COMM seen in one sample while watching
#   wait_rc_qps_at_most N [S] wait until at most N RC QPs remain (default 15 s)
#   stats_lines FILE [K=V...] matching stats lines as "comm role local remote path reason
#                             negcached bytes_sent bytes_received opened_ms closed_ms";
#                             K is a field name, or port=P (local or remote port P)
#   assert_all_rdma FILE COMM...   every line path=rdma reason=none, at least one line per
#                             COMM, every client line has its server line (and back) when
#                             both programs are in COMM...
#   assert_exact_bytes FILE   for every connection both ends logged, bytes sent by one end
#                             = bytes received by the other
#   now_ms                    CLOCK_REALTIME in milliseconds
#   ref_digests_start "SEED BYTES"...   (setup_file) reference digests of tests/progs/stream
#                             streams: taken from the host's $STREAMREF_DIR, else
#                             computed in the background by streamref
#   ref_digest SEED BYTES     one of them (waits up to 5 min; computes it if never started)
#   redis_start ADDR PORT / redis_stop          a preloaded redis-server (start_bg "redis")
#   redis_bench ADDR PORT N [ARGS...]           preloaded redis-benchmark -n N -t get,set
#   redis_data ADDR PORT      40 keys and a 4 MiB value through preloaded redis-cli, by SHA-256
#   redis_stats MIN COMM      at least MIN client lines, all on RDMA, paired (redis-server, COMM)
#   assert_switched REASON COUNT [K=V...]   stats lines that moved to TCP (issue 6)
#   live_server PORT [FIELD]  "PATH BYTES_RECEIVED" (or FIELD) of the live server connection on PORT
#   live_end ROLE PORT [FIELD...]   "PATH FIELD..." of the live ROLE end of the connection to PORT
#   wait_live ROLE PORT WANT SECS   until live_end ROLE PORT climbs prints WANT ("PATH CLIMBS")
#   BIG_STREAM, BIG_BYTES     the size of the long streams (10-rdma-stream, 50-zcopy,
#                             70-switch, pair), as given to stream -b and in bytes: 256M in
#                             the suite, SDPSHIM_BIG_STREAM=1G for the full run (NM or NG,
#                             at least 32M; else 256M, with a warning)
#   size_bytes SIZE / size_name SIZE   256M -> 268435456 / "256 MiB"

# The long streams: a quarter of a GiB keeps the suite under 45 minutes on two
# cores; their bytes are checked the same way at any size.  Below 32 MiB some
# checks cannot hold (the link delete waits for 16 MiB to move first).
BIG_STREAM=${SDPSHIM_BIG_STREAM:-256M}
if ! [[ $BIG_STREAM =~ ^[1-9][0-9]*[MG]$ ]] || { [[ $BIG_STREAM == *M ]] && [ "${BIG_STREAM%M}" -lt 32 ]; }; then
  echo "vm_helpers: SDPSHIM_BIG_STREAM='$BIG_STREAM' is not NM (N >= 32) or NG; using 256M" >&2
  BIG_STREAM=256M
fi

size_bytes() {   # 1G -> 1073741824 (k, M, G suffixes)
  local n=${1%[kKmMgG]}
  case $1 in *[kK]) echo $((n << 10)) ;; *[mM]) echo $((n << 20)) ;; *[gG]) echo $((n << 30)) ;; *) echo "$n" ;; esac
}

size_name() {   # 1G -> "1 GiB"
  case $1 in *k) echo "${1%?} KiB" ;; *M) echo "${1%?} MiB" ;; *G) echo "${1%?} GiB" ;; *) echo "$1 bytes" ;; esac
}

BIG_BYTES=$(size_bytes "$BIG_STREAM")

vm_setup() {
  requires_rdma
  [ -x "$SDPSHIM_BIN" ] || { echo "missing $SDPSHIM_BIN: run make first" >&2; return 1; }
  T=$BATS_TEST_TMPDIR
  export SDPSHIM_RUN_DIR=$T/run
  mkdir -p "$SDPSHIM_RUN_DIR"
  unset SDPSHIM_CONFIG SDPSHIM_MODE LD_PRELOAD
  export SDPSHIM_CONNECT_TIMEOUT_MS=10000 SDPSHIM_ACK_TIMEOUT=19
  STATS=$T/stats.jsonl
  export SDPSHIM_STATS_FILE=$STATS
  export TMPDIR=$T
  PRE=("$SDPSHIM_BIN" run --)
}

now_ms() { date +%s%3N; }

# The system interpreter: a version manager's shim on PATH costs a second per
# start under TCG.
if [ -x /usr/bin/python3 ]; then PY=/usr/bin/python3; else PY=$(command -v python3); fi


start_bg() {
  local name=$1; shift
  ( exec "$@" ) >"$BATS_TEST_TMPDIR/$name.log" 2>&1 3>&- &
  echo $! >"$BATS_TEST_TMPDIR/$name.pid"
}

wait_bg() {
  local name=$1 pid rc=0
  pid=$(cat "$BATS_TEST_TMPDIR/$name.pid")
  wait "$pid" || rc=$?
  rm -f "$BATS_TEST_TMPDIR/$name.pid"
  return "$rc"
}

bg_log() { cat "$BATS_TEST_TMPDIR/$1.log" 2>/dev/null; }

vm_teardown() {
  qp_watch_stop
  stop_recorded_pids
}

count_rc_qps() {
  local comm=${1:-}
  if [ -n "$comm" ]; then
    rdma resource show qp 2>/dev/null | grep -c "type RC .*comm $comm\( \|$\)" || true
  else
    rdma resource show qp 2>/dev/null | grep -c 'type RC ' || true
  fi
}

# Samples every 0.25 s into $T/qp.samples, one block per sample ending in "--".
qp_watch_start() {
  local out=$BATS_TEST_TMPDIR/qp.samples
  : >"$out"
  (
    while :; do
      rdma resource show qp 2>&1
      echo --
      sleep 0.25
    done
  ) >>"$out" 2>&1 3>&- &
  echo $! >"$BATS_TEST_TMPDIR/qpwatch.pidfile"
}

qp_watch_stop() {
  local f=$BATS_TEST_TMPDIR/qpwatch.pidfile pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  rm -f "$f"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

qp_seen() {
  awk -v comm="$1" '
    $0 == "--" { if (n > max) max = n; n = 0; next }
    / type RC / { for (i = 1; i < NF; i++) if ($i == "comm" && $(i + 1) == comm) n++ }
    END { if (n > max) max = n; print max + 0 }' "$BATS_TEST_TMPDIR/qp.samples"
}

wait_rc_qps_at_most() {
  local want=$1 secs=${2:-15} until n
  until=$(( $(date +%s) + secs ))
  while :; do
    n=$(count_rc_qps)
    [ "$n" -le "$want" ] && return 0
    if [ "$(date +%s)" -ge "$until" ]; then
      echo "still $n RC QPs after ${secs}s, expected at most $want:" >&2
      rdma resource show qp >&2
      return 1
    fi
    sleep 0.2
  done
}

stats_lines() {
  local file=$1; shift
  "$PY" -S - "$file" "$@" <<'EOF'
import json, os, sys
path, filters = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
cols = ("comm", "role", "local", "remote", "path", "reason", "negcached",
        "bytes_sent", "bytes_received", "opened_ms", "closed_ms")
def text(v):
    return ("true" if v else "false") if isinstance(v, bool) else str(v)
def port(addr):
    return addr.rsplit(":", 1)[-1]
if os.path.exists(path):
    for line in open(path):
        c = json.loads(line)
        ok = True
        for k, v in filters:
            if k == "port":
                ok = ok and v in (port(c["local"]), port(c["remote"]))
            else:
                ok = ok and text(c.get(k)) == v
        if ok:
            print(" ".join(text(c.get(k, "-")) for k in cols))
EOF
}

assert_all_rdma() {
  local file=$1; shift
  run "$PY" -S - "$file" "$@" <<'EOF'
import collections, json, os, re, sys
path, comms = sys.argv[1], sys.argv[2:]
lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
errors = []
def plain(a):
    return re.sub(r"^\[::ffff:([0-9.]+)\]", r"\1", a)
for c in lines:
    if c["path"] != "rdma" or c["reason"] != "none":
        errors.append("%s pid %d fd %d %s %s -> %s: path=%s reason=%s" % (
            c["comm"], c["pid"], c["fd"], c["role"], c["local"], c["remote"], c["path"], c["reason"]))
by_comm = collections.Counter(c["comm"] for c in lines)
for comm in comms:
    if by_comm[comm] == 0:
        errors.append("no stats line from %s" % comm)
ours = [c for c in lines if c["comm"] in comms]
# Pairing by 4-tuple; a client line whose local address is unknown ("-") pairs
# with any server line on the address it connected to.
servers = collections.Counter((plain(c["local"]), plain(c["remote"])) for c in ours if c["role"] == "server")
loose = collections.Counter()
for c in ours:
    if c["role"] != "client":
        continue
    key = (plain(c["remote"]), plain(c["local"]))
    if c["local"] == "-":
        loose[key[0]] += 1
    elif servers[key] > 0:
        servers[key] -= 1
    else:
        errors.append("client %s -> %s has no server line" % (key[1], key[0]))
for (local, remote), n in sorted(servers.items()):
    take = min(n, loose[local])
    loose[local] -= take
    if n > take:
        errors.append("server %s <- %s has no client line" % (local, remote))
for local, n in sorted(loose.items()):
    if n:
        errors.append("%d client lines (local address unknown) -> %s have no server line" % (n, local))
print("%d lines (%s): %s" % (len(lines), ", ".join("%s %d" % kv for kv in sorted(by_comm.items())),
      "all rdma, paired" if not errors else "%d problems" % len(errors)))
for e in errors[:12]:
    print("ERROR: " + e)
sys.exit(1 if errors else 0)
EOF
  show "stats: $output"
  [ "$status" -eq 0 ]
}

assert_exact_bytes() {
  run "$PY" -S - "$1" <<'EOF'
import collections, json, re, sys
def plain(a):
    return re.sub(r"^\[::ffff:([0-9.]+)\]", r"\1", a)
ends = collections.defaultdict(lambda: [0, 0])
for l in open(sys.argv[1]):
    c = json.loads(l)
    key = (c["role"], plain(c["local"]), plain(c["remote"]))
    ends[key][0] += c["bytes_sent"]
    ends[key][1] += c["bytes_received"]
errors, pairs = [], 0
# A client whose local address is unknown ("-") pairs with the server end on the
# address it connected to when that is the only unpaired one.
paired = {("server", r, l) for (role, l, r) in ends if role == "client" and ("server", r, l) in ends}
for (role, local, remote) in list(ends):
    if role != "client" or local != "-":
        continue
    cands = [k for k in ends if k[0] == "server" and k[1] == remote and k not in paired]
    if len(cands) == 1:
        paired.add(cands[0])
        ends[("client", cands[0][2], remote)] = ends.pop((role, local, remote))
for (role, local, remote), (sent, received) in ends.items():
    other = ends.get(("server", remote, local)) if role == "client" else None
    if other is None:
        continue
    pairs += 1
    if other != [received, sent]:
        errors.append("client %s -> %s sent/received %d/%d, server received/sent %d/%d" % (
            local, remote, sent, received, other[1], other[0]))
if pairs == 0:
    errors.append("no connection was logged by both ends")
print("%d connections logged by both ends%s" % (pairs, "" if errors else ", bytes agree"))
for e in errors[:12]:
    print("ERROR: " + e)
sys.exit(1 if errors else 0)
EOF
  show "bytes: $output"
  [ "$status" -eq 0 ]
}

# wait_count FILE REGEX N SECS: until FILE has at least N lines matching REGEX
wait_count() {
  local until=$(( $(date +%s) + $4 )) n
  while :; do
    n=$(grep -Ec -- "$2" "$1" 2>/dev/null) || n=0
    [ "$n" -ge "$3" ] && return 0
    [ "$(date +%s)" -ge "$until" ] && { echo "wait_count: $n of $3 lines matching '$2' in $1 after $4 s" >&2; return 1; }
    sleep 0.2
  done
}

# need PROG...: skips the test if a program is missing (fails under SDPSHIM_STRICT=1)
need() {
  local prog
  for prog in "$@"; do
    if ! command -v "$prog" >/dev/null; then
      [ "${SDPSHIM_STRICT:-0}" = 1 ] && { echo "$prog is not installed" >&2; return 1; }
      skip "$prog is not installed"
    fi
  done
}

# --- redis ---------------------------------------------------------------------

redis_start() {   # redis_start ADDR PORT
  start_bg redis timeout -k 5 900 "${PRE[@]}" redis-server --port "$2" --bind "$1" \
    --protected-mode no --save '' --appendonly no --daemonize no
  wait_port "$1" "$2" 30 || { bg_log redis >&2; return 1; }
}

# SIGTERM: redis shuts down cleanly, so the stats lines of open connections are written.
redis_stop() {
  local rc=0
  kill -TERM "$(cat "$BATS_TEST_TMPDIR/redis.pid")"
  wait_bg redis || rc=$?
  [ "$rc" -eq 0 ] || { echo "redis-server exited with $rc:" >&2; bg_log redis >&2; return 1; }
}

# redis_bench ADDR PORT N ARGS...: preloaded redis-benchmark -n N -t get,set with the QPs
# watched; fails on a nonzero exit, a missing result line or any "error" in its output.
redis_bench() {
  local addr=$1 port=$2 n=$3 out=$BATS_TEST_TMPDIR/bench.out rc=0 t0; shift 3
  qp_watch_start
  t0=$(now_ms)
  run_timeout 600 "${PRE[@]}" redis-benchmark -h "$addr" -p "$port" -n "$n" -t get,set \
    -q "$@" >"$out" 2>&1 || rc=$?
  qp_watch_stop
  show "redis-benchmark -n $n -t get,set $*: rc=$rc, $(( $(now_ms) - t0 )) ms" \
       "$(tr '\r' '\n' <"$out" | grep -E 'requests per second' | sed -E 's/^.*(SET|GET)/\1/')" \
       "RC QPs seen: redis-benchmark $(qp_seen redis-benchmark), redis-server $(qp_seen redis-server)"
  [ "$rc" -eq 0 ] || { cat "$out" >&2; return 1; }
  tr '\r' '\n' <"$out" | grep -Eq '^SET: [0-9.]+ requests per second'
  tr '\r' '\n' <"$out" | grep -Eq '^GET: [0-9.]+ requests per second'
  if grep -qi 'error' "$out"; then
    echo "redis-benchmark printed errors:" >&2
    cat "$out" >&2
    return 1
  fi
  # 50 clients (the default -c) are connected during each test: with links
  # they share one RC QP per process (docs/links.md; a second while an idle
  # one closes), else each has its own; redis_stats checks every path.
  local q
  if [ "${SDPSHIM_LINKS:-1}" = 1 ]; then
    for q in "$(qp_seen redis-benchmark)" "$(qp_seen redis-server)"; do
      [ "$q" -ge 1 ] && [ "$q" -le 2 ]
    done
  else   # a channel, and an RC QP, per connection
    [ "$(qp_seen redis-benchmark)" -ge 50 ]
    [ "$(qp_seen redis-server)" -ge 50 ]
  fi
}

# redis-benchmark does not check replies: SET 40 random values over one redis-cli
# connection, GET them back over another and compare; then a 4 MiB random value
# through redis-cli -x (the whole of stdin as the last argument), by SHA-256.
redis_data() {   # redis_data ADDR PORT
  local addr=$1 port=$2 d=$BATS_TEST_TMPDIR i n sets want got
  : >"$d/set.cmds"; : >"$d/get.cmds"; : >"$d/want"
  for i in $(seq 1 40); do
    n=$(( (RANDOM * 3 + i * 997) % 73000 + 1 ))
    head -c "$n" /dev/urandom | base64 -w0 >"$d/v$i"        # one word, no spaces
    printf 'SET key:%d %s\n' "$i" "$(cat "$d/v$i")" >>"$d/set.cmds"
    printf 'GET key:%d\n' "$i" >>"$d/get.cmds"
    { cat "$d/v$i"; echo; } >>"$d/want"
  done
  sets=$(run_timeout 60 "${PRE[@]}" redis-cli -h "$addr" -p "$port" <"$d/set.cmds")
  [ "$(grep -cx OK <<<"$sets")" -eq 40 ]
  run_timeout 60 "${PRE[@]}" redis-cli -h "$addr" -p "$port" <"$d/get.cmds" >"$d/got"
  want=$(sha256_of "$d/want"); got=$(sha256_of "$d/got")
  show "40 keys, $(stat -c %s "$d/want") bytes of values: sent $want, got back $got"
  [ "$got" = "$want" ]

  head -c $((4 << 20)) /dev/urandom >"$d/value"
  run run_timeout 60 "${PRE[@]}" redis-cli -h "$addr" -p "$port" -x set bigvalue <"$d/value"
  [ "$status" -eq 0 ] && [ "$output" = OK ]
  run_timeout 60 "${PRE[@]}" redis-cli -h "$addr" -p "$port" get bigvalue >"$d/big.out"
  # redis-cli prints the raw value and a newline when stdout is not a terminal.
  got=$(head -c $((4 << 20)) "$d/big.out" | sha256sum | cut -c1-64)
  show "4 MiB value: sent $(sha256_of "$d/value"), got back $got ($(stat -c %s "$d/big.out") bytes)"
  [ "$(stat -c %s "$d/big.out")" -eq $(( (4 << 20) + 1 )) ]
  [ "$got" = "$(sha256_of "$d/value")" ]
}

# Every connection, the benchmark's extra CONFIG connection included, on RDMA.
redis_stats() {   # redis_stats MIN_CLIENT_LINES CLIENT_COMM
  local clients
  clients=$(stats_lines "$STATS" role=client | wc -l)
  show "client lines: $clients (at least $1 expected)"
  [ "$clients" -ge "$1" ]
  assert_all_rdma "$STATS" redis-server "$2"
}

# assert_switched REASON COUNT [K=V...]: the stats lines matching every K=V (a JSON
# field) number exactly COUNT ("any": at least one), and each has path=tcp,
# reason=REASON and switches >= 1.  REASON forked-or-climbed: each has that
# (path=tcp reason=forked), or climbed back after it (path=rdma, climbs >= 1,
# switches >= 2): a fork-per-connection child's stream, which climbs when the
# child holds it alone and neither end has shut it down first.
assert_switched() {
  run "$PY" -S - "$STATS" "$@" <<'EOF'
import collections, json, os, sys
path, reason, want = sys.argv[1], sys.argv[2], sys.argv[3]
filters = [a.split("=", 1) for a in sys.argv[4:]]
def text(v):
    return ("true" if v else "false") if isinstance(v, bool) else str(v)
lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
sel = [c for c in lines if all(text(c.get(k)) == v for k, v in filters)]
what = " ".join("%s=%s" % tuple(kv) for kv in filters) or "all"
errors = []
if want == "any":
    if not sel:
        errors.append("no stats line matches %s" % what)
elif len(sel) != int(want):
    errors.append("%d stats lines match %s, expected %s" % (len(sel), what, want))
def climbed(c, sw):
    return c["path"] == "rdma" and c.get("climbs", 0) >= 1 and sw >= 2
may_climb = reason == "forked-or-climbed"
if may_climb:
    reason = "forked"
for c in sel:
    sw = c.get("switches")
    if may_climb and isinstance(sw, int) and climbed(c, sw):
        continue
    if c["path"] != "tcp" or c["reason"] != reason or not isinstance(sw, int) or sw < 1:
        errors.append("%s pid %s fd %s %s %s -> %s: path=%s reason=%s switches=%s" % (
            c["comm"], c.get("pid"), c.get("fd"), c["role"], c["local"], c["remote"],
            c["path"], c["reason"], sw))
kinds = collections.Counter("%s/%s%s" % (c["path"], c["reason"], " climbed" if c.get("climbs") else "")
                            for c in sel)
sws = [c.get("switches") for c in sel if isinstance(c.get("switches"), int)]
print("%d lines with %s: %s; switches %s" % (
    len(sel), what, ", ".join("%s %d" % kv for kv in sorted(kinds.items())) or "-",
    "%d..%d" % (min(sws), max(sws)) if sws else "-"))
for e in errors[:12]:
    print("ERROR: " + e)
if len(errors) > 12:
    print("ERROR: ... %d more" % (len(errors) - 12))
sys.exit(1 if errors else 0)
EOF
  show "switched ($1 expected): $output"
  [ "$status" -eq 0 ]
}

# assert_climbed_share WANT MIN_PCT [FIELD=VALUE...]: WANT (a count, or
# "any") stats lines match the filters, and each ended on RDMA after a
# climb (path rdma, climbs >= 1; or a failover after the climb, with the
# share below still met) with at least MIN_PCT % of its bytes
# (sent and received) carried over RDMA, by its own counters (the bytes
# that went through the kernel socket are tcp_bytes_sent/received).
assert_climbed_share() {
  run "$PY" -S - "$STATS" "$@" <<'EOF'
import json, os, sys
path, want, pct = sys.argv[1], sys.argv[2], float(sys.argv[3])
filters = [a.split("=", 1) for a in sys.argv[4:]]
def text(v):
    return ("true" if v else "false") if isinstance(v, bool) else str(v)
lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
sel = [c for c in lines if all(text(c.get(k)) == v for k, v in filters)]
errors, shares = [], []
if want != "any" and len(sel) != int(want):
    errors.append("%d stats lines match, expected %s" % (len(sel), want))
if not sel:
    errors.append("no stats line matches")
for c in sel:
    total = c["bytes_sent"] + c["bytes_received"]
    tcp = c["tcp_bytes_sent"] + c["tcp_bytes_received"]
    share = 100.0 * (total - tcp) / total if total else 0.0
    shares.append(share)
    # The issue's measure is the share.  A carrier that fails after the
    # climb (the peer process gone at the close, 0 bytes left to move) ends
    # the line tcp/failover with one switch more: that is no failed climb.
    later_failover = (c["path"] == "tcp" and c["reason"] == "failover" and
                      c.get("switches", 0) > 2 * c.get("climbs", 0))
    if (c["path"] != "rdma" and not later_failover) or c.get("climbs", 0) < 1 or share < pct:
        errors.append("%s pid %s %s %s -> %s: path=%s reason=%s switches=%s climbs=%s, "
                      "%d of %d bytes on TCP (%.1f %% on RDMA)" % (
            c["comm"], c.get("pid"), c["role"], c["local"], c["remote"], c["path"],
            c["reason"], c.get("switches"), c.get("climbs"), tcp, total, share))
print("%d lines climbed; RDMA share %s" % (len(sel),
      "%.1f..%.1f %%" % (min(shares), max(shares)) if shares else "-"))
shown = errors[:12] + (["... %d more" % (len(errors) - 12)] if len(errors) > 12 else [])
print("".join("ERROR: %s\n" % e for e in shown), end="")
sys.exit(1 if errors else 0)
EOF
  show "climbed share (>= $2 %): $output"
  [ "$status" -eq 0 ]
}

# live_server PORT: "PATH BYTES_RECEIVED" of the live server connection on PORT
# (sdpshim stat --json), "none 0" while there is none
live_server() {
  local live
  live=$(live_end server "$1" "${2:-bytes_received}")
  [ "$live" != none ] || live="none 0"
  echo "$live"
}

# live_end ROLE PORT [FIELD...]: the live ROLE end of the connection to
# PORT, by `sdpshim stat --json`: "PATH FIELD1 FIELD2 ..." (the last one
# listed; none when not seen).
live_end() {
  "$SDPSHIM_BIN" stat --json 2>/dev/null | "$PY" -S -c '
import json, sys
role, port, fields, seen = sys.argv[1], sys.argv[2], sys.argv[3:], "none"
for p in json.load(sys.stdin).get("processes", []):
    for c in p.get("connections", []):
        end = c.get("local" if role == "server" else "remote", "")
        if c.get("role") == role and end.rsplit(":", 1)[-1] == port:
            seen = " ".join([c.get("path", "none")] + [str(c.get(f, "-")) for f in fields])
print(seen)' "$@"
}

live_path() { live_end "$1" "$2"; }

# live_channel ROLE PORT: the channel state of the live ROLE end on PORT
# (sdpshim stat --json: binding, open, moving, held, fallback...), or none
live_channel() {
  local seen
  seen=$(live_end "$1" "$2" channel)
  echo "${seen#* }"
}

# wait_live_channel ROLE PORT WANT SECS: until live_channel ROLE PORT is WANT.
wait_live_channel() {
  local until=$(( $(date +%s) + $4 ))
  while [ "$(live_channel "$1" "$2")" != "$3" ]; do
    [ "$(date +%s)" -lt "$until" ] || return 1
    sleep 0.1
  done
}

# wait_live_path ROLE PORT PATH SECS: until live_path ROLE PORT prints PATH;
# fails after SECS, saying what it saw
wait_live_path() {
  local until=$(( $(date +%s) + $4 )) seen
  while :; do
    seen=$(live_path "$1" "$2")
    [ "$seen" = "$3" ] && return 0
    [ "$(date +%s)" -lt "$until" ] || { echo "wait_live_path: the $1 end on port $2 is '$seen', not '$3', after $4 s" >&2; return 1; }
    sleep 0.1
  done
}

# wait_live ROLE PORT WANT SECS: until live_end ROLE PORT climbs prints WANT
# ("PATH CLIMBS").
wait_live() {
  local until=$(( $(now_ms) + $4 * 1000 ))
  while [ "$(now_ms)" -lt "$until" ]; do
    [ "$(live_end "$1" "$2" climbs)" = "$3" ] && return 0
    sleep 0.05
  done
  return 1
}

# Reference digests (tests/progs/streamref SEED BYTES: the SHA-256 of the stream,
# computed without any socket).  run-bats.sh computes the usual ones natively on
# the host before the boot, into $STREAMREF_DIR; under emulation a 1 GiB one
# costs ~35 s of guest CPU.  Anything not there is computed here, in the
# background, while the first transfers run.
host_ref_digest() {   # host_ref_digest SEED BYTES: prints it if the host computed it
  local f=${STREAMREF_DIR:-/nonexistent}/$1-$2
  grep -Exm1 '[0-9a-f]{64}' "$f" 2>/dev/null
}

ref_digests_start() {
  local ref=$BATS_FILE_TMPDIR/ref spec todo=()
  mkdir -p "$ref"
  for spec in "$@"; do
    set -- $spec
    if host_ref_digest "$1" "$2" >"$ref/$1-$2.tmp"; then
      mv "$ref/$1-$2.tmp" "$ref/$1-$2"
    else
      todo+=("$spec")
    fi
  done
  [ ${#todo[@]} -gt 0 ] || return 0
  (
    for spec in "${todo[@]}"; do
      set -- $spec
      "$PROGS/streamref" "$1" "$2" >"$ref/$1-$2.tmp" && mv "$ref/$1-$2.tmp" "$ref/$1-$2"
    done
  ) >/dev/null 2>&1 3>&- &
  echo $! >"$BATS_FILE_TMPDIR/ref.pid"
}

ref_digests_stop() {   # teardown_file
  kill "$(cat "$BATS_FILE_TMPDIR/ref.pid" 2>/dev/null)" 2>/dev/null || true
}

ref_digest() {
  local f=$BATS_FILE_TMPDIR/ref/$1-$2
  if [ -e "$f" ] || [ -e "$f.tmp" ]; then
    wait_for_line "$f" '^[0-9a-f]{64}$' 300 >/dev/null
    cat "$f"
  else
    host_ref_digest "$1" "$2" || "$PROGS/streamref" "$1" "$2"
  fi
}

# --- trust (tests/vm/35-trust.bats): a rogue peer run by an unprivileged user ---
#
#   TRUST_PROGS               where rogue and acceptwait come from: $SDPSHIM_TRUST_PROGS, else
#                             $PROGS.  The tools of this tree can drive another library build:
#                             BUILD=/path/to/old/build SDPSHIM_TRUST_PROGS=$PWD/build/tests/progs
#   ROGUE_ARGS                words added to every rogue command: $SDPSHIM_ROGUE_ARGS, e.g. --v1
#                             to speak the version-1 formats to a build of the old protocol
#   AS_NOBODY                 array: prefix that runs a command as nobody (65534, no groups)
#   rogue_start NAME ARGS...  start_bg NAME: rogue ARGS $ROGUE_ARGS as nobody, under a timeout;
#                             its lines go to $T/NAME.log
#   rogue_stop NAME           SIGTERM (the rogue prints its summary and exits 0), wait
#   rogue_summary NAME        its last line (listen: "data_bytes=..", hello: "established=..")
#   rogue_field NAME KEY      KEY's value in that summary line
#   plain_echo_client ADDR PORT SPORT BYTES [GO]   a plain (not preloaded) client bound to
#                             source port SPORT: sends BYTES random bytes while reading the echo
#                             (once the file GO exists, if given: at most 40 s), then
#                             half-closes and reads to EOF; prints "sent=N sha256=H" and
#                             "got=N sha256=H" (30 s socket timeout, killed after 60 s)
#   memcg_create NAME MAX     a cgroup v2 memory group (mounts cgroup2 if needed) with memory.max
#                             MAX; prints its path, or nothing where the kernel has none
#   memcg_remove PATH         removes it (after its processes ended)
#   proc_vmpin_kb PID         VmPin of PID in kB (0 when absent)
#   proc_mr_bytes PID         sum of mrlen of the MRs of PID's threads (`rdma resource show mr`)
#   pin_watch_start PID / pin_watch_stop   sample both every 0.1 s into $T/pin.samples
#   pin_watch_mark NAME       start a named stretch of samples
#   pin_watch_max [NAME]      "MAX_VMPIN_KB MAX_MR_BYTES" over all samples (or NAME's stretch)
#   link_mode MODE            the transport a trust case runs over: conn = one rdma_cm connection
#                             per TCP connection (SDPSHIM_LINKS=0 for every preloaded process, the
#                             rogue without --link); link = links (SDPSHIM_LINKS=1, the default)
#                             and a rogue that speaks them (--link).  Sets LINK_ARG (an array:
#                             add "${LINK_ARG[@]}" to the rogue's words) and MODE; skips a link
#                             case when ROGUE_ARGS speaks an old version (links are version 3)
#   link_diags FILE PATTERN   lines of FILE matching PATTERN (0 when none or no file)

TRUST_PROGS=${SDPSHIM_TRUST_PROGS:-$PROGS}
read -r -a ROGUE_ARGS <<<"${SDPSHIM_ROGUE_ARGS:-}"
AS_NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)

link_mode() {
  MODE=$1
  case $1 in
    conn) export SDPSHIM_LINKS=0; LINK_ARG=() ;;
    link)
      case " ${ROGUE_ARGS[*]} " in
        *" --v1 "*|*" --wire-version "*) skip "links speak the current wire version only (SDPSHIM_ROGUE_ARGS=${ROGUE_ARGS[*]})" ;;
      esac
      export SDPSHIM_LINKS=1; LINK_ARG=(--link) ;;
    *) echo "link_mode: conn or link, not $1" >&2; return 1 ;;
  esac
}

link_diags() {
  grep -c -- "$2" "$1" 2>/dev/null || true
}

rogue_start() {
  local name=$1; shift
  start_bg "$name" timeout -k 5 300 "${AS_NOBODY[@]}" "$TRUST_PROGS/rogue" "$@" "${ROGUE_ARGS[@]}"
}

rogue_stop() {
  local f=$BATS_TEST_TMPDIR/$1.pid
  [ -f "$f" ] || return 0
  kill -TERM "$(cat "$f")" 2>/dev/null || true
  wait_bg "$1"
}

rogue_summary() { tail -n 1 "$BATS_TEST_TMPDIR/$1.log" 2>/dev/null; }

rogue_field() {
  rogue_summary "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"
}

plain_echo_client() {
  timeout -k 5 60 "$PY" -S - "$@" <<'PYEOF'
import hashlib, os, socket, sys, threading
addr, port, sport, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
data = os.urandom(n)
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.settimeout(30)
s.bind((addr, sport))
s.connect((addr, port))
if len(sys.argv) > 5:  # a go file: send nothing until it exists
    import time
    until = time.monotonic() + 40
    while not os.path.exists(sys.argv[5]) and time.monotonic() < until:
        time.sleep(0.05)
def send():
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
t = threading.Thread(target=send, daemon=True)
t.start()
got = bytearray()
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
except Exception as e:
    print("error=%s" % type(e).__name__)
print("sent=%d sha256=%s" % (len(data), hashlib.sha256(data).hexdigest()))
print("got=%d sha256=%s" % (len(got), hashlib.sha256(bytes(got)).hexdigest()))
PYEOF
}

memcg_create() {
  local name=$1 max=$2 root=/sys/fs/cgroup
  if [ ! -e "$root/cgroup.controllers" ]; then
    mount -t cgroup2 none "$root" 2>/dev/null || return 0
  fi
  grep -qw memory "$root/cgroup.controllers" || return 0
  grep -qw memory "$root/cgroup.subtree_control" ||
    echo +memory >"$root/cgroup.subtree_control" 2>/dev/null || return 0
  mkdir -p "$root/$name" && echo "$max" >"$root/$name/memory.max" || return 0
  echo "$root/$name"
}

memcg_remove() {
  [ -n "${1:-}" ] && [ -d "$1" ] || return 0
  rmdir "$1" 2>/dev/null || true
}

proc_vmpin_kb() {
  local k v _
  while read -r k v _; do
    [ "$k" = VmPin: ] && { echo "$v"; return 0; }
  done <"/proc/$1/status" 2>/dev/null
  echo 0
}

# rdma names the thread that registered an MR (its TID): match every thread of PID.
proc_mr_bytes() {
  local tids
  tids=$(ls "/proc/$1/task" 2>/dev/null | tr '\n' ' ')
  [ -n "$tids" ] || { echo 0; return 0; }
  rdma resource show mr 2>/dev/null | awk -v tids=" $tids" '
    { len = 0; p = ""
      for (i = 1; i < NF; i++) { if ($i == "mrlen") len = $(i + 1); if ($i == "pid") p = $(i + 1) }
      if (p != "" && index(tids, " " p " ")) sum += len }
    END { print sum + 0 }'
}

pin_watch_start() {
  local pid=$1 out=$BATS_TEST_TMPDIR/pin.samples
  : >"$out"
  (
    while kill -0 "$pid" 2>/dev/null; do
      echo "$(proc_vmpin_kb "$pid") $(proc_mr_bytes "$pid")"
      sleep 0.1
    done
  ) >>"$out" 2>/dev/null 3>&- &
  echo $! >"$BATS_TEST_TMPDIR/pinwatch.pidfile"
}

pin_watch_stop() {
  local f=$BATS_TEST_TMPDIR/pinwatch.pidfile pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  rm -f "$f"
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

pin_watch_mark() { echo "mark $1" >>"$BATS_TEST_TMPDIR/pin.samples"; }

pin_watch_max() {
  awk -v want="${1:-}" '
    $1 == "mark" { in_stretch = ($2 == want); next }
    want == "" || in_stretch { if ($1 > p) p = $1; if ($2 > m) m = $2 }
    END { print p + 0, m + 0 }' "$BATS_TEST_TMPDIR/pin.samples" 2>/dev/null
}

# --- rdma link delete (tests/vm/70-switch.bats, tests/vm/72-failover-stress.bats) ---
#
#   stream_digest WHO FILE BYTES   the SHA-256 that tests/progs/stream's WHO (client|server)
#                             printed in FILE for BYTES bytes received and checked (empty if none)
#   rxe_link_pick             sets RXE_LINK (DEV/PORT), LINK_DEV and LINK_NETDEV: the rdma link whose
#                             netdev carries $RXE_IP (else the first with a netdev); RXE_LINKS = `rdma link show`
#   rxe_counter LINK NAME     a port counter (rdma statistic show link LINK)
#   link_delete_start RES     `rdma link delete $LINK_DEV` in the background (60 s bound); when it
#                             returns, "rc=N ms=N" goes into RES.  rxe cannot disassociate user
#                             contexts: the delete may block until the processes close theirs
#   restore_link [RES]        (teardown) waits up to 60 s for RES (default $T/linkdel.res), re-adds
#                             $LINK_DEV on $LINK_NETDEV if it is gone, waits until its port is ACTIVE
#   cpu_hog_start [N]         N (default 2) busy processes, nice 0, as start_bg hog1..hogN
#                             (vm_teardown ends them); cpu_hog_stop ends them now

stream_digest() {
  sed -nE "s/^stream: $1 received $3 bytes sha256=([0-9a-f]{64}) OK\$/\\1/p" "$2"
}

rxe_link_pick() {
  local netdev link
  RXE_LINKS=$(rdma link show)
  netdev=$(ip -o -4 addr show to "$RXE_IP" 2>/dev/null | awk '{ print $2; exit }')
  link=$(awk -v nd="$netdev" '$1 == "link" { for (i = 1; i < NF; i++) if ($i == "netdev" && $(i + 1) == nd) { print $2; exit } }' <<<"$RXE_LINKS")
  if [ -z "$link" ]; then
    link=$(awk '$1 == "link" && / netdev / { print $2; exit }' <<<"$RXE_LINKS")
    netdev=$(awk -v l="$link" '$2 == l { for (i = 1; i < NF; i++) if ($i == "netdev") print $(i + 1) }' <<<"$RXE_LINKS")
  fi
  RXE_LINK=$link LINK_DEV=${link%%/*} LINK_NETDEV=$netdev
  [ -n "$LINK_DEV" ] && [ -n "$LINK_NETDEV" ]
}

rxe_counter() {
  rdma statistic show link "$1" 2>/dev/null | tr ' ' '\n' | awk -v k="$2" 'prev == k { print; exit } { prev = $0 }'
}

link_delete_start() {
  local res=$1
  rm -f "$res"
  (
    # bash's own clock: a `date` on each side would add two process starts,
    # slow under TCG, to what is measured.
    rc=0 t0=${EPOCHREALTIME/./}
    timeout 60 rdma link delete "$LINK_DEV" >"$res.out" 2>&1 || rc=$?
    echo "rc=$rc ms=$(( (${EPOCHREALTIME/./} - t0) / 1000 ))" >"$res"
  ) 3>&- &
}

# live_rdma_wait PORT FIELD [MIN]: waits (90 s at most) until the server end
# on PORT is on RDMA with at least MIN bytes (16 MiB) counted in FIELD; prints
# live_server's last "PATH BYTES".
live_rdma_wait() {
  local until=$(( $(date +%s) + 90 )) live min=${3:-$((16 << 20))}
  while :; do
    live=$(live_server "$1" "$2")
    [ "${live% *}" = rdma ] && [ "${live#* }" -ge "$min" ] && break
    [ "$(date +%s)" -lt "$until" ] || break
    sleep 0.2
  done
  echo "$live"
}

# link_delete_watch RES NAME...: link_delete_start RES (RESTORE_LINK=1 for the
# teardown), then up to 10 s for the delete to return; sets DEL_RUNNING to
# "NAME running|ended, ..." for each start_bg NAME at that moment.  A device
# released by the processes lets the delete return while they still run.
link_delete_watch() {
  local res=$1 i name; shift
  RESTORE_LINK=1
  link_delete_start "$res"
  for i in $(seq 1 100); do
    [ -f "$res" ] && break
    sleep 0.1
  done
  DEL_RUNNING=
  for name in "$@"; do
    DEL_RUNNING+="${DEL_RUNNING:+, }$name $(bg_running "$name" && echo running || echo ended)"
  done
}

# restore_link [RES]: once the `rdma link delete` that writes RES is over,
# add the device again (LINK_ADDED_MS: when the add returned) and wait, at
# most 30 s, for its port to be ACTIVE.
restore_link() {
  local res=${1:-$BATS_TEST_TMPDIR/linkdel.res} i
  for i in $(seq 1 600); do
    [ -f "$res" ] && break
    sleep 0.1
  done
  [ -f "$res" ] || echo "restore_link: rdma link delete $LINK_DEV still running after 60 s" >&2
  if ! rdma link show "$LINK_DEV/1" >/dev/null 2>&1; then
    rdma link add "$LINK_DEV" type rxe netdev "$LINK_NETDEV" ||
      echo "restore_link: rdma link add $LINK_DEV type rxe netdev $LINK_NETDEV failed" >&2
    LINK_ADDED_MS=$(now_ms) # the device is back (the wall clock of the stats' moved_ms)
  fi
  for i in $(seq 1 300); do
    rdma link show 2>/dev/null | grep -Eq "^link $LINK_DEV/1 state ACTIVE " && return 0
    sleep 0.1
  done
  echo "restore_link: $LINK_DEV/1 not ACTIVE 30 s after re-adding it:" >&2
  rdma link show >&2
  return 1
}

cpu_hog_start() {
  local i
  for i in $(seq 1 "${1:-2}"); do
    start_bg "hog$i" timeout -k 5 3600 sh -c 'exec yes >/dev/null'
  done
}

cpu_hog_stop() {
  local f
  for f in "$BATS_TEST_TMPDIR"/hog*.pid; do
    [ -f "$f" ] || continue
    kill -TERM "$(cat "$f")" 2>/dev/null || true
    wait_bg "$(basename "$f" .pid)" || true
  done
}

# --- data-path lies (tests/vm/36-datapath-lies.bats): the rogue's peer mode ---
#
#   rogue_peer NAME ARGS...   rogue_start NAME peer ARGS (as nobody), with the test bed's RC ack
#                             timeout ($SDPSHIM_ACK_TIMEOUT) on the rogue's own QP
#   bg_running NAME           true while start_bg NAME has not exited
#   bg_wait_for NAME SECS     waits up to SECS for start_bg NAME to exit: its exit status, or 124
#                             when it is still running (then it is left running)
#   bg_stop NAME [SECS]       SIGTERM, then bg_wait_for SECS (default 10); one still running then
#                             gets SIGKILL (its `timeout` wrapper and that one's children), and
#                             the status is 124
#   evecho_start PORT ARGS... a preloaded tests/progs/evecho on $RXE_IP:PORT (start_bg "evecho")
#   honest_echo PORT BYTES NAME   a preloaded `connects` client: BYTES sent, echoed and compared by
#                             SHA-256, bounded by 40 s; output in $T/NAME.out; its exit status
#   honest_ok NAME            that output says the echo was byte-exact ("ok 1")

rogue_peer() {
  local name=$1; shift
  rogue_start "$name" peer --ack-timeout "${SDPSHIM_ACK_TIMEOUT:-0}" "$@"
}

bg_running() {
  local pid st
  pid=$(cat "$BATS_TEST_TMPDIR/$1.pid" 2>/dev/null) || return 1
  st=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

bg_wait_for() {
  local name=$1 until=$(( $(date +%s) + $2 ))
  [ -f "$BATS_TEST_TMPDIR/$name.pid" ] || return 0
  while bg_running "$name"; do
    [ "$(date +%s)" -ge "$until" ] && return 124
    sleep 0.1
  done
  wait_bg "$name"
}

bg_stop() {
  local name=$1 secs=${2:-10} pid rc=0
  pid=$(cat "$BATS_TEST_TMPDIR/$name.pid" 2>/dev/null) || return 0
  kill -TERM "$pid" 2>/dev/null || true
  bg_wait_for "$name" "$secs" || rc=$?
  if [ "$rc" = 124 ]; then
    pkill -KILL -P "$pid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
    wait_bg "$name" || true
  fi
  return "$rc"
}

evecho_start() {
  local port=$1; shift
  start_bg evecho timeout -k 5 600 "${PRE[@]}" "$TRUST_PROGS/evecho" -s "$port" -a "$RXE_IP" "$@"
  wait_for_line "$T/evecho.log" '^listening ' 30
}

honest_echo() {
  run_timeout 40 "${PRE[@]}" "$PROGS/connects" -c "$RXE_IP" -p "$1" -n 1 -b "$2" >"$T/$3.out" 2>&1
}

honest_ok() {
  grep -Eq '^conn 1 connect_ms=.* ok$' "$T/$1.out" && grep -qx 'ok 1' "$T/$1.out"
}

# stream_listening NAME PORT: until the tests/progs/stream server started as start_bg NAME
# says it listens on PORT.  It prints that after listen() returned, and the preloaded
# listen() returns once the RDMA listener is up too; the TCP socket alone (wait_port)
# listens a moment earlier, and a client that connects then finds no RDMA listener
# (path=tcp reason=peer_no_sdpshim: seen once in the 70-switch soak).
stream_listening() {
  wait_port "$RXE_IP" "$2" && wait_for_line "$BATS_TEST_TMPDIR/$1.log" "^stream: listening on $2\$"
}

# --- scale (tests/vm/80-scale.bats, bench/scale_inside.sh): many connections per process ---
#
#   rdma_usage PID...         RDMA resources per process from `rdma -j resource show mr|qp`
#                             (iproute2's JSON; its text output when -j gives none): one line
#                             per PID "pid=P comm=C mr_bytes=B mrs=M rc_qps=Q vmpin_kb=K",
#                             then "other mr_bytes=B mrs=M rc_qps=Q" (user resources of every
#                             other process, and of threads that are gone) and "all ...".
#                             rdma names the thread (TID) that created a resource: each is
#                             counted for the process (Tgid) that thread belongs to.  MRs
#                             and RC QPs with no pid (the kernel's) are left out.
#   usage_field FILE PID|other|all FIELD   one value of a saved rdma_usage output
#   live_paths PID ROLE [--all-users]   "RDMA_NONE TOTAL" for the live connections of PID with
#                             ROLE (client|server) in `sdpshim stat --json`: how many are on
#                             path=rdma with reason=none, of how many
#   bg_wait_line NAME REGEX SECS   waits until start_bg NAME's log has a line matching REGEX;
#                             fails at once when NAME exits first, or after SECS

rdma_usage() {
  "$PY" -S - "$@" <<'PYEOF'
import json, re, subprocess, sys
pids = [int(a) for a in sys.argv[1:]]

def rdma(kind):
    """The entries of `rdma resource show KIND` as dicts, and where they came from."""
    try:
        out = subprocess.run(["rdma", "-j", "resource", "show", kind], capture_output=True,
                             text=True, timeout=120).stdout
        data = json.loads(out) if out.strip() else []
        if isinstance(data, list) and all(isinstance(e, dict) for e in data):
            return data, "json"
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    out = subprocess.run(["rdma", "resource", "show", kind], capture_output=True, text=True,
                         timeout=120).stdout
    rows = []
    for line in out.splitlines():
        e = {}
        for key in ("mrlen", "pid", "lqpn"):
            m = re.search(r"\b%s (\d+)" % key, line)
            if m:
                e[key] = int(m.group(1))
        for key in ("type", "comm"):
            m = re.search(r"\b%s (\S+)" % key, line)
            if m:
                e[key] = m.group(1)
        if e:
            rows.append(e)
    return rows, "text"

tgids = {}
def tgid(tid):
    if tid not in tgids:
        tgids[tid] = None
        try:
            for line in open("/proc/%d/status" % tid):
                if line.startswith("Tgid:"):
                    tgids[tid] = int(line.split()[1])
        except OSError:
            pass
    return tgids[tid]

def proc_field(pid, name, key):
    try:
        for line in open("/proc/%d/%s" % (pid, name)):
            if line.startswith(key):
                return line.split()[1]
    except OSError:
        pass
    return "0"

acc = {p: [0, 0, 0] for p in pids + ["other", "all"]}
mrs, src_mr = rdma("mr")
qps, src_qp = rdma("qp")
for e in mrs:
    if "pid" not in e or not e.get("pid"):
        continue
    owner = tgid(int(e["pid"]))
    for k in (owner if owner in pids else "other", "all"):
        acc[k][0] += int(e.get("mrlen", 0))
        acc[k][1] += 1
for e in qps:
    if "pid" not in e or not e.get("pid") or e.get("type") != "RC":
        continue
    owner = tgid(int(e["pid"]))
    for k in (owner if owner in pids else "other", "all"):
        acc[k][2] += 1
for p in pids:
    comm = proc_field(p, "status", "Name:")
    print("pid=%d comm=%s mr_bytes=%d mrs=%d rc_qps=%d vmpin_kb=%s" % (
        p, comm, acc[p][0], acc[p][1], acc[p][2], proc_field(p, "status", "VmPin:")))
for k in ("other", "all"):
    print("%s mr_bytes=%d mrs=%d rc_qps=%d source=%s/%s" % (k, acc[k][0], acc[k][1], acc[k][2], src_mr, src_qp))
PYEOF
}

usage_field() {   # usage_field FILE PID|other|all FIELD
  awk -v who="$2" -v f="$3" '
    ($1 == "pid=" who) || ($1 == who) {
      for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == f) { print kv[2]; exit } }
    }' "$1"
}

live_paths() {   # live_paths PID ROLE [--all-users]
  "$SDPSHIM_BIN" stat --json ${3:-} 2>/dev/null | "$PY" -S -c '
import json, sys
pid, role = int(sys.argv[1]), sys.argv[2]
rdma = total = 0
for p in json.load(sys.stdin).get("processes", []):
    if p.get("pid") != pid:
        continue
    for c in p.get("connections", []):
        if c.get("role") == role:
            total += 1
            rdma += c.get("path") == "rdma" and c.get("reason") == "none"
print(rdma, total)' "$1" "$2"
}

# live_strays PID ROLE [--all-users]: the live connections of PID in ROLE not
# on RDMA (at most 5, one line each), then PID's links: what a failed
# live_paths reading needs to be understood.
live_strays() {
  "$SDPSHIM_BIN" stat --json ${3:-} 2>/dev/null | "$PY" -S -c '
import json, sys
pid, role = int(sys.argv[1]), sys.argv[2]
for p in json.load(sys.stdin).get("processes", []):
    if p.get("pid") != pid:
        continue
    strays = [c for c in p.get("connections", []) if c.get("role") == role and
              (c.get("path") != "rdma" or c.get("reason") != "none")]
    print("%d not on RDMA" % len(strays))
    for c in strays[:5]:
        print("  fd %s %s -> %s path=%s reason=%s channel=%s bytes %s/%s tcp %s/%s credits %s posted %s" % tuple(
            c.get(k) for k in ("fd", "local", "remote", "path", "reason", "channel", "bytes_sent",
                               "bytes_received", "tcp_bytes_sent", "tcp_bytes_received",
                               "tx_credits", "rx_posted")))
    for l in p.get("links", []):
        print("  link %s %s %s -> %s streams %s credits %s/%s msgs %s/%s (by app %s)" % tuple(
            l.get(k) for k in ("role", "state", "local", "peer", "streams", "credits_in_use",
                               "credits_total", "msgs_sent", "msgs_received", "msgs_received_by_app")))' "$1" "$2"
}

bg_wait_line() {   # bg_wait_line NAME REGEX SECS
  local name=$1 re=$2 until=$(( $(date +%s) + $3 ))
  until grep -Eq -- "$re" "$BATS_TEST_TMPDIR/$name.log" 2>/dev/null; do
    if ! bg_running "$name"; then
      echo "bg_wait_line: $name exited before a line matching '$re'; its log:" >&2
      tail -20 "$BATS_TEST_TMPDIR/$name.log" >&2
      return 1
    fi
    if [ "$(date +%s)" -ge "$until" ]; then
      echo "bg_wait_line: no line matching '$re' from $name after $3 s; its log:" >&2
      tail -20 "$BATS_TEST_TMPDIR/$name.log" >&2
      return 1
    fi
    sleep 0.2
  done
}
