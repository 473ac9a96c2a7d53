#!/usr/bin/env python3
"""make_zcopy_seeds.py: writes the seed corpus of tests/fuzz/fuzz_zcopy.c,
tests/fuzz/corpus/fuzz_zcopy/: one script per scenario of issue 13's
zero-copy findings and a few honest exchanges (the input format is in the
harness's header comment).  The directory is rewritten whole; also makes
sure tests/fuzz/regressions/fuzz_zcopy/ exists (with a .gitkeep).

Usage: tests/model/make_zcopy_seeds.py    (from anywhere; no arguments)
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

OPS = ["EXEC", "COMPLETE", "NET", "DATA", "SRC", "SRC_CANCEL", "SRC_DROP", "SINK_ANSWER",
       "SINK_CANCEL_ACK", "READ", "RD_COMPL", "RD_COMPL_ANY", "SINK_AVAIL", "SINK_CANCEL",
       "CREDIT", "ABORT", "DISCONN", "RAW", "DISCONNECTED", "QP_FAIL", "ADVANCE", "RECV",
       "SEND", "HOLD", "RELEASE", "PROBE", "FIONREAD", "FINISH", "AUTO", "BUDGET"]
OP = {name: i for i, name in enumerate(OPS)}
# The harness's tables (choose_len, choose_ms), by value.
LENS = [1, 100, 4079, 4080, 4081, 8192, 16383, 16384, 32768, 65535, 65536, 100000, 131072,
        262144, 262145, 600000]
MS = [1, 5, 19, 20, 21, 50, 100, 1000, 4999, 5000, 5001, 10000, 30000, 60000, 130000, 2]
# App call modes.
TIMEOUT, NONBLOCK, SIGNAL, DONTWAIT, UNTIMED = range(5)
PEEK, TRUNC, WAITALL = 1, 2, 8
# Sink answers.
IMM, WRITE_COMPL, COMPL_ONLY, PARTIAL = range(4)


def L(n):
    return LENS.index(n)


def T(ms):
    return MS.index(ms)


def op(name, *params):
    return bytes([OP[name]]) + bytes(params)


def data(n):
    v = n - 1
    return op("DATA", v >> 8, v & 0xff)


def recv(n, flags=0, mode=TIMEOUT, ms=1000):
    tail = [T(ms)] if mode in (TIMEOUT, SIGNAL) else []
    return op("RECV", L(n), flags, mode, *tail)


def send(n, mode=TIMEOUT, ms=1000):
    tail = [T(ms)] if mode in (TIMEOUT, SIGNAL) else []
    return op("SEND", L(n), mode, *tail)


def seeds():
    s = {}
    s["cancel-crosses-direct-read"] = b"".join([
        recv(262144, ms=10000), op("NET"), op("SINK_CANCEL_ACK"), op("NET"),
        op("SRC", L(131072)), op("SRC_CANCEL"), op("EXEC"), op("EXEC"), op("EXEC"),
        op("COMPLETE"), op("COMPLETE"), op("COMPLETE"), op("FINISH"), op("NET"),
        op("FIONREAD"), data(1000), recv(8192), op("FINISH"), op("FIONREAD")])
    s["cancel-crosses-staged-read"] = b"".join([
        op("SRC", L(131072)), op("SRC_CANCEL"), op("NET"), recv(262144), op("FINISH"),
        op("NET"), recv(262144), op("FINISH"), data(500), recv(8192), op("FINISH")])
    s["abort-disconnect-during-send"] = b"".join([
        send(262144, ms=10000), op("NET"), op("HOLD"), op("ABORT"), op("DISCONNECTED"),
        op("RELEASE"), op("FINISH"), op("PROBE")])
    s["abort-disconnect-during-recv"] = b"".join([
        recv(262144, ms=10000), op("NET"), op("HOLD"), op("ABORT"), op("DISCONNECTED"),
        op("RELEASE"), op("FINISH"), op("PROBE")])
    s["send-after-abort"] = b"".join([op("ABORT"), send(262144), op("FINISH"), op("PROBE")])
    s["unanswered-src-cancel"] = b"".join([send(262144, ms=100), op("FINISH"), op("PROBE")])
    s["unanswered-src-cancel-nonblocking"] = b"".join([
        send(262144, mode=NONBLOCK), op("FINISH"), op("PROBE")])
    s["unanswered-src-cancel-signal"] = b"".join([
        send(600000, mode=SIGNAL, ms=50), op("FINISH"), op("PROBE")])
    s["unanswered-sink-cancel"] = b"".join([recv(262144, ms=100), op("FINISH"), op("PROBE")])
    for name, mode in (("sink-count-nothing-written", COMPL_ONLY),
                       ("sink-count-half-written", PARTIAL),
                       ("sink-write-with-immediate", IMM),
                       ("sink-write-then-count-v2", WRITE_COMPL)):
        s[name] = b"".join([recv(262144), op("NET"), op("SINK_ANSWER", mode), op("FINISH"),
                            data(100), recv(8192), op("FINISH"), op("PROBE")])
    s["sources-stacked-behind-data"] = b"".join(
        [data(1000), op("SRC", L(65536)), op("SRC", L(65536)), op("NET")] +
        [recv(32768) + op("FINISH") + op("NET") for _ in range(6)] + [op("FIONREAD")])
    s["trunc-waitall"] = b"".join([data(1000), recv(4081, flags=TRUNC | WAITALL, ms=100),
                                   data(1000), op("FINISH")])
    s["honest-both-ways"] = b"".join([
        op("AUTO"), send(262144, ms=10000), op("FINISH"), op("SRC", L(131072)),
        recv(262144), op("FINISH"), data(4080), data(4080), recv(8192, flags=WAITALL),
        op("FINISH"), send(100000, mode=NONBLOCK), op("FINISH"), op("NET"), op("FIONREAD")])
    s["peer-sink-for-our-send"] = b"".join([
        op("SINK_AVAIL", L(262144)), op("NET"), send(262144, ms=10000), op("FINISH"),
        op("NET"), op("SINK_AVAIL", L(65536)), op("NET"), send(4081), op("FINISH"),
        op("SINK_CANCEL"), op("NET")])
    s["peer-reads-our-source"] = b"".join([
        send(262144, ms=10000), op("NET"), op("READ", 0, 64), op("READ", 0, 0),
        op("RD_COMPL"), op("FINISH"), op("NET"), op("PROBE")])
    s["peer-qp-fails-mid-read"] = b"".join([
        recv(262144, ms=5000), op("NET"), op("SINK_CANCEL_ACK"), op("NET"),
        op("SRC", L(262144)), op("EXEC"), op("QP_FAIL"), op("FINISH"), op("PROBE")])
    # DATA queued behind a SrcAvail whose RdmaRdCompl the peer has not seen
    # yet, taken in, then a lie resets the connection: the DATA's bytes came
    # before the reset (a fuzzer find: the model once tagged them from the
    # peer's books, which lag its SrcAvails).
    s["reset-after-data"] = b"".join([
        op("AUTO"), send(262144, ms=2), op("FINISH"), op("SRC", L(131072)),
        recv(262144), op("FINISH"), data(4080), data(4080),
        recv(8192, flags=WAITALL, ms=5), op("EXEC"), bytes([0x80 | OP["SINK_CANCEL_ACK"]]),
        op("FINISH"), op("NET"), op("FIONREAD")])
    s["disconn-after-data"] = b"".join([
        data(4080), data(10), op("DISCONN"), recv(8192, flags=WAITALL), op("FINISH"),
        recv(8192), op("FINISH")])
    # The pinned-memory budget spent (issue 15): nothing new can be
    # registered, so a SrcAvail is declined (RdmaRdCompl 0) and a send copies.
    s["budget-spent-source-declined"] = b"".join([
        op("BUDGET"), op("SRC", L(131072)), op("NET"), data(3000), recv(262144), op("FINISH"),
        op("BUDGET"), op("SRC", L(131072)), op("NET"), recv(262144), op("FINISH")])
    s["budget-spent-blocked-recv"] = b"".join([
        op("BUDGET"), recv(262144, ms=10000), op("NET"), op("SRC", L(131072)), op("NET"),
        data(2000), op("FINISH"), op("PROBE")])
    s["budget-spent-send"] = b"".join([
        op("AUTO"), op("BUDGET"), send(262144, ms=10000), op("FINISH"), op("NET")])
    # A SrcAvail the peer made up, declined: the answer is to a lie (a
    # fuzzer find: the model once called it an answer to nothing).
    s["budget-spent-raw-srcavail"] = b"".join([
        op("BUDGET"), op("RAW", 7, 0, 0, 0, 44, 0, 0, 0, 7, 0, 0, 0, 16, 0), op("NET"),
        data(1000), recv(8192), op("FINISH")])
    return s


def main():
    d = os.path.join(REPO, "tests", "fuzz", "corpus", "fuzz_zcopy")
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
        os.unlink(os.path.join(d, old))
    for name, blob in sorted(seeds().items()):
        with open(os.path.join(d, name), "wb") as f:
            f.write(blob)
    reg = os.path.join(REPO, "tests", "fuzz", "regressions", "fuzz_zcopy")
    os.makedirs(reg, exist_ok=True)
    keep = os.path.join(reg, ".gitkeep")
    if not os.path.exists(keep):
        open(keep, "w").close()
    print("%s: %d seeds" % (os.path.relpath(d, REPO), len(seeds())))


if __name__ == "__main__":
    main()
