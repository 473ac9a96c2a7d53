"""forkclose: a fork-per-connection server whose child closes the inherited
listening socket after it has used its connection (the child's own library
state is busy by then), as many servers do.

Usage:
  forkclose.py server HOST PORT COUNT

Serves COUNT connections, one at a time: accepts, forks; the child echoes
what the client sends as it comes, closes its copy of the listening socket
once 64 KiB went back, echoes the rest until EOF and exits; the parent closes its copy of
the connection and waits for the child before the next accept, so that each
client finds the parent's listener after a child has closed its copy.
Prints "forkclose: served N" and exits 0 when every child exited 0."""
import os
import sys

import checked

FIRST = 65536


def child(conn, listener):
    echoed = 0
    while True:
        data = conn.recv(65536)
        if not data:
            break
        conn.sendall(data)
        echoed += len(data)
        if echoed >= FIRST and listener.fileno() >= 0:
            listener.close()
    conn.close()
    if echoed < FIRST:
        sys.exit("forkclose child: EOF after %d bytes" % echoed)


def server(host, port, count):
    listener = checked.listen_on("forkclose", host, port, 16)
    for n in range(int(count)):
        conn, _ = listener.accept()
        pid = os.fork()
        if pid == 0:
            try:
                child(conn, listener)
            except BaseException as e:  # SystemExit too: the child never runs the loop
                print("forkclose child: %s" % e, flush=True)
                os._exit(1)
            os._exit(0)
        conn.close()
        _, status = os.waitpid(pid, 0)
        if status != 0:
            print("forkclose: child %d exited with status %#x" % (n, status), flush=True)
            sys.exit(1)
    listener.close()
    print("forkclose: served %d" % int(count), flush=True)


if __name__ == "__main__":
    checked.run_role("forkclose", {"server": server})
