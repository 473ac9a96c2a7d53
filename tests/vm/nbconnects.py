"""nbconnects: non-blocking connects, one after another, each checked by echo.

Usage: nbconnects.py HOST PORT N.  Connection I (1..N) connects without
blocking (EINPROGRESS, then select() for writability and SO_ERROR), echoes
4 KiB of its own bytes at once, and stays open while the next connects.
Once all N are up, each echoes 4 KiB more, half-closes and must read EOF.
Every byte is compared.  Prints "nbconnects: ok N" last and exits 0, or
exits nonzero with one line on stderr."""
import errno
import select
import socket
import sys

import checked


def fail(msg):
    sys.exit("nbconnects: " + msg)


def pattern(seed, size):
    return checked.pattern("nbconnects", seed, size)


def echo(sock, seed):
    data = pattern(seed, 4096)
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(len(data) - len(got))
        if not chunk:
            fail("EOF after %d of %d echoed bytes (seed %d)" % (len(got), len(data), seed))
        got += chunk
    if got != data:
        fail("echo mismatch (seed %d)" % seed)


def connect(host, port):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    rc = sock.connect_ex((host, port))
    if rc not in (0, errno.EINPROGRESS):
        fail("connect: %s" % errno.errorcode.get(rc, rc))
    _, writable, _ = select.select([], [sock], [], 60)
    if not writable:
        fail("connect not done within 60 s")
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        fail("connect: %s" % errno.errorcode.get(err, err))
    sock.setblocking(True)
    sock.settimeout(60)
    return sock


def main():
    host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    socks = []
    for i in range(count):
        sock = connect(host, port)
        echo(sock, i)
        socks.append(sock)
    for i, sock in enumerate(socks):
        echo(sock, 1000 + i)
    for sock in socks:
        sock.shutdown(socket.SHUT_WR)
        if sock.recv(1) != b"":
            fail("a byte after the echo, where EOF was due")
        sock.close()
    print("nbconnects: ok %d" % count)


main()
