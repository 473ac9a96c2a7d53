#!/bin/bash
# zcopy_share.sh: how much of a writer's stream goes by zero-copy, and the
# writer's CPU, for random writes of up to 1 MiB (the default threshold is
# 256 KiB) to a fast reader and to a slow one (64 KiB reads, 2 ms apart), on
# soft-RoCE.  Boots the test bed once and runs bench/zcopy_share_inside.sh:
# each library named in ZS_LIBS, ZS_RUNS times per reader, byte-checked.
# A base build to compare with: `git worktree add .cache/base COMMIT` and
# `make -C .cache/base build/libsdpshim.so`, then
# ZS_LIBS="base=$PWD/.cache/base/build/libsdpshim.so now=$PWD/build/libsdpshim.so".
# Env: ZS_LIBS (default now=BUILD/libsdpshim.so), ZS_RUNS (3), ZS_BYTES (64M),
# BUILD.  About 2 min for two libraries.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export BUILD=${BUILD:-build}
[ -f "$REPO/$BUILD/libsdpshim.so" ] || { echo "zcopy_share: run make first" >&2; exit 2; }
export ZS_LIBS=${ZS_LIBS:-now=$REPO/$BUILD/libsdpshim.so} ZS_RUNS=${ZS_RUNS:-3} ZS_BYTES=${ZS_BYTES:-64M}
"$REPO/tests/vm/run-in-vm.sh" -n dummy -m 1G -t 900 -e BUILD -e ZS_LIBS -e ZS_RUNS -e ZS_BYTES \
	"bash $REPO/bench/zcopy_share_inside.sh"
