#!/usr/bin/env python3
"""paper_files.py DIR: the files people download for FLUX.1-dev on small
machines, as headers only: the tensors' names, types and shapes of
flux1-dev-Q8_0.gguf (ComfyUI-GGUF's choices), t5xxl_fp8_e4m3fn.safetensors
and clip_l.safetensors, their data sparse (the files have their real sizes
and hold no bytes on disk). `pdit plan` reads headers only: this is how
bench/quant_paper.sh plans them without downloading 20 GB.
"""
import json
import os
import struct
import sys

D, MLP, DOUBLE, SINGLE = 3072, 12288, 19, 38


def flux_tensors():
    t = []

    def lin(name, o, i, bias=True):
        t.append((name + ".weight", [o, i]))
        if bias:
            t.append((name + ".bias", [o]))

    lin("img_in", D, 64)
    lin("txt_in", D, 4096)
    for e, n in (("time_in", 256), ("vector_in", 768), ("guidance_in", 256)):
        lin(e + ".in_layer", D, n)
        lin(e + ".out_layer", D, D)
    for b in range(DOUBLE):
        p = "double_blocks.%d." % b
        for s in ("img", "txt"):
            lin(p + s + "_mod.lin", 6 * D, D)
            lin(p + s + "_attn.qkv", 3 * D, D)
            lin(p + s + "_attn.proj", D, D)
            t.append((p + s + "_attn.norm.query_norm.scale", [128]))
            t.append((p + s + "_attn.norm.key_norm.scale", [128]))
            lin(p + s + "_mlp.0", MLP, D)
            lin(p + s + "_mlp.2", D, MLP)
    for b in range(SINGLE):
        p = "single_blocks.%d." % b
        lin(p + "linear1", 3 * D + MLP, D)
        lin(p + "linear2", D, D + MLP)
        lin(p + "modulation.lin", 3 * D, D)
        t.append((p + "norm.query_norm.scale", [128]))
        t.append((p + "norm.key_norm.scale", [128]))
    lin("final_layer.adaLN_modulation.1", 2 * D, D)
    lin("final_layer.linear", 64, D)
    return sorted(t)


KEEP = ("txt_in.", "img_in.", "time_in.", "vector_in.", "guidance_in.", "final_layer.")
F32, BF16, Q8_0 = 0, 30, 8
BYTES = {F32: (1, 4), BF16: (1, 2), Q8_0: (32, 34)}


def gguf(path):
    def s(x):
        x = x.encode()
        return struct.pack("<Q", len(x)) + x

    tensors, off, infos = flux_tensors(), 0, []
    for name, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        if len(shape) == 1 or n <= 1024:
            ty = F32
        elif name.endswith("weight") and len(shape) == 2 and not name.startswith(KEEP):
            ty = Q8_0
        else:
            ty = BF16
        bs, bb = BYTES[ty]
        nbytes = n // bs * bb
        infos.append(s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape))
                     + struct.pack("<IQ", ty, off))
        off += (nbytes + 31) // 32 * 32
    kv = (s("general.architecture") + struct.pack("<I", 8) + s("flux") +
          s("general.quantization_version") + struct.pack("<II", 4, 2) + s("general.file_type") + struct.pack("<II", 4, 7))
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 3) + kv + b"".join(infos)
    head += b"\0" * ((32 - len(head) % 32) % 32)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + off)


def safetensors(path, tensors, meta=None):
    head, off = {}, 0
    for name, dtype, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        nbytes = n * {"F8_E4M3": 1, "F16": 2, "BF16": 2, "F32": 4}[dtype]
        head[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + nbytes]}
        off += nbytes
    if meta:
        head["__metadata__"] = meta
    h = json.dumps(head).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + off)


def t5_fp8():
    t = [("shared.weight", "F8_E4M3", [32128, 4096]), ("encoder.final_layer_norm.weight", "BF16", [4096])]
    for b in range(24):
        p = "encoder.block.%d." % b
        for x in "qkvo":
            t.append((p + "layer.0.SelfAttention.%s.weight" % x, "F8_E4M3", [4096, 4096]))
        if b == 0:
            t.append((p + "layer.0.SelfAttention.relative_attention_bias.weight", "F8_E4M3", [32, 64]))
        t.append((p + "layer.0.layer_norm.weight", "BF16", [4096]))
        t.append((p + "layer.1.DenseReluDense.wi_0.weight", "F8_E4M3", [10240, 4096]))
        t.append((p + "layer.1.DenseReluDense.wi_1.weight", "F8_E4M3", [10240, 4096]))
        t.append((p + "layer.1.DenseReluDense.wo.weight", "F8_E4M3", [4096, 10240]))
        t.append((p + "layer.1.layer_norm.weight", "BF16", [4096]))
    return t


def clip_l():
    p, t = "text_model.", []
    t.append((p + "embeddings.token_embedding.weight", "F16", [49408, 768]))
    t.append((p + "embeddings.position_embedding.weight", "F16", [77, 768]))
    for b in range(12):
        q = p + "encoder.layers.%d." % b
        for x in ("q_proj", "k_proj", "v_proj", "out_proj"):
            t += [(q + "self_attn.%s.weight" % x, "F16", [768, 768]), (q + "self_attn.%s.bias" % x, "F16", [768])]
        for x in ("layer_norm1", "layer_norm2"):
            t += [(q + x + ".weight", "F16", [768]), (q + x + ".bias", "F16", [768])]
        t += [(q + "mlp.fc1.weight", "F16", [3072, 768]), (q + "mlp.fc1.bias", "F16", [3072]),
              (q + "mlp.fc2.weight", "F16", [768, 3072]), (q + "mlp.fc2.bias", "F16", [768])]
    t += [(p + "final_layer_norm.weight", "F16", [768]), (p + "final_layer_norm.bias", "F16", [768])]
    return t


out = sys.argv[1]
os.makedirs(out, exist_ok=True)
gguf(os.path.join(out, "flux1-dev-Q8_0.gguf"))
safetensors(os.path.join(out, "t5xxl_fp8_e4m3fn.safetensors"), t5_fp8())
safetensors(os.path.join(out, "clip_l.safetensors"), clip_l())
