"""checked: the byte patterns the VM suite's Python peers send and compare.

pattern(tag, seed, size): SIZE bytes of a SHA-256 chain that starts at
"TAG SEED", so each connection's bytes are its own and any loss, duplicate,
reorder or stranger's byte shows in a comparison."""
import hashlib


def pattern(tag, seed, size):
    out, block = bytearray(), hashlib.sha256(b"%s %d" % (tag.encode(), seed)).digest()
    while len(out) < size:
        out += block
        block = hashlib.sha256(block).digest()
    return bytes(out[:size])
