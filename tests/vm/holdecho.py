"""holdecho: a client that holds two echo connections open across a pause.

Usage: holdecho.py HOST PORT DIR.  Each connection echoes 64 KiB; then the
client creates DIR/phase1 and waits (up to 120 s) for DIR/go, echoes 64 KiB
more on each, half-closes and reads to EOF.  Every byte is compared.  Prints
"holdecho: ok" last and exits 0, or exits nonzero with one line on stderr."""
import os
import socket
import sys
import time


def echo(sock, data):
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(len(data) - len(got))
        if not chunk:
            sys.exit("holdecho: EOF after %d of %d echoed bytes" % (len(got), len(data)))
        got += chunk
    if got != data:
        sys.exit("holdecho: the echo differs from what was sent")


def main():
    host, port, tdir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    socks = [socket.create_connection((host, port)) for _ in range(2)]
    for sock in socks:
        echo(sock, os.urandom(65536))
    open(os.path.join(tdir, "phase1"), "w").close()
    until = time.time() + 120
    while not os.path.exists(os.path.join(tdir, "go")) and time.time() < until:
        time.sleep(0.05)
    for sock in socks:
        echo(sock, os.urandom(65536))
        sock.shutdown(socket.SHUT_WR)
        if sock.recv(1):
            sys.exit("holdecho: bytes after the echo")
        sock.close()
    print("holdecho: ok")


main()
