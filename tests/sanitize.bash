# Helpers for the sanitizer tests (tests/native/40-sanitizers.bats,
# tests/vm/60-sanitizers.bats): run programs with the ASan+UBSan build of the
# library (make SAN=1 -> build-san/) preloaded behind the ASan runtime.
#   san_setup                  fails (never skips) when build-san/ is missing; sets
#                              SAN_LIB, SAN_ENV (env words: LD_PRELOAD, *SAN_OPTIONS)
#   san_clean < TEXT           fails if TEXT holds a sanitizer report
#   san_run_pair MODE PORT HOST BYTES   stream -d both under SAN_ENV on both ends,
#                              checks exit codes, digests against a plain run, reports

san_setup() {
  SAN_LIB=$REPO/build-san/libsdpshim.so
  [ -f "$SAN_LIB" ] || { echo "missing $SAN_LIB: run make SAN=1 first" >&2; return 1; }
  local asan
  asan=$(readlink -f "$(gcc -print-file-name=libasan.so)")
  [ -f "$asan" ] || { echo "no libasan found" >&2; return 1; }
  SAN_ENV=("LD_PRELOAD=$asan $SAN_LIB"
    "ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=99"
    "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=98")
  T=$BATS_TEST_TMPDIR
}

san_clean() {
  if grep -E 'ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer' ; then
    echo "a sanitizer reported the lines above" >&2
    return 1
  fi
  return 0
}

# The digests a run without any preload produces for the same stream.
san_reference() {   # san_reference BYTES -> "server-digest client-digest"
  local port out=$T/ref
  port=$(free_port)
  timeout -k 5 120 "$PROGS/stream" -s "$port" -n 1 >"$out.server" 2>&1 3>&- &
  local spid=$!
  wait_port 127.0.0.1 "$port"
  run_timeout 120 "$PROGS/stream" -c 127.0.0.1 -p "$port" -b "$1" -d both -m 1M >"$out.client" 2>&1
  wait "$spid"
  echo "$(grep -oE 'sha256=[0-9a-f]{64}' "$out.server" | cut -d= -f2)" \
       "$(grep -oE 'sha256=[0-9a-f]{64}' "$out.client" | cut -d= -f2)"
}

san_run_pair() {   # san_run_pair MODE PORT HOST BYTES
  local mode=$1 port=$2 host=$3 bytes=$4 crc=0 src=0 ref
  [ -n "${SAN_REF:-}" ] || SAN_REF=$(san_reference "$bytes")
  ref=($SAN_REF)
  env "${SAN_ENV[@]}" timeout -k 5 300 "$PROGS/stream" -s "$port" -n 1 -e "$mode" \
    >"$T/san.server" 2>&1 3>&- &
  local spid=$!
  wait_port "$host" "$port"
  env "${SAN_ENV[@]}" timeout -k 5 300 "$PROGS/stream" -c "$host" -p "$port" -b "$bytes" \
    -d both -m 1M -e "$mode" >"$T/san.client" 2>&1 || crc=$?
  wait "$spid" || src=$?
  show "-e $mode: client rc=$crc $(grep -oE 'sha256=[0-9a-f]{16}' "$T/san.client")," \
       "server rc=$src $(grep -oE 'sha256=[0-9a-f]{16}' "$T/san.server")"
  san_clean <"$T/san.client"
  san_clean <"$T/san.server"
  [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]
  grep -q "sha256=${ref[0]} OK" "$T/san.server"
  grep -q "sha256=${ref[1]} OK" "$T/san.client"
}
