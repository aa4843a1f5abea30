#!/usr/bin/env python3
"""Grow a GGUF file to a model's real depth and vocabulary for memory
measurements: the tensors of PATTERN's block 0 repeated as blocks 0..N-1
(their bytes copied: the same weights in every block, which a product's
time and a process's memory do not see), the other blocks dropped, a u32
metadata KEY set to N, and with --rows NAME:R a tensor's rows repeated up
to R (token_embd to a real vocabulary). Standard library only.

  bench/gguf_grow.py IN OUT --pattern 'transformer_blocks.{}.' --blocks 60
  bench/gguf_grow.py IN OUT --pattern 'blk.{}.' --blocks 28 --key qwen2vl.block_count \
      --rows token_embd.weight:152064
"""
import argparse
import struct
import sys

# ggml's block sizes and bytes per block (types the writers here produce)
BLOCKS = {0: (1, 4), 1: (1, 2), 30: (1, 2), 8: (32, 34), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
          12: (256, 144), 13: (256, 176), 14: (256, 210)}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--pattern", required=True)
    ap.add_argument("--blocks", type=int, required=True)
    ap.add_argument("--key")
    ap.add_argument("--rows", action="append", default=[])
    a = ap.parse_args()
    f = open(a.src, "rb")
    raw = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, raw, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("Q")
        s = raw[pos:pos + n].decode()
        pos += n
        return s

    def value(t):
        nonlocal pos
        start = pos
        if t == 8:
            string()
        elif t == 9:
            et, n = take("I"), take("Q")
            for _ in range(n):
                value(et)
        else:
            pos += SCALAR[t]
        return raw[start:pos]

    if raw[:4] != b"GGUF":
        sys.exit("%s: not a GGUF file" % a.src)
    pos = 4
    version, n_t, n_kv = take("I"), take("Q"), take("Q")
    kvs = []
    align = 32
    for _ in range(n_kv):
        k = string()
        t = take("I")
        v = value(t)
        if k == a.key:
            if t != 4:
                sys.exit("%s: %s is not a u32" % (a.src, k))
            v = struct.pack("<I", a.blocks)
        if k == "general.alignment":
            align = struct.unpack("<I", v)[0]
        kvs.append((k, t, v))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        dims = [take("Q") for _ in range(nd)]
        t, off = take("I"), take("Q")
        infos.append((name, dims, t, off))
    data0 = (pos + align - 1) // align * align
    rows = dict((r.split(":")[0], int(r.split(":")[1])) for r in a.rows)
    first = a.pattern.format(0)
    out = []  # (name, dims, type, source bytes, repeat)
    for name, dims, t, off in infos:
        bs, bb = BLOCKS[t]
        n = 1
        for d in dims:
            n *= d
        nbytes = n // bs * bb
        src = (data0 + off, nbytes)
        if name.startswith(first):
            for b in range(a.blocks):
                out.append((a.pattern.format(b) + name[len(first):], dims, t, src, 1))
        elif any(name.startswith(a.pattern.format(b)) for b in range(1, 4096)):
            continue
        elif name in rows:
            # ggml's dims: [columns, rows]
            reps = rows[name] // dims[1]
            out.append((name, [dims[0], dims[1] * reps], t, src, reps))
        else:
            out.append((name, dims, t, src, 1))
    with open(a.dst, "wb") as g:
        g.write(b"GGUF" + struct.pack("<IQQ", version, len(out), len(kvs)))
        for k, t, v in kvs:
            kb = k.encode()
            g.write(struct.pack("<Q", len(kb)) + kb + struct.pack("<I", t) + v)
        off = 0
        for name, dims, t, (s, nb), reps in out:
            nb_out = nb * reps
            nm = name.encode()
            g.write(struct.pack("<Q", len(nm)) + nm + struct.pack("<I", len(dims)))
            g.write(b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", t, off))
            off += (nb_out + align - 1) // align * align
        g.write(b"\0" * ((-g.tell()) % align))
        for name, dims, t, (s, nb), reps in out:
            chunk = raw[s:s + nb]
            for _ in range(reps):
                g.write(chunk)
            g.write(b"\0" * ((-(nb * reps)) % align))
    print("%s: %d tensors (%d blocks of %s)" % (a.dst, len(out), a.blocks, a.pattern.format("N")))


if __name__ == "__main__":
    main()
