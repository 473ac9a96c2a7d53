#!/usr/bin/env bats
# VM suite, part 70: moving an established connection from RDMA to the kernel
# TCP socket ("switch", issue 6), both ends preloaded, on rxe0 ($RXE_IP).
#
#  - fork: tests/progs/forkecho is a fork-per-connection echo server (the parent
#    accepts, forks, closes its copy at once; the child echoes until EOF) and a
#    client that sends a seeded pattern on CONNS connections, PARALLEL at once,
#    and checks each echo by length and SHA-256.  The parent switches every RDMA
#    socket before fork, so every client stats line must say path=tcp,
#    reason=forked, switches >= 1; 200 sequential connections, 20 concurrent ones
#    of 1 MiB, and 20 where the child execs `sh -c 'exec cat <&3 >&3'` on the
#    inherited socket (fd 3) so an exec'd image does the echo.
#  - failover: SDPSHIM_DEBUG_FAIL_AFTER=N makes a process force the QP of each of
#    its RDMA connections into the error state once it has sent N bytes over
#    RDMA; a 1 GiB stream (tests/progs/stream) with the failure on the sending
#    end, up and down, must finish byte-exact on TCP (SHA-256 = tests/progs/
#    streamref), both stats lines reason=failover, switches >= 1, with the
#    sender's RDMA byte counters between N and the stream's length.
#  - soak: for SDPSHIM_SOAK_S seconds (default 60; 600 for the 10-minute run:
#    `SDPSHIM_SOAK_S=600 make vm`, run-bats.sh forwards SDPSHIM_* into the
#    guest), batches of forkecho clients (10 connections, 5 at once) against one
#    long-running preloaded forkecho server, each followed by an 8 MiB stream
#    that fails over after 1 MiB (alternately up with the failure on the client
#    and down with it on the server).  Every batch and stream must be
#    sha-correct; the server parent's fd count may not grow by more than 2 from
#    after the first batch to the end, it must hold no RC QP and no more MRs
#    than after the first batch once idle, and after the programs exit the RC
#    QP and MR counts (`rdma resource show`) are back to their baseline.
#  - link delete (last, as it removes rxe0): `rdma link delete` of the device
#    under a running 1 GiB stream; the stream must finish on TCP with the
#    reference SHA-256 and reason=failover on both ends.  The delete's exit code,
#    output and duration are printed (rxe cannot disassociate user contexts, so
#    the delete may block until the processes close them).  Teardown re-adds
#    the link on the same netdev and waits for it to be ACTIVE again.

load ../helpers
load vm_helpers

FAIL_AFTER_1G=$((128 << 20))   # forced QP error after 128 MiB of a 1 GiB stream

# Reference digests (streamref SEED BYTES), computed in the background: the
# 1 GiB one costs ~35 s of guest CPU.
setup_file() {
  requires_rdma
  local ref=$BATS_FILE_TMPDIR/ref
  mkdir -p "$ref"
  (
    for spec in "1 8M" "1 1G"; do
      set -- $spec
      "$PROGS/streamref" "$1" "$2" >"$ref/$1-$2.tmp" && mv "$ref/$1-$2.tmp" "$ref/$1-$2"
    done
  ) >/dev/null 2>&1 3>&- &
  echo $! >"$BATS_FILE_TMPDIR/ref.pid"
}

teardown_file() {
  kill "$(cat "$BATS_FILE_TMPDIR/ref.pid" 2>/dev/null)" 2>/dev/null || true
}

setup() {
  vm_setup
  # run-bats.sh forwards every SDPSHIM_* variable: only the process a test
  # names may carry the forced failure.
  unset SDPSHIM_DEBUG_FAIL_AFTER
  FORKECHO=$PROGS/forkecho
  [ -x "$FORKECHO" ] || { echo "missing $FORKECHO: run make progs" >&2; return 1; }
  [ -x "$PROGS/streamref" ] || { echo "missing $PROGS/streamref: run make progs" >&2; return 1; }
  RESTORE_LINK=
}

teardown() {
  vm_teardown
  [ -z "${RESTORE_LINK:-}" ] || restore_link
}

ref_digest() {   # ref_digest SEED BYTES: waits (up to 5 min) for the reference digest
  local f=$BATS_FILE_TMPDIR/ref/$1-$2
  wait_for_line "$f" '^[0-9a-f]{64}$' 300 >/dev/null
  cat "$f"
}

# received_digest WHO FILE BYTES: the digest stream's WHO (client|server) printed
received_digest() {
  sed -nE "s/^stream: $1 received $3 bytes sha256=([0-9a-f]{64}) OK\$/\\1/p" "$2"
}

# stats_summary: the stats file grouped by comm, role, path, reason, switches
stats_summary() {
  "$PY" -S - "$STATS" <<'EOF'
import collections, json, os, sys
path = sys.argv[1]
lines = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
groups = collections.Counter((c["comm"], c["role"], c["path"], c["reason"], c.get("switches", "-"))
                             for c in lines)
print("stats: %d lines" % len(lines))
for (comm, role, p, reason, sw), n in sorted(groups.items(), key=lambda kv: tuple(map(str, kv[0]))):
    print("  %4d x %s %s path=%s reason=%s switches=%s" % (n, comm, role, p, reason, sw))
EOF
}

rxe_counter() {
  rdma statistic show link "$1" 2>/dev/null | tr ' ' '\n' | awk -v k="$2" 'prev == k { print; exit } { prev = $0 }'
}


# Teardown of the link-delete test: let the delete finish (it can block until the
# last user context closes; the processes are gone by now), then re-add the link
# on its netdev and wait until its port is ACTIVE.
restore_link() {
  local i
  for i in $(seq 1 600); do
    [ -f "$T/linkdel.res" ] && break
    sleep 0.1
  done
  [ -f "$T/linkdel.res" ] || echo "restore_link: rdma link delete $LINK_DEV still running after 60 s" >&2
  if ! rdma link show "$LINK_DEV/1" >/dev/null 2>&1; then
    rdma link add "$LINK_DEV" type rxe netdev "$LINK_NETDEV" ||
      echo "restore_link: rdma link add $LINK_DEV type rxe netdev $LINK_NETDEV failed" >&2
  fi
  for i in $(seq 1 300); do
    rdma link show 2>/dev/null | grep -Eq "^link $LINK_DEV/1 state ACTIVE " && return 0
    sleep 0.1
  done
  echo "restore_link: $LINK_DEV/1 not ACTIVE 30 s after re-adding it:" >&2
  rdma link show >&2
  return 1
}

@test "switch: rdma link delete during a 1 GiB stream: the stream finishes on TCP" {
  local links netdev link port pkts0 pkts live until i crc=0 src=0 t_del t_end del got want
  links=$(rdma link show)
  # The link whose netdev carries $RXE_IP (else the first one).
  netdev=$(ip -o -4 addr show to "$RXE_IP" 2>/dev/null | awk '{ print $2; exit }')
  link=$(awk -v nd="$netdev" '$1 == "link" { for (i = 1; i < NF; i++) if ($i == "netdev" && $(i + 1) == nd) { print $2; exit } }' <<<"$links")
  if [ -z "$link" ]; then
    link=$(awk '$1 == "link" && / netdev / { print $2; exit }' <<<"$links")
    netdev=$(awk -v l="$link" '$2 == l { for (i = 1; i < NF; i++) if ($i == "netdev") print $(i + 1) }' <<<"$links")
  fi
  show "rdma link show: $links" "using link ${link:-?} on netdev ${netdev:-?}"
  [ -n "$link" ]
  [ -n "$netdev" ]
  LINK_DEV=${link%%/*} LINK_NETDEV=$netdev
  port=$(free_port)
  start_bg server timeout -k 5 600 "${PRE[@]}" "$PROGS/stream" -s "$port" -n 1
  wait_port "$RXE_IP" "$port"
  qp_watch_start
  pkts0=$(rxe_counter "$link" sent_pkts)
  start_bg client timeout -k 5 600 "${PRE[@]}" "$PROGS/stream" -c "$RXE_IP" -p "$port" -b 1G -d up -m 1M
  # Data is flowing over RDMA: the server's live counters show 16 MiB received.
  until=$(( $(date +%s) + 90 ))
  while :; do
    live=$(live_server "$port")
    [ "${live% *}" = rdma ] && [ "${live#* }" -ge $((16 << 20)) ] && break
    [ "$(date +%s)" -lt "$until" ] || break
    sleep 0.2
  done
  pkts=$(rxe_counter "$link" sent_pkts)
  show "before the delete: server connection path and bytes received: $live;" \
       "  sent_pkts of $link: ${pkts0:-?} before the stream, ${pkts:-?} now; RC QPs of stream: $(count_rc_qps stream)"
  [ "${live% *}" = rdma ]
  [ "${live#* }" -ge $((16 << 20)) ]
  [ "$(count_rc_qps stream)" -ge 2 ]
  RESTORE_LINK=1
  t_del=$(now_ms)
  (
    rc=0
    timeout 60 rdma link delete "$LINK_DEV" >"$T/linkdel.out" 2>&1 || rc=$?
    echo "rc=$rc ms=$(( $(now_ms) - t_del ))" >"$T/linkdel.res"
  ) 3>&- &
  wait_bg client || crc=$?
  wait_bg server || src=$?
  t_end=$(now_ms)
  qp_watch_stop
  # How long the delete took, relative to the stream's end (up to 90 s more).
  for i in $(seq 1 900); do
    [ -f "$T/linkdel.res" ] && break
    sleep 0.1
  done
  del=$(cat "$T/linkdel.res" 2>/dev/null)
  got=$(received_digest server "$T/server.log" $((1 << 30)))
  want=$(ref_digest 1 1G)
  show "rdma link delete $LINK_DEV: ${del:-still running 90 s after the stream ended}" \
       "  output: $(cat "$T/linkdel.out" 2>/dev/null)" \
       "  the stream ended $(( t_end - t_del )) ms after the delete began" \
       "  rdma link show now: $(rdma link show 2>&1)" \
       "client (rc=$crc): $(bg_log client)" "server (rc=$src): $(bg_log server)" \
       "server received sha256 ${got:-none}, reference $want" \
       "RC QPs of stream seen: $(qp_seen stream)" \
       "$(stats_lines "$STATS")" "$(stats_summary)"
  [ "$crc" -eq 0 ]
  [ "$src" -eq 0 ]
  [ -n "$got" ]
  [ "$got" = "$want" ]
  [ "$(stats_lines "$STATS" role=client | wc -l)" -eq 1 ]
  [ "$(stats_lines "$STATS" role=server | wc -l)" -eq 1 ]
  assert_switched failover 2
  assert_exact_bytes "$STATS"
}
