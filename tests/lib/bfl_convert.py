#!/usr/bin/env python3
"""Writes diffusers folders as single files in the original layouts, for the single-file tests.

transformer: one file in Black Forest Labs' layout (flux1-dev.safetensors, as their `flux` repository names
the modules). Written from the BFL side, independently of pdit's loader: the fused projections are
concatenated (img_attn.qkv = [to_q; to_k; to_v], single_blocks.N.linear1 = [to_q; to_k; to_v; proj_mlp]) and
the final modulation is stored as (shift, scale), diffusers' norm_out.linear being (scale, shift);
--no-swap leaves that out (a broken file the tests must tell apart).

vae: the decoder in the original (LDM) layout of ae.safetensors: decoder.mid.block_1, decoder.mid.attn_1
with 1x1-convolution q/k/v/proj_out, decoder.up.N counted from the full resolution (diffusers counts from
the smallest), nin_shortcut, norm_out.

    bfl_convert.py transformer DIR OUT.safetensors [--prefix P] [--config-metadata] [--no-swap]
    bfl_convert.py vae DIR OUT.safetensors [--prefix P] [--config-metadata]
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testfiles import load_st, save_st  # noqa: E402


def load_folder(d):
    idx = os.path.join(d, "diffusion_pytorch_model.safetensors.index.json")
    if os.path.exists(idx):
        W = {}
        for f in sorted(set(json.load(open(idx))["weight_map"].values())):
            W.update(load_st(os.path.join(d, f)))
        return W
    return load_st(os.path.join(d, "diffusion_pytorch_model.safetensors"))


def vae(src, out, prefix):
    cfg = json.load(open(os.path.join(src, "config.json")))
    W = load_folder(src)
    B = {}

    def both(ldm, diff, conv1x1=False):
        for e in ("weight", "bias"):
            k = "%s.%s" % (diff, e)
            if k in W:
                v = W[k]
                B["%s.%s" % (ldm, e)] = v[:, :, None, None] if conv1x1 and e == "weight" else v

    def resnet(ldm, diff):
        for p in ("norm1", "conv1", "norm2", "conv2"):
            both("%s.%s" % (ldm, p), "%s.%s" % (diff, p))
        both(ldm + ".nin_shortcut", diff + ".conv_shortcut")

    n = len(cfg["block_out_channels"])
    both("post_quant_conv", "post_quant_conv")
    both("decoder.conv_in", "decoder.conv_in")
    resnet("decoder.mid.block_1", "decoder.mid_block.resnets.0")
    resnet("decoder.mid.block_2", "decoder.mid_block.resnets.1")
    a = "decoder.mid_block.attentions.0."
    both("decoder.mid.attn_1.norm", a + "group_norm")
    for ldm, diff in (("q", "to_q"), ("k", "to_k"), ("v", "to_v"), ("proj_out", "to_out.0")):
        both("decoder.mid.attn_1." + ldm, a + diff, conv1x1=True)
    for k in range(n):
        for j in range(cfg.get("layers_per_block", 2) + 1):
            resnet("decoder.up.%d.block.%d" % (n - 1 - k, j), "decoder.up_blocks.%d.resnets.%d" % (k, j))
        both("decoder.up.%d.upsample.conv" % (n - 1 - k), "decoder.up_blocks.%d.upsamplers.0.conv" % k)
    both("decoder.norm_out", "decoder.conv_norm_out")
    both("decoder.conv_out", "decoder.conv_out")
    meta = {"config": json.dumps(cfg)} if "--config-metadata" in sys.argv else None
    save_st(out, {prefix + k: v for k, v in B.items()}, meta)
    print("wrote %s: %d tensors" % (out, len(B)))


def main():
    kind, src, out = sys.argv[1], sys.argv[2], sys.argv[3]
    prefix = sys.argv[sys.argv.index("--prefix") + 1] if "--prefix" in sys.argv else ""
    if kind == "vae":
        return vae(src, out, prefix)
    cfg = json.load(open(os.path.join(src, "config.json")))
    W = load_folder(src)
    B = {}

    def both(bfl, diff):
        for e in ("weight", "bias"):
            if "%s.%s" % (diff, e) in W:
                B["%s.%s" % (bfl, e)] = W["%s.%s" % (diff, e)]

    def fused(bfl, parts):
        for e in ("weight", "bias"):
            B["%s.%s" % (bfl, e)] = np.concatenate([W["%s.%s" % (p, e)] for p in parts])

    both("img_in", "x_embedder")
    both("txt_in", "context_embedder")
    both("time_in.in_layer", "time_text_embed.timestep_embedder.linear_1")
    both("time_in.out_layer", "time_text_embed.timestep_embedder.linear_2")
    both("vector_in.in_layer", "time_text_embed.text_embedder.linear_1")
    both("vector_in.out_layer", "time_text_embed.text_embedder.linear_2")
    if cfg.get("guidance_embeds"):
        both("guidance_in.in_layer", "time_text_embed.guidance_embedder.linear_1")
        both("guidance_in.out_layer", "time_text_embed.guidance_embedder.linear_2")
    for i in range(cfg["num_layers"]):
        d, b = "transformer_blocks.%d." % i, "double_blocks.%d." % i
        both(b + "img_mod.lin", d + "norm1.linear")
        both(b + "txt_mod.lin", d + "norm1_context.linear")
        fused(b + "img_attn.qkv", [d + "attn.to_q", d + "attn.to_k", d + "attn.to_v"])
        fused(b + "txt_attn.qkv", [d + "attn.add_q_proj", d + "attn.add_k_proj", d + "attn.add_v_proj"])
        both(b + "img_attn.proj", d + "attn.to_out.0")
        both(b + "txt_attn.proj", d + "attn.to_add_out")
        B[b + "img_attn.norm.query_norm.scale"] = W[d + "attn.norm_q.weight"]
        B[b + "img_attn.norm.key_norm.scale"] = W[d + "attn.norm_k.weight"]
        B[b + "txt_attn.norm.query_norm.scale"] = W[d + "attn.norm_added_q.weight"]
        B[b + "txt_attn.norm.key_norm.scale"] = W[d + "attn.norm_added_k.weight"]
        both(b + "img_mlp.0", d + "ff.net.0.proj")
        both(b + "img_mlp.2", d + "ff.net.2")
        both(b + "txt_mlp.0", d + "ff_context.net.0.proj")
        both(b + "txt_mlp.2", d + "ff_context.net.2")
    for i in range(cfg["num_single_layers"]):
        d, b = "single_transformer_blocks.%d." % i, "single_blocks.%d." % i
        both(b + "modulation.lin", d + "norm.linear")
        fused(b + "linear1", [d + "attn.to_q", d + "attn.to_k", d + "attn.to_v", d + "proj_mlp"])
        both(b + "linear2", d + "proj_out")
        B[b + "norm.query_norm.scale"] = W[d + "attn.norm_q.weight"]
        B[b + "norm.key_norm.scale"] = W[d + "attn.norm_k.weight"]
    both("final_layer.linear", "proj_out")
    for e in ("weight", "bias"):
        scale, shift = np.split(W["norm_out.linear." + e], 2)
        B["final_layer.adaLN_modulation.1." + e] = np.concatenate(
            [scale, shift] if "--no-swap" in sys.argv else [shift, scale])
    used = len(W)
    meta = {"config": json.dumps(cfg)} if "--config-metadata" in sys.argv else None
    save_st(out, {prefix + k: v for k, v in B.items()}, meta)
    print("wrote %s: %d tensors from %d" % (out, len(B), used))


if __name__ == "__main__":
    main()
