#!/usr/bin/env python3
"""Grow a GGUF file to a model's real depth and vocabulary for memory
measurements: the tensors of PATTERN's block 0 repeated as blocks 0..N-1
(their bytes copied: the same weights in every block, which a product's
time and a process's memory do not see), the other blocks dropped, a u32
metadata KEY set to N, and with --rows NAME:R a tensor's rows repeated up
to R (token_embd to a real vocabulary). With --take OTHER:PREFIX the
tensors whose names start with PREFIX come from OTHER, a GGUF of the same
tensors in other types (a file of mixed types, as llama.cpp's Q4_K_S mixes
Q4_K, Q5_K and Q6_K, for the tests). Standard library only.

  bench/gguf_grow.py IN OUT --pattern 'transformer_blocks.{}.' --blocks 60
  bench/gguf_grow.py IN OUT --pattern 'blk.{}.' --blocks 28 --key qwen2vl.block_count \\
      --rows token_embd.weight:152064
  bench/gguf_grow.py IN OUT --take other.gguf:single_blocks.
"""
import argparse
import struct
import sys

# ggml's block sizes and bytes per block (types the writers here produce)
BLOCKS = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
          12: (256, 144), 13: (256, 176), 14: (256, 210)}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class Gguf:
    """A GGUF file read whole: its version, metadata (key, type, raw value
    bytes), alignment and tensors (name -> (dims, type, data, bytes) where
    data is the tensor's offset in raw)."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.raw = f.read()
        self.pos = 0
        if self.raw[:4] != b"GGUF":
            sys.exit("%s: not a GGUF file" % path)
        self.pos = 4
        self.version, n_t, n_kv = self.take("I"), self.take("Q"), self.take("Q")
        self.kvs = []
        self.align = 32
        for _ in range(n_kv):
            k = self.string()
            t = self.take("I")
            v = self.value(t)
            if k == "general.alignment":
                self.align = struct.unpack("<I", v)[0]
            self.kvs.append((k, t, v))
        infos = []
        for _ in range(n_t):
            name = self.string()
            nd = self.take("I")
            dims = [self.take("Q") for _ in range(nd)]
            t, off = self.take("I"), self.take("Q")
            infos.append((name, dims, t, off))
        data0 = (self.pos + self.align - 1) // self.align * self.align
        self.tensors = {}
        self.names = []
        for name, dims, t, off in infos:
            if t not in BLOCKS:
                sys.exit("%s: %s: ggml type %d not known here" % (path, name, t))
            bs, bb = BLOCKS[t]
            n = 1
            for d in dims:
                n *= d
            self.tensors[name] = (dims, t, data0 + off, n // bs * bb)
            self.names.append(name)

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.raw, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        s = self.raw[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def value(self, t):
        start = self.pos
        if t == 8:
            self.string()
        elif t == 9:
            et, n = self.take("I"), self.take("Q")
            for _ in range(n):
                self.value(et)
        else:
            self.pos += SCALAR[t]
        return self.raw[start:self.pos]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--pattern")
    ap.add_argument("--blocks", type=int)
    ap.add_argument("--key")
    ap.add_argument("--rows", action="append", default=[])
    ap.add_argument("--take", action="append", default=[])
    a = ap.parse_args()
    if (a.pattern is None) != (a.blocks is None) or (a.key and a.blocks is None):
        sys.exit("--pattern and --blocks go together (and --key needs them)")
    g = Gguf(a.src)
    kvs = []
    for k, t, v in g.kvs:
        if a.key and k == a.key:
            if t != 4:
                sys.exit("%s: %s is not a u32" % (a.src, k))
            v = struct.pack("<I", a.blocks)
        kvs.append((k, t, v))
    takes = []
    for spec in a.take:
        path, _, prefix = spec.rpartition(":")
        if not path or not prefix:
            sys.exit("--take %s: OTHER:PREFIX expected" % spec)
        takes.append((Gguf(path), prefix))
    rows = dict((r.split(":")[0], int(r.split(":")[1])) for r in a.rows)
    out = []  # (name, dims, type, file, offset, bytes, repeat)
    taken = set()
    for name in g.names:
        first = a.pattern.format(0) if a.pattern is not None else None
        if first and not name.startswith(first) and any(name.startswith(a.pattern.format(b)) for b in range(1, 4096)):
            continue
        dims, t, off, nbytes = g.tensors[name]
        src = g
        for other, prefix in takes:
            if name.startswith(prefix):
                if name not in other.tensors or other.tensors[name][0] != dims:
                    sys.exit("%s: no %s of dims %s" % (other.path, name, dims))
                src = other
                dims, t, off, nbytes = other.tensors[name]
                taken.add(prefix)
        if first and name.startswith(first):
            for b in range(a.blocks):
                out.append((a.pattern.format(b) + name[len(first):], dims, t, src, off, nbytes, 1))
            continue
        if name in rows:
            # ggml's dims: [columns, rows]
            reps = rows[name] // dims[1]
            out.append((name, [dims[0], dims[1] * reps], t, src, off, nbytes, reps))
        else:
            out.append((name, dims, t, src, off, nbytes, 1))
    for other, prefix in takes:
        if prefix not in taken:
            sys.exit("--take %s:%s: no tensor of %s starts with it" % (other.path, prefix, a.src))
    align = g.align
    with open(a.dst, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", g.version, len(out), len(kvs)))
        for k, t, v in kvs:
            kb = k.encode()
            f.write(struct.pack("<Q", len(kb)) + kb + struct.pack("<I", t) + v)
        pos = 0
        for name, dims, t, src, off, nbytes, reps in out:
            nm = name.encode()
            f.write(struct.pack("<Q", len(nm)) + nm + struct.pack("<I", len(dims)))
            f.write(b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", t, pos))
            pos += (nbytes * reps + align - 1) // align * align
        f.write(b"\0" * ((-f.tell()) % align))
        for name, dims, t, src, off, nbytes, reps in out:
            chunk = src.raw[off:off + nbytes]
            for _ in range(reps):
                f.write(chunk)
            f.write(b"\0" * ((-(nbytes * reps)) % align))
    what = " (%d blocks of %s)" % (a.blocks, a.pattern.format("N")) if a.pattern is not None else ""
    print("%s: %d tensors%s" % (a.dst, len(out), what))


if __name__ == "__main__":
    main()
