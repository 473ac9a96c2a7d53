#!/bin/bash
# fork_switch.sh: the cost of moving a connection to TCP at fork (issue 6), on
# soft-RoCE.  Boots the test bed once and runs bench/fork_switch_inside.sh: the
# parent's fork() time in a fork-per-connection server (tests/progs/forkecho)
# with its accepted connection on RDMA under SDPSHIM_FORK=switch (the shim
# moves it to TCP first) and SDPSHIM_FORK=handoff (the default: the parent
# keeps the channel, the child's first use moves it), and on TCP, with the
# client's time a connection over the whole run; and the time of an RDMA
# connect, the least that re-creating a channel in the child would cost.
# Env: FORK_CONNS (default 50), BUILD.  About 3 min.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ -f "$REPO/${BUILD:-build}/libsdpshim.so" ] || { echo "fork_switch: run make first" >&2; exit 2; }
export BUILD=${BUILD:-build} FORK_CONNS=${FORK_CONNS:-50}
"$REPO/tests/vm/run-in-vm.sh" -n dummy -m 1536M -t 900 -e BUILD -e FORK_CONNS \
	"bash $REPO/bench/fork_switch_inside.sh"
