"""zcpair: a client and a server whose traffic stalls a zero-copy send
unless the library lets neither end's app hold the other's writer.

Usage:
  zcpair.py server HOST PORT MODE
  zcpair.py client HOST PORT MODE BYTES

Modes:
  echo      the client writes BYTES (one blocking send call) before it reads
            anything; the server echoes in 64 KiB reads.  Kernel TCP's
            buffers absorb a few MiB of this; the client checks the echo.
  echo-nb   the same with a non-blocking client socket (a timeout set):
            each large send offers zero-copy for a few ms, then cancels
  slow      the non-blocking client writes BYTES; the server reads one
            byte, sleeps ZCPAIR_SLOW_S seconds, then reads the rest and
            answers its SHA-256; the client checks it
(The suite runs echo; echo-nb and slow at 4 MiB show the limits in README.)

Each side prints "zcpair: ... ok" last and exits 0, or exits nonzero with one
line on stderr."""
import hashlib
import os
import socket
import sys
import time

import checked

SLOW_S = float(os.environ.get("ZCPAIR_SLOW_S", "4"))


def server(host, port, mode):
    lsn = socket.socket()
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsn.bind((host, port))
    lsn.listen(1)
    conn, _ = lsn.accept()
    lsn.close()
    if mode in ("echo", "echo-nb"):
        done = 0
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            conn.sendall(chunk)
            done += len(chunk)
        print("zcpair: server %s ok: echoed %d bytes" % (mode, done))
    elif mode == "slow":
        h = hashlib.sha256(checked.recv_exact("zcpair", conn, 1))
        time.sleep(SLOW_S)
        n = int.from_bytes(checked.recv_exact("zcpair", conn, 8), "big")
        h.update(n.to_bytes(8, "big"))
        h.update(checked.recv_exact("zcpair", conn, n))
        conn.sendall(h.digest())
        print("zcpair: server slow ok: %d bytes after a %.1f s pause" % (n + 9, SLOW_S))
    else:
        sys.exit("zcpair: unknown mode %s" % mode)
    conn.close()


def client(host, port, mode, n):
    sock = socket.create_connection((host, port))
    # The channel opens after connect() returns; the first large send must
    # find it open, or it goes by TCP and tests nothing of zero-copy.  The
    # test creates ZCPAIR_GO_FILE once the stats show the connection on RDMA.
    go = os.environ.get("ZCPAIR_GO_FILE")
    until = time.time() + 60
    while go and not os.path.exists(go):
        if time.time() > until:
            sys.exit("zcpair: no %s after 60 s" % go)
        time.sleep(0.02)
    if mode != "echo":
        sock.settimeout(60)
    data = os.urandom(n)
    t0 = time.time()
    if mode in ("echo", "echo-nb"):
        sock.sendall(data)
        if checked.recv_exact("zcpair", sock, n) != data:
            sys.exit("zcpair: the echo differs from what was sent")
    elif mode == "slow":
        body = data[:1] + (n - 1).to_bytes(8, "big") + data[1:]
        sock.sendall(body)
        if checked.recv_exact("zcpair", sock, 32) != hashlib.sha256(body).digest():
            sys.exit("zcpair: the server's digest differs from what was sent")
    sock.shutdown(socket.SHUT_WR)
    if sock.recv(1):
        sys.exit("zcpair: bytes after the answer")
    print("zcpair: client %s ok: %d bytes in %.2f s" % (mode, n, time.time() - t0))


def main():
    if sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        client(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))


main()
