#!/usr/bin/env bats
# Native suite, part 05: the library's include layers (issue 14).  No include
# may go up a layer (core/ or ipoib_fallback/ into preload/) or across to the
# sibling folder unless tests/layers.allow still lists it; the list may only
# shrink (tests/check-layers.sh).

load ../helpers

@test "layers: every include that goes up or across is one the allow list still names" {
  run "$BATS_TEST_DIRNAME/../check-layers.sh"
  echo "$output"
  [ "$status" -eq 0 ]
}

# The check must be able to fail: on a copy of the tree, plant an upward
# include, then drop a listed crossing's include.
@test "layers: a new upward include, and a listed crossing that is gone, both fail the check" {
  local copy="$BATS_TEST_TMPDIR/tree"
  mkdir -p "$copy/tests"
  cp -r "$BATS_TEST_DIRNAME/../../core" "$BATS_TEST_DIRNAME/../../ipoib_fallback" \
        "$BATS_TEST_DIRNAME/../../preload" "$copy/"
  cp "$BATS_TEST_DIRNAME/../check-layers.sh" "$BATS_TEST_DIRNAME/../layers.allow" "$copy/tests/"
  run "$copy/tests/check-layers.sh"
  [ "$status" -eq 0 ]

  echo '#include "preload/sock.h"' >> "$copy/core/wire.h"
  run "$copy/tests/check-layers.sh"
  echo "$output"
  [ "$status" -eq 1 ]
  [[ "$output" == *"new crossing"*"core/wire.h -> preload/sock.h"* ]]

  sed -i '/#include "preload\/sock.h"/d' "$copy/core/wire.h"
  sed -i '/#include "preload\/fdtable.h"/d' "$copy/core/progress.c"
  run "$copy/tests/check-layers.sh"
  echo "$output"
  [ "$status" -eq 1 ]
  [[ "$output" == *"gone"*"core/progress.c -> preload/fdtable.h"* ]]
}
