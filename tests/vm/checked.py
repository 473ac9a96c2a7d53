"""checked: the byte patterns the VM suite's Python peers send and compare.

pattern(tag, seed, size): SIZE bytes of a SHA-256 chain that starts at
"TAG SEED", so each connection's bytes are its own and any loss, duplicate,
reorder or stranger's byte shows in a comparison.

listen_on(tag, host, port, backlog=1, rcvbuf=0): a listening socket on
HOST:PORT (SO_REUSEADDR, that receive buffer if given); prints "TAG:
listening".  accept_one(tag, host, port, rcvbuf=0): a plain TCP listener (with that
receive buffer, if given); prints "TAG: listening", accepts one
connection, prints "TAG: accepted" and returns it.  small_window_accept
is the same with a 4 KiB receive buffer (so a writer that is not read
stops soon).  recv_exact(tag, sock, n): N bytes, or exits with "TAG: EOF
after ...".

A writer that the reader stops: queue_until_full(sock, data) sends DATA on
a non-blocking socket until it takes no more and returns how much it took
(send_some(sock, data, off) is one try from OFF).  stuck_writer(tag, host,
port, d, total, secs): a client with a 16 KiB send buffer, non-blocking,
that queues TAG's pattern of TOTAL bytes until the socket takes no more (it
exits if all went), prints "TAG: queued N" and (unless wait_stuck is
False) waits for D/stuck; returns (sock, data, N).  wait_file(path, secs)
waits for a file the test creates (False after SECS); need_file(tag, path,
secs) exits with "TAG: no PATH within SECS s" instead; touch(path) creates one.

run_role(tag, roles): the command line "ROLE HOST PORT ARGS..." runs
roles[ROLE](host, port, *args)."""
import hashlib
import os
import socket
import sys
import time


def pattern(tag, seed, size):
    out, block = bytearray(), hashlib.sha256(b"%s %d" % (tag.encode(), seed)).digest()
    while len(out) < size:
        out += block
        block = hashlib.sha256(block).digest()
    return bytes(out[:size])


def listen_on(tag, host, port, backlog=1, rcvbuf=0):
    lsn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf:
        lsn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # inherited by the accepted socket
    lsn.bind((host, int(port)))
    lsn.listen(backlog)
    print("%s: listening" % tag, flush=True)
    return lsn


def accept_one(tag, host, port, rcvbuf=0):
    lsn = listen_on(tag, host, port, 1, rcvbuf)
    conn, _ = lsn.accept()
    lsn.close()
    print("%s: accepted" % tag, flush=True)
    return conn


def small_window_accept(tag, host, port):
    return accept_one(tag, host, port, 4096)


def recv_exact(tag, sock, n):
    got = bytearray()
    while len(got) < n:
        b = sock.recv(min(65536, n - len(got)))
        if not b:
            sys.exit("%s: EOF after %d of %d bytes" % (tag, len(got), n))
        got += b
    return bytes(got)


def send_some(sock, data, off):
    try:
        return off + sock.send(data[off:off + 65536])
    except BlockingIOError:
        return off


def queue_until_full(sock, data):
    off = 0
    while off < len(data):
        n = send_some(sock, data, off)
        if n == off:
            break
        off = n
    return off


def wait_file(path, secs):
    deadline = time.monotonic() + secs
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def touch(path):
    with open(path, "w"):
        pass


def need_file(tag, path, secs):
    if not wait_file(path, secs):
        sys.exit("%s: no %s within %d s" % (tag, path, secs))


def run_role(tag, roles):
    role = sys.argv[1] if len(sys.argv) > 3 else ""
    if role not in roles:
        sys.exit("%s: usage: %s HOST PORT ..., not %s" % (tag, " | ".join(sorted(roles)), " ".join(sys.argv[1:])))
    roles[role](sys.argv[2], int(sys.argv[3]), *sys.argv[4:])


def stuck_writer(tag, host, port, d, total, secs, wait_stuck=True):
    data = pattern(tag, 1, total)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    sock.connect((host, port))
    sock.setblocking(False)
    off = queue_until_full(sock, data)
    if off == total:
        sys.exit("%s: took all %d bytes, though the server reads none" % (tag, total))
    print("%s: queued %d" % (tag, off), flush=True)
    if wait_stuck:
        need_file(tag, os.path.join(d, "stuck"), secs)
    return sock, data, off
