"""heldreset: SO_ERROR of a stream that a failover left on TCP (channel
"held": it waits there to climb back to RDMA) when its TCP connection is
reset.

Usage: heldreset.py server HOST PORT DIR | heldreset.py client HOST PORT DIR.
server: accepts one connection, echoes ECHO_BYTES, prints "heldreset:
echoed", and keeps the connection until DIR/go (the test resets it).
client: connects, sends its pattern and checks the echo, creates
DIR/phase1, waits for DIR/go, then polls for POLLIN (10 s) and asks
SO_ERROR twice, as an event loop told of an error does.  A plain TCP socket
reports POLLERR and ECONNRESET once, then 0.  Prints "heldreset: poll
POLLERR=B so_error=E then E2" (names or 0) and exits 0; any other failure
prints one line on stderr and exits nonzero."""
import errno
import os
import select
import socket
import sys

import checked

ECHO_BYTES = 65536
WAIT_S = 120


def fail(msg):
    sys.exit("heldreset: " + msg)


def server(host, port, d):
    conn = checked.accept_one("heldreset", host, port)
    conn.sendall(checked.recv_exact("heldreset", conn, ECHO_BYTES))
    print("heldreset: echoed", flush=True)
    checked.wait_file(os.path.join(d, "go"), WAIT_S)
    conn.close()


def error_name(err):
    return errno.errorcode.get(err, str(err)) if err else "0"


def client(host, port, d):
    data = checked.pattern("heldreset", 1, ECHO_BYTES)
    sock = socket.create_connection((host, port), timeout=WAIT_S)
    sock.sendall(data)
    if checked.recv_exact("heldreset", sock, ECHO_BYTES) != data:
        fail("the echo differs from what was sent")
    checked.touch(os.path.join(d, "phase1"))
    checked.need_file("heldreset", os.path.join(d, "go"), WAIT_S)
    p = select.poll()
    p.register(sock, select.POLLIN)
    ev = p.poll(10000)
    revents = ev[0][1] if ev else 0
    first = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    second = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    print("heldreset: poll POLLERR=%d so_error=%s then %s" %
          (1 if revents & select.POLLERR else 0, error_name(first), error_name(second)), flush=True)
    sock.close()


checked.run_role("heldreset", {"server": server, "client": client})
