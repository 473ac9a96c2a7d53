#!/usr/bin/env bats
# Native suite, part 05: the library's include layers (issue 14).  From the
# bottom: base/; core/ and ipoib_fallback/ (siblings); preload/; tools/.  No
# include may go up a layer or across to the sibling folder unless
# tests/layers.allow names it, and that list is empty
# (tests/check-layers.sh).

load ../helpers

@test "layers: no include goes up a layer or across, and the allow list is empty" {
  run "$BATS_TEST_DIRNAME/../check-layers.sh"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"0 crossings left"* ]]
  run grep -cv '^#' "$BATS_TEST_DIRNAME/../layers.allow"
  [ "$output" = 0 ]
}

# The check must be able to fail: on a copy of the tree, plant an include of
# each kind of crossing, then list a crossing that does not exist.
@test "layers: an upward or sideways include, and a listed crossing that is gone, fail the check" {
  local copy="$BATS_TEST_TMPDIR/tree" top="$BATS_TEST_DIRNAME/../.."
  mkdir -p "$copy/tests"
  cp -r "$top/base" "$top/core" "$top/ipoib_fallback" "$top/preload" "$top/tools" "$copy/"
  cp "$BATS_TEST_DIRNAME/../check-layers.sh" "$BATS_TEST_DIRNAME/../layers.allow" "$copy/tests/"
  run "$copy/tests/check-layers.sh"
  [ "$status" -eq 0 ]

  local planted
  for planted in "core/wire.h:preload/sock.h" "base/log.h:core/wire.h" \
                 "ipoib_fallback/path.h:core/conn.h" "core/conn.h:ipoib_fallback/path.h" \
                 "preload/sock.h:tools/cli.h"; do
    local file=${planted%%:*} hdr=${planted#*:}
    echo "#include \"$hdr\"" >> "$copy/$file"
    run "$copy/tests/check-layers.sh"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"new crossing"*"$file -> $hdr"* ]]
    sed -i "\\|#include \"$hdr\"|d" "$copy/$file"
  done

  # A downward include is no crossing.
  echo '#include "base/log.h"' >> "$copy/tools/cli.h"
  run "$copy/tests/check-layers.sh"
  [ "$status" -eq 0 ]

  echo "core/progress.c -> preload/sock.h" >> "$copy/tests/layers.allow"
  run "$copy/tests/check-layers.sh"
  echo "$output"
  [ "$status" -eq 1 ]
  [[ "$output" == *"gone"*"core/progress.c -> preload/sock.h"* ]]
}

# The channel (struct sdp_conn) is private to core/: defined in
# core/conn_struct.h, and no header the other layers include brings it in.
@test "layers: the channel struct is private to core" {
  cd "$BATS_TEST_DIRNAME/../.."
  run grep -rl 'struct sdp_conn {' base core ipoib_fallback preload tools
  [ "$output" = "core/conn_struct.h" ]
  local private='core/\(conn_struct\|conn_internal\|zc_internal\)\.h'
  run grep -rl "#include \"$private\"" base ipoib_fallback preload tools
  [ -z "$output" ]
  local hdr
  for hdr in $(sed -n 's/^#include "\(core\/[a-z_]*\.h\)".*/\1/p' base/* ipoib_fallback/* preload/* tools/* | sort -u); do
    run grep -l "#include \"$private\"" "$hdr"
    [ -z "$output" ] || { echo "$hdr includes a private header"; false; }
  done
}
