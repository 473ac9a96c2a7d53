#!/usr/bin/env bats
# VM suite, part 75: a real fork-per-connection server across a switch (issue 6).
#
# PostgreSQL, a real fork-per-connection server (the postmaster
# accepts, forks a backend that serves the connection, and closes its own copy),
# preloaded with its psql clients over RDMA.  200 sequential and 20 concurrent
# connections each send 64 KiB and get it back; the server's SHA-256 of what it
# received and the echoed bytes are both checked.  Every connection moves to
# TCP when its backend, which inherited it on RDMA, first reads it (the
# postmaster moves it for the fork: preload/fork_handoff.c), and comes back to
# RDMA: the backend holds it alone, and climbs to psql's rendezvous port with
# the postmaster's ticket (docs/upgrade.md, "Fork").  At least 90 % of each
# connection's bytes must go over RDMA, by the counters of both ends.

load ../helpers
load vm_helpers

PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)

setup() {
  vm_setup
  if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/postgres" ] || ! id postgres >/dev/null 2>&1; then
    [ "${SDPSHIM_STRICT:-0}" = 1 ] && { echo "no PostgreSQL: tests/setup-debian.sh installs it" >&2; return 1; }
    skip "no PostgreSQL server"
  fi
  # The server runs as user postgres: it must reach its data directory, the
  # run directory and the stats file under $T.
  local d=$T
  while [ "$d" != / ]; do chmod o+x "$d"; d=$(dirname "$d"); done
  chmod 1777 "$SDPSHIM_RUN_DIR"
  touch "$STATS"
  chmod 666 "$STATS"
}

teardown() {
  [ -z "${PG_PID:-}" ] || kill -INT "$PG_PID" 2>/dev/null || true
  vm_teardown
}

as_postgres() { setpriv --reuid=postgres --regid=postgres --clear-groups "$@"; }

# pg_start: initdb and a preloaded postmaster on $RXE_IP:$PG_PORT
pg_start() {
  local i
  PG_DATA=$T/pgdata PG_PORT=$(free_port)
  mkdir "$PG_DATA"
  chown postgres:postgres "$PG_DATA"
  as_postgres "$PGBIN/initdb" -D "$PG_DATA" -A trust -U postgres --no-sync >"$T/initdb.log" 2>&1 ||
    { show "initdb failed: $(tail -5 "$T/initdb.log")"; return 1; }
  echo "host all all $RXE_IP/32 trust" >>"$PG_DATA/pg_hba.conf"
  # RDMA deployments lift RLIMIT_MEMLOCK for such servers: with the default 8 MiB
  # the postmaster can pin the buffers of only a few channels at once, and some of
  # the 20 concurrent connections would stay on TCP (reason resources).
  start_bg pg timeout -k 5 900 "${PRE[@]}" prlimit --memlock=unlimited:unlimited \
    setpriv --reuid=postgres --regid=postgres --clear-groups \
    "$PGBIN/postgres" -D "$PG_DATA" -k "$PG_DATA" -h "$RXE_IP" -p "$PG_PORT" -c fsync=off \
    -c max_connections=60 -c shared_buffers=16MB -c dynamic_shared_memory_type=mmap
  PG_PID=$(cat "$T/pg.pid")
  for i in $(seq 150); do
    "$PGBIN/pg_isready" -q -h "$RXE_IP" -p "$PG_PORT" -U postgres && return 0
    sleep 0.2
  done
  show "postgres did not become ready: $(bg_log pg | tail -5)"
  return 1
}

# payload_sql FILE PREFIX I...: for each connection I, PREFIX (if any) and one
# query appended to FILE ("{}" in FILE becomes I): 64 KiB of hex up, the server's
# SHA-256 of it and the same 64 KiB back.  The expected output line
# "conn I SHA PAYLOAD" goes to FILE.want.  One python3 for all of them: od and
# sha256sum per connection cost ~70 s of emulated CPU for 220 connections.
payload_sql() {
  /usr/bin/python3 - "$@" <<'PY'
import hashlib, os, sys
path, prefix, ids = sys.argv[1], sys.argv[2], sys.argv[3:]
for i in ids:
    with open(path.format(i), "a") as sql, open(path.format(i) + ".want", "a") as want:
        if prefix:
            sql.write(prefix + "\n")
        payload = os.urandom(32768).hex()
        digest = hashlib.sha256(payload.encode()).hexdigest()
        sql.write(f"SELECT 'conn {i}', encode(sha256(convert_to('{payload}', 'UTF8')), 'hex'),"
                  f" '{payload}';\n")
        want.write(f"conn {i} {digest} {payload}\n")
PY
}

# psql_run FILE OUT: one preloaded psql running FILE; its output in OUT
psql_run() {
  timeout 600 "${PRE[@]}" psql -X -q -A -t -F ' ' -h "$RXE_IP" -p "$PG_PORT" -U postgres \
    -d postgres -f "$1" >"$2" 2>&1
}

# checked OUT WANT: how many expected lines OUT has (comm, not grep -f: 200
# patterns of 64 KiB exhaust grep's memory in a 1 GiB guest)
checked() { comm -12 <(sort "$1") <(sort "$2") | wc -l; }

@test "climb: PostgreSQL (postmaster forks per connection), 200 sequential and 20 concurrent connections, sha-checked, each >= 90 % on RDMA" {
  local t0 seq_ms par_ms i seq_ok par_ok pids=() rc=0
  pg_start
  # Sequential: one psql, a new connection (\connect: a new backend) per query.
  # A \connect that fails must stop the run, not reuse the previous connection.
  echo '\set ON_ERROR_STOP on' >"$T/seq.sql"
  payload_sql "$T/seq.sql" "" 1
  payload_sql "$T/seq.sql" "\\connect postgres postgres $RXE_IP $PG_PORT" $(seq 2 200)
  payload_sql "$T/par.{}.sql" "" $(seq 1001 1020)
  qp_watch_start
  t0=$(now_ms)
  psql_run "$T/seq.sql" "$T/seq.out" || rc=$?
  seq_ms=$(( $(now_ms) - t0 ))
  # Concurrent: 20 psql processes, one connection each.
  t0=$(now_ms)
  for i in $(seq 1001 1020); do
    psql_run "$T/par.$i.sql" "$T/par.$i.out" &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  par_ms=$(( $(now_ms) - t0 ))
  qp_watch_stop
  kill -INT "$PG_PID"
  wait_bg pg || true
  PG_PID=
  seq_ok=$(checked "$T/seq.out" "$T/seq.sql.want")
  par_ok=0
  for i in $(seq 1001 1020); do par_ok=$(( par_ok + $(checked "$T/par.$i.out" "$T/par.$i.sql.want") )); done
  show "200 sequential (one psql, \\connect before each query): $seq_ok ok in $seq_ms ms" \
       "  ($(( seq_ms / 200 )) ms per connection; psql rc=$rc)" \
       "20 concurrent psql: $par_ok ok in $par_ms ms" \
       "$(grep -hv '^conn [0-9]* [0-9a-f]\{64\} ' "$T/seq.out" "$T"/par.*.out | cut -c1-200 | head -5)" \
       "RC QPs seen while it ran: psql $(qp_seen psql), postgres $(qp_seen postgres)" \
       "server log: $(bg_log pg | grep -E 'FATAL|ERROR|PANIC|sdpshim|terminated by|exited with|malloc|free|assert|Assert|corrupt|abort' | grep -v 'starting up' | head -8)" \
       "psql diagnostics: $(grep -h 'sdpshim' "$T/seq.out" "$T"/par.*.out | grep -v 'now runs on TCP' | head -5)"
  [ "$rc" -eq 0 ]
  [ "$seq_ok" -eq 200 ]
  [ "$par_ok" -eq 20 ]
  [ $(( $(qp_seen psql) + $(qp_seen postgres) )) -ge 1 ]
  # Every connection (the sequential psql's first one, its 199 \connect and
  # the 20 concurrent ones) was on RDMA until the postmaster forked, then on
  # TCP while its backend took it over, then back on RDMA (the backend, alone
  # with it, climbed): by both ends' counters, at least 90 % of its bytes
  # went over RDMA.
  assert_climbed_share 220 90 comm=psql role=client
  assert_climbed_share 220 90 role=server climbs=1 # a backend's comm is its process title
}
