#!/usr/bin/env bats
# Native suite, part 40: the library built with ASan and UBSan (make SAN=1,
# build-san/) preloaded into real programs on this machine (kernel TCP path):
# streams in every I/O mode, the readiness cases and the socket scenarios.
# Any sanitizer report fails the test; the bytes are checked as elsewhere.

load ../helpers
load ../sanitize

setup() {
  san_setup
}

@test "ASan+UBSan library: stream -d both 16 MiB, each I/O mode, sha256 both ways, no report" {
  local mode port
  for mode in block poll select epoll epollet; do
    port=$(free_port)
    san_run_pair "$mode" "$port" 127.0.0.1 16M
  done
}

@test "ASan+UBSan library: every readiness case, no report" {
  local c
  for c in epoll_lt epoll_et epoll_oneshot epoll_rdhup epoll_mod_toggle epoll_joined_asleep epoll_unwanted poll_unwanted epoll_starve bad_timeout select_big epoll_dup poll ppoll select pselect mixed nbconnect refused \
           lifecycle; do
    run run_timeout 60 env "${SAN_ENV[@]}" "$PROGS/readiness" 127.0.0.1 "$(free_port)" "$c"
    show "$c: $(tail -1 <<<"$output")"
    [ "$status" -eq 0 ]
    grep -qx "ok $c" <<<"$output"
    san_clean <<<"$output"
  done
}

@test "ASan+UBSan library: sockcheck scenarios (fork, threads, sendfile, inetd, exec, ipv6, MSG_TRUNC), no report" {
  local sc addr
  for sc in halfclose forkserver threadserver sendfile inetd execinherit ipv6 trunc; do
    addr=127.0.0.1; [ "$sc" = ipv6 ] && addr=::1
    run run_timeout 120 env "${SAN_ENV[@]}" "$PROGS/sockcheck" "$sc" "$addr" "$(free_port)"
    show "$sc: rc=$status $(tail -1 <<<"$output")"
    [ "$status" -eq 0 ]
    grep -qx "ok $sc" <<<"$output"
    san_clean <<<"$output"
  done
}

# The launcher built with ASan+UBSan (build-san/sdpshim) reading a live
# segment in every output of `sdpshim stat` (issue 18).
@test "ASan+UBSan sdpshim stat: table, --json, --totals, --prom, -i -n, filters and --sort on a live process, no report" {
  local san_bin=$REPO/build-san/sdpshim args out
  [ -x "$san_bin" ] || { echo "missing $san_bin: run make SAN=1 first" >&2; return 1; }
  export SDPSHIM_RUN_DIR=$T/run
  mkdir -p "$SDPSHIM_RUN_DIR"
  write_pair_py "$T/pair.py"
  "$SDPSHIM_BIN" run -- python3 "$T/pair.py" "$T/ready" 3>&- &
  echo $! >"$T/pair.pid"
  disown
  wait_for_line "$T/ready" '^[0-9]+$' 20
  while IFS= read -r args; do
    out=$(run_timeout 30 env ASAN_OPTIONS=detect_leaks=1:exitcode=99 \
          UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=98 \
          "$san_bin" stat $args 2>&1) || { echo "stat $args: exit $?: $out" >&2; stop_recorded_pids; return 1; }
    show "stat $args: $(wc -l <<<"$out") lines"
    san_clean <<<"$out" || { stop_recorded_pids; return 1; }
  done <<'EOF'
--listeners --bytes
--json --sort bytes
--totals --sort sent
--prom --path tcp --reason loopback
--prom --comm python3 --listeners
-i 0.2 -n 3 --sort rate
-w 1 -n 2 --prom
EOF
  stop_recorded_pids
}
