"""drainpoll: poll() on a socket whose app bytes, which waited for a channel
that never opened, are still draining into TCP (the channel state "moving").

Usage: drainpoll.py server HOST PORT DIR | drainpoll.py client HOST PORT DIR.
server: a plain TCP server with a 4 KiB receive buffer.  It accepts one
connection, prints "drainpoll: accepted", and reads nothing until DIR/go
exists; then writes REPLY_BYTES (its own pattern) and, once DIR/read exists,
reads to EOF, checks every byte against the client's pattern, and prints
"drainpoll: server received N bytes ok" (or BAD at the first difference).
client: a 16 KiB send buffer, non-blocking after its connect.  It sends its
pattern until EAGAIN (the bytes wait in the channel's send slots: a rogue
listener never sends ATTACH), prints "drainpoll: queued N", and waits for
DIR/stuck (the test sees the bytes move to TCP and stop there, the server's
window full).  Then, as a plain TCP socket with a full send buffer would:
  1. poll(POLLIN|POLLOUT, 1 s) reports nothing, and sleeps: the thread's CPU
     time over it is printed ("drainpoll: idle poll rc=R cpu_ms=C");
  2. it creates DIR/go; poll(POLLIN, 10 s) reports the server's bytes, which
     it reads and checks ("drainpoll: reply N bytes ok, poll cpu_ms=C");
  3. it creates DIR/read, sends the rest of its TOTAL_BYTES (poll(POLLOUT)
     between sends), half-closes, and prints "drainpoll: sent N bytes".
Any failure prints one line on stderr and exits nonzero."""
import os
import resource
import select
import socket
import sys
import time

import checked

TOTAL_BYTES = 2 << 20
REPLY_BYTES = 4096
WAIT_S = 60


def fail(msg):
    sys.exit("drainpoll: " + msg)


def thread_cpu_ms():
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return (r.ru_utime + r.ru_stime) * 1000.0


def server(host, port, d):
    conn = checked.small_window_accept("drainpoll", host, port)
    conn.settimeout(WAIT_S)
    checked.need_file("drainpoll", os.path.join(d, "go"), WAIT_S)
    conn.sendall(checked.pattern("drainpoll-reply", 1, REPLY_BYTES))
    checked.need_file("drainpoll", os.path.join(d, "read"), WAIT_S)
    want = checked.pattern("drainpoll", 1, TOTAL_BYTES)
    got = 0
    while True:
        b = conn.recv(65536)
        if not b:
            break
        if b != want[got:got + len(b)]:
            print("drainpoll: server received BAD bytes at offset %d" % got, flush=True)
            sys.exit(1)
        got += len(b)
    print("drainpoll: server received %d bytes %s" % (got, "ok" if got == TOTAL_BYTES else "SHORT"),
          flush=True)


def client(host, port, d):
    sock, data, off = checked.stuck_writer("drainpoll", host, port, d, TOTAL_BYTES, WAIT_S)
    p = select.poll()
    p.register(sock, select.POLLIN | select.POLLOUT)
    cpu = thread_cpu_ms()
    ev = p.poll(1000)
    print("drainpoll: idle poll rc=%d cpu_ms=%.0f" % (len(ev), thread_cpu_ms() - cpu), flush=True)
    checked.touch(os.path.join(d, "go"))
    p = select.poll()
    p.register(sock, select.POLLIN)
    cpu = thread_cpu_ms()
    ev = p.poll(10000)
    spent = thread_cpu_ms() - cpu
    if not ev:
        fail("the server's reply was not readable within 10 s")
    want = checked.pattern("drainpoll-reply", 1, REPLY_BYTES)
    got = b""
    deadline = time.monotonic() + WAIT_S
    while len(got) < REPLY_BYTES and time.monotonic() < deadline:
        try:
            b = sock.recv(REPLY_BYTES - len(got))
        except BlockingIOError:
            p.poll(1000)
            continue
        if not b:
            fail("EOF after %d reply bytes" % len(got))
        got += b
    if got != want:
        fail("reply: %d bytes, not the server's %d" % (len(got), REPLY_BYTES))
    print("drainpoll: reply %d bytes ok, poll cpu_ms=%.0f" % (len(got), spent), flush=True)
    checked.touch(os.path.join(d, "read"))
    p = select.poll()
    p.register(sock, select.POLLOUT)
    deadline = time.monotonic() + WAIT_S
    while off < TOTAL_BYTES:
        if time.monotonic() > deadline:
            fail("sent %d of %d bytes in %d s" % (off, TOTAL_BYTES, WAIT_S))
        p.poll(1000)
        off = checked.send_some(sock, data, off)
    sock.shutdown(socket.SHUT_WR)
    print("drainpoll: sent %d bytes" % off, flush=True)
    sock.close()


checked.run_role("drainpoll", {"server": server, "client": client})
