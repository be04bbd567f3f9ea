#!/usr/bin/env python3
"""Write the seed corpora of the libFuzzer harnesses (tests/fuzz/corpus/<name>/).

    python3 tests/fuzz/make_seeds.py            # rewrite every corpus
    python3 tests/fuzz/make_seeds.py npy select # only these

The seeds are committed; this script is how they were made (deterministic:
the same script writes the same files). Each harness documents its input
encoding at the top of its .c file; the writers below follow it. Values are
little-endian; fz_i64_edge() reads one byte (< 0x80: an index into its table
of edge values; >= 0x80: eight raw bytes follow).
"""
import io
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def u8(v): return struct.pack("<B", v & 0xFF)
def u16(v): return struct.pack("<H", v & 0xFFFF)
def u32(v): return struct.pack("<I", v & 0xFFFFFFFF)
def u64(v): return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


# fz_i64_edge's table (tests/fuzz/fuzz_common.c, edge_i64), first entries.
EDGE = [0, 1, -1, 2, 3, 4, 7, 8, 16, 31, 32, 63, 64, 100, 255, 256, 1000, 1024, 1025]


def edge(v):
    """fz_i64_edge encoding of v: a table index when v is in the table's head."""
    if v in EDGE:
        return u8(EDGE.index(v))
    return u8(0x80) + u64(v)


def write(name, files):
    d = os.path.join(HERE, "corpus", name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        # finding-* are inputs that once found a bug: kept as regression seeds
        if not f.startswith("finding-"):
            os.remove(os.path.join(d, f))
    for i, data in enumerate(files):
        with open(os.path.join(d, "seed-%03d" % i), "wb") as fh:
            fh.write(data)
    print("%s: %d seeds" % (name, len(files)))


# ---- npy: real .npy files ---------------------------------------------------

def npy_seeds():
    import numpy as np
    fmt = np.lib.format
    out = []

    def save(a, version=None):
        buf = io.BytesIO()
        if version is None:
            np.save(buf, a)
        else:
            fmt.write_array(buf, a, version=version)
        out.append(buf.getvalue())

    rng = np.random.default_rng(0)
    save(rng.standard_normal((3, 4)).astype(np.float32))
    save(rng.standard_normal((5,)).astype(np.float16))
    save(np.arange(6, dtype=np.int64).reshape(2, 3))
    save(np.array([0, 1, 2, 1], dtype=np.uint8))
    save(np.array([True, False]))
    save(np.array(3.5))                                   # rank 0
    save(np.zeros((0, 4), dtype=np.float32))              # empty
    save(np.arange(4, dtype=np.int32), version=(2, 0))
    save(np.arange(3, dtype=np.uint16), version=(3, 0))
    save(np.ones((1, 1, 1, 1, 1, 1, 1, 2), dtype=np.int8))  # rank 8
    save(np.asfortranarray(np.ones((2, 3), dtype=np.float32)))  # refused
    save(np.arange(3, dtype=">i4"))                       # big-endian: refused
    save(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i2")]))  # structured: refused
    save(np.arange(2, dtype=np.float64))
    save(np.arange(2, dtype=np.uint64))
    # hand-made headers: Python 2 'L' suffixes, odd spacing, truncation
    def raw(header, data=b"", major=1):
        h = header.encode()
        if major == 1:
            return b"\x93NUMPY\x01\x00" + u16(len(h)) + h + data
        return b"\x93NUMPY" + bytes([major, 0]) + u32(len(h)) + h + data
    out.append(raw("{'descr':'<f4','fortran_order':False,'shape':(2L,)}\n", b"\0" * 8))
    out.append(raw("{ 'shape' : ( 1 , 2 , ) , 'fortran_order' : False , 'descr' : '|u1' }",
                   b"\1\2"))
    out.append(raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 7))
    out.append(raw("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"))
    out.append(raw("{'descr': '=f4', 'fortran_order': False, 'shape': (), }", b"\0" * 4, major=2))
    out.append(b"\x93NUMPY\x01\x00")
    return out


# ---- params: programs of parameter operations (fuzz_params.c) ---------------

NSPECS = 15  # fuzz_params.c specs[]


def params_seeds():
    out = []
    # num_layers 32, batch 1, then set every parameter of its own kind with
    # each value mode (min, max, min - 1, max + 1, default, in range)
    kinds = [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2]  # specs[i].kind
    doubles = {8, 11}
    for mode in range(6):
        p = edge(32) + edge(1)
        for i in range(NSPECS):
            k = kinds[i]
            if i in doubles:
                p += u8(3 + k) + u8(i) + u8(mode % 5)
            else:
                p += u8(k) + u8(i) + u8(mode) + (u16(7) if mode == 5 else b"")
        out.append(p)
    # gets of the wrong type / kind, bounds with every struct_size, names
    p = edge(8) + edge(2)
    for i in range(NSPECS):
        p += u8(6 + (i % 3)) + u8(i) + u8(i & 1)
        p += u8(10) + u8(i) + u8(i % 7)
    out.append(p)
    # keep counts over the ratio and keep budgets, resets
    p = edge(32) + edge(1)
    for n in (0, 1, 2, 10, 63):
        p += u8(11) + u8(n)
    p += u8(11) + u8(0x80) + u8(0x80) + u64(2**62)          # huge n at ratio 0.1
    p += u8(4) + u8(8) + u8(1) + u8(11) + u8(0x80) + u8(0x80) + u64(2**63 - 1)  # ratio 1
    p += u8(1) + u8(7) + u8(0x60) + u8(4) + u8(11) + u8(2)          # keep 3
    for kind in range(3):
        for what in range(3):
            p += u8(9) + u8(kind) + u8(what)
    out.append(p)
    # relevance creation, probe layers, is_probe, schedule
    p = edge(16) + edge(3)
    p += u8(16) + u8(3) + u8(1) + u8(5) + u8(15)
    p += u8(17) + u8(1) + u8(18) + u8(1) + u8(6)
    p += u8(2) + u8(12) + u8(1) + u8(18) + u8(0) + u8(3)
    p += u8(12) + edge(-1) + edge(1) + u8(12) + edge(2**20 + 1) + edge(1)
    p += u8(9) + u8(2) + u8(1) + u8(17) + u8(0)
    out.append(p)
    # contexts, backend and device queries, NULL handles
    p = edge(1) + edge(1)
    for name in range(10):
        p += u8(13) + u8(name) + u8(1) + u8(1)
    for sz in range(0x40, 0x44):
        p += u8(14) + u8(0) + u8(sz) + u8(1)
        p += u8(14) + u8(1) + u8(sz) + u8(0) + u8(1)
    p += u8(14) + u8(0) + u8(0) + u8(1)
    p += u8(15) + u8(3)
    out.append(p)
    return out


def tail(rng, n):
    """n deterministic pseudo-random bytes (layouts, values, patches)."""
    return bytes(rng.getrandbits(8) for _ in range(n))


# ---- dlpack: one call per input (fuzz_dlpack.c) ------------------------------

def dlpack_seeds():
    rng = random.Random(12)
    out = []
    # op, mask (bit i: argument i arbitrary), then the op's sizes / config;
    # zeros give the simplest valid layout, random tails vary it
    for op in range(9):
        for mask in (0x00, 0x01, 0x02, 0x04, 0x3F):
            head = u8(op) + u8(mask)
            out.append(head + bytes([7, 3, op % 3, 1, op * 5, op, 0x03]))
            out.append(head + tail(rng, 48))
    # select with each objective / pivot / order, valid arrays
    for a in range(0, 96, 7):
        out.append(u8(0) + u8(0) + bytes([11, 5, a % 3, 1 + a % 2, a, a // 3, 2]) + tail(rng, 64))
    # batch with cls, keep and out_offsets
    out.append(u8(1) + u8(0) + bytes([3, 2, 3, 4, 5, 4, 1, 7]) + bytes([0, 0, 1]) + tail(rng, 96))
    # arbitrary tensors with huge strides / offsets: every knob set
    for op in (0, 1, 3, 4, 5, 8):
        out.append(u8(op) + u8(0xFF) + bytes([5, 3, 0, 0, 0, 0, 2]) +
                   (u8(0xFF) + u8(0xB5) + u8(0xC1) + u8(0xC9)) * 8 + tail(rng, 32))
    return out


# ---- select: stage 1 end to end (fuzz_select.c) ------------------------------

def select_seeds():
    rng = random.Random(1)
    out = []
    for objective in range(3):
        for pivot in range(6):
            order = (objective + pivot) % 3
            a = objective | (pivot << 2) | (order << 5)
            for flags in (0x00, 0x02, 0x06, 0x12, 0x72, 0x80, 0x01):
                n, d = rng.randrange(64), rng.randrange(32)
                head = bytes([rng.randrange(3), n, d, flags, rng.randrange(256),
                              rng.randrange(256)])
                cfg = bytes([a, rng.choice([0, 3, 6, 7]), rng.choice([0, 5, 0x80, 0xF1])])
                out.append(head + cfg + tail(rng, 120))
    return out


# ---- relevance: stage 2 end to end (fuzz_relevance.c) --------------------------

def relevance_seeds():
    rng = random.Random(2)
    out = []
    for L in (1, 4, 8):
        for B in (1, 2, 3):
            for types_mode in (0, 1, 2):
                head = bytes([L - 1, B - 1, rng.randrange(256)])
                params = bytes([0x02, 0x00, 0x00])          # schedule UNTIL_DROP, LIST; no probes
                types = bytes([types_mode, 15, 2, 6]) + tail(rng, 40)
                ops = b""
                for _ in range(6):
                    ops += u8(rng.choice([0, 3, 0, 3, 6, 7, 8, 9])) + tail(rng, 24)
                out.append(head + params + types + ops)
    return out


WRITERS = {
    "npy": npy_seeds,
    "params": params_seeds,
    "dlpack": dlpack_seeds,
    "select": select_seeds,
    "relevance": relevance_seeds,
}


def main():
    names = sys.argv[1:] or list(WRITERS)
    for name in names:
        write(name, WRITERS[name]())


if __name__ == "__main__":
    main()
