#!/usr/bin/env python3
"""`pdit bench --json` on a tiny model of random sizes, one process and several meshes.

1. Every key the benchmark promises is there, with the run's height, width, ranks and threads.
2. step_gflop equals an independent count: 2 x rows x in x out for every 2-D weight in the
   transformer's safetensors header (rows = image tokens for x_embedder, proj_out and the double
   blocks' image stream, text tokens for context_embedder and the text stream, 1 for the modulations,
   all tokens for the single blocks; the embedders of the time,
   guidance and pooled vectors, a few thousand FLOPs, are left out by both) plus 4 S^2 D per block for
   attention; times the images and CFG branches. Relative tolerance 1e-8.
3. achieved = step_gflop / seconds_per_step and ratio = achieved / (matmul x ranks), to the printed
   digits (six and four).
4. Nothing is allocated (no buffer grown, no primitive made) in the timed steps, on any mesh.
5. The memory estimate holds the weights as the backend prepares them: at least the linear weights at the
   compute precision's bytes and their f32 biases, at most twice that (packing pads blocked layouts).
6. --vae-time gives a positive decode time; without it, -1. vae_gflop equals an independent count from
   the VAE's safetensors header (2 x out x in x k x k x pixels for every decoder convolution at its
   block's resolution, the mid attention's four projections and 4 N^2 C for its scores and values),
   the same for --vae-dtype f32 and bf16; vae_gflops = vae_gflop / vae_seconds, vae_ratio = vae_gflops /
   (vae_matmul_gflops x vae_bands), the product rate at the VAE's middle convolutions' shape.
   With 2 processes the decode runs in 2 bands (vae_bands) and the count is the same.
7. load_seconds is positive and load_mb_per_second = weights_mb / load_seconds.
8. --e2e: the phases of one generation, each positive, the steps warm-up + timed, loading within opening,
   and total = opening + steps + decode.
9. --op-times: rows of operations, the longest first; each product's GFLOP equals 2 x rows x in x out x
   calls from the shape its name gives, each attention's 4 x queries x keys x heads x head_dim x calls;
   on one process the rows together count at least the step's GFLOP (and the embedders' few more, under
   5% here); their seconds are positive and sum to no more than 1.5 step.

    cli_bench.py PDIT MPIRUN...
"""
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

PDIT, MPIRUN = sys.argv[1], sys.argv[2:]
KEYS = ["seconds_per_step", "step_gflop", "achieved_gflops", "matmul_gflops", "ratio", "peak_rss_mb",
        "vae_seconds", "height", "width", "threads", "ranks", "weights_mb", "activations_mb", "estimate_mb",
        "peak_over_estimate", "allocations_after_warmup", "images", "branches", "tokens",
        "wait_seconds_per_step_per_rank", "load_seconds", "load_mb_per_second", "vae_dtype", "vae_gflop",
        "vae_gflops", "vae_matmul_gflops", "vae_ratio", "vae_bands"]
failures = []


def report(ok, label):
    print("  %-4s %s" % ("ok" if ok else "FAIL", label))
    if not ok:
        failures.append(label)


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def expected_gflop(model, T, L):
    h = header(os.path.join(model, "transformer", "diffusion_pytorch_model.safetensors"))
    cfg = json.load(open(os.path.join(model, "transformer", "config.json")))
    S = T + L
    D = cfg["num_attention_heads"] * cfg["attention_head_dim"]
    flop = 0.0
    for name, t in h.items():
        if name == "__metadata__" or not name.endswith(".weight") or len(t["shape"]) != 2:
            continue
        out_f, in_f = t["shape"]
        if name.startswith("time_text_embed."):
            continue
        if name.startswith(("x_embedder.", "proj_out.")):
            rows = L
        elif name.startswith("context_embedder."):
            rows = T
        elif ".norm" in name or name.startswith("norm_out."):
            rows = 1
        elif name.startswith("transformer_blocks."):
            # the double block's two streams: the text's own projections, the image's
            rows = T if ("add_" in name or "ff_context" in name) else L
        else:
            rows = S
        flop += 2.0 * rows * in_f * out_f
    blocks = cfg["num_layers"] + cfg["num_single_layers"]
    flop += blocks * 4.0 * S * S * D
    return flop / 1e9


def expected_vae_gflop(model, H, W):
    h = header(os.path.join(model, "vae", "diffusion_pytorch_model.safetensors"))
    ups = sorted({int(n.split(".")[2]) for n in h if n.startswith("decoder.up_blocks.")})
    f = 2 ** (len(ups) - 1)
    latent = (H // f) * (W // f)
    flop = 0.0
    for name, t in h.items():
        if name == "__metadata__" or not name.endswith(".weight"):
            continue
        shape = t["shape"]
        if name.startswith("decoder.up_blocks."):
            i = int(name.split(".")[2])
            pixels = latent * 4 ** (i + 1 if ".upsamplers." in name else i)
        elif name.startswith(("decoder.conv_in.", "decoder.mid_block.", "post_quant_conv.")):
            pixels = latent
        elif name.startswith("decoder.conv_out."):
            pixels = H * W
        else:
            continue
        if len(shape) == 4:
            flop += 2.0 * shape[0] * shape[1] * shape[2] * shape[3] * pixels
        elif len(shape) == 2 and ".attentions." in name:
            flop += 2.0 * shape[0] * shape[1] * pixels
            if ".to_q." in name:
                flop += 4.0 * pixels * pixels * shape[0]
    return flop / 1e9


def bench(model, np_, *args):
    cmd = ([] if np_ == 1 else MPIRUN + ["-np", str(np_)]) + [PDIT, "bench", "--model", model, "--json"]
    r = subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1:] if r.stderr else r.stdout
    lines = [x for x in r.stdout.splitlines() if x.startswith("{")]
    return (json.loads(lines[-1]), None) if len(lines) == 1 else (None, r.stdout)


def check_ops(label, j):
    ops = j.get("ops", [])
    bad = []
    for o in ops:
        m = re.match(r"linear (\d+) x (\d+) -> (\d+) ", o["name"])
        a = re.match(r"attention (\d+) x (\d+), (\d+) x (\d+)$", o["name"])
        want = (2.0 * int(m[1]) * int(m[2]) * int(m[3]) if m else
                4.0 * int(a[1]) * int(a[2]) * int(a[3]) * int(a[4]) if a else 0.0) * o["calls"] / 1e9
        if abs(o["gflop"] - want) > 1e-6 * want + 1e-12 or o["seconds"] < 0 or o["calls"] <= 0:
            bad.append((o["name"], o["gflop"], want))
    report(ops and not bad, "%s: %d operations, each one's GFLOP from its shape (wrong: %s)" % (label, len(ops), bad))
    total = sum(o["gflop"] for o in ops)
    secs = [o["seconds"] for o in ops]
    # one process only: a mesh's rank 0 holds a share whose size depends on the method
    if j["ranks"] == 1:
        report(j["step_gflop"] * (1 - 1e-9) <= total <= j["step_gflop"] * 1.05,
               "%s: the rows' %.6f GFLOP against the step's %.6f" % (label, total, j["step_gflop"]))
    report(secs == sorted(secs, reverse=True) and 0 < sum(secs) <= 1.5 * j["seconds_per_step"],
           "%s: the longest first, %.4f s of a %.4f s step" % (label, sum(secs), j["seconds_per_step"]))


def main():
    seed = int(os.environ.get("PDIT_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
    print("seed %d (PDIT_TEST_SEED to repeat)" % seed)
    rnd = random.Random(seed)
    heads = rnd.choice([2, 4, 6])
    hd = rnd.choice([8, 16, 24])
    layers, singles = rnd.randint(1, 3), rnd.randint(1, 3)
    H, W = 16 * rnd.randint(2, 5), 16 * rnd.randint(2, 5)
    print("model: %d heads x %d, %d double + %d single blocks; %dx%d" % (heads, hd, layers, singles, H, W))
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "m")
        r = subprocess.run([PDIT, "tiny", model, "--heads", str(heads), "--head-dim", str(hd), "--layers",
                            str(layers), "--single-layers", str(singles)], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr)
            sys.exit(1)
        h = header(os.path.join(model, "transformer", "diffusion_pytorch_model.safetensors"))
        # linear weights at the compute precision, their biases in f32
        mats = sum(t["shape"][0] * t["shape"][1] for n, t in h.items() if n != "__metadata__" and
                   len(t["shape"]) == 2)
        biases = sum(t["shape"][0] for n, t in h.items() if n.endswith(".bias") and len(t["shape"]) == 1)
        runs = [
            (1, "one process f32", ["--dtype", "f32"]),
            (1, "one process bf16, VAE timed", ["--dtype", "bf16", "--vae-time"]),
            (1, "one process bf16, VAE timed in bf16", ["--dtype", "bf16", "--vae-time", "--vae-dtype", "bf16"]),
            (1, "true CFG", ["--true-cfg-scale", "2"]),
            (2, "ulysses 2", ["--ulysses-degree", "2"] if heads % 2 == 0 else ["--ring-degree", "2"]),
            (2, "ring 2, VAE in bands", ["--ring-degree", "2", "--vae-time"]),
            (1, "one process, end to end", ["--e2e", "--warmup", "2"]),
            (2, "tensor parallel 2", ["--tensor-parallel-degree", "2"] if heads % 2 == 0 else ["--ring-degree", "2"]),
            (2, "cfg parallel", ["--cfg-parallel", "--true-cfg-scale", "2"]),
            # the first patched step makes the patches' primitives: it is the second warm-up step
            (2, "pipefusion 2", ["--pipefusion-degree", "2", "--warmup-steps", "1", "--warmup", "2"]),
            (2, "distrifusion 2", ["--distrifusion-degree", "2", "--warmup-steps", "1", "--warmup", "2"]),
            (1, "operation times", ["--op-times", "--dtype", "bf16"]),
            (2, "operation times, tensor parallel 2",
             ["--op-times"] + (["--tensor-parallel-degree", "2"] if heads % 2 == 0 else ["--ring-degree", "2"])),
        ]
        for np_, label, args in runs:
            j, err = bench(model, np_, "-H", H, "-W", W, "--steps", 2, *args)
            if j is None:
                report(False, "%s: bench failed: %s" % (label, err))
                continue
            missing = [k for k in KEYS if k not in j]
            report(not missing, "%s: keys present (missing %s)" % (label, missing))
            if missing:
                continue
            report(j["height"] == H and j["width"] == W and j["ranks"] == np_ and j["threads"] >= 1,
                   "%s: height %d width %d ranks %d threads %d" % (label, j["height"], j["width"], j["ranks"],
                                                                  j["threads"]))
            T = j["tokens"] - (H // 16) * (W // 16)
            want = expected_gflop(model, T, (H // 16) * (W // 16)) * j["images"] * j["branches"]
            report(abs(j["step_gflop"] - want) <= 1e-8 * want,
                   "%s: step GFLOP %.8g, counted from the weights %.8g" % (label, j["step_gflop"], want))
            ach = j["step_gflop"] / j["seconds_per_step"]
            report(abs(j["achieved_gflops"] - ach) <= 1e-5 * ach,
                   "%s: achieved %.1f = GFLOP / seconds %.1f" % (label, j["achieved_gflops"], ach))
            ratio = j["achieved_gflops"] / (j["matmul_gflops"] * j["ranks"])
            report(abs(j["ratio"] - ratio) <= 1e-3 * ratio,
                   "%s: ratio %.3f = achieved / matmul %.3f" % (label, j["ratio"], ratio))
            waits = j["wait_seconds_per_step_per_rank"]
            # a rank waits part of a step, never longer (the waits of the timed steps alone);
            # one process has no one to wait for
            report(len(waits) == np_ and all(0 <= x <= j["seconds_per_step"] * 1.5 for x in waits) and
                   (np_ > 1 or waits == [0]), "%s: seconds waiting per step %s of %.3f" %
                   (label, waits, j["seconds_per_step"]))
            report(j["allocations_after_warmup"] == 0,
                   "%s: %d allocations in the timed steps" % (label, j["allocations_after_warmup"]))
            if np_ == 1:
                lo = (mats * (2 if "bf16" in args else 4) + biases * 4) / 1048576.0
                report(lo * 0.999 <= j["weights_mb"] <= 2 * lo + 1,
                       "%s: weights %.2f MB for %.2f MB of parameters" % (label, j["weights_mb"], lo))
                report(j["activations_mb"] > 0 and abs(j["estimate_mb"] - j["weights_mb"] - j["activations_mb"])
                       < 0.2 and j["peak_rss_mb"] > 0, "%s: estimate %.1f = weights + activations %.1f, peak %.1f"
                       % (label, j["estimate_mb"], j["activations_mb"], j["peak_rss_mb"]))
            timed = "--vae-time" in args or "--e2e" in args
            if timed:
                report(j["vae_bands"] == np_, "%s: decoded in %d bands" % (label, j["vae_bands"]))
            if "--e2e" in args:
                x = j.get("e2e", {})
                ok = x and all(x[k] > 0 for k in ("open_seconds", "load_seconds", "steps_seconds",
                                                  "decode_seconds", "total_seconds"))
                ok = ok and x["steps"] == 4 and x["load_seconds"] <= x["open_seconds"] and abs(
                    x["total_seconds"] - x["open_seconds"] - x["steps_seconds"] - x["decode_seconds"]) <= 1e-4 * x[
                    "total_seconds"] + 1e-5 and x["decode_seconds"] == j["vae_seconds"]
                report(ok, "%s: phases %s" % (label, x))
            report((j["vae_seconds"] > 0) if timed else (j["vae_seconds"] == -1),
                   "%s: vae_seconds %.3f" % (label, j["vae_seconds"]))
            if timed:
                want = expected_vae_gflop(model, H, W)
                report(abs(j["vae_gflop"] - want) <= 1e-6 * want and j["vae_dtype"] ==
                       ("bf16" if "--vae-dtype" in args and args[args.index("--vae-dtype") + 1] == "bf16" else "f32"),
                       "%s: VAE %.6f GFLOP (%s), counted from its weights %.6f" %
                       (label, j["vae_gflop"], j["vae_dtype"], want))
                rate = j["vae_gflop"] / j["vae_seconds"]
                report(abs(j["vae_gflops"] - rate) <= 1e-2 * rate + 0.05 and
                       j["vae_matmul_gflops"] > 0 and
                       abs(j["vae_ratio"] - j["vae_gflops"] / (j["vae_matmul_gflops"] * j["vae_bands"])) <=
                       1e-2 * j["vae_ratio"] + 1e-3,
                       "%s: VAE %.1f GFLOP/s, %.3f of the matmul rate" % (label, j["vae_gflops"], j["vae_ratio"]))
            if "--op-times" in args:
                check_ops(label, j)
            report(j["load_seconds"] > 0 and abs(j["load_mb_per_second"] - j["weights_mb"] / j["load_seconds"]) <=
                   1e-2 * j["load_mb_per_second"] + 0.1, "%s: loaded in %.3f s, %.1f MB/s" %
                   (label, j["load_seconds"], j["load_mb_per_second"]))
    if failures:
        print("%d failed" % len(failures))
        sys.exit(1)
    print("all passed")


main()
