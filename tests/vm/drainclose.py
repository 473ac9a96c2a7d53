"""drainclose: the app closes a socket whose bytes, which waited for a
channel that never opened, are still draining into TCP (channel "moving").

Usage: drainclose.py server HOST PORT DIR MODE | drainclose.py client HOST PORT DIR MODE.
client: a 16 KiB send buffer, non-blocking after its connect.  It sends its
pattern until the socket takes no more, prints "drainclose: queued N" and
waits for DIR/stuck (the test sees the bytes move to TCP and stop there:
the server reads nothing yet; MODE early and late: it does not wait, and
closes as its channel still binds).  Then it closes the socket (MODE abort: with
SO_LINGER 0 first), creates DIR/closed, and stays alive until DIR/done, so
that any background drain has its process.
server: a plain TCP server with a 4 KiB receive buffer.  It accepts one
connection and waits for DIR/closed; then, by MODE:
  pauses: sleeps PAUSE_S, reads FIRST_READ bytes, sleeps PAUSE_S again,
          then reads to the end (two pauses longer together than the
          client's linger bound, each shorter);
  stops, early: watches the socket, reading nothing, for a reset, up to
          STOP_S;
  late:   reads at once, and prints "drainclose: first bytes after T ms"
          (the close to the first bytes: when the drain began);
  abort:  sleeps 1 s;
then reads to the end, checks every byte against the client's pattern and
prints "drainclose: server received N bytes ok, then END", END being "EOF"
or "reset"; in stops and early mode "drainclose: reset after T ms" (or "no reset
within STOP_S s") comes first.  Any failure prints one line on stderr and
exits nonzero."""
import os
import select
import socket
import struct
import sys
import time

import checked

TOTAL_BYTES = 2 << 20
WAIT_S = 60
PAUSE_S = 2.0
STOP_S = 15.0
FIRST_READ = 65536


def fail(msg):
    sys.exit("drainclose: " + msg)


def read_for(conn, want, got, secs, upto=TOTAL_BYTES):
    """Reads on from GOT, checked against WANT, for up to SECS and until UPTO
    bytes; returns (got, end), end None if neither EOF nor a reset came."""
    conn.settimeout(secs)
    deadline = time.monotonic() + secs
    while got < upto and time.monotonic() < deadline:
        try:
            b = conn.recv(65536)
        except socket.timeout:
            return got, None
        except ConnectionResetError:
            return got, "reset"
        if not b:
            return got, "EOF"
        if b != want[got:got + len(b)]:
            print("drainclose: server received BAD bytes at offset %d" % got, flush=True)
            sys.exit(1)
        got += len(b)
    return got, None


def server(host, port, d, mode):
    conn = checked.small_window_accept("drainclose", host, port)
    want = checked.pattern("drainclose", 1, TOTAL_BYTES)
    got, end = 0, None
    checked.need_file("drainclose", os.path.join(d, "closed"), WAIT_S)
    start = time.monotonic()
    if mode == "pauses":
        time.sleep(PAUSE_S)
        got, end = read_for(conn, want, got, PAUSE_S, FIRST_READ)
        time.sleep(PAUSE_S)
    elif mode in ("stops", "early"):
        p = select.poll()
        p.register(conn, select.POLLERR | select.POLLHUP)
        while time.monotonic() - start < STOP_S:
            if any(ev & (select.POLLERR | select.POLLHUP) for _, ev in p.poll(100)):
                break
        spent = (time.monotonic() - start) * 1000
        if spent < STOP_S * 1000:
            print("drainclose: reset after %.0f ms" % spent, flush=True)
        else:
            print("drainclose: no reset within %.0f s" % STOP_S, flush=True)
    elif mode == "late":
        got, end = read_for(conn, want, got, WAIT_S, 1)
        print("drainclose: first bytes after %.0f ms" % ((time.monotonic() - start) * 1000),
              flush=True)
    else:
        time.sleep(1)
    if end is None:
        got, end = read_for(conn, want, got, WAIT_S)
    print("drainclose: server received %d bytes ok, then %s" % (got, end or "nothing"), flush=True)


def client(host, port, d, mode):
    sock, _, _ = checked.stuck_writer("drainclose", host, port, d, TOTAL_BYTES, WAIT_S,
                                      wait_stuck=mode not in ("early", "late"))
    if mode == "abort":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    checked.touch(os.path.join(d, "closed"))
    print("drainclose: closed", flush=True)
    checked.need_file("drainclose", os.path.join(d, "done"), WAIT_S)


def with_mode(role):
    def run(host, port, d, mode):
        if mode not in ("pauses", "stops", "early", "late", "abort"):
            fail("mode is pauses, stops, early, late or abort, not " + mode)
        role(host, port, d, mode)
    return run


checked.run_role("drainclose", {"server": with_mode(server), "client": with_mode(client)})
