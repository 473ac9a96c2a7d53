#!/bin/bash
# run-fuzz.sh [SECONDS_PER_HARNESS] : the libFuzzer harnesses (tests/fuzz/fuzz_*.c)
# as a short fixed-time run, one TAP result per harness.  Builds them with
# `make fuzz` (clang) if needed; then, for each harness: its kept crash inputs
# (tests/fuzz/regressions/<harness>/) must all pass, then it fuzzes for SECONDS
# (default 10) from a copy of its seed corpus (tests/fuzz/corpus/<harness>/) in a
# temp dir, so the checked-in corpus never grows.  Prints "ok N fuzz_x: EXECS execs"
# (libFuzzer's stat::number_of_executed_units) or "not ok N ...".  An input that
# crashes is copied into tests/fuzz/regressions/<harness>/ (commit it with the fix)
# and fails the harness.  Exits 1 if any harness failed.
# Env: BUILD (default build), MAKE.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 2
SECS=${1:-10}
case "$SECS" in ''|*[!0-9]*|0) echo "usage: $0 [SECONDS_PER_HARNESS (>= 1)]" >&2; exit 2 ;; esac
BUILD=${BUILD:-build}
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT

HARNESSES=()
for src in tests/fuzz/fuzz_*.c; do
  [ -e "$src" ] && HARNESSES+=("$(basename "$src" .c)")
done
echo "1..${#HARNESSES[@]}"
[ ${#HARNESSES[@]} -gt 0 ] || exit 0

n=0; failed=0
result() {   # result OK|FAIL TEXT
  n=$((n + 1))
  if [ "$1" = OK ]; then echo "ok $n $2"; else echo "not ok $n $2"; failed=$((failed + 1)); fi
}
comment_tail() {   # comment_tail FILE : the end of a libFuzzer log as TAP comments
  grep -vE '^#[0-9]+|^(INFO|MERGE|Running|Executed|\*\*\*)' "$1" | tail -n 40 | sed 's/^/# /'
}

if ! ${MAKE:-make} --no-print-directory BUILD="$BUILD" fuzz >"$TMP/build.log" 2>&1; then
  sed 's/^/# /' "$TMP/build.log" | tail -n 40
  for h in "${HARNESSES[@]}"; do result FAIL "$h: not built (make fuzz failed)"; done
  exit 1
fi

for h in "${HARNESSES[@]}"; do
  bin=$BUILD/fuzz/$h work=$TMP/$h regdir=tests/fuzz/regressions/$h
  mkdir -p "$work/corpus" "$work/artifacts"

  # 1. Every kept crash input must pass now.
  regs=()
  for f in "$regdir"/*; do [ -f "$f" ] && regs+=("$f"); done
  if [ ${#regs[@]} -gt 0 ] &&
     ! timeout -k 5 120 "$bin" -timeout=10 "${regs[@]}" >"$work/regressions.log" 2>&1; then
    comment_tail "$work/regressions.log"
    result FAIL "$h: a kept input in $regdir/ still fails"
    continue
  fi

  # 2. SECS of fuzzing from a copy of the seed corpus.
  [ -d "tests/fuzz/corpus/$h" ] && cp -R "tests/fuzz/corpus/$h/." "$work/corpus/"
  rc=0
  timeout -k 5 $((SECS * 3 + 60)) "$bin" -max_total_time="$SECS" -print_final_stats=1 \
    -timeout=10 -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/fuzz.log" 2>&1 || rc=$?
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$work/fuzz.log" | tail -n 1)
  kept=()
  for f in "$work/artifacts"/*; do
    [ -f "$f" ] || continue
    mkdir -p "$regdir"
    cp "$f" "$regdir/" && kept+=("$regdir/$(basename "$f")")
  done
  if [ "$rc" -eq 0 ] && [ ${#kept[@]} -eq 0 ] && [ -n "$execs" ]; then
    result OK "$h: $execs execs"
  else
    comment_tail "$work/fuzz.log"
    why="exited $rc"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && why="timed out"
    [ ${#kept[@]} -gt 0 ] && why="failed on an input, kept as ${kept[*]}"
    [ "$rc" -eq 0 ] && [ -z "$execs" ] && why="printed no execution count"
    result FAIL "$h: ${execs:-?} execs, $why"
  fi
done
[ "$failed" -eq 0 ]
