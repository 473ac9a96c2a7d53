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
  for c in epoll_lt epoll_et epoll_oneshot epoll_rdhup epoll_mod_toggle poll ppoll select pselect mixed nbconnect refused \
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
