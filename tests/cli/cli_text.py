#!/usr/bin/env python3
"""Prompts through the command line, as a user runs them.

1. `pdit encode` with the golden tiny encoders and the real tokenizers, for every golden prompt (at 32
   T5 tokens, and 512 where recorded): ids equal transformers' exactly, pooled and T5 outputs within
   1e-4 of transformers' (max|a - b| / max|ref|), under the names generate --embeds reads.
2. A tiny model laid out as FLUX.1-dev (`pdit tiny --full`: sharded transformer and T5 with index files,
   tokenizers, encoders) goes from a prompt to a PNG; the picture equals the one made from
   `pdit encode`'s file; --prompts makes one picture per line; a negative prompt with true CFG works.
3. Bad input gets one line and a nonzero exit.

    cli_text.py PDIT GOLDEN_TE_DIR
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

PDIT, TE = sys.argv[1], sys.argv[2]
sys.argv = [sys.argv[0], TE]
sys.path.insert(0, TE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
import numpy_reference_te as te  # noqa: E402
from testfiles import load_st, read_png, save_st  # noqa: E402

failures = []


def report(ok, label):
    print("  %-4s %s" % ("ok" if ok else "FAIL", label))
    if not ok:
        failures.append(label)


def run(*args):
    return subprocess.run([PDIT] + [str(a) for a in args], capture_output=True, text=True)


def rel(a, b):
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def main():
    comp = ["--text-encoder", os.path.join(TE, "text_encoder"), "--tokenizer", os.path.join(TE, "tokenizer"),
            "--text-encoder-2", os.path.join(TE, "text_encoder_2"), "--tokenizer-2", os.path.join(TE, "tokenizer_2")]
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "enc.safetensors")
        print("pdit encode against transformers")
        for path in sorted(glob.glob(os.path.join(TE, "cases", "*.safetensors"))):
            ref, meta = te.load_st(path)
            prompt = json.loads(meta["prompt"])
            for L in (32, 512):
                if "t5.input_ids.%d" % L not in ref:
                    continue
                r = run("encode", *comp, "-p", prompt, "--max-sequence-length", L, "--out", out)
                if r.returncode != 0:
                    report(False, "%s: pdit encode failed: %s" % (os.path.basename(path), r.stderr.strip()))
                    continue
                got, _ = te.load_st(out)
                ok = (got["clip.input_ids"] == ref["clip.input_ids"]).all() and \
                    (got["t5.input_ids"] == ref["t5.input_ids.%d" % L]).all()
                e1 = rel(got["pooled_prompt_embeds"], ref["clip.pooler_output"])
                e2 = rel(got["prompt_embeds"], ref["t5.last_hidden_state.%d" % L])
                e3 = rel(got["clip.pooler_output"], ref["clip.pooler_output"])
                e4 = rel(got["t5.last_hidden_state"], ref["t5.last_hidden_state.%d" % L])
                worst = max(worst, e1, e2, e3, e4)
                if not (ok and max(e1, e2, e3, e4) <= 1e-4):
                    report(False, "%s at %d: ids %s, errors %.2e %.2e" % (os.path.basename(path), L, ok, e1, e2))
        report(not failures, "every golden prompt: ids exact, outputs within 1e-4 (worst %.2e)" % worst)

        print("single-file encoders (--clip_l, --t5xxl)")
        clip = load_st(os.path.join(TE, "text_encoder", "model.safetensors"))
        t5 = load_st(os.path.join(TE, "text_encoder_2", "model.safetensors"))
        cfile, tfile = os.path.join(tmp, "clip_l.safetensors"), os.path.join(tmp, "t5xxl.safetensors")
        # a prefix as ComfyUI's files have, and the config as metadata (CLIP's heads cannot be read from
        # shapes); T5 with its embedding under the other name and no config (read from the shapes)
        save_st(cfile, {"text_encoders.clip_l.transformer." + k: v for k, v in clip.items()},
                {"config": open(os.path.join(TE, "text_encoder", "config.json")).read()})
        save_st(tfile, {("encoder.embed_tokens.weight" if k == "shared.weight" else k): v for k, v in t5.items()})
        ref, meta = te.load_st(os.path.join(TE, "cases", "p01.safetensors"))
        r = run("encode", "--clip_l", cfile, "--t5xxl", tfile, "--tokenizer", os.path.join(TE, "tokenizer"),
                "--tokenizer-2", os.path.join(TE, "tokenizer_2"), "-p", json.loads(meta["prompt"]),
                "--max-sequence-length", 32, "--out", out)
        got = te.load_st(out)[0] if r.returncode == 0 else None
        e1 = rel(got["pooled_prompt_embeds"], ref["clip.pooler_output"]) if got else 1
        e2 = rel(got["prompt_embeds"], ref["t5.last_hidden_state.32"]) if got else 1
        report(got is not None and max(e1, e2) <= 1e-4, "p01 through single files: %.2e %.2e %s" % (e1, e2, r.stderr.strip()[-200:]))

        print("single-file encoders in fp8 (as t5xxl_fp8_e4m3fn.safetensors): kept in fp8, equal to their dequantization")
        outs = []
        for kind in ("fp8", "plain"):
            files = []
            for f in (cfile, tfile):
                q = f.replace(".safetensors", "-fp8.safetensors")
                if kind == "fp8":
                    r = run("quantize", f, q, "--type", "fp8")
                    report(r.returncode == 0, "pdit quantize %s --type fp8 %s" % (os.path.basename(f), r.stderr.strip()[-200:]))
                    files.append(q)
                else:
                    d = f.replace(".safetensors", "-dq.safetensors")
                    r = run("quantize", q, d, "--type", "f32")
                    files.append(d)
            o = os.path.join(tmp, "fp8-%s.safetensors" % kind)
            r = run("encode", "--clip_l", files[0], "--t5xxl", files[1], "--tokenizer", os.path.join(TE, "tokenizer"),
                    "--tokenizer-2", os.path.join(TE, "tokenizer_2"), "-p", json.loads(meta["prompt"]),
                    "--max-sequence-length", 32, "--out", o)
            report(r.returncode == 0, "encode with the %s encoders %s" % (kind, r.stderr.strip()[-200:]))
            outs.append(te.load_st(o)[0] if r.returncode == 0 else None)
        if outs[0] is not None and outs[1] is not None:
            e1 = rel(outs[0]["pooled_prompt_embeds"], outs[1]["pooled_prompt_embeds"])
            e2 = rel(outs[0]["prompt_embeds"], outs[1]["prompt_embeds"])
            e3 = rel(outs[0]["prompt_embeds"], ref["t5.last_hidden_state.32"])
            report(max(e1, e2) <= 1e-5 and 0 < e3 < 0.2,
                   "fp8 encoders = their dequantized copies (%.2e %.2e), %.1e from the unquantized ones" % (e1, e2, e3))

        print("a FLUX.1-dev-shaped tiny folder, prompt to picture")
        m = os.path.join(tmp, "m")
        r = run("tiny", m, "--full")
        report(r.returncode == 0, "pdit tiny --full")
        for f in ("transformer/diffusion_pytorch_model.safetensors.index.json", "text_encoder_2/model.safetensors.index.json",
                  "tokenizer/vocab.json", "tokenizer/merges.txt", "tokenizer_2/spiece.model", "text_encoder/config.json"):
            report(os.path.exists(os.path.join(m, f)), "it has %s" % f)
        img = os.path.join(tmp, "p.png")
        base = ["--model", m, "-H", 64, "-W", 80, "--steps", 2, "-s", 3]
        r = run("generate", *base, "-p", "a photo of a cat in the snow", "-o", img)
        report(r.returncode == 0 and os.path.exists(img), "generate -p writes a PNG %s" % r.stderr.strip()[-200:])
        r = run("encode", "--model", m, "-p", "a photo of a cat in the snow", "--out", out)
        r2 = run("generate", *base, "--embeds", out, "-o", os.path.join(tmp, "e.png"))
        same = r.returncode == 0 and r2.returncode == 0 and \
            (read_png(img) == read_png(os.path.join(tmp, "e.png"))).all()
        report(same, "the same picture from encode's file (every pixel)")
        plist = os.path.join(tmp, "prompts.txt")
        open(plist, "w").write("a red fox\n\nan old ship at sea\r\nsnow\n")
        r = run("generate", *base, "--prompts", plist, "-o", os.path.join(tmp, "b.png"))
        report(r.returncode == 0 and all(os.path.exists(os.path.join(tmp, "b-%d.png" % i)) for i in range(3)),
               "--prompts: one picture per non-blank line")
        r = run("generate", *base, "-p", "a cat", "-n", "blurry", "--true-cfg-scale", 3, "-o", os.path.join(tmp, "n.png"))
        report(r.returncode == 0, "a negative prompt with true CFG")

        print("bad input")
        for label, args, want in [
            ("-p and --embeds together", ["-p", "x", "--embeds", out], "give one of"),
            ("no prompt at all", [], "no prompt"),
            ("too long a T5 sequence", ["-p", "x", "--max-sequence-length", 600], "--max-sequence-length"),
            ("true CFG without a negative prompt", ["-p", "x", "--true-cfg-scale", 3], "negative prompt"),
            ("a missing tokenizer folder", ["-p", "x", "--tokenizer", os.path.join(tmp, "none")], "--tokenizer"),
        ]:
            r = run("generate", *base, *args, "-o", os.path.join(tmp, "x.png"))
            lines = [x for x in r.stderr.split("\n") if x]
            report(r.returncode != 0 and len(lines) == 1 and want in lines[0] and not os.path.exists(os.path.join(tmp, "x.png")),
                   "%s: %s" % (label, lines[0] if lines else "(nothing)"))
    print("ALL OK" if not failures else "FAILED: %d" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
