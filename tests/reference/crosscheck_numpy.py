#!/usr/bin/env python3
"""pdit against the independent NumPy reference on configurations no golden file covers.

The golden files fix two tiny configurations. This test writes models pdit has never been checked
on (other head counts and sizes, layer counts including zero, text and image lengths, VAE widths,
batches, true CFG) with `pdit tiny`, runs `pdit forward` and `pdit generate`, and compares with
golden/flux-tiny/numpy_reference.py, a float64 NumPy implementation written from the diffusers
formulas independently of pdit.

Tolerances (max|a - b| / max|ref|): forward intermediates and output 1e-5; final latents 1e-4;
pixels within 1. NumPy is given torch's float32 sinusoid frequency table (recorded by diffusers
in the golden files), so both sides evaluate the same timestep embedding.

    crosscheck_numpy.py PDIT GOLDEN_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

PDIT, GOLDEN = sys.argv[1], sys.argv[2]
sys.path.insert(0, GOLDEN)
import numpy_reference as nr  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from testfiles import read_png, save_st  # noqa: E402

TOL_FWD, TOL_LAT = 1e-5, 1e-4
failures = []


def check(label, ours, ref, tol):
    ref = np.asarray(ref, np.float64)
    ours = np.asarray(ours, np.float64).reshape(ref.shape)
    err = np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-30)
    ok = err <= tol
    print("  %-4s %-46s %.2e" % ("ok" if ok else "FAIL", label, err))
    if not ok:
        failures.append(label)


def run(*args):
    r = subprocess.run([PDIT] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stderr)
        raise SystemExit("pdit %s failed" % args[0])


# Configurations: (name, tiny flags, image H, W, text tokens, batch, true CFG scale)
CASES = [
    ("3 heads x 24, 1+2 blocks, dev", ["--heads", 3, "--head-dim", 24, "--layers", 1, "--single-layers", 2,
                                       "--in-channels", 16, "--joint-dim", 20, "--pooled-dim", 12,
                                       "--vae-channels", "8,8,16,16", "--vae-layers", 2, "--vae-groups", 4],
     80, 48, 5, 1, 1.0),
    ("6 heads x 8, 3+1 blocks, schnell", ["--heads", 6, "--head-dim", 8, "--layers", 3, "--single-layers", 1,
                                          "--in-channels", 64, "--joint-dim", 48, "--pooled-dim", 40,
                                          "--no-guidance", "--vae-channels", "12,12,24,24", "--vae-groups", 6],
     32, 112, 11, 1, 1.0),
    ("1 head x 32, single blocks only, batch 2 + true CFG", ["--heads", 1, "--head-dim", 32, "--layers", 0,
                                                             "--single-layers", 3, "--in-channels", 8,
                                                             "--joint-dim", 16, "--pooled-dim", 8],
     48, 64, 1, 2, 3.0),
    ("5 heads x 12, double blocks only, 12 heads' worth of text", ["--heads", 5, "--head-dim", 12, "--layers", 2,
                                                                  "--single-layers", 0, "--in-channels", 32,
                                                                  "--joint-dim", 24, "--pooled-dim", 16],
     64, 64, 23, 1, 1.0),
]


def main():
    freqs = nr.load_st(os.path.join(GOLDEN, "forward-dev-h64w48.safetensors"))[0]["emb.sinusoid_freqs"]
    nr.FREQS["table"] = freqs
    rng = np.random.default_rng(12345)
    with tempfile.TemporaryDirectory() as tmp:
        for idx, (name, flags, H, W, T, B, cfg_scale) in enumerate(CASES):
            print(name)
            d = os.path.join(tmp, "m%d" % idx)
            run("tiny", d, "--seed", 100 + idx, "--txt-len", T, "--batch", B, *flags)
            Wt, cfg = nr.load_model(os.path.join(d, "transformer"))
            VW, vcfg = nr.load_model(os.path.join(d, "vae"))
            sc = json.load(open(os.path.join(d, "scheduler", "scheduler_config.json")))
            C = cfg["in_channels"]
            hh, ww = 2 * (H // 16), 2 * (W // 16)
            L = (hh // 2) * (ww // 2)

            # one transformer call on random inputs, every recorded intermediate compared
            ins = {
                "in.hidden_states": rng.standard_normal((1, L, C)),
                "in.encoder_hidden_states": rng.standard_normal((1, T, cfg["joint_attention_dim"])),
                "in.pooled_projections": rng.standard_normal((1, cfg["pooled_projection_dim"])),
                "in.timestep": np.array([rng.uniform(0.05, 1.0)]),
                "in.img_ids": nr.latent_image_ids(hh // 2, ww // 2),
                "in.txt_ids": np.zeros((T, 3)),
            }
            if cfg["guidance_embeds"]:
                ins["in.guidance"] = np.array([3.5])
            ins = {k: v.astype(np.float32) for k, v in ins.items()}
            save_st(os.path.join(tmp, "in.safetensors"), ins)
            run("forward", "--transformer", os.path.join(d, "transformer"), "--inputs",
                os.path.join(tmp, "in.safetensors"), "--out", os.path.join(tmp, "out.safetensors"), "--dump")
            got = nr.load_st(os.path.join(tmp, "out.safetensors"))[0]
            rec = {}
            ref = nr.transformer_forward(Wt, cfg, ins, rec)
            check("forward out.sample", got["out.sample"], ref, TOL_FWD)
            for k in sorted(rec):
                check("forward " + k, got[k][0] if got[k].shape[0] == 1 and rec[k].ndim < got[k].ndim
                      else got[k], rec[k], TOL_FWD)

            # the whole pipeline: 3 steps, seeded noise, optional true CFG, decode
            steps, seed, guidance = 3, 7 + idx, 3.5
            run("generate", "--model", d, "--embeds", os.path.join(d, "embeds.safetensors"), "-H", H, "-W", W,
                "--steps", steps, "-s", seed, "--true-cfg-scale", cfg_scale,
                "--out-latents", os.path.join(tmp, "lat.safetensors"), "-o", os.path.join(tmp, "img.png"))
            lat = nr.load_st(os.path.join(tmp, "lat.safetensors"))[0]
            emb = nr.load_st(os.path.join(d, "embeds.safetensors"))[0]
            mu, ts, sig = nr.flux_sigmas(steps, L, sc)
            for b in range(B):
                x = lat["latents.init"][b].astype(np.float64)
                for i in range(steps):
                    fwd = {"in.hidden_states": x[None], "in.encoder_hidden_states": emb["prompt_embeds"][b:b + 1],
                           "in.pooled_projections": emb["pooled_prompt_embeds"][b:b + 1],
                           "in.timestep": np.array([np.float32(ts[i]) / np.float32(1000)]),
                           "in.img_ids": nr.latent_image_ids(hh // 2, ww // 2), "in.txt_ids": np.zeros((T, 3))}
                    if cfg["guidance_embeds"]:
                        fwd["in.guidance"] = np.array([guidance])
                    v = nr.transformer_forward(Wt, cfg, fwd, {})[0]
                    if cfg_scale > 1:
                        fwd["in.encoder_hidden_states"] = emb["negative_prompt_embeds"][b:b + 1]
                        fwd["in.pooled_projections"] = emb["negative_pooled_prompt_embeds"][b:b + 1]
                        neg = nr.transformer_forward(Wt, cfg, fwd, {})[0]
                        v = neg + cfg_scale * (v - neg)
                    x = x + (float(sig[i + 1]) - float(sig[i])) * v
                check("generate[%d] latents.final" % b, lat["latents.final"][b], x, TOL_LAT)
                z = nr.unpack(x, hh, ww) / vcfg["scaling_factor"] + vcfg["shift_factor"]
                img = nr.vae_decode(VW, vcfg, z, {})
                u8 = np.round(np.clip(img * 0.5 + 0.5, 0, 1).transpose(1, 2, 0) * 255)
                png = read_png(os.path.join(tmp, "img.png" if B == 1 else "img-%d.png" % b))
                diff = np.abs(png.astype(np.int32) - u8.astype(np.int32)).max()
                print("  %-4s %-46s %d" % ("ok" if diff <= 1 else "FAIL", "generate[%d] pixels within" % b, diff))
                if diff > 1:
                    failures.append("pixels")
    print("ALL OK" if not failures else "FAILED: %s" % ", ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
