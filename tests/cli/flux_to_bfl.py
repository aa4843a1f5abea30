#!/usr/bin/env python3
"""flux_to_bfl.py DIFFUSERS_FILE OUT: a diffusers FluxTransformer2DModel
safetensors file as Black Forest Labs' single file (flux1-dev.safetensors
names: q, k, v stacked by rows into qkv and linear1, the final modulation's
halves swapped), rounded to BF16 (nearest even), as the published
checkpoints are and as the quantized golden files were made from.

Plain Python (no NumPy): the tests write the source the quantizer reads,
the expected bytes are ggml's, in the golden files."""
import json
import re
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, h in head.items():
        if name == "__metadata__":
            continue
        assert h["dtype"] == "F32", (name, h["dtype"])
        a, b = h["data_offsets"]
        out[name] = (h["shape"], data[a:b])
    return out


def bf16(raw):
    words = struct.unpack("<%dI" % (len(raw) // 4), raw)
    return struct.pack("<%dH" % len(words), *(((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF for u in words))


def main():
    src = read(sys.argv[1])
    out = {}

    def put(name, *parts):
        shape = list(src[parts[0]][0])
        shape[0] = sum(src[p][0][0] for p in parts)
        out[name] = (shape, b"".join(src[p][1] for p in parts))

    def both(bfl, diff):
        for kind in ("weight", "bias"):
            if diff + "." + kind in src:
                put(bfl + "." + kind, diff + "." + kind)

    for a, b in (("time_in", "timestep_embedder"), ("vector_in", "text_embedder"), ("guidance_in", "guidance_embedder")):
        both(a + ".in_layer", "time_text_embed.%s.linear_1" % b)
        both(a + ".out_layer", "time_text_embed.%s.linear_2" % b)
    both("txt_in", "context_embedder")
    both("img_in", "x_embedder")
    both("final_layer.linear", "proj_out")
    for kind in ("weight", "bias"):
        shape, raw = src["norm_out.linear." + kind]
        half = len(raw) // 2
        out["final_layer.adaLN_modulation.1." + kind] = (shape, raw[half:] + raw[:half])
    blocks = sorted({int(m.group(1)) for m in (re.match(r"transformer_blocks\.(\d+)\.", k) for k in src) if m})
    for i in blocks:
        d, p = "double_blocks.%d." % i, "transformer_blocks.%d." % i
        both(d + "img_mod.lin", p + "norm1.linear")
        both(d + "txt_mod.lin", p + "norm1_context.linear")
        for kind in ("weight", "bias"):
            put(d + "img_attn.qkv." + kind, *(p + "attn.to_%s.%s" % (x, kind) for x in "qkv"))
            put(d + "txt_attn.qkv." + kind, *(p + "attn.add_%s_proj.%s" % (x, kind) for x in "qkv"))
        put(d + "img_attn.norm.query_norm.scale", p + "attn.norm_q.weight")
        put(d + "img_attn.norm.key_norm.scale", p + "attn.norm_k.weight")
        put(d + "txt_attn.norm.query_norm.scale", p + "attn.norm_added_q.weight")
        put(d + "txt_attn.norm.key_norm.scale", p + "attn.norm_added_k.weight")
        both(d + "img_attn.proj", p + "attn.to_out.0")
        both(d + "txt_attn.proj", p + "attn.to_add_out")
        both(d + "img_mlp.0", p + "ff.net.0.proj")
        both(d + "img_mlp.2", p + "ff.net.2")
        both(d + "txt_mlp.0", p + "ff_context.net.0.proj")
        both(d + "txt_mlp.2", p + "ff_context.net.2")
    singles = sorted({int(m.group(1)) for m in (re.match(r"single_transformer_blocks\.(\d+)\.", k) for k in src) if m})
    for i in singles:
        d, p = "single_blocks.%d." % i, "single_transformer_blocks.%d." % i
        both(d + "modulation.lin", p + "norm.linear")
        for kind in ("weight", "bias"):
            put(d + "linear1." + kind, *(p + x + "." + kind for x in ("attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp")))
        both(d + "linear2", p + "proj_out")
        put(d + "norm.query_norm.scale", p + "attn.norm_q.weight")
        put(d + "norm.key_norm.scale", p + "attn.norm_k.weight")
    head, blobs, off = {}, [], 0
    for name in sorted(out):
        shape, raw = out[name]
        raw = bf16(raw)
        head[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(sys.argv[2], "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    print("%d tensors" % len(out))


main()
