"""forkshare: one accepted connection shared by a server and its forked child.

Usage:
  forkshare.py server HOST PORT DIR MODE
  forkshare.py client HOST PORT MODE
  forkshare.py execserve FD     (childexec's new image)

The client sends 64 KiB and checks the echo.  The server echoes it, creates
DIR/accepted (with its pid) and waits (up to 120 s) for DIR/go, so that a
test can see the connection on RDMA first; then it forks, and MODE says
who uses the socket after the fork:

  both        parent and child each write RECORDS records of 64 bytes; the
              client checks that every record arrived once, intact, and in
              its writer's order (they interleave, as on TCP)
  childonly   the child never touches the socket and exits; the parent then
              takes 1 MiB and answers its SHA-256 (a redis BGSAVE child)
  childserves the parent closes its copy at once; the child takes 1 MiB
              and answers its SHA-256 (a fork-per-connection server)
  childclimbs the parent closes its copy at once; the child echoes 200
              rounds of 32 KiB, paced, long enough for the stream to climb
              back to RDMA (the client compares every round)
  grandchild  the parent closes its copy at once; the child forks a
              grandchild, keeps its own copy (untouched) until the
              grandchild is gone, and the grandchild echoes as childclimbs
              does: two processes hold the socket, so it must not climb
  childexec   the parent keeps its copy open until the child is gone; the
              child execs this script (execserve) on the inherited socket,
              which takes 1 MiB and answers its SHA-256 (a fork+exec helper)
  parentexit  the parent exits at once (exit handlers run); the child waits
              for that, then takes 1 MiB and answers its SHA-256 (a process
              that daemonizes)
  parentkill  the parent waits to be killed (DIR/parent.pid); the child
              waits for DIR/go2, then reads: it must fail, not return bytes
  rogue       the child never touches the connection; it finds the fork
              handoff's request socket among its descriptors and lies on
              it: malformed messages, claims of streams that are not its
              (answered "no"), and thousands of holder reports naming
              itself; then it exits.  The parent checks that its own
              descriptors did not grow with the lies, then takes 1 MiB
              and answers its SHA-256 (the stream must not have moved)

With FORKSHARE_FORK_RETURN_MS=N in the server's environment, the parent's
fork() returns late (a fork handler registered after the library's): it
waits for the child to be about to use the socket (DIR/child.ready), then
N ms more, so that the child uses the socket before its parent has
recorded it, however slowly the child got there.

Each side prints "forkshare: ... ok" last and exits 0, or exits nonzero with
one line on stderr."""
import errno
import hashlib
import os
import socket
import struct
import sys
import time

import checked

RECORDS = 4000
ECHO_BYTES = 1 << 20
# childclimbs: echo rounds long enough for the child's stream to climb
CLIMB_ROUNDS = 200
CLIMB_CHUNK = 32768
CLIMB_PAUSE = 0.01


def record(writer, seq):
    head = b"%c %08d " % (writer, seq)
    tail = hashlib.sha256(head).hexdigest().encode()[:63 - len(head)]
    return head + tail + b"\n"


def recv_exact(sock, n, what):
    return checked.recv_exact("forkshare (%s)" % what, sock, n)


def echo_peer(sock, n):
    """Server side of an echo of n bytes (64 KiB before the fork)."""
    done = 0
    while done < n:
        chunk = sock.recv(min(65536, n - done))
        if not chunk:
            sys.exit("forkshare: EOF after %d of %d echo bytes" % (done, n))
        sock.sendall(chunk)
        done += len(chunk)


def echo_check(sock, n, what):
    """Client side: sends n random bytes, checks they come back."""
    data = os.urandom(n)
    sock.sendall(data)
    if recv_exact(sock, n, what) != data:
        sys.exit("forkshare: the echo (%s) differs from what was sent" % what)


def digest_peer(sock, n):
    """Server side after the fork: reads n bytes, answers their SHA-256.
    (Not an echo: a sender blocked in one zero-copy write of 1 MiB reads
    nothing until the receiver has taken all of it, and an echo of it
    would have to fit the sender's receive window meanwhile.)"""
    h = hashlib.sha256()
    h.update(recv_exact(sock, n, "the stream after the fork"))
    sock.sendall(h.digest())


def digest_check(sock, n, what):
    """Client side: sends n random bytes, checks the peer's SHA-256 of them."""
    data = os.urandom(n)
    sock.sendall(data)
    if recv_exact(sock, 32, what) != hashlib.sha256(data).digest():
        sys.exit("forkshare: the peer's digest (%s) differs from what was sent" % what)


def wait_file(path, secs=120):
    until = time.time() + secs
    while not os.path.exists(path):
        if time.time() > until:
            sys.exit("forkshare: no %s after %d s" % (path, secs))
        time.sleep(0.02)


HANDOFF_MAGIC = 0x5344484F
HANDOFF_REPLY_MAGIC = 0x53444852


def handoff_sockets():
    """The AF_UNIX SOCK_SEQPACKET sockets among our descriptors."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        if s.family == socket.AF_UNIX and s.type == socket.SOCK_SEQPACKET:
            found.append(s)
        else:
            s.close()
    return found


def handoff_req(owner, kind, holder=0, via=0, sock=0, ident=0):
    return struct.pack("=IIIIIIQQ", HANDOFF_MAGIC, owner, kind, holder, via, 0, sock, ident)


def rogue_lies(owner):
    """Lies on every request socket we find; returns a summary line."""
    socks = handoff_sockets()
    if not socks:
        sys.exit("forkshare: no SOCK_SEQPACKET socket inherited (no handoff socket)")
    answers = []
    for s in socks:
        for junk in (b"x", b"\0" * 39, b"\0" * 41, os.urandom(40), os.urandom(4096),
                     handoff_req(owner + 1, 1, sock=1, ident=1)):
            s.send(junk)
        # Claims of streams that are not ours, each with a reply socket.
        for sock_addr, ident in ((0xdeadbeef, 1), (0, 1), (0xdeadbeef, 1 << 40), (1, 0)):
            a, b = socket.socketpair()
            s.sendmsg([handoff_req(owner, 1, sock=sock_addr, ident=ident)],
                      [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", b.fileno()))])
            b.close()
            a.settimeout(30)
            answers.append(a.recv(4096))
            a.close()
        for i in range(3000):
            s.send(handoff_req(owner, 2, holder=os.getpid(), via=100000 + i))
    # The owner's answer (struct handoff_reply): magic, status 1 ("no") and
    # no climb ticket (its key never goes to a claim it refused).
    refused = struct.pack("=IBBxx", HANDOFF_REPLY_MAGIC, 1, 0)
    if any(x != refused for x in answers):
        sys.exit("forkshare: a forged claim was not refused: %r" % answers)
    return "%d request socket(s), %d forged claims refused" % (len(socks), len(answers))


_fork_hold = None


def hold_fork_return(ms, ready):
    """The parent's fork() returns late: a fork handler of ours, run after
    the library's (handlers run in the order they were registered), waits
    up to 30 s for the child's file ready, then ms."""
    global _fork_hold
    import ctypes
    libc = ctypes.CDLL(None)

    def hold():
        until = time.time() + 30
        while not os.path.exists(ready) and time.time() < until:
            time.sleep(0.005)
        time.sleep(ms / 1000.0)
    _fork_hold = ctypes.CFUNCTYPE(None)(hold)
    # pthread_atfork is in libc_nonshared.a: its exported form takes a DSO handle
    if libc.__register_atfork(None, _fork_hold, None, None) != 0:
        sys.exit("forkshare: could not register a fork handler")


def fd_count():
    return len(os.listdir("/proc/self/fd"))


def server(host, port, tdir, mode):
    lsn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsn.bind((host, port))
    lsn.listen(1)
    conn, _ = lsn.accept()
    lsn.close()
    echo_peer(conn, 65536)
    with open(os.path.join(tdir, "accepted"), "w") as f:
        f.write("%d\n" % os.getpid())
    wait_file(os.path.join(tdir, "go"))
    with open(os.path.join(tdir, "parent.pid"), "w") as f:
        f.write("%d\n" % os.getpid())
    fds_before = fd_count()
    hold_ms = os.environ.get("FORKSHARE_FORK_RETURN_MS")
    ready = os.path.join(tdir, "child.ready")
    if hold_ms:
        hold_fork_return(int(hold_ms), ready)
    pid = os.fork()
    if pid == 0 and hold_ms:
        open(ready, "w").close()  # the parent's fork() returns hold_ms after this
    if mode == "both":
        writer = b"C"[0] if pid == 0 else b"P"[0]
        for seq in range(RECORDS):
            conn.sendall(record(writer, seq))
        if pid == 0:
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        conn.shutdown(socket.SHUT_WR)
        conn.close()
        print("forkshare: server both ok (child status %d)" % status)
    elif mode == "childonly":
        if pid == 0:
            time.sleep(0.3)
            os._exit(0)
        os.waitpid(pid, 0)
        digest_peer(conn, ECHO_BYTES)
        conn.close()
        print("forkshare: server childonly ok")
    elif mode in ("childserves", "childclimbs"):
        if pid == 0:
            if mode == "childserves":
                digest_peer(conn, ECHO_BYTES)
            else:
                echo_peer(conn, CLIMB_ROUNDS * CLIMB_CHUNK)
            conn.close()
            print("forkshare: server %s ok (child)" % mode, flush=True)
            os._exit(0)
        conn.close()
        _, status = os.waitpid(pid, 0)
        if status:
            sys.exit("forkshare: the child failed (status %d)" % status)
    elif mode == "grandchild":
        if pid == 0:
            gpid = os.fork()
            if gpid == 0:
                echo_peer(conn, CLIMB_ROUNDS * CLIMB_CHUNK)
                conn.close()
                print("forkshare: server grandchild ok (grandchild)", flush=True)
                os._exit(0)
            _, status = os.waitpid(gpid, 0)
            conn.close()
            os._exit(1 if status else 0)
        conn.close()
        _, status = os.waitpid(pid, 0)
        if status:
            sys.exit("forkshare: the child or grandchild failed (status %d)" % status)
    elif mode == "childexec":
        if pid == 0:
            os.set_inheritable(conn.fileno(), True)
            os.execv(sys.executable, [sys.executable, "-S", os.path.abspath(__file__),
                                      "execserve", str(conn.fileno())])
        _, status = os.waitpid(pid, 0)
        conn.close()
        if status:
            sys.exit("forkshare: the exec'd child failed (status %d)" % status)
        print("forkshare: server childexec ok", flush=True)
    elif mode == "parentexit":
        if pid != 0:
            sys.exit(0)  # exit handlers run: the library moves the stream first
        until = time.time() + 60
        while os.getppid() == int(open(os.path.join(tdir, "parent.pid")).read()):
            if time.time() > until:
                sys.exit("forkshare: the parent did not exit")
            time.sleep(0.02)
        digest_peer(conn, ECHO_BYTES)
        conn.close()
        print("forkshare: server parentexit ok (child)", flush=True)
    elif mode == "parentkill":
        if pid != 0:
            time.sleep(120)
            sys.exit("forkshare: the parent was not killed")
        wait_file(os.path.join(tdir, "go2"))
        t0 = time.time()
        try:
            data = conn.recv(65536)
        except OSError as e:
            print("forkshare: server parentkill ok (child): recv failed with %s after %d ms"
                  % (errno.errorcode.get(e.errno, e.errno), (time.time() - t0) * 1000), flush=True)
            os._exit(0)
        sys.exit("forkshare: the child's recv returned %d bytes, not an error" % len(data))
    elif mode == "rogue":
        if pid == 0:
            line = rogue_lies(os.getppid())
            print("forkshare: server rogue child: %s" % line, flush=True)
            open(os.path.join(tdir, "lied"), "w").close()
            time.sleep(1)  # alive while the parent counts its descriptors
            os._exit(0)
        wait_file(os.path.join(tdir, "lied"))
        time.sleep(0.5)  # the server thread has taken every message by now
        grown = fd_count() - fds_before
        _, status = os.waitpid(pid, 0)
        if status:
            sys.exit("forkshare: the rogue child failed (status %d)" % status)
        # The fork itself adds three (the request socket pair, the child's
        # pidfd); each holder report recorded would add one more.
        if grown > 10:
            sys.exit("forkshare: the lies cost the owner %d descriptors" % grown)
        digest_peer(conn, ECHO_BYTES)
        conn.close()
        print("forkshare: server rogue ok: %d descriptors more while the liar lived" % grown)
    else:
        sys.exit("forkshare: unknown mode %s" % mode)


def check_records(data):
    if len(data) % 64:
        sys.exit("forkshare: %d bytes is not a whole number of records" % len(data))
    want = {b"P"[0]: 0, b"C"[0]: 0}
    runs, last = 0, None
    for off in range(0, len(data), 64):
        rec = data[off:off + 64]
        writer = rec[0]
        if writer not in want or rec != record(writer, want[writer]):
            sys.exit("forkshare: record at offset %d is not %c %d: %r"
                     % (off, writer, want.get(writer, -1), rec[:16]))
        want[writer] += 1
        runs += writer != last
        last = writer
    if want[b"P"[0]] != RECORDS or want[b"C"[0]] != RECORDS:
        sys.exit("forkshare: got %d P and %d C records of %d each"
                 % (want[b"P"[0]], want[b"C"[0]], RECORDS))
    return runs


def client(host, port, mode):
    sock = socket.create_connection((host, port))
    echo_check(sock, 65536, "before the fork")
    if mode == "both":
        got = bytearray()
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
        runs = check_records(bytes(got))
        print("forkshare: client both ok: %d records each, in writer order, %d runs" % (RECORDS, runs))
    elif mode in ("childclimbs", "grandchild"):
        for i in range(CLIMB_ROUNDS):
            echo_check(sock, CLIMB_CHUNK, "round %d after the fork" % i)
            time.sleep(CLIMB_PAUSE)
        sock.shutdown(socket.SHUT_WR)
        if sock.recv(1):
            sys.exit("forkshare: bytes after the echo")
        print("forkshare: client %s ok: %d rounds of %d bytes echoed after the fork"
              % (mode, CLIMB_ROUNDS, CLIMB_CHUNK))
    elif mode in ("childonly", "childserves", "childexec", "parentexit", "rogue"):
        digest_check(sock, ECHO_BYTES, "after the fork")
        sock.shutdown(socket.SHUT_WR)
        if sock.recv(1):
            sys.exit("forkshare: bytes after the echo")
        print("forkshare: client %s ok: %d bytes sent after the fork, the peer\'s digest matches" % (mode, ECHO_BYTES))
    elif mode == "parentkill":
        sock.settimeout(90)
        extra = 0
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                extra += len(chunk)
        except OSError as e:
            print("forkshare: client parentkill: %s" % e)
        if extra:
            sys.exit("forkshare: %d bytes arrived that no one wrote" % extra)
        print("forkshare: client parentkill ok: no byte after the echo")
    sock.close()


def execserve(fd):
    """childexec's new image: the inherited socket, 1 MiB, its SHA-256."""
    conn = socket.socket(fileno=fd)
    digest_peer(conn, ECHO_BYTES)
    conn.close()
    print("forkshare: server childexec ok (exec'd child)", flush=True)


def main():
    if sys.argv[1] == "execserve":
        execserve(int(sys.argv[2]))
    elif sys.argv[1] == "server":
        server(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        client(sys.argv[2], int(sys.argv[3]), sys.argv[4])


main()
