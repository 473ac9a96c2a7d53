#!/usr/bin/env bats
# Native suite, part 1: checks on the build products that need no RDMA device:
# the launcher runs, the library exports no internal names, and the RDMA smoke
# test fails loudly (instead of passing or hanging) where RDMA cannot work.

load ../helpers

@test "sdpshim run -- true exits 0" {
  [ -x "$SDPSHIM_BIN" ] || skip "$SDPSHIM_BIN not built yet"
  run run_timeout 30 "$SDPSHIM_BIN" run -- true
  show "rc=$status" "$output"
  [ "$status" -eq 0 ]
}

@test "sdpshim run -- false passes the child's failure through" {
  [ -x "$SDPSHIM_BIN" ] || skip "$SDPSHIM_BIN not built yet"
  run run_timeout 30 "$SDPSHIM_BIN" run -- false
  [ "$status" -ne 0 ]
}

@test "libsdpshim.so exports no internal (sdp_/conn_/rules_/negcache_/stats_/fdt_) symbols" {
  [ -f "$SDPSHIM_LIB" ] || skip "$SDPSHIM_LIB not built yet"
  run nm -D --defined-only "$SDPSHIM_LIB"
  [ "$status" -eq 0 ]
  # "ADDR TYPE NAME[@VERSION]": keep the names of code and data symbols.
  local names bad
  names=$(awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' <<<"$output" | sort -u)
  show "$(wc -l <<<"$names") exported symbols: $(tr '\n' ' ' <<<"$names")"
  [ -n "$names" ]
  bad=$(grep -E '^(sdp_|conn_|rules_|negcache_|stats_|fdt_)' <<<"$names" || true)
  if [ -n "$bad" ]; then
    echo "internal symbols leak out of $SDPSHIM_LIB:" >&2
    echo "$bad" >&2
    return 1
  fi
}

@test "rdma_smoke without a usable RDMA device fails with a clear error, fast" {
  local smoke=$PROGS/rdma_smoke
  [ -x "$smoke" ] || { echo "missing $smoke: run make first" >&2; return 1; }
  # Natively there is no device at all.  Where a device does exist, 127.0.0.1
  # still cannot be reached over rdma_cm (no RDMA netdev on lo), so this must
  # fail either way.
  local t0=$SECONDS
  run run_timeout 30 "$smoke" client 127.0.0.1 "$(free_port)" 1
  show "rc=$status after $((SECONDS - t0)) s: $output"
  [ "$status" -ne 0 ]
  [ "$status" -ne 124 ]                       # failed by itself, not by our timeout
  [[ "$output" =~ "RDMA device"|"rdma_cm" ]]
  [[ "$output" != *MATCH* ]]

  run run_timeout 30 "$smoke" server 127.0.0.1 "$(free_port)"
  show "server rc=$status: $output"
  [ "$status" -ne 0 ]
  [ "$status" -ne 124 ]
}

@test "rdma_smoke's data stream digest agrees with sha256sum" {
  local smoke=$PROGS/rdma_smoke
  [ -x "$smoke" ] || { echo "missing $smoke: run make first" >&2; return 1; }
  local f=$BATS_TEST_TMPDIR/stream internal
  run_timeout 30 "$smoke" gen 3 >"$f" 2>"$f.err"
  internal=$(grep -oE 'sha256=[0-9a-f]{64}' "$f.err" | cut -d= -f2)
  show "gen 3: $(stat -c %s "$f") bytes, internal $internal, sha256sum $(sha256_of "$f")"
  [ "$(stat -c %s "$f")" -eq $((3 << 20)) ]
  [ "$internal" = "$(sha256_of "$f")" ]
  # A different seed must give a different stream.
  [ "$(RDMA_SMOKE_SEED=7 "$smoke" gen 3 2>/dev/null | sha256sum | cut -d' ' -f1)" != "$internal" ]
}
