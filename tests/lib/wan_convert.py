#!/usr/bin/env python3
"""Writes a diffusers Wan2.1 transformer folder in the original layout, for the single-file tests.

The original layout is Wan-AI's `wan/modules/model.py` (WanModel): the names diffusers'
`scripts/convert_wan_to_diffusers.py` renames (TRANSFORMER_KEYS_RENAME_DICT), here undone from the
original side: self_attn/cross_attn with q, k, v, o and norm_q/norm_k; ffn.0 and ffn.2; the
cross-attention's affine norm is norm3 (diffusers' norm2); modulation tables are `blocks.N.modulation`
and `head.modulation`, the output layer `head.head`, the embedders text_embedding.0/2,
time_embedding.0/2 and time_projection.1. Written independently of pdit's loader.

    wan_convert.py DIR OUT.safetensors [--prefix P] [--config-metadata] [--original-config OUT.json]

--prefix: ComfyUI's files carry "model.diffusion_model."; --config-metadata stores the diffusers
config as the "config" metadata entry; --original-config writes the folder's config as Wan-AI's
config.json (class WanModel).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testfiles import load_st, save_st  # noqa: E402

TOP = {
    "condition_embedder.text_embedder.linear_1": "text_embedding.0",
    "condition_embedder.text_embedder.linear_2": "text_embedding.2",
    "condition_embedder.time_embedder.linear_1": "time_embedding.0",
    "condition_embedder.time_embedder.linear_2": "time_embedding.2",
    "condition_embedder.time_proj": "time_projection.1",
    "proj_out": "head.head",
    "patch_embedding": "patch_embedding",
}
BLOCK = {
    "attn1.to_q": "self_attn.q", "attn1.to_k": "self_attn.k", "attn1.to_v": "self_attn.v",
    "attn1.to_out.0": "self_attn.o", "attn1.norm_q": "self_attn.norm_q", "attn1.norm_k": "self_attn.norm_k",
    "attn2.to_q": "cross_attn.q", "attn2.to_k": "cross_attn.k", "attn2.to_v": "cross_attn.v",
    "attn2.to_out.0": "cross_attn.o", "attn2.norm_q": "cross_attn.norm_q", "attn2.norm_k": "cross_attn.norm_k",
    "norm2": "norm3", "ffn.net.0.proj": "ffn.0", "ffn.net.2": "ffn.2",
}


def original_name(k):
    if k == "scale_shift_table":
        return "head.modulation"
    m = re.fullmatch(r"blocks\.(\d+)\.(.+)", k)
    if m:
        i, rest = m.groups()
        if rest == "scale_shift_table":
            return "blocks.%s.modulation" % i
        mod, ext = rest.rsplit(".", 1)
        return "blocks.%s.%s.%s" % (i, BLOCK[mod], ext)
    mod, ext = k.rsplit(".", 1)
    return "%s.%s" % (TOP[mod], ext)


def main():
    src, out = sys.argv[1], sys.argv[2]
    prefix = sys.argv[sys.argv.index("--prefix") + 1] if "--prefix" in sys.argv else ""
    cfg = json.load(open(os.path.join(src, "config.json")))
    W = load_st(os.path.join(src, "diffusion_pytorch_model.safetensors"))
    O = {prefix + original_name(k): v for k, v in W.items()}
    assert len(O) == len(W)
    meta = {"config": json.dumps(cfg)} if "--config-metadata" in sys.argv else None
    save_st(out, O, meta)
    if "--original-config" in sys.argv:
        orig = {"_class_name": "WanModel", "dim": cfg["num_attention_heads"] * cfg["attention_head_dim"],
                "eps": cfg["eps"], "ffn_dim": cfg["ffn_dim"], "freq_dim": cfg["freq_dim"],
                "in_dim": cfg["in_channels"], "model_type": "t2v", "num_heads": cfg["num_attention_heads"],
                "num_layers": cfg["num_layers"], "out_dim": cfg["out_channels"], "text_len": 512,
                "text_dim": cfg["text_dim"]}
        json.dump(orig, open(sys.argv[sys.argv.index("--original-config") + 1], "w"), indent=2)
    print("wrote %s (%d tensors)" % (out, len(O)))


if __name__ == "__main__":
    main()
