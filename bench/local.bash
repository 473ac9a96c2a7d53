# Shared by the benchmarks that run on this host rather than in the test bed
# (fallback_overhead.sh, fallback_cost.sh).  Loads tests/helpers.bash
# (SDPSHIM_LIB, SDPSHIM_BIN, free_port, wait_port, run_timeout), sets WORK (a
# temporary directory that also holds our stats segments), clears the
# caller's sdpshim settings, and at exit kills every pid in PIDS and removes
# WORK.  median: the median of the numbers on stdin, one a line.
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/../tests/helpers.bash"
WORK=$(mktemp -d)
export SDPSHIM_RUN_DIR=$WORK    # keep our stats segments out of /dev/shm
unset SDPSHIM_STATS_FILE SDPSHIM_LOG SDPSHIM_CONFIG SDPSHIM_MODE LD_PRELOAD
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
