"""resetunder: a stream whose TCP connection is reset under its open channel.

Usage: resetunder.py HOST PORT RELEASE THEN.  Connects, echoes 4 KiB of its
own bytes (checked), prints "resetunder: ready", waits for the file RELEASE
(60 s at most), then sends 4 KiB more, and then reads (THEN is recv), or
waits 1 s and sends 4 KiB again (THEN is send).  Meanwhile the test resets
the TCP connection (ss -K at the server), and the client's
SDPSHIM_DEBUG_FAIL_AFTER fails its channel as the first 4 KiB go, so the
stream moves to a TCP connection that was reset.  A plain TCP client would
see ECONNRESET there: so must this one, and never an EOF or EPIPE.  The only
bytes it may read first are the echo of those 4 KiB (the server's channel
ran until the failure, so its app may have echoed them).
Prints "resetunder: reset on send" or "... on recv" and exits 0, or exits
nonzero with one line on stderr."""
import errno
import os
import socket
import sys
import time

import checked


def fail(msg):
    sys.exit("resetunder: " + msg)


def pattern(seed, size):
    return checked.pattern("resetunder", seed, size)


def wait_for(path, seconds):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            fail("no %s within %d s" % (path, seconds))
        time.sleep(0.05)


def main():
    host, port, release, then = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    sock = socket.create_connection((host, port), timeout=60)
    data = pattern(1, 4096)
    sock.sendall(data)
    if checked.recv_exact("resetunder: the echo", sock, len(data)) != data:
        fail("echo mismatch")
    print("resetunder: ready", flush=True)
    wait_for(release, 60)
    where, last = "send", pattern(2, 4096)
    try:
        sock.sendall(last)
        if then == "send":
            time.sleep(1)
            sock.sendall(pattern(3, 4096))
            fail("send: took 4 KiB after the reset, not ECONNRESET")
        where = "recv"
        echo, got = last, b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                fail("recv: EOF after %d echoed bytes, not ECONNRESET" % len(got))
            got += chunk
            if not echo.startswith(got):
                fail("recv: %d bytes that are not the echo" % len(got))
    except OSError as e:
        if e.errno == errno.ECONNRESET:
            print("resetunder: reset on " + where)
            return
        fail("%s: %s, not ECONNRESET" % (where, os.strerror(e.errno or 0)))


main()
