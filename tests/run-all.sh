#!/bin/bash
# run-all.sh : the whole suite = unit tests + native bats suite + VM (soft-RoCE) bats
# suite + a short run of the libFuzzer harnesses (tests/run-fuzz.sh, one test per
# harness, SDPSHIM_FUZZ_SECONDS each, default 6).  Streams each part's TAP, then
# prints one count line per part and, last, a line exactly "N passed, M failed";
# exits 1 if M > 0.
# Counting: "ok" = passed, "not ok" = failed; skipped tests count as passed, except
# with SDPSHIM_STRICT=1, where they count as failed.  Results a plan promised but
# never printed, and a part that exits nonzero without any "not ok" (a crash, a VM
# that never booted), count as failures too.
# Env: BUILD (default build), SDPSHIM_STRICT, SDPSHIM_FUZZ_SECONDS, plus whatever
# run-bats.sh takes.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 2
export BUILD=${BUILD:-build}
STRICT=${SDPSHIM_STRICT:-0}
LOGDIR=$(mktemp -d); trap 'rm -rf "$LOGDIR"' EXIT
TOTAL_P=0; TOTAL_F=0; SUMMARY=()

count() {   # count PART LOGFILE RC SECONDS
  local part=$1 log=$2 rc=$3 secs=$4 ok skip bad plan missing=0 extra=""
  skip=$(grep -cE '^ok [0-9]+.* # [Ss][Kk][Ii][Pp]' "$log")
  ok=$(( $(grep -cE '^ok [0-9]+' "$log") - skip ))
  bad=$(grep -cE '^not ok [0-9]+' "$log")
  plan=$(sed -nE 's/^1\.\.([0-9]+).*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
  if [ "$plan" -gt $((ok + skip + bad)) ]; then
    missing=$(( plan - ok - skip - bad )); extra+=", $missing planned but never reported"
  fi
  bad=$(( bad + missing ))
  if [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
    bad=1; extra+=", exited $rc with no failing test reported"
  fi
  local p=$ok f=$bad
  if [ "$STRICT" = 1 ]; then f=$((f + skip)); else p=$((p + skip)); fi
  TOTAL_P=$((TOTAL_P + p)); TOTAL_F=$((TOTAL_F + f))
  local how="as passed"; [ "$STRICT" = 1 ] && how="as failed: SDPSHIM_STRICT=1"
  [ "$skip" -gt 0 ] && extra+=", the $skip skipped counted $how"
  SUMMARY+=("== $part: $p passed, $f failed ($ok ok, $skip skipped, $bad not ok$extra) in ${secs}s")
}

run_part() {   # run_part NAME CMD... : stream the part's output, keep a copy to count
  local name=$1; shift
  local log=$LOGDIR/$name.tap t0=$SECONDS rc
  echo; echo "######## $name: $*"
  "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  tally_part "$name" "$log" "$rc" $((SECONDS - t0))
}

tally_part() {   # tally_part NAME LOGFILE RC SECONDS: count it, keep its VM boot lines
  count "$@"
  grep -E '^# vm\[[a-z]+\]: boot [0-9?]' "$2" | sed 's/^# /== /' >>"$LOGDIR/vmtimes"
}

# Unit tests: build every tests/unit/test_*.c first (make's `test` goal builds the
# library, launcher and programs, not these).
UNIT_BINS=()
for src in tests/unit/test_*.c; do
  [ -e "$src" ] && UNIT_BINS+=("$BUILD/tests/unit/$(basename "$src" .c)")
done
if [ ${#UNIT_BINS[@]} -gt 0 ]; then
  echo "######## building unit tests"
  if ${MAKE:-make} --no-print-directory BUILD="$BUILD" "${UNIT_BINS[@]}"; then
    run_part unit tests/run-unit.sh "${UNIT_BINS[@]}"
  else
    TOTAL_F=$((TOTAL_F + 1)); SUMMARY+=("== unit: 0 passed, 1 failed (the unit tests did not build)")
  fi
fi

# start_part NAME CMD... / finish_part NAME: run_part in two halves, for a part
# that runs in the background while another runs in the foreground.
declare -A PART_PID PART_T0
start_part() {
  local name=$1; shift
  PART_T0[$name]=$SECONDS
  ( "$@" >"$LOGDIR/$name.tap" 2>&1; echo $? >"$LOGDIR/$name.rc" ) &
  PART_PID[$name]=$!
}

finish_part() {
  local name=$1 log=$LOGDIR/$1.tap t0=${PART_T0[$1]}
  echo; echo "######## $name (started $((SECONDS - t0)) s ago: its output so far, then live)"
  tail -n +1 -f --pid="${PART_PID[$name]}" "$log"
  wait "${PART_PID[$name]}"
  tally_part "$name" "$log" "$(cat "$LOGDIR/$name.rc" 2>/dev/null || echo 1)" $((SECONDS - t0))
}

# The VM suite keeps both cores busy under emulation for most of the run; the
# native suite mostly waits on timers and sockets.  So the native suite runs
# while the VM suite does (SDPSHIM_SERIAL_PARTS=1: one after the other).  No
# native test builds into the build tree or times itself (50-package builds
# the .deb in a clone of its own), and the VM only reads the build.
# The fuzz part (one core for about 10 s per harness; it builds only
# $BUILD/fuzz/) runs beside the native suite too.
FUZZ_SECONDS=${SDPSHIM_FUZZ_SECONDS:-6}
if [ "${SDPSHIM_SERIAL_PARTS:-0}" = 1 ]; then
  run_part native tests/run-bats.sh native
  run_part fuzz tests/run-fuzz.sh "$FUZZ_SECONDS"
  run_part vm tests/run-bats.sh vm
else
  start_part vm tests/run-bats.sh vm
  start_part fuzz tests/run-fuzz.sh "$FUZZ_SECONDS"
  run_part native tests/run-bats.sh native
  finish_part fuzz
  finish_part vm
fi

echo
printf '%s\n' "${SUMMARY[@]}"
[ -s "$LOGDIR/vmtimes" ] && cat "$LOGDIR/vmtimes"
echo "$TOTAL_P passed, $TOTAL_F failed"
[ "$TOTAL_F" -eq 0 ]
