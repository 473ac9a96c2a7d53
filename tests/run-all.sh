#!/bin/bash
# run-all.sh : the whole suite = unit tests + native bats suite + VM (soft-RoCE) bats
# suite.  Streams each part's TAP, then prints one count line per part and, last, a
# line exactly "N passed, M failed"; exits 1 if M > 0.
# Counting: "ok" = passed, "not ok" = failed; skipped tests count as passed, except
# with SDPSHIM_STRICT=1, where they count as failed.  Results a plan promised but
# never printed, and a part that exits nonzero without any "not ok" (a crash, a VM
# that never booted), count as failures too.
# Env: BUILD (default build), SDPSHIM_STRICT, plus whatever run-bats.sh takes.
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
  count "$name" "$log" "$rc" $((SECONDS - t0))
  grep -E '^# vm\[[a-z]+\]: boot [0-9?]' "$log" | sed 's/^# /== /' >>"$LOGDIR/vmtimes"
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

run_part native tests/run-bats.sh native
run_part vm tests/run-bats.sh vm

echo
printf '%s\n' "${SUMMARY[@]}"
[ -s "$LOGDIR/vmtimes" ] && cat "$LOGDIR/vmtimes"
echo "$TOTAL_P passed, $TOTAL_F failed"
[ "$TOTAL_F" -eq 0 ]
