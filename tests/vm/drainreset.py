"""drainreset: app bytes that waited for a channel move to a TCP connection
that is reset before they are all in it.

Usage: drainreset.py server HOST PORT | drainreset.py client HOST PORT.
server: a plain TCP server with a 4 KiB receive buffer; it accepts one
connection, prints "drainreset: accepted", and never reads (the test
destroys its socket with ss -K, then stops it).
client: a 16 KiB send buffer; it connects and sends 4 MiB at once.  Its channel never opens (a rogue listener that never sends
ATTACH), so they wait in the channel's send slots, and then move to TCP,
where the server's full window stops them.  Then the connection is reset:
a plain TCP client's send says ECONNRESET there, and so must this one,
never EPIPE.  Prints "drainreset: reset on send" and exits 0, or exits
nonzero with one line on stderr."""
import errno
import os
import socket
import sys
import time

import checked

SEND_BYTES = 4 << 20


def fail(msg):
    sys.exit("drainreset: " + msg)


def server(host, port):
    conn = checked.small_window_accept("drainreset", host, port)
    time.sleep(120)
    conn.close()


def client(host, port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    sock.settimeout(60)  # non-blocking, with poll(): its wakeup is tested too
    sock.connect((host, port))
    try:
        sock.sendall(os.urandom(SEND_BYTES))  # never read: nothing to compare
    except OSError as e:
        if e.errno == errno.ECONNRESET:
            print("drainreset: reset on send", flush=True)
            return
        fail("send: %s, not ECONNRESET" % os.strerror(e.errno or 0))
    fail("send: took all %d bytes, though the server reads none" % SEND_BYTES)


checked.run_role("drainreset", {"server": server, "client": client})
