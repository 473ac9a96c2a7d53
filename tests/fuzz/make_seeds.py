#!/usr/bin/env python3
"""make_seeds.py: writes the seed corpus of the libFuzzer harnesses,
tests/fuzz/corpus/<harness>/, from the layouts of core/wire.h (and of the
stats segment, base/stats_shm.h): a few valid
inputs per harness and a few that break exactly one rule (near-valid).  The
named seeds of each corpus directory are rewritten whole, so they depend on
this file (and the reason list of base/reason.h) only; inputs named by their
SHA-1, as libFuzzer names what a run adds and what was committed from such
runs, are left alone.  Also makes sure every
harness has tests/fuzz/regressions/<harness>/ (with a .gitkeep); it never
touches the inputs kept there.

Each harness's input starts with the parameters its header comment names
(fuzz_bsdh: a buf_size selector; fuzz_switch: reason_count; fuzz_bind:
kinds_mask and reason_count; fuzz_tcp_diag: the peer port), then the bytes as
received.  fuzz_tcp_diag's replies are netlink messages, in this machine's
byte order as the kernel sends them (linux/netlink.h, linux/inet_diag.h).

Usage: tests/fuzz/make_seeds.py    (from anywhere; no arguments)
"""
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

WIRE_VERSION = 4
HELLO_MAGIC = 0x53445053  # "SDPS"
BIND_MAGIC = 0x53445042   # "SDPB"
MID = dict(DATA=0x01, CREDIT_UPDATE=0x02, DISCONN=0x03, ABORT=0x04, KEEPALIVE=0x05,
           ATTACH=0x06, DETACH=0x07, SRC_AVAIL=0x08, RDMA_RD_COMPL=0x09, SRC_CANCEL=0x0a,
           SINK_AVAIL=0x0b, RDMA_WR_COMPL=0x0c, SINK_CANCEL=0x0d, SINK_CANCEL_ACK=0x0e,
           SWITCH=0x0f, COMMIT=0x10)
FLAG_STARVING = 0x01
BIND_PROOF, BIND_ACK, BIND_NAK = 1, 2, 3
NONCE_A = bytes(range(16))
NONCE_B = bytes(range(0xf0, 0x100))


def reasons():
    """The sdp_reason names in enum order (base/reason.h)."""
    with open(os.path.join(REPO, "base", "reason.h")) as f:
        text = f.read()
    names = re.findall(r"^\s*X\((\w+),", text, re.M)
    if not names or names[0] != "NONE":
        sys.exit("make_seeds.py: cannot read the reason list of base/reason.h")
    return names


REASONS = reasons()
REASON = {name: i for i, name in enumerate(REASONS)}
REASON_COUNT = len(REASONS)


def bsdh(mid, length, flags=0, bufs=32, mseq=1, ack=0):
    return struct.pack(">BBHIII", mid, flags, bufs, length, mseq, ack)


def ext(a=0, b=0, c=0, d=0):
    return struct.pack(">IIQQ", a, b, c, d)


def msg(mid, payload=b"", **kw):
    return bsdh(mid, 16 + len(payload), **kw) + payload


def ctrl(mid, a=0, b=0, c=0, d=0, **kw):
    return msg(mid, ext(a, b, c, d), **kw)


def nonce_ext(nonce):
    c, d = struct.unpack(">QQ", nonce)
    return ext(c=c, d=d)


SEL_MIN = b"\x00"       # buf_size = SDP_MIN_BUF_SIZE
SEL_LEN = b"\x03"       # buf_size = the message length
SEL_LEN_M1 = b"\x04"    # buf_size = the message length - 1


def sel_raw(buf_size):
    return b"\xf0" + struct.pack(">I", buf_size)


def bsdh_seeds():
    s = {
        "data-5": SEL_MIN + msg(MID["DATA"], b"hello"),
        "data-fills-buffer": SEL_LEN + msg(MID["DATA"], bytes(range(200)), mseq=7, ack=6),
        "data-big-buffer": sel_raw(1 << 20) + msg(MID["DATA"], b"x" * 64, bufs=1024),
        "credit-update-starving": SEL_MIN + bsdh(MID["CREDIT_UPDATE"], 16, FLAG_STARVING, 1024),
        "disconn": SEL_MIN + bsdh(MID["DISCONN"], 16, mseq=0xffffffff, ack=0xfffffffe),
        "keepalive": SEL_MIN + bsdh(MID["KEEPALIVE"], 16, bufs=0),
        "attach": SEL_MIN + bsdh(MID["ATTACH"], 16, mseq=2),
        "abort": SEL_MIN + ctrl(MID["ABORT"], a=104),
        "detach": SEL_MIN + ctrl(MID["DETACH"], a=REASON["ACCEPTED_ELSEWHERE"]),
        "commit-nonce": SEL_MIN + msg(MID["COMMIT"], nonce_ext(NONCE_A)),
        "src-avail": SEL_MIN + ctrl(MID["SRC_AVAIL"], 262144, 0x1234, 0x7f0000001000, 1 << 30),
        "rdma-rd-compl": SEL_MIN + ctrl(MID["RDMA_RD_COMPL"], 262144, 0, 0, 1 << 30),
        "sink-avail": SEL_MIN + ctrl(MID["SINK_AVAIL"], 1 << 20, 0x99, 0x7f0000200000, 4096),
        "sink-cancel-ack": SEL_MIN + ctrl(MID["SINK_CANCEL_ACK"], 0, 0, 0, 4096),
        # near-valid: one rule broken
        "bad-data-empty": SEL_MIN + bsdh(MID["DATA"], 16),
        "bad-len-not-received": SEL_MIN + bsdh(MID["DATA"], 22) + b"hello",
        "bad-len-over-buffer": SEL_LEN_M1 + msg(MID["DATA"], b"hello"),
        "bad-mid-0x11": SEL_MIN + bsdh(0x11, 16),
        "bad-mid-0": SEL_MIN + ctrl(0x00),
        "bad-flags": SEL_MIN + bsdh(MID["KEEPALIVE"], 16, flags=0x02),
        "bad-bufs-1025": SEL_MIN + bsdh(MID["CREDIT_UPDATE"], 16, bufs=1025),
        "bad-commit-v1-no-ext": SEL_MIN + bsdh(MID["COMMIT"], 16),
        "bad-attach-with-ext": SEL_MIN + ctrl(MID["ATTACH"]),
        "bad-short": SEL_MIN + bsdh(MID["KEEPALIVE"], 16)[:15],
    }
    return s


def v4_mapped(addr):
    return bytes(10) + b"\xff\xff" + bytes(addr)


def hello(count=32, size=32768, sport=40000, dport=6379, src=None, dst=None,
          magic=HELLO_MAGIC, version=WIRE_VERSION, flags=0):
    if src is None:
        src, dst = v4_mapped((10, 0, 0, 2)), v4_mapped((10, 0, 0, 1))
    return struct.pack(">IBBHIHH", magic, version, flags, count, size, sport, dport) + src + dst


def hello_seeds():
    v6 = (bytes.fromhex("fe800000000000000000000000000002"),
          bytes.fromhex("fe800000000000000000000000000001"))
    return {
        "v4": hello(),
        "v4-private-data-56": hello() + bytes(8),
        "v6-limits-min": hello(4, 4096, 1, 1, *v6),
        "v6-limits-max": hello(1024, 1 << 20, 65535, 65535, *v6),
        "bad-magic": hello(magic=BIND_MAGIC),
        "bad-version-1": hello(version=1),
        "bad-flags": hello(flags=2),
        "bad-src-port-0": hello(sport=0),
        "link": hello(sport=0, flags=1, size=32768 + 16, count=64),
        "link-solicited": hello(sport=0, flags=3, size=32768 + 16, count=64),
        "bad-unknown-flag-4": hello(sport=0, flags=5),
        "bad-link-with-src-port": hello(flags=1),
        "bad-count-3": hello(count=3),
        "bad-count-1025": hello(count=1025),
        "bad-size-4095": hello(size=4095),
        "bad-size-over-max": hello(size=(1 << 20) + 1),
        "bad-short": hello()[:-1],
    }


LINK_KIND = {"STREAM": 1, "CREDIT": 2, "OPEN": 3, "OPEN_ACK": 4, "OPEN_NAK": 5, "RELEASED": 6,
             "CLIMB_REQ": 7, "CLIMB_CHAL": 8, "CLIMB_PROVE": 9, "CLIMB_ACK": 10, "CLIMB_NAK": 11}


def lh(kind, payload=b"", flags=0, stream=0, lseq=1, lack=0, length=None):
    if length is None:
        length = 16 + len(payload)
    return struct.pack(">BBHIII", kind, flags, stream, length, lseq, lack) + payload


def open_payload(sport=40000, dport=6379, count=32, size=32768, pad=0):
    return (v4_mapped((10, 0, 0, 2)) + v4_mapped((10, 0, 0, 1)) +
            struct.pack(">HHHHI", sport, dport, count, pad, size))


def open_ack_payload(count=32, size=32768, pad=0):
    return NONCE_A + struct.pack(">HHI", count, pad, size)


def climb_chal_payload(count=32, size=32768, pad=0):
    return NONCE_A + bytes(range(32)) + struct.pack(">HHI", count, pad, size)


def link_seeds():
    sel = b"\x07"  # buf_size 32 KiB + 16
    k = LINK_KIND
    return {
        "stream-data": sel + lh(k["STREAM"], msg(MID["DATA"], b"hello"), stream=5),
        "credit": sel + lh(k["CREDIT"], lseq=9, lack=7),
        "credit-starving": sel + lh(k["CREDIT"], flags=1),
        "open": sel + lh(k["OPEN"], open_payload(), stream=3),
        "open-bad-port": sel + lh(k["OPEN"], open_payload(sport=0)),
        "open-rdv-port": sel + lh(k["OPEN"], open_payload(pad=40123)),
        "open-ack": sel + lh(k["OPEN_ACK"], open_ack_payload()),
        "open-ack-bad-count": sel + lh(k["OPEN_ACK"], open_ack_payload(count=2)),
        "open-ack-rdv-port": sel + lh(k["OPEN_ACK"], open_ack_payload(pad=40124)),
        "open-nak": sel + lh(k["OPEN_NAK"], bytes([4]) + bytes(7)),
        "released": sel + lh(k["RELEASED"], stream=4095),
        "bad-stream-index": sel + lh(k["RELEASED"], stream=4096),
        "climb-req": sel + lh(k["CLIMB_REQ"], open_payload() + NONCE_B, stream=2),
        "climb-req-bad-flags": sel + lh(k["CLIMB_REQ"], open_payload(pad=2) + NONCE_B),
        "climb-req-from-server": sel + lh(k["CLIMB_REQ"], open_payload(pad=1) + NONCE_B),
        "climb-chal": sel + lh(k["CLIMB_CHAL"], climb_chal_payload(), stream=2),
        "climb-chal-bad-size": sel + lh(k["CLIMB_CHAL"], climb_chal_payload(size=1 << 21)),
        "climb-prove": sel + lh(k["CLIMB_PROVE"], bytes(range(32)) + struct.pack(">Q", 1 << 24)),
        "climb-ack": sel + lh(k["CLIMB_ACK"], struct.pack(">Q", 123456)),
        "climb-ack-bad-cut": sel + lh(k["CLIMB_ACK"], struct.pack(">Q", (1 << 62) + 1)),
        "climb-nak": sel + lh(k["CLIMB_NAK"], bytes([7]) + bytes(7)),
        "bad-kind": sel + lh(12),
        "bad-flags": sel + lh(k["CREDIT"], flags=2),
        "bad-len": sel + lh(k["CREDIT"], length=17),
        "bad-stream-short": sel + lh(k["STREAM"], b"abc"),
        "bad-over-buffer": b"\x05" + lh(k["STREAM"], msg(MID["DATA"], b"hello")),
        "bad-short": sel + lh(k["CREDIT"])[:-1],
    }


def hello_ack(count=32, size=32768, nonce=NONCE_B, magic=HELLO_MAGIC, version=WIRE_VERSION,
              flags=0):
    return struct.pack(">IBBHI", magic, version, flags, count, size) + nonce


def hello_ack_seeds():
    return {
        "default": hello_ack(),
        "limits-min": hello_ack(4, 4096, bytes(16)),
        "limits-max": hello_ack(1024, 1 << 20, b"\xff" * 16),
        "with-trailing-bytes": hello_ack() + bytes(20),
        "bad-v1-without-nonce": struct.pack(">IBBHI", HELLO_MAGIC, 1, 0, 32, 32768),
        "bad-version-1": hello_ack(version=1),
        "bad-magic": hello_ack(magic=0),
        "bad-flags": hello_ack(flags=0x80),
        "link-solicited": hello_ack(flags=3),
        "bad-solicited-without-link": hello_ack(flags=2),
        "bad-count-0": hello_ack(count=0),
        "bad-size-0": hello_ack(size=0),
        "bad-short": hello_ack()[:-1],
    }


def reject(code, magic=HELLO_MAGIC, version=WIRE_VERSION, pad=0):
    return struct.pack(">IBBH", magic, version, code, pad)


def reject_seeds():
    s = {"code-%d" % c: reject(c) for c in range(1, 6)}
    s.update({
        "code-unknown-200": reject(200),
        "code-0": reject(0),
        "v1-version": reject(1, version=1),
        "with-trailing-bytes": reject(3) + bytes(48),
        "bad-magic": reject(1, magic=BIND_MAGIC),
        "bad-short": reject(1)[:-1],
    })
    return s


def count16(n):
    return struct.pack(">H", n)


def switch(reason, resend_from, magic=HELLO_MAGIC, version=WIRE_VERSION, flags=0):
    return struct.pack(">IBBHQ", magic, version, reason, flags, resend_from)


def switch_seeds():
    rc = count16(REASON_COUNT)
    return {
        "failover-0": rc + switch(REASON["FAILOVER"], 0),
        "forked-with-stream": rc + switch(REASON["FORKED"], 1 << 40) + b"stream bytes",
        "last-reason-max-offset": rc + switch(REASON_COUNT - 1, (1 << 64) - 1),
        "any-reason": count16(0xffff) + switch(255, 12345),
        "bad-reason-count": rc + switch(REASON_COUNT, 0),
        "bad-version-1": rc + switch(REASON["FAILOVER"], 0, version=1),
        "bad-flags": rc + switch(REASON["FAILOVER"], 0, flags=0x100),
        "bad-magic-bind": rc + switch(REASON["FAILOVER"], 0, magic=BIND_MAGIC),
        "bad-short": rc + switch(REASON["FAILOVER"], 0)[:-1],
    }


def reader_input(have, back, drop, sizes, stream):
    return struct.pack(">QIBB", have, back, drop - 1, len(sizes)) + bytes(sizes) + stream


def switch_reader_seeds():
    fo = REASON["FAILOVER"]
    return {
        "nothing-to-skip": reader_input(1000, 4096, 64, [16], switch(fo, 1000) + b"new"),
        "skip-in-pieces": reader_input(1000, 4096, 7, [3, 5, 1], switch(fo, 900) + bytes(100) + b"new"),
        "record-byte-by-byte": reader_input(50, 50, 1, [], switch(REASON["FORKED"], 0) + bytes(50)),
        "skip-cut-short": reader_input(1 << 20, 1 << 21, 255, [64], switch(fo, 0) + bytes(300)),
        "resend-after-have": reader_input(10, 100, 16, [16], switch(fo, 11)),
        "resend-too-far-back": reader_input(1 << 30, 4096, 16, [16], switch(fo, 0)),
        "bad-version": reader_input(0, 0, 16, [8], switch(fo, 0, version=1)),
        "short-record": reader_input(0, 0, 16, [4], switch(fo, 0)[:10]),
    }


def bind(kind, reason=0, nonce=NONCE_B, magic=BIND_MAGIC, version=WIRE_VERSION):
    return struct.pack(">IBBH", magic, version, kind, reason) + nonce


SERVER = bytes([1 << BIND_PROOF])                  # the server accepts PROOF
CLIENT = bytes([1 << BIND_ACK | 1 << BIND_NAK])     # the client accepts ACK and NAK


def bind_seeds():
    rc = count16(REASON_COUNT)
    return {
        "proof": SERVER + rc + bind(BIND_PROOF, nonce=NONCE_B),
        "ack": CLIENT + rc + bind(BIND_ACK, nonce=NONCE_A),
        "ack-then-app-data": CLIENT + rc + bind(BIND_ACK, nonce=NONCE_A) + b"+PONG\r\n",
        "nak-protocol": CLIENT + rc + bind(BIND_NAK, REASON["PROTOCOL"], bytes(16)),
        "bad-proof-at-client": CLIENT + rc + bind(BIND_PROOF),
        "bad-nak-reason-count": CLIENT + rc + bind(BIND_NAK, REASON_COUNT),
        "bad-ack-with-reason": CLIENT + rc + bind(BIND_ACK, 1),
        "bad-kind-0": bytes([0xff]) + rc + bind(0),
        "bad-kind-4": bytes([0xff]) + rc + bind(4),
        "bad-version-1": SERVER + rc + bind(BIND_PROOF, version=1),
        "bad-magic-hello": SERVER + rc + bind(BIND_PROOF, magic=HELLO_MAGIC),
        "prefix-magic": SERVER + rc + b"SDPB",
        "prefix-magic-version": SERVER + rc + b"SDPB" + bytes([WIRE_VERSION]),
        "prefix-3": SERVER + rc + b"SDP",
        "app-data": SERVER + rc + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    }


def rules_seeds():
    return {
        "readme": (b"# use rdma|tcp|both server|client <program glob> <addr[/prefix]|*>:<port[-port]|*>\n"
                   b"use tcp  client *          10.1.0.0/16:*\n"
                   b"use both server redis-*    *:6379\n"
                   b"use rdma client iperf3     [fe80::]/64:5201-5299 zcopy_thresh=131072 "
                   b"connect_timeout_ms=200\n"),
        "server-clients": b"use both server memcached  *:11211 clients=10.1.0.0/16,[fd00::]/8\n",
        "one-rule": b"use both client * *:*\n",
        "climb": (b"use both server redis-* *:6379 climb=no\n"
                  b"use rdma server * *:* zcopy_thresh=1 climb=yes connect_timeout_ms=2 "
                  b"clients=10.0.0.0/8\n"),
        "empty": b"",
    }


NLMSG_ERROR, NLMSG_DONE, SOCK_DIAG_BY_FAMILY = 2, 3, 20
NLM_F_MULTI = 0x2
ENOENT, EPERM = 2, 1
TCP_ESTABLISHED, TCP_SYN_RECV, TCP_LISTEN = 1, 3, 10
DIAG_PORT = 40000    # the client's port the lookup names


def nlmsg(mtype, payload, flags=0, seq=0, pid=0, length=None):
    """A netlink header (host order) and payload; length overrides nlmsg_len."""
    n = 16 + len(payload) if length is None else length
    return struct.pack("=IHHII", n, mtype, flags, seq, pid) + payload


def inet_diag_msg(state=TCP_ESTABLISHED, sport=6379, dport=DIAG_PORT, inode=123456,
                  family=2, src=b"\x7f\x00\x00\x01", dst=b"\x7f\x00\x00\x01"):
    """struct inet_diag_msg: ports and addresses in network order, the rest host."""
    sockid = struct.pack(">HH", sport, dport) + src.ljust(16, b"\0") + dst.ljust(16, b"\0")
    sockid += struct.pack("=I", 0) + struct.pack("=II", 0xffffffff, 0xffffffff)
    return (struct.pack("=BBBB", family, state, 0, 0) + sockid +
            struct.pack("=IIIII", 0, 0, 0, 1000, inode))


def rtattr(atype, payload):
    n = 4 + len(payload)
    return struct.pack("=HH", n, atype) + payload + b"\0" * ((4 - n % 4) % 4)


def tcp_diag_seeds():
    port = struct.pack(">H", DIAG_PORT)
    request = struct.pack("=IHHII", 72, SOCK_DIAG_BY_FAMILY, 1, 0, 0)
    attrs = rtattr(8, b"\0") + rtattr(11, b"\0\0\0\0")   # SHUTDOWN, as kernels append
    accepted = nlmsg(SOCK_DIAG_BY_FAMILY, inet_diag_msg())
    return {
        "accepted": port + accepted,
        "accepted-with-attrs": port + nlmsg(SOCK_DIAG_BY_FAMILY, inet_diag_msg() + attrs),
        "accepted-then-done": port + accepted + nlmsg(NLMSG_DONE, struct.pack("=i", 0),
                                                      flags=NLM_F_MULTI),
        "accepted-ipv6": port + nlmsg(SOCK_DIAG_BY_FAMILY,
                                      inet_diag_msg(family=10, src=b"\0" * 15 + b"\1",
                                                    dst=b"\0" * 15 + b"\1")),
        "queued-inode-0": port + nlmsg(SOCK_DIAG_BY_FAMILY, inet_diag_msg(state=TCP_SYN_RECV,
                                                                          inode=0)),
        "listener-fallback": port + nlmsg(SOCK_DIAG_BY_FAMILY,
                                          inet_diag_msg(state=TCP_LISTEN, dport=0, inode=99)),
        "other-peer-port": port + nlmsg(SOCK_DIAG_BY_FAMILY, inet_diag_msg(dport=DIAG_PORT + 1)),
        "error-enoent": port + nlmsg(NLMSG_ERROR, struct.pack("=i", -ENOENT) + request),
        "error-eperm": port + nlmsg(NLMSG_ERROR, struct.pack("=i", -EPERM) + request),
        "done-only": port + nlmsg(NLMSG_DONE, struct.pack("=i", 0), flags=NLM_F_MULTI),
        "bad-error-short": port + nlmsg(NLMSG_ERROR, struct.pack("=i", -ENOENT)),
        "bad-diag-short": port + nlmsg(SOCK_DIAG_BY_FAMILY, inet_diag_msg()[:-1]),
        "bad-len-past-end": port + nlmsg(SOCK_DIAG_BY_FAMILY, inet_diag_msg(), length=89),
        "bad-len-below-header": port + nlmsg(SOCK_DIAG_BY_FAMILY, inet_diag_msg(), length=15),
        "bad-header-short": port + accepted[:15],
        "empty": port,
    }


# The stats segment (base/stats_shm.h), little-endian as the writer lays it out
# on the hosts sdpshim runs on: a 440-byte header, then 208-byte slots, then
# 144-byte link records.
STATS_MAGIC = 0x3154415453504453  # "SDPSTAT1"
STATS_VERSION = 6
AF_INET, AF_INET6 = 2, 10
ROLE = dict(NONE=0, CLIENT=1, SERVER=2, LISTENER=3)
PATH = dict(UNDECIDED=0, TCP=1, RDMA=2)


LINK_ROLE = dict(CLIENT=1, SERVER=2)
LINK_STATE = dict(CONNECTING=0, UP=1, FAILED=2, CLOSING=3)


def stats_header(slots, pid=4242, uid=1000, comm=b"redis-server", magic=STATS_MAGIC,
                 version=STATS_VERSION, by_path=(0, 2, 1), bytes_sent=5000, bytes_received=7000,
                 links=1, pin_budget=268435456, pinned=4268032, refusals=3, wakeups=1234):
    by_reason = [0] * 32
    by_reason[REASON["LOOPBACK"]] = 2
    return struct.pack("<QIIiIQ64s3Q32QQQQIIQQQQ", magic, version, slots, pid, uid,
                       1700000000000, comm, *by_path, *by_reason, bytes_sent, bytes_received, 1,
                       links, 0, pin_budget, pinned, refusals, wakeups)


def stats_addr(family=0, port=0, addr=b""):
    return struct.pack("<HH16s", family, port, addr)


def stats_slot(in_use=1, seq=2, fd=7, role=ROLE["CLIENT"], path=PATH["TCP"],
               reason=REASON["LOOPBACK"], local=None, remote=None, sent=5000, received=7000,
               tcp_sent=5000, tcp_received=7000, moved_ms=1700000000009):
    local = local if local is not None else stats_addr(AF_INET, 40000, bytes((127, 0, 0, 1)))
    remote = remote if remote is not None else stats_addr(AF_INET, 6379, bytes((127, 0, 0, 1)))
    head = struct.pack("<IIiBBHBBH", in_use, seq, fd, role, path, reason, 0, 0, 0)
    counters = struct.pack("<Q12Q", 1700000000001, sent, received, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    return (head + local + remote + b"\0" * 4 + counters + struct.pack("<IIII", 32, 32, 1, 0) +
            struct.pack("<QQQ", tcp_sent, tcp_received, moved_ms))


def stats_link(in_use=1, seq=2, role=LINK_ROLE["CLIENT"], state=LINK_STATE["UP"], pad=0,
               pad2=0, local=None, peer=None, streams=3):
    local = local if local is not None else stats_addr(AF_INET, 40001, bytes((10, 0, 0, 1)))
    peer = peer if peer is not None else stats_addr(AF_INET, 6379, bytes((10, 0, 0, 2)))
    head = struct.pack("<IIBBH", in_use, seq, role, state, pad)
    tail = struct.pack("<IQIIQIIQQQQQQQ", pad2, 1700000000002, streams, 255, 1 << 20, 64, 5,
                       1000, 999, 123456, 654321, 9, 500, 2)
    return head + local + peer + tail


def stats_seeds():
    v6 = stats_addr(AF_INET6, 443, bytes.fromhex("fe800000000000000000000000000001"))
    rdma = stats_slot(fd=9, role=ROLE["SERVER"], path=PATH["RDMA"], reason=REASON["NONE"],
                      local=v6, remote=v6)
    listener = stats_slot(fd=3, role=ROLE["LISTENER"], remote=stats_addr())
    free_slot = bytes(208)
    free_link = bytes(144)
    assert len(stats_header(1)) == 440 and len(stats_slot()) == 208 and len(stats_link()) == 144
    return {
        "one-free-slot": stats_header(1) + free_slot + free_link,
        "client-rdma-listener-free": stats_header(4) + stats_slot() + rdma + listener + free_slot +
                                     free_link,
        "hostile-comm": stats_header(1, comm=b'a"b\\c\n\x7f\xff' + b"x" * 56) + stats_slot() +
                        free_link,
        "slot-being-written": stats_header(2) + stats_slot(seq=3) + stats_slot(in_use=2) +
                              free_link,
        "slot-bad-fields": stats_header(3) + stats_slot(reason=0xffff) +
                           stats_slot(path=7) + stats_slot(local=stats_addr(1, 1)) + free_link,
        "longer-than-its-slots": stats_header(1) + stats_slot() + free_link + b"trailing",
        "links-client-server-v6": stats_header(1, links=3) + stats_slot() + stats_link() +
                                  stats_link(role=LINK_ROLE["SERVER"], local=v6, peer=v6) +
                                  free_link,
        "links-bad-fields": stats_header(1, links=6) + free_slot + stats_link(role=3) +
                            stats_link(state=4) + stats_link(pad=1) + stats_link(pad2=1) +
                            stats_link(peer=stats_addr(1, 1)) + stats_link(seq=5),
        "links-being-set-up": stats_header(1, links=2) + free_slot + stats_link(in_use=2) +
                              stats_link(),
        # near-valid: one rule broken
        "bad-magic": stats_header(1, magic=STATS_MAGIC ^ 1) + stats_slot() + free_link,
        "bad-version-1": stats_header(1, version=1) + stats_slot() + free_link,
        "bad-slots-0": stats_header(0) + free_link,
        "bad-slots-past-end": stats_header(3) + stats_slot() + stats_slot(),
        "bad-slots-huge": stats_header(0xffffffff) + stats_slot() + free_link,
        "bad-pid-0": stats_header(1, pid=0) + stats_slot() + free_link,
        "bad-links-0": stats_header(1, links=0) + stats_slot(),
        "bad-links-past-end": stats_header(1, links=2) + stats_slot() + stats_link(),
        "bad-links-huge": stats_header(1, links=0x10001) + stats_slot() + free_link,
        "bad-short": stats_header(1)[:-1],
        "garbage": b"junk\n",
    }


def uevent_seeds():
    def msg(*fields):
        return b"".join(f.encode() + b"\0" for f in fields)
    uverbs = "/devices/virtual/infiniband_verbs/uverbs0"
    return {
        "uverbs-remove": msg("remove@" + uverbs, "ACTION=remove", "DEVPATH=" + uverbs,
                             "SUBSYSTEM=infiniband_verbs", "MAJOR=231", "MINOR=192",
                             "DEVNAME=infiniband/uverbs0", "SEQNUM=4021"),
        "ibdev-remove": msg("remove@/devices/virtual/infiniband/rxe0", "ACTION=remove",
                            "SUBSYSTEM=infiniband", "NAME=rxe0"),
        "uverbs-add": msg("add@" + uverbs, "ACTION=add", "SUBSYSTEM=infiniband_verbs"),
        "net-remove": msg("remove@/devices/virtual/net/rxenet0", "ACTION=remove",
                          "SUBSYSTEM=net", "INTERFACE=rxenet0"),
        "no-last-nul": b"ACTION=remove\0SUBSYSTEM=infiniband",
        "empty-fields": b"\0\0ACTION=remove\0\0SUBSYSTEM=infiniband\0\0",
    }


LIBFUZZER_NAME = re.compile(r"^[0-9a-f]{40}$")  # how libFuzzer names what it adds
HANDOFF_MAGIC = 0x5344484F  # "SDHO"
HANDOFF_OWNER = 4242


def handoff_input(kind, holder=0, via=0, sock=0, ident=0, owner=HANDOFF_OWNER, magic=HANDOFF_MAGIC,
                  pad=0, truncated=False, self_pid=HANDOFF_OWNER, cut=None):
    """fuzz_handoff: flags byte, the owner's pid, then the request (native order)."""
    req = struct.pack("=IIIIIIQQ", magic, owner, kind, holder, via, pad, sock, ident)
    if cut is not None:
        req = req[:cut]
    return struct.pack("=BI", 1 if truncated else 0, self_pid) + req


def handoff_seeds():
    sock = 0x7F00DEADBEEF
    return {
        "nop": handoff_input(0),
        "claim": handoff_input(1, sock=sock, ident=7),
        "holder": handoff_input(2, holder=5000, via=4243),
        "claim_id0": handoff_input(1, sock=sock, ident=0),
        "holder_self": handoff_input(2, holder=HANDOFF_OWNER, via=4243),
        "holder_negative": handoff_input(2, holder=0x80000001, via=4243),
        "other_owner": handoff_input(1, sock=sock, ident=7, owner=4243),
        "bad_magic": handoff_input(0, magic=0x5344484E),
        "pad": handoff_input(0, pad=1),
        "kind3": handoff_input(3),
        "truncated": handoff_input(1, sock=sock, ident=7, truncated=True),
        "short": handoff_input(1, sock=sock, ident=7, cut=39),
        "long": handoff_input(1, sock=sock, ident=7) + b"\0",
    }


CORPORA = {
    "fuzz_handoff": handoff_seeds,
    "fuzz_bsdh": bsdh_seeds,
    "fuzz_hello": hello_seeds,
    "fuzz_hello_ack": hello_ack_seeds,
    "fuzz_link": link_seeds,
    "fuzz_reject": reject_seeds,
    "fuzz_switch": switch_seeds,
    "fuzz_switch_reader": switch_reader_seeds,
    "fuzz_bind": bind_seeds,
    "fuzz_rules": rules_seeds,
    "fuzz_stats": stats_seeds,
    "fuzz_tcp_diag": tcp_diag_seeds,
    "fuzz_uevent": uevent_seeds,
}


def main():
    for harness, make in sorted(CORPORA.items()):
        d = os.path.join(HERE, "corpus", harness)
        os.makedirs(d, exist_ok=True)
        for old in os.listdir(d):
            if not LIBFUZZER_NAME.match(old):  # inputs a fuzzing run kept stay
                os.unlink(os.path.join(d, old))
        seeds = make()
        for name, data in sorted(seeds.items()):
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
        print("%s: %d seeds" % (os.path.relpath(d, REPO), len(seeds)))
    for src in sorted(os.listdir(HERE)):
        if src.startswith("fuzz_") and src.endswith(".c"):
            d = os.path.join(HERE, "regressions", src[:-2])
            os.makedirs(d, exist_ok=True)
            keep = os.path.join(d, ".gitkeep")
            if not os.path.exists(keep):
                open(keep, "w").close()


if __name__ == "__main__":
    main()
