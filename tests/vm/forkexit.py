"""forkexit: a server that exits while a forked child still holds its streams.

Usage:
  forkexit.py server HOST PORT DIR COUNT

Accepts COUNT connections and echoes 16 KiB on each (on RDMA, under the
library), prints "forkexit: echoed COUNT", then forks a child that holds
every socket and never touches them (it waits for DIR/done, then exits).
The parent waits for DIR/go, prints "forkexit: exiting" and exits: the
library's exit handlers move each stream the child shares to TCP, each
bounded by SDPSHIM_SWITCH_TIMEOUT_MS, all of them together by one such
bound.  The test times the exit from DIR/go."""
import os
import sys

import checked

ECHO = 16384  # one lock-step chunk of tests/progs/connects


def server(host, port, d, count):
    listener = checked.listen_on("forkexit", host, port, 16)
    conns = []
    for _ in range(int(count)):
        conn, _ = listener.accept()
        conn.sendall(checked.recv_exact("forkexit", conn, ECHO))
        conns.append(conn)
    print("forkexit: echoed %d" % len(conns), flush=True)
    if os.fork() == 0:
        checked.need_file("forkexit child", os.path.join(d, "done"), 300)
        os._exit(0)
    checked.need_file("forkexit", os.path.join(d, "go"), 120)
    print("forkexit: exiting", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    checked.run_role("forkexit", {"server": server})
