#!/usr/bin/env bats
# VM suite, part 36: the peer of a bound channel lies on the data path (issue
# 13).  tests/progs/rogue's peer mode is a complete sdpshim client of a real
# preloaded server, run by an unprivileged user (nobody): it binds its channel
# to its own TCP connection (Hello, COMMIT, the urgent byte, PROOF, ATTACH) and
# then speaks the data path correctly (credits, DATA, READs of SrcAvails)
# except for one scripted lie:
#   1    none: the tool itself, honest, gets its echo back byte-exact;
#   2    it never answers a SrcAvailCancel: an event-loop server (evecho) must
#        not freeze: its send() returns within 15 s, and honest clients get
#        their echo byte-exact meanwhile and afterwards;
#   3    it answers a SinkAvail with a full RdmaWrCompl and writes nothing: the
#        receiver's recv() (canary) must never return the canary its buffer held;
#   4,5  it sends ABORT and then disconnects while the server exposes a window
#        for a READ (its send buffer) or a WRITE (its recv buffer); its own QP
#        stays up, and its RDMA READ or WRITE to the old window afterwards must
#        fail (a fixed server invalidated the window or moved its QP to error).
#        Which comes first at the server, its app thread closing the window or
#        the disconnect, is a race: each case runs with the disconnect after
#        the ABORT's completion, right after posting it, and before it;
#   6    its SrcAvail or SinkAvail names a stream offset ahead of or behind the
#        true one: the server answers at the offset named, or aborts with a
#        one-line diagnostic; it never crashes; other clients are unaffected;
#   7    DATA, then 4 SrcAvails back to back before the server reads: each
#        RdmaRdCompl names its own SrcAvail's offset, or the server aborts.
# Each of 1-7 runs twice: per connection (SDPSHIM_LINKS=0 for every preloaded
# process, the rogue's own rdma_cm connection per stream) and "[link]": the
# rogue speaks links (--link: a link Hello, an OPEN naming its 4-tuple, the
# OPEN_ACK's nonce in its PROOF, every message in a link header), the honest
# clients use links (the default).  Then the lies only a link can tell, each
# against a preloaded evecho (or canary) with an honest client afterwards:
#   8    a second OPEN for the index its stream still uses;
#   9    an OPEN for index 1024, past the server's stream table (the server
#        runs the ASan build);
#   10   a link header whose lseq skips one, while a second stream of its link
#        is pending (the server runs the ASan build); 11  one that
#        acknowledges link messages never sent;
#   12   a STREAM message (DATA) for an index never opened;
#   13   RELEASED for its stream while it is open, then DATA on it;
#   14   two streams on its link, a sink offered on each: one RDMA WRITE fills
#        the second stream's sink while its immediate names the first (canary:
#        recv() must never return the canary its buffer held);
#   15   a link Hello that claims SOLICITED (every message asks for an event)
#        from a peer whose messages never do: its own messages wait for the
#        once-a-second sweep; its echo still comes back.
# What must hold each time: the server lives, the liar gets no byte but its
# own, a lie the server can see costs one diagnostic line, and honest
# clients on their own links keep their bytes byte-exact.
# The rogue checks every byte it gets back against the stream it sent
# (tests/progs/lie_pattern.h); honest clients (tests/progs/connects) check
# theirs by SHA-256.

load ../helpers
load vm_helpers
load ../sanitize

setup() {
  vm_setup
  for p in rogue evecho canary; do
    [ -x "$TRUST_PROGS/$p" ] || { echo "missing $TRUST_PROGS/$p: run make" >&2; return 1; }
  done
  [ -x "$PROGS/connects" ] || { echo "missing $PROGS/connects: run make" >&2; return 1; }
}

teardown() { vm_teardown; }

# diagnostics FILE: the shim's "peer violated ..." lines in FILE
diagnostics() {
  grep -c 'peer violated the' "$1" 2>/dev/null || true
}

# rfield NAME KEY: rogue_field, 0 when the summary lacks it
rfield() {
  local v
  v=$(rogue_field "$1" "$2")
  echo "${v:-0}"
}

# rogue_lines NAME [N]: the last N (30) lines of the rogue's log, without its DATA lines
rogue_lines() {
  grep -v '^data conn=' "$T/$1.log" | tail -"${2:-30}"
}

# honest_peer MODE
honest_peer() {
  local port rc=0 erc=0
  link_mode "$1"
  port=$(free_port)
  evecho_start "$port" -m 262144 -M 300
  rogue_peer rogue --to "$RXE_IP:$port" --lie none --bytes 1048576 --for 120 "${LINK_ARG[@]}"
  bg_wait_for rogue 130 || rc=$?
  [ "$rc" -ne 124 ] || bg_stop rogue 10 || true
  bg_stop evecho 15 || erc=$?
  show "rogue (rc=$rc):" "$(rogue_lines rogue)" "evecho (rc=$erc):" "$(bg_log evecho)" \
       "$(stats_lines "$STATS")"
  [ "$rc" -eq 0 ]
  grep -q 'uid=65534' "$T/rogue.log"
  grep -q '^end conn=0 reason=closed ' "$T/rogue.log"
  [ "$(rogue_field rogue attach)" = 1 ]
  [ "$(rogue_field rogue data_received)" = 1048576 ]
  [ "$(rogue_field rogue echo_bad)" = 0 ]
  [ "$(rogue_field rogue invalid)" = 0 ]
  [ "$(rogue_field rogue srcavails)" -ge 1 ]
  [ "$erc" -eq 0 ]
  [ "$(stats_lines "$STATS" comm=evecho role=server path=rdma reason=none | wc -l)" -eq 1 ]
  [ "$1" = conn ] || { [ "$(rogue_field rogue link)" = 1 ] && [ "$(rogue_field rogue open_acks)" = 1 ]; }
}

@test "the rogue peer as an honest client: attached over RDMA, its 1 MiB echo comes back byte-exact (in part by READs of the server's SrcAvails)" {
  honest_peer conn
}

@test "[link] the rogue peer as an honest client: attached over RDMA, its 1 MiB echo comes back byte-exact (in part by READs of the server's SrcAvails)" {
  honest_peer link
}

# never_answers_cancel MODE
never_answers_cancel() {
  local port r1=0 r2=0 erc=0 t0 t1 slow
  link_mode "$1"
  port=$(free_port)
  # The server's non-blocking write cancels its SrcAvail after 5 ms; the
  # answer it then waits for never comes.
  export SDPSHIM_ZCOPY_NB_WAIT_MS=5 SDPSHIM_ZCOPY_ANSWER_MS=2000
  evecho_start "$port" -m 262144 -M 300
  rogue_peer rogue --to "$RXE_IP:$port" --lie never-answer-cancel --bytes 1048576 --for 240 \
    "${LINK_ARG[@]}"
  wait_for_line "$T/rogue.log" '^(srccancel_ignored|end) ' 90 || true
  t0=$(now_ms)
  honest_echo "$port" 262144 during || r1=$?
  t1=$(now_ms)
  rogue_stop rogue || true
  honest_echo "$port" 262144 after || r2=$?
  bg_stop evecho 15 || erc=$?
  slow=$(sed -nE 's/^slow_write conn=0 .* ms=([0-9]+) .*/\1/p' "$T/evecho.log" | sort -n | tail -1)
  show "rogue:" "$(rogue_lines rogue)" \
       "honest client meanwhile (rc=$r1, $((t1 - t0)) ms): $(tr '\n' ' ' <"$T/during.out")" \
       "honest client afterwards (rc=$r2): $(tr '\n' ' ' <"$T/after.out")" \
       "evecho (rc=$erc after SIGTERM; 124: still stuck):" "$(bg_log evecho)" "$(stats_lines "$STATS")"
  # The lie was told: a SrcAvail never READ, its cancel never answered.
  grep -q '^srcavail_ignored conn=0 ' "$T/rogue.log"
  grep -q '^srccancel_ignored conn=0 ' "$T/rogue.log"
  # The event loop went on: the honest clients' echoes, in bounded time.
  [ "$r1" -eq 0 ]
  honest_ok during
  [ $((t1 - t0)) -lt 20000 ]
  [ "$r2" -eq 0 ]
  honest_ok after
  # No write() held it 15 s or more, and it still ends on SIGTERM.
  [ -z "$slow" ] || [ "$slow" -lt 15000 ]
  [ "$erc" -eq 0 ]
  grep -q '^totals ' "$T/evecho.log"
  [ "$(stats_lines "$STATS" comm=connects role=client path=rdma | wc -l)" -ge 1 ]
}

@test "rogue that never answers a SrcAvailCancel: the event-loop server's send() returns within 15 s, honest clients get their echo byte-exact meanwhile and afterwards" {
  never_answers_cancel conn
}

@test "[link] rogue that never answers a SrcAvailCancel: the event-loop server's send() returns within 15 s, honest clients get their echo byte-exact meanwhile and afterwards" {
  never_answers_cancel link
}

# false_wrcompl MODE
false_wrcompl() {
  local port crc=0 buf=1052672
  link_mode "$1"
  port=$(free_port)
  start_bg canary timeout -k 5 120 "${PRE[@]}" "$TRUST_PROGS/canary" -s "$port" -a "$RXE_IP" \
    -b "$buf" -x $((4096 + buf)) -t 30
  wait_for_line "$T/canary.log" '^listening ' 30
  # 4096 real bytes first; then the lie at the next sink (offset 4096); then
  # a DisConn 3 s later, so a receiver that waits for real bytes sees EOF.
  rogue_peer rogue --to "$RXE_IP:$port" --lie false-wrcompl --bytes 4096 --after-ms 3000 --for 90 \
    "${LINK_ARG[@]}"
  bg_wait_for canary 110 || crc=$?
  bg_stop rogue 10 || true
  show "canary (rc=$crc; 1: it got the canary back):" "$(bg_log canary)" "rogue:" \
       "$(rogue_lines rogue)" "$(stats_lines "$STATS")"
  grep -q '^wrcompl_lie conn=0 off=4096 ' "$T/rogue.log"
  grep -Eq '^end=.* pattern_bytes=4096 ' "$T/canary.log"
  if grep -Eq 'canary_bytes=[1-9]' "$T/canary.log"; then return 1; fi
  [ "$crc" -eq 0 ]
}

@test "rogue that answers a SinkAvail with a full RdmaWrCompl and writes nothing: recv() never returns the canary its buffer held" {
  false_wrcompl conn
}

@test "[link] rogue that answers a SinkAvail with a full RdmaWrCompl and writes nothing: recv() never returns the canary its buffer held" {
  false_wrcompl link
}

# abort_probe OP WHEN CANARY_ARGS...: a canary (send mode: a SrcAvail, op
# read; recv mode: a SinkAvail, op write) exposes a window; the rogue sends
# ABORT and disconnects (rdma_disconnect WHEN: acked, posted, first), and 500
# ms later READs or WRITEs that window over its own QP, which it keeps in RTS.
# Then the canary's hold ends (SIGTERM) and it reports any late write.  Adds
# "WHEN OP: STATUS ..." to PROBES; false if the scenario did not happen.
abort_probe() {
  local op=$1 when=$2 name=r_$1_$2 port st rrc=0; shift 2
  port=$(free_port)
  start_bg "c_${op}_$when" timeout -k 5 120 "${PRE[@]}" "$TRUST_PROGS/canary" -s "$port" -a "$RXE_IP" -H 60 "$@"
  wait_for_line "$T/c_${op}_$when.log" '^listening ' 30
  # A short RC ack timeout on the rogue's QP: a probe nobody answers (a peer
  # QP in the error state drops it) fails after 7 x 268 ms.
  rogue_peer "$name" --to "$RXE_IP:$port" --lie abort-disconnect --disconnect-at "$when" \
    --after-ms 500 --ack-timeout 16 --for 60 "${LINK_ARG[@]}"
  bg_wait_for "$name" 70 || rrc=$?
  [ "$rrc" -ne 124 ] || bg_stop "$name" 10 || true
  bg_stop "c_${op}_$when" 10 || true
  st=$(sed -nE "s/^probe conn=0 op=$op status=([A-Za-z_]+) .*/\\1/p" "$T/$name.log")
  PROBES+=("$when $op: ${st:-no probe}; canary: $(grep -E '^(send|recv|late_write|end)' "$T/c_${op}_$when.log" | sed 's/ t_ms=.*//' | tr '\n' ' ')")
  show "rogue $name (rc=$rrc):" "$(rogue_lines "$name" 14)"
  grep -q "^window conn=0 op=$op " "$T/$name.log" && grep -q '^disconnect_sent conn=0' "$T/$name.log"
}

# probe_failed WHEN OP: that probe's status was an error (not IBV_WC_SUCCESS,
# and there was one), and the canary saw no late write
probe_failed() {
  local v
  for v in "${PROBES[@]}"; do
    case "$v" in
      "$1 $2: IBV_WC_SUCCESS"*|"$1 $2: no probe"*) return 1 ;;
      "$1 $2: "*) [[ "$v" != *" late_bytes="[1-9]* ]] ; return ;;
    esac
  done
  return 1
}

# abort_mid_read MODE
abort_mid_read() {
  local when happened=()
  link_mode "$1"
  PROBES=()
  # send mode: one blocking 1 MiB send() (a SrcAvail); the socket and the
  # buffer are then held until SIGTERM.
  for when in acked posted first; do
    abort_probe read "$when" -S 1048576 && happened+=("$when")
  done
  show "${PROBES[@]}" "$(stats_lines "$STATS")"
  [ "${#happened[@]}" -eq 3 ]
  for when in acked posted first; do
    probe_failed "$when" read
  done
  if grep -q '^probe_data ' "$T"/r_read_*.log; then return 1; fi # it read the server's memory
}

@test "rogue that sends ABORT and then disconnects mid-READ: its RDMA READ of the server's old send window afterwards fails" {
  abort_mid_read conn
}

@test "[link] rogue that sends ABORT and then disconnects mid-READ: its RDMA READ of the server's old send window afterwards fails" {
  abort_mid_read link
}

# abort_mid_recv MODE
abort_mid_recv() {
  local when happened=()
  link_mode "$1"
  PROBES=()
  # recv mode: a blocking 1 MiB recv() (a SinkAvail); after it returns, the
  # socket and the buffer are held until SIGTERM, then checked for late writes.
  for when in acked posted first; do
    abort_probe write "$when" -b 1048576 -t 60 && happened+=("$when")
  done
  show "${PROBES[@]}" "$(stats_lines "$STATS")"
  [ "${#happened[@]}" -eq 3 ]
  for when in acked posted first; do
    probe_failed "$when" write
  done
  grep -q ' late_bytes=0 ' "$T"/c_write_acked.log
}

@test "rogue that sends ABORT and then disconnects while a recv() exposes its buffer: its RDMA WRITE afterwards fails, the buffer stays untouched" {
  abort_mid_recv conn
}

@test "[link] rogue that sends ABORT and then disconnects while a recv() exposes its buffer: its RDMA WRITE afterwards fails, the buffer stays untouched" {
  abort_mid_recv link
}

# offset_verdict NAME DIAG_BEFORE: "ok: ..." or "BAD: ..." for one wrong-offset rogue
offset_verdict() {
  local name=$1 before=$2 now aborted answers bad
  now=$(diagnostics "$T/evecho.log")
  aborted=$(rfield "$name" aborted)
  answers=$(( $(rfield "$name" rdcompl) + $(rfield "$name" sinkcancelacks) + $(rfield "$name" wrcompl) ))
  bad=$(( $(rfield "$name" rdcompl_bad) + $(rfield "$name" sinkcancelacks_bad) + $(rfield "$name" wrcompl_bad) + $(rfield "$name" echo_bad) ))
  if ! grep -q '^offer_sent conn=0 ' "$T/$name.log"; then
    echo "BAD: the rogue made no offer"
  elif [ "$aborted" = 1 ] && [ "$now" -eq $((before + 1)) ]; then
    echo "ok: aborted with one diagnostic: $(grep 'peer violated the' "$T/evecho.log" | tail -1)"
  elif [ "$aborted" = 1 ]; then
    echo "BAD: aborted with $((now - before)) diagnostic lines"
  elif [ "$answers" -ge 1 ] && [ "$bad" -eq 0 ] && grep -q '^end conn=0 reason=closed ' "$T/$name.log" &&
       [ "$(rfield "$name" data_received)" = "$(rfield "$name" data_sent)" ]; then
    echo "ok: answered at the offset named: $(grep -E '^(rdcompl|sinkcancelack|wrcompl) conn=0 ' "$T/$name.log" | head -1)"
  else
    echo "BAD: answers=$answers wrong=$bad aborted=$aborted: $(rogue_summary "$name")"
  fi
}

# wrong_offset MODE
wrong_offset() {
  local port spec name before verdicts=() hrc erc=0 alive=1
  link_mode "$1"
  port=$(free_port)
  evecho_start "$port"
  for spec in "src 4096" "src -4096" "sink 4096" "sink -4096"; do
    set -- $spec
    name=wo_$1_${2#-}$([ "${2#-}" != "$2" ] && echo behind || echo ahead)
    before=$(diagnostics "$T/evecho.log")
    # 64 KiB echoed first, then the offer at the true offset + delta.
    rogue_peer "$name" --to "$RXE_IP:$port" --lie wrong-offset --offer "$1" --offset-delta "$2" \
      --bytes 65536 --for 60 "${LINK_ARG[@]}"
    bg_wait_for "$name" 70 || bg_stop "$name" 10 || true
    sleep 0.5 # the server's diagnostic, if any, is in its log
    hrc=0
    honest_echo "$port" 65536 "h_$name" || hrc=$?
    verdicts+=("$spec: $(offset_verdict "$name" "$before"); honest client rc=$hrc$(honest_ok "h_$name" && echo ' ok' || echo ' FAILED')")
    bg_running evecho || alive=0
  done
  bg_stop evecho 15 || erc=$?
  show "${verdicts[@]}" "evecho (rc=$erc):" "$(bg_log evecho)"
  for name in wo_src_4096ahead wo_src_4096behind wo_sink_4096ahead wo_sink_4096behind; do
    show "$name:" "$(rogue_lines "$name" 12)"
  done
  [ "$alive" -eq 1 ]
  [ "$erc" -eq 0 ]
  for v in "${verdicts[@]}"; do
    [[ "$v" == *": ok: "*"rc=0 ok" ]]
  done
}

@test "rogue SrcAvail or SinkAvail at a wrong stream offset (ahead, behind): answered at that offset or aborted with a one-line diagnostic; the server lives on, honest clients are unaffected" {
  wrong_offset conn
}

@test "[link] rogue SrcAvail or SinkAvail at a wrong stream offset (ahead, behind): answered at that offset or aborted with a one-line diagnostic; the server lives on, honest clients are unaffected" {
  wrong_offset link
}

# stacked_srcavail MODE
stacked_srcavail() {
  local port rc=0 hrc=0 erc=0 total=$((65536 + 4 * 262144))
  link_mode "$1"
  port=$(free_port)
  evecho_start "$port"
  rogue_peer rogue --to "$RXE_IP:$port" --lie stacked-srcavail --stack 4 --src-len 262144 \
    --bytes 65536 --for 90 "${LINK_ARG[@]}"
  bg_wait_for rogue 100 || rc=$?
  [ "$rc" -ne 124 ] || bg_stop rogue 10 || true
  honest_echo "$port" 262144 honest || hrc=$?
  bg_stop evecho 15 || erc=$?
  show "rogue (rc=$rc):" "$(grep -E '^(offer_sent|rdcompl|msg|end|abort)' "$T/rogue.log" | head -30)" \
       "$(rogue_summary rogue)" "honest client (rc=$hrc): $(tr '\n' ' ' <"$T/honest.out")" \
       "evecho (rc=$erc):" "$(bg_log evecho)" "$(stats_lines "$STATS")"
  [ "$(rogue_field rogue offers_sent)" = 4 ]
  if [ "$(rogue_field rogue aborted)" = 1 ]; then
    [ "$(diagnostics "$T/evecho.log")" -eq 1 ]
  else
    [ "$(rogue_field rogue rdcompl)" = 4 ]
    [ "$(rogue_field rogue rdcompl_bad)" = 0 ]
    [ "$(rogue_field rogue echo_bad)" = 0 ]
    [ "$(rogue_field rogue data_received)" = "$total" ]
  fi
  [ "$hrc" -eq 0 ]
  honest_ok honest
  [ "$erc" -eq 0 ]
}

@test "rogue DATA, then 4 SrcAvails back to back before the server reads: every RdmaRdCompl names its own SrcAvail's offset, or the server aborts with a diagnostic" {
  stacked_srcavail conn
}

@test "[link] rogue DATA, then 4 SrcAvails back to back before the server reads: every RdmaRdCompl names its own SrcAvail's offset, or the server aborts with a diagnostic" {
  stacked_srcavail link
}

# --- lies only a link can tell ------------------------------------------------

# link_lie LIE [ROGUE ARGS...]: a preloaded evecho on a fresh port (started
# with EVECHO_ENV words in front, e.g. the ASan build), the rogue peer telling
# LIE over its link with 64 KiB echoed first, then an honest client of its own
# link.  Sets PORT, RRC (the rogue's exit; 124: still running at 50 s), HRC
# (the honest client's), ALIVE (1: evecho still ran after both), ERC (evecho's
# exit after SIGTERM), SPORT (the rogue's TCP source port) and IN (the bytes
# evecho read from the rogue's connection, by its close line).
link_lie() {
  local lie=$1; shift
  RRC=0 HRC=0 ALIVE=0 ERC=0
  link_mode link
  PORT=$(free_port)
  start_bg evecho timeout -k 5 600 "${EVECHO_ENV[@]}" "$TRUST_PROGS/evecho" -s "$PORT" -a "$RXE_IP"
  wait_for_line "$T/evecho.log" '^listening ' 30
  rogue_peer rogue --to "$RXE_IP:$PORT" --link --lie "$lie" --after-ms 1000 --for 40 "$@"
  bg_wait_for rogue 50 || RRC=$?
  [ "$RRC" -ne 124 ] || bg_stop rogue 10 || true
  sleep 0.5 # the server's diagnostic, if any, is in its log
  honest_echo "$PORT" 262144 honest || HRC=$?
  bg_running evecho && ALIVE=1
  bg_stop evecho 15 || ERC=$?
  SPORT=$(sed -nE 's/^tcp_bound conn=0 .* sport=([0-9]+) .*/\1/p' "$T/rogue.log")
  IN=$(sed -nE "s/^close conn=[0-9]+ peer=[^ ]*:$SPORT in=([0-9]+) .*/\\1/p" "$T/evecho.log")
  show "rogue (--lie $lie, rc=$RRC):" "$(rogue_lines rogue 24)" \
       "honest client afterwards (rc=$HRC): $(tr '\n' ' ' <"$T/honest.out")" \
       "evecho (alive after both: $ALIVE; rc=$ERC after SIGTERM; read $IN bytes from the rogue):" \
       "$(bg_log evecho | tail -12)" "$(stats_lines "$STATS")"
}

# link_lie_holds: what every link lie must leave: the server lived through it
# and ends cleanly, the honest client's echo came back byte-exact over RDMA,
# and the rogue got no byte that was not its own stream's.
link_lie_holds() {
  grep -q 'uid=65534' "$T/rogue.log"
  [ "$ALIVE" -eq 1 ]
  [ "$ERC" -eq 0 ]
  [ "$HRC" -eq 0 ]
  honest_ok honest
  [ "$(stats_lines "$STATS" comm=connects role=client path=rdma reason=none | wc -l)" -eq 1 ]
  [ "$(rfield rogue echo_bad)" = 0 ]
  [ "$(rfield rogue data_received)" -le "$(rfield rogue data_sent)" ]
  [ "$(rfield rogue link)" = 1 ]
}

@test "[link] rogue OPEN for the index its stream still uses: refused with one diagnostic, its stream goes on byte-exact; the server lives, an honest client is unaffected" {
  EVECHO_ENV=("${PRE[@]}")
  link_lie open-dup-index
  link_lie_holds
  [ "$(grep -c '^open_sent conn=0 stream=0 ' "$T/rogue.log")" -eq 2 ]
  if grep -q '^open_answer_unexpected conn=0 stream=0 kind=ack' "$T/rogue.log"; then return 1; fi
  grep -q '^end conn=0 reason=closed ' "$T/rogue.log"
  [ "$(rfield rogue data_received)" = 131072 ]
  [ "$(rfield rogue data_sent)" = 131072 ]
  [ "$(link_diags "$T/evecho.log" 'index is still in use')" -eq 1 ]
}

@test "[link] rogue OPEN for stream index 1024, past the server's table: the server (ASan build) reads and writes nothing past it, lives, and serves an honest client" {
  san_setup
  export SDPSHIM_LINK_STREAMS=1024
  EVECHO_ENV=(env "${SAN_ENV[@]}")
  link_lie open-index-oob --stream-index 1024 --for 20
  show "evecho's sanitizer lines:" "$(grep -E 'AddressSanitizer|runtime error|SUMMARY' "$T/evecho.log" | head -5)"
  grep -q '^open_sent conn=0 stream=1024 ' "$T/rogue.log"
  san_clean <"$T/evecho.log"
  link_lie_holds
}

@test "[link] rogue link header whose lseq skips one, a second stream of its link pending: the server (ASan build) fails that link with one diagnostic, drops the pending stream cleanly, lives, and serves an honest client" {
  san_setup
  EVECHO_ENV=(env "${SAN_ENV[@]}")
  # The pending stream: OPENed, never committed nor connected, so it sits in
  # the listener's pending table when its link fails; the honest client's
  # accept() then walks that table.
  link_lie bad-lseq --second-pending
  show "evecho's sanitizer lines:" "$(grep -E 'AddressSanitizer|runtime error|SUMMARY|#[0-9] ' "$T/evecho.log" | head -16)"
  grep -q '^pending conn=1 stream=1 ' "$T/rogue.log"
  grep -q '^lseq_lie conn=0 ' "$T/rogue.log"
  san_clean <"$T/evecho.log"
  link_lie_holds
  [ "$(rfield rogue data_received)" = 65536 ]
  [ "$(link_diags "$T/evecho.log" 'link peer violated the sdpshim protocol')" -eq 1 ]
}

@test "[link] rogue link header acknowledging link messages never sent: the server fails that link with one diagnostic, lives, and serves an honest client on its own link" {
  EVECHO_ENV=("${PRE[@]}")
  link_lie bad-lack
  link_lie_holds
  grep -q '^lack_lie conn=0 ' "$T/rogue.log"
  [ "$(rfield rogue data_received)" = 65536 ]
  [ "$(link_diags "$T/evecho.log" 'link peer violated the sdpshim protocol')" -eq 1 ]
}

@test "[link] rogue STREAM message (DATA) for an index never opened: no stream takes its bytes; the rogue's own stream goes on byte-exact, the server lives, an honest client is unaffected" {
  EVECHO_ENV=("${PRE[@]}")
  link_lie stream-unopened
  link_lie_holds
  grep -q '^unopened_sent conn=0 stream=7 bytes=4096 ' "$T/rogue.log"
  grep -q '^end conn=0 reason=closed ' "$T/rogue.log"
  [ "$(rfield rogue data_received)" = 131072 ]
  # evecho read exactly the rogue's stream: the 4 KiB for index 7 went nowhere.
  [ "$IN" = 131072 ]
  [ "$(link_diags "$T/evecho.log" 'violated')" -le 1 ]
}

@test "[link] rogue RELEASED for its stream while it is open, then DATA on it: the server gives that stream up with one diagnostic and takes none of the DATA; it lives, an honest client is unaffected" {
  EVECHO_ENV=("${PRE[@]}")
  link_lie released-in-use
  link_lie_holds
  grep -q '^released_sent conn=0 stream=0 ' "$T/rogue.log"
  [ "$(rfield rogue data_received)" -le 65536 ]
  [ -z "$IN" ] || [ "$IN" -le 65536 ]
  [ "$(link_diags "$T/evecho.log" 'released the stream')" -eq 1 ]
}

@test "[link] rogue WRITE with immediate into one stream's sink naming another stream of its link: recv() on the named stream never returns the canary its buffer held" {
  local port crc=0
  link_mode link
  port=$(free_port)
  start_bg canary timeout -k 5 120 "${PRE[@]}" "$TRUST_PROGS/canary" -s "$port" -a "$RXE_IP" \
    -n 2 -b 1052672 -t 20
  wait_for_line "$T/canary.log" '^listening ' 30
  # Both streams of its link attach; the canary's recv() on each would offer
  # a sink, but a link exposes one sink at a time (docs/links.md): the WRITE
  # fills the one offered and names the other stream, which has none.  The
  # server fails the link (one diagnostic); its streams move to TCP, where
  # the rogue sends nothing more.
  rogue_peer rogue --to "$RXE_IP:$port" --link --lie write-imm-other --after-ms 2000 --for 60
  bg_wait_for canary 70 || crc=$?
  bg_stop rogue 10 || true
  show "canary, two connections (rc=$crc; 1: a recv() returned the canary):" "$(bg_log canary)" \
       "rogue:" "$(rogue_lines rogue 30)" "$(stats_lines "$STATS")"
  grep -q 'uid=65534' "$T/rogue.log"
  # The scenario happened: both streams attached, the lying WRITE went out.
  [ "$(rfield rogue second_attach)" = 1 ]
  grep -Eq '^write_imm_lie conn=0 named_stream=(0 target_stream=1|1 target_stream=0) ' "$T/rogue.log"
  grep -q 'RDMA WRITE naming a stream without an open sink' "$T/canary.log"
  if grep -Eq 'canary_bytes=[1-9]' "$T/canary.log"; then return 1; fi
  # The WRITE can only have filled the one sink the link exposed, which that
  # stream's recv() offered: those bytes stay in that buffer unreported (as
  # after a carrier failure between a WRITE and its completion, where the
  # peer's resend overwrites them), so canary may exit 1 for that one late
  # write, within that sink; no other buffer changes, no recv() returns them.
  [ "$crc" -eq 0 ] || [ "$crc" -eq 1 ]
  [ "$(grep -c '^late_write ' "$T/canary.log")" -le 1 ]
  awk '/^late_write / { for (i = 1; i <= NF; i++) if ($i ~ /^bytes=/) { split($i, b, "=");
       if (b[2] + 0 > 1052672) bad = 1 } } END { exit bad }' "$T/canary.log"
}

# OPEN_COMMIT commits a stream with its OPEN; only a link whose Hellos both
# offered OPEN_COMMITS may carry one (docs/links.md).  A rogue that sends one
# on a link whose Hello did not offer it breaks the framing it agreed to.
@test "[link] rogue OPEN_COMMIT on a link whose Hello did not offer it: the server fails that link with one diagnostic and opens no stream; it lives, and an honest client (which opens with OPEN_COMMIT) is unaffected" {
  EVECHO_ENV=("${PRE[@]}")
  link_lie open-commit-unoffered --for 10
  link_lie_holds
  grep -q '^open_commit_sent conn=0 stream=0 ' "$T/rogue.log"
  if grep -q '^open_ack conn=0 ' "$T/rogue.log"; then return 1; fi
  [ "$(rfield rogue data_received)" = 0 ]
  [ -z "$IN" ] || [ "$IN" -eq 0 ]
  [ "$(link_diags "$T/evecho.log" 'link peer violated the sdpshim protocol')" -eq 1 ]
}

# Issue 16: a link's CQ is armed for solicited events alone while nothing of
# the server's is in flight, on the word of the client's Hello (SOLICITED:
# "every message of mine asks for an event").  A client that says so and
# sends without the bit gets no wake-up for its messages; what it gains is
# a wait of its own: the once-a-second sweep takes them in (link_sweep_all),
# so its echo still comes back byte-exact, and the server and an honest
# client are unaffected.
@test "[link] rogue claims SOLICITED in its link Hello and never sets the bit: its echo still comes back byte-exact (the sweep takes its messages in), the server lives, an honest client is unaffected" {
  EVECHO_ENV=("${PRE[@]}")
  link_lie false-solicited --bytes 65536
  link_lie_holds
  grep -q '^end conn=0 reason=closed ' "$T/rogue.log"
  [ "$RRC" -eq 0 ]
  [ "$(rfield rogue attach)" = 1 ]
  [ "$(rfield rogue data_sent)" = 65536 ]
  [ "$(rfield rogue data_received)" = 65536 ]
  [ "$(rfield rogue invalid)" = 0 ]
  [ "$IN" = 65536 ]
}
