#!/usr/bin/env bats
# VM suite: PostgreSQL, a real fork-per-connection server (the postmaster
# accepts, forks a backend that serves the connection, and closes its own copy),
# preloaded with its psql clients over RDMA.  200 sequential and 20 concurrent
# connections each send 64 KiB and get it back; the server's SHA-256 of what it
# received and the echoed bytes are both checked.  Every psql line must have
# moved to TCP with reason forked (the postmaster's fork moved it).

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
  start_bg pg timeout -k 5 900 "${PRE[@]}" setpriv --reuid=postgres --regid=postgres --clear-groups \
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

# pg_conn I: one preloaded psql connection; 64 KiB of hex up, its SHA-256 as
# computed by the server and the same 64 KiB back; prints "conn I ok" or BAD.
pg_conn() {
  local i=$1 payload want out rc=0
  payload=$(head -c 32768 /dev/urandom | od -An -tx1 -v | tr -d ' \n')
  want=$(printf %s "$payload" | sha256sum | cut -d' ' -f1)
  printf "SELECT encode(sha256(convert_to('%s', 'UTF8')), 'hex'), '%s';\n" "$payload" "$payload" \
    >"$T/q$i.sql"
  out=$(timeout 120 "${PRE[@]}" psql -X -q -A -t -F ' ' -h "$RXE_IP" -p "$PG_PORT" -U postgres \
    -d postgres -f "$T/q$i.sql" 2>&1) || rc=$?
  rm -f "$T/q$i.sql"
  if [ "$rc" -eq 0 ] && [ "${out%% *}" = "$want" ] && [ "${out#* }" = "$payload" ]; then
    echo "conn $i ok"
  else
    echo "conn $i BAD (psql rc=$rc): ${out:0:300}"
  fi
}

@test "switch: PostgreSQL (postmaster forks per connection), 200 sequential and 20 concurrent psql connections, sha-checked" {
  local t0 seq_ms par_ms i seq_ok par_ok pids=()
  pg_start
  qp_watch_start
  t0=$(now_ms)
  for i in $(seq 200); do pg_conn "$i"; done >"$T/seq.out"
  seq_ms=$(( $(now_ms) - t0 ))
  t0=$(now_ms)
  for i in $(seq 1001 1020); do
    pg_conn "$i" >"$T/par.$i.out" &
    pids+=($!)
  done
  wait "${pids[@]}" || true
  par_ms=$(( $(now_ms) - t0 ))
  qp_watch_stop
  cat "$T"/par.*.out >"$T/par.out"
  kill -INT "$PG_PID"
  wait_bg pg || true
  PG_PID=
  seq_ok=$(grep -c ' ok$' "$T/seq.out" || true)
  par_ok=$(grep -c ' ok$' "$T/par.out" || true)
  show "200 sequential: $seq_ok ok in $seq_ms ms ($(( seq_ms / 200 )) ms per connection)" \
       "20 concurrent: $par_ok ok in $par_ms ms" \
       "$(grep -hv ' ok$' "$T/seq.out" "$T/par.out" | head -5)" \
       "RC QPs seen while it ran: psql $(qp_seen psql), postgres $(qp_seen postgres)" \
       "server log: $(bg_log pg | grep -E 'FATAL|ERROR|PANIC|sdpshim' | head -5)"
  [ "$seq_ok" -eq 200 ]
  [ "$par_ok" -eq 20 ]
  [ $(( $(qp_seen psql) + $(qp_seen postgres) )) -ge 1 ]
  # Each psql connection was on RDMA until the postmaster forked, then on TCP.
  assert_switched forked 220 comm=psql role=client
}
