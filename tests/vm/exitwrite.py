"""exitwrite: one end writes a stream and leaves by _exit at once.

Usage: exitwrite.py server HOST PORT BYTES HOW | exitwrite.py client HOST PORT BYTES.
The server accepts one connection, writes BYTES of a seeded stream in one
sendall and ends as HOW says: "close" (close, then os._exit), "open"
(os._exit with the socket still open) or "shutdown" (shutdown SHUT_WR,
close, os._exit).  The kernel would send every byte and a FIN after any of
these.  The client reads to EOF and prints "exitwrite: N bytes sha256=D
(expected E)"; exit 0 only if the two match.  EXITWRITE_READ_DELAY_S: the
client waits that long before its first read (the writer is then ahead of
it by a window, and leaves with bytes not yet sent)."""
import hashlib
import os
import socket
import sys
import time

import checked


def stream(nbytes):
    """The seeded stream: SHA-256 counter blocks, cut to nbytes."""
    out, i = bytearray(), 0
    while len(out) < nbytes:
        out += hashlib.sha256(b"exitwrite %d" % i).digest() * 64
        i += 1
    return bytes(out[:nbytes])


def server(host, port, nbytes, how):
    ls = checked.listen_on("exitwrite", host, port)
    conn, _ = ls.accept()
    conn.sendall(stream(nbytes))
    if how == "shutdown":
        conn.shutdown(socket.SHUT_WR)
    if how in ("close", "shutdown"):
        conn.close()
    sys.stdout.flush()
    os._exit(0)


def client(host, port, nbytes):
    sock = socket.create_connection((host, port))
    time.sleep(float(os.environ.get("EXITWRITE_READ_DELAY_S", "0")))
    digest, got = hashlib.sha256(), 0
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        digest.update(chunk)
        got += len(chunk)
    want = hashlib.sha256(stream(nbytes)).hexdigest()
    print("exitwrite: %d bytes sha256=%s (expected %d sha256=%s)" %
          (got, digest.hexdigest(), nbytes, want))
    sock.close()
    sys.exit(0 if got == nbytes and digest.hexdigest() == want else 1)


def main():
    mode, host, port, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if mode == "server":
        server(host, port, nbytes, sys.argv[5])
    else:
        client(host, port, nbytes)


main()
