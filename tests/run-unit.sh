#!/bin/bash
# run-unit.sh BIN... : runs each unit-test binary (each prints TAP), merges them into
# one TAP stream (renumbered, plan at the end) and exits 1 if any case failed, a
# binary crashed or exited nonzero, or printed fewer results than it planned.
set -u
[ $# -gt 0 ] || { echo "usage: $0 UNIT_TEST_BINARY..." >&2; exit 2; }
UNIT_TIMEOUT=${UNIT_TIMEOUT:-300}
n=0; failed=0
out=$(mktemp); trap 'rm -f "$out"' EXIT

emit() {   # emit OK|FAIL DESCRIPTION
  n=$((n + 1))
  if [ "$1" = OK ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi
}

for bin in "$@"; do
  name=$(basename "$bin")
  echo "# $bin"
  if [ ! -x "$bin" ]; then emit FAIL "$name: not built ($bin missing)"; continue; fi
  rc=0; timeout -k 5 "$UNIT_TIMEOUT" "$bin" >"$out" 2>&1 || rc=$?
  plan=-1; seen=0; bad=0
  while IFS= read -r line; do
    case "$line" in
      "ok "*|"not ok "*)
        seen=$((seen + 1))
        # Drop the binary's own number, keep its description (and any directive).
        desc=$(sed -E 's/^(not )?ok [0-9]+ *(- *)?//' <<<"$line")
        case "$line" in ok*) emit OK "$name: $desc" ;; *) emit FAIL "$name: $desc"; bad=1 ;; esac ;;
      1..*) plan=${line#1..}; plan=${plan%%[!0-9]*} ;;
      "#"*) echo "$line" ;;
      *) echo "# $line" ;;        # stray stdout/stderr (e.g. sanitizer reports)
    esac
  done <"$out"
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    emit FAIL "$name: timed out after ${UNIT_TIMEOUT}s"
  elif [ "$plan" -ge 0 ] && [ "$seen" -ne "$plan" ]; then
    emit FAIL "$name: planned $plan results, printed $seen (exit $rc)"
  elif [ "$plan" -lt 0 ]; then
    emit FAIL "$name: printed no TAP plan (exit $rc)"
  elif [ "$rc" -ne 0 ] && [ "$bad" = 0 ]; then
    emit FAIL "$name: exited $rc although every case passed"
  fi
done
echo "1..$n"
[ "$failed" = 0 ]
