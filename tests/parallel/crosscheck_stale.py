#!/usr/bin/env python3
"""DistriFusion and PipeFusion against an independent NumPy model of what they compute.

After their warm-up both methods attend, on purpose, to keys and values that are partly one step
old, so their pictures differ from one process's. Comparing with one process only shows that they
differ; this test checks *how*: golden/flux-tiny/numpy_reference.py (float64, written from the
diffusers formulas) runs the denoising loop with its attention replaced by the method's rule, and
pdit under mpirun must land on the same final latents.

DistriFusion (P bands; band j = text chunk j and image chunk j of the sequence-parallel split):
  steps < W: exact attention. From step W on, the queries of band j attend to keys and values that
  are this step's for band j and the previous step's for every other band.
PipeFusion (M patches = bands of whole latent rows; the text travels with patch 0):
  steps < W: the whole sequence at once, exact. From step W on, patches run one after another
  through every block; at each attention layer patch p writes its fresh keys and values into that
  layer's buffer of the whole sequence and attends to the whole buffer, whose other rows are from
  earlier patches of this step or, for later patches, from the previous step.
Both keep one state per image and branch (true CFG's passes differ).

Also: the relative difference from one process (the price of staleness) is printed and must be
finite and nonzero for W < steps; with W = steps the result is one process's (1e-5).

Tolerance: max|pdit - numpy| / max|numpy| <= 1e-4 on latents.final.

    crosscheck_stale.py PDIT GOLDEN_DIR MPIRUN...
"""
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

PDIT, GOLDEN, MPIRUN = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, GOLDEN)
import numpy_reference as nr  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'lib'))
from testfiles import read_png  # noqa: E402

TOL = 1e-4
FBC = 0.8  # First Block Cache threshold of the cached cases (this model's changes: 0.65 to 1.5)
EXACT_ATTENTION = nr.attention
failures = []


def chunk_start(n, p, i):
    return i * (n // p) + min(i, n % p)


def chunk_len(n, p, i):
    return n // p + (1 if i < n % p else 0)


def patch_boundary(T, hp, wp, n, i):
    """PipeFusion's patches are bands of latent rows balancing tokens, the text counted in patch 0:
    boundary i = round(((T + L) i / n - T) / wp) (halves up), within [i, hp - n + i]."""
    if i <= 0:
        return 0
    if i >= n:
        return hp
    num, den = (T + hp * wp) * i - T * n, n * wp
    return min(max((2 * num + den) // (2 * den), i), hp - n + i)


def embed_rows(W, cfg, fwd, r0, rn, with_text):
    """Embedders, time vector and RoPE tables for image rows [r0, r0 + rn) (and the text)."""
    f64 = lambda k: np.asarray(fwd[k], np.float64)  # noqa: E731
    img = nr.linear(W, "x_embedder", f64("in.hidden_states")[0][r0:r0 + rn])
    D = img.shape[1]
    txt = nr.linear(W, "context_embedder", f64("in.encoder_hidden_states")[0]) if with_text else np.zeros((0, D))
    g = fwd["in.guidance"][0] if "in.guidance" in fwd else None
    temb = nr.temb_vector(W, cfg, fwd["in.timestep"][0], g, f64("in.pooled_projections")[0], nr.FREQS["table"])
    ids = np.concatenate([f64("in.txt_ids") if with_text else np.zeros((0, 3)), f64("in.img_ids")[r0:r0 + rn]])
    cos, sin = nr.rope_tables(ids, cfg["axes_dims_rope"])
    return txt, img, temb, cos, sin


def double_block_no_text(W, p, img, temb, cos, sin, H):
    """numpy_reference.double_block for a piece without text rows (its reshape(0, H, -1) cannot infer
    the head width there): the image stream's half of the block."""
    m = nr.linear(W, p + ".norm1.linear", nr.silu(temb))
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = np.split(m, 6)
    nx = nr.layer_norm(img) * (1 + scale_msa) + shift_msa
    a = p + ".attn."
    heads = lambda x: x.reshape(x.shape[0], H, -1)  # noqa: E731
    q = nr.apply_rope(nr.rms_norm(heads(nr.linear(W, a + "to_q", nx)), W[a + "norm_q.weight"]), cos, sin)
    k = nr.apply_rope(nr.rms_norm(heads(nr.linear(W, a + "to_k", nx)), W[a + "norm_k.weight"]), cos, sin)
    v = heads(nr.linear(W, a + "to_v", nx))
    o = nr.attention(q, k, v).reshape(q.shape[0], -1)
    img = img + gate_msa * nr.linear(W, a + "to_out.0", o)
    ff = nr.layer_norm(img) * (1 + scale_mlp) + shift_mlp
    return img + gate_mlp * nr.linear(W, p + ".ff.net.2", nr.gelu_tanh(nr.linear(W, p + ".ff.net.0.proj", ff)))


CUR = {}  # what the attention rule needs to know: the block, the piece's first image row, the piece


def run_blocks(W, cfg, x, ks):
    """Blocks ks (double then single, counted from 0) on piece x (its txt, img, temb, cos, sin)."""
    H, nl = cfg["num_attention_heads"], cfg["num_layers"]
    for k in ks:
        CUR["layer"] = k
        if k < nl and x["txt"].shape[0] == 0:
            x["img"] = double_block_no_text(W, "transformer_blocks.%d" % k, x["img"], x["temb"], x["cos"], x["sin"], H)
        elif k < nl:
            x["txt"], x["img"] = nr.double_block(W, "transformer_blocks.%d" % k, x["img"], x["txt"], x["temb"],
                                                 x["cos"], x["sin"], H, {}, "d")
        else:
            x["txt"], x["img"] = nr.single_block(W, "single_transformer_blocks.%d" % (k - nl), x["img"], x["txt"],
                                                 x["temb"], x["cos"], x["sin"], H, {})


def forward_pieces(W, cfg, fwd, bands, attn, cache, thr):
    """bands: (first image row, rows, with text) in order. Block 0 on every band, then First Block Cache's
    decision (ParaAttention: r = block 0's change of the image rows, skip when
    sum|r_ref - r| / sum|r_ref| < thr, r_ref and the other blocks' effect from the last computed step),
    then the other blocks band after band. Returns the prediction [L, C]."""
    nb = cfg["num_layers"] + cfg["num_single_layers"]
    L = fwd["in.hidden_states"].shape[1]
    pieces = []
    nr.attention = attn
    try:
        for p, (r0, rn, with_text) in enumerate(bands):
            txt, img, temb, cos, sin = embed_rows(W, cfg, fwd, r0, rn, with_text)
            x = dict(txt=txt, img=img, temb=temb, cos=cos, sin=sin, r0=r0, p=p, e=img)
            CUR.update(r0=r0, p=p)
            run_blocks(W, cfg, x, [0])
            pieces.append(x)
        skip = False
        if cache is not None:
            r = np.concatenate([x["img"] - x["e"] for x in pieces])
            if cache.get("valid") and thr > 0:
                change = np.abs(cache["r_ref"] - r).sum() / np.abs(cache["r_ref"]).sum()
                skip = change < thr
                cache.setdefault("changes", []).append(round(float(change), 4))
            if not skip:
                cache["r_ref"], cache["valid"] = r, True
                cache.setdefault("rest", np.zeros((L, r.shape[1])))
        pred = np.zeros((L, cfg["in_channels"]))
        for x in pieces:
            h1, rows = x["img"].copy(), slice(x["r0"], x["r0"] + x["img"].shape[0])
            if skip:
                x["img"] = h1 + cache["rest"][rows]
            else:
                CUR.update(r0=x["r0"], p=x["p"])
                run_blocks(W, cfg, x, range(1, nb))
                if cache is not None:
                    cache["rest"][rows] = x["img"] - h1
            scale, shift = np.split(nr.linear(W, "norm_out.linear", nr.silu(x["temb"])), 2)
            pred[rows] = nr.linear(W, "proj_out", nr.layer_norm(x["img"]) * (1 + scale) + shift)
        return pred
    finally:
        nr.attention = EXACT_ATTENTION


def distrifusion_attention(state, step, warm, P, T):
    """state: layer -> (K, V) of the last step that ran the layer, whole sequence."""
    def attn(Q, K, V):
        l, S = CUR["layer"], Q.shape[0]
        if step < warm:
            out = EXACT_ATTENTION(Q, K, V)
        else:
            Kp, Vp = state[l]
            out = np.empty_like(Q)
            for j in range(P):
                rows = np.r_[chunk_start(T, P, j):chunk_start(T, P, j) + chunk_len(T, P, j),
                             T + chunk_start(S - T, P, j):T + chunk_start(S - T, P, j) + chunk_len(S - T, P, j)]
                Km, Vm = Kp.copy(), Vp.copy()
                Km[rows], Vm[rows] = K[rows], V[rows]
                out[rows] = EXACT_ATTENTION(Q[rows], Km, Vm)
        state[l] = (K.copy(), V.copy())
        return out
    return attn


def pipefusion_attention(state, T, L):
    """state: layer -> (K, V) buffers of the whole sequence, updated piece by piece."""
    def attn(Q, K, V):
        l, r0, p = CUR["layer"], CUR["r0"], CUR["p"]
        if l not in state:
            state[l] = (np.zeros((T + L,) + K.shape[1:]), np.zeros((T + L,) + V.shape[1:]))
        Kb, Vb = state[l]
        tn = T if p == 0 else 0
        Kb[:tn], Vb[:tn] = K[:tn], V[:tn]
        Kb[T + r0:T + r0 + K.shape[0] - tn], Vb[T + r0:T + r0 + K.shape[0] - tn] = K[tn:], V[tn:]
        return EXACT_ATTENTION(Q, Kb, Vb)
    return attn


def numpy_run(d, lat, H, Wd, steps, cfg_scale, method, P, warm, M, thr=0.0):
    Wt, cfg = nr.load_model(os.path.join(d, "transformer"))
    sc = json.load(open(os.path.join(d, "scheduler", "scheduler_config.json")))
    emb = nr.load_st(os.path.join(d, "embeds.safetensors"))[0]
    hh, ww = 2 * (H // 16), 2 * (Wd // 16)
    L, grid_w = (hh // 2) * (ww // 2), ww // 2
    T = emb["prompt_embeds"].shape[1]
    mu, ts, sig = nr.flux_sigmas(steps, L, sc)
    finals, changes = [], []
    for b in range(lat["latents.init"].shape[0]):
        x = lat["latents.init"][b].astype(np.float64)
        states = {1: {}, 0: {}}
        caches = {1: {} if thr > 0 else None, 0: {} if thr > 0 else None}
        for i in range(steps):
            def call(branch):
                pe = "prompt_embeds" if branch else "negative_prompt_embeds"
                pp = "pooled_prompt_embeds" if branch else "negative_pooled_prompt_embeds"
                fwd = {"in.hidden_states": x[None], "in.encoder_hidden_states": emb[pe][b:b + 1],
                       "in.pooled_projections": emb[pp][b:b + 1],
                       "in.timestep": np.array([np.float32(ts[i]) / np.float32(1000)]),
                       "in.img_ids": nr.latent_image_ids(hh // 2, ww // 2), "in.txt_ids": np.zeros((T, 3))}
                if cfg["guidance_embeds"]:
                    fwd["in.guidance"] = np.array([3.5])
                bands = [(0, L, True)]
                if method == "exact":
                    attn = EXACT_ATTENTION
                elif method == "distrifusion":
                    attn = distrifusion_attention(states[branch], i, warm, P, T)
                else:
                    attn = pipefusion_attention(states[branch], T, L)
                    n = 1 if i < warm else min(M, L // grid_w)
                    edge = [patch_boundary(T, L // grid_w, grid_w, n, k) for k in range(n + 1)]
                    bands = [(edge[k] * grid_w, (edge[k + 1] - edge[k]) * grid_w, k == 0) for k in range(n)]
                return forward_pieces(Wt, cfg, fwd, bands, attn, caches[branch], thr)

            v = call(1)
            if cfg_scale > 1:
                neg = call(0)
                v = neg + cfg_scale * (v - neg)
            x = x + (float(sig[i + 1]) - float(sig[i])) * v
        finals.append(x)
        changes += [caches[k].get("changes", []) for k in (1, 0) if caches[k] is not None]
    return np.stack(finals), changes


def pdit(np_, *args):
    cmd = (MPIRUN + ["-np", str(np_)] if np_ > 1 else []) + [PDIT] + [str(a) for a in args]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout[-2000:], r.stderr[-2000:])
        raise SystemExit("failed: %s" % " ".join(cmd))
    return r.stderr


def rms(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0 ** 2 / mse))


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def report(label, err, ok):
    print("  %-4s %-66s %.2e" % ("ok" if ok else "FAIL", label, err))
    if not ok:
        failures.append(label)


# (label, world size, pdit flags, method, P or stages, W, M, First Block Cache threshold)
CASES = [
    ("DistriFusion 2 bands, W=1", 2, ["--distrifusion-degree", 2], "distrifusion", 2, 1, 0, 0),
    ("DistriFusion 3 bands, W=2", 3, ["--distrifusion-degree", 3], "distrifusion", 3, 2, 0, 0),
    ("DistriFusion 2 bands x CFG pair, W=1", 4, ["--distrifusion-degree", 2, "--cfg-parallel"], "distrifusion",
     2, 1, 0, 0),
    ("PipeFusion 2 stages, 2 patches, W=1", 2, ["--pipefusion-degree", 2], "pipefusion", 2, 1, 2, 0),
    ("PipeFusion 2 stages, 3 patches, W=1", 2, ["--pipefusion-degree", 2, "--num-patches", 3], "pipefusion",
     2, 1, 3, 0),
    ("PipeFusion 3 stages, 3 patches, W=2", 3, ["--pipefusion-degree", 3], "pipefusion", 3, 2, 3, 0),
    ("PipeFusion 4 stages, 2 patches, W=1", 4, ["--pipefusion-degree", 4, "--num-patches", 2], "pipefusion",
     4, 1, 2, 0),
    ("PipeFusion 2 stages x Ulysses 2, 3 patches, W=1", 4,
     ["--pipefusion-degree", 2, "--ulysses-degree", 2, "--num-patches", 3], "pipefusion", 2, 1, 3, 0),
    ("PipeFusion 2 stages x ring 2, 2 patches, W=1", 4, ["--pipefusion-degree", 2, "--ring-degree", 2],
     "pipefusion", 2, 1, 2, 0),
    ("PipeFusion 2 stages x TP 2, 2 patches, W=1", 4, ["--pipefusion-degree", 2, "--tensor-parallel-degree", 2],
     "pipefusion", 2, 1, 2, 0),
    ("PipeFusion 2 stages x CFG pair, 2 patches, W=1", 4, ["--pipefusion-degree", 2, "--cfg-parallel"],
     "pipefusion", 2, 1, 2, 0),
    # First Block Cache on top: decided after block 0 of every patch, the skipped blocks' buffers kept
    ("First Block Cache, one process", 1, [], "exact", 1, 0, 0, FBC),
    ("First Block Cache, DistriFusion 2 bands, W=1", 2, ["--distrifusion-degree", 2], "distrifusion", 2, 1, 0,
     FBC),
    ("First Block Cache, PipeFusion 2 stages, 3 patches, W=1", 2, ["--pipefusion-degree", 2, "--num-patches", 3],
     "pipefusion", 2, 1, 3, FBC),
    ("First Block Cache, PipeFusion 2 stages x Ulysses 2, 3 patches, W=2", 4,
     ["--pipefusion-degree", 2, "--ulysses-degree", 2, "--num-patches", 3], "pipefusion", 2, 2, 3, FBC),
]


def main():
    nr.FREQS["table"] = nr.load_st(os.path.join(GOLDEN, "forward-dev-h64w48.safetensors"))[0]["emb.sinusoid_freqs"]
    H, Wd, steps, cfg_scale = 64, 80, 4, 3.0  # 4 x 5 latent token rows, 20 image tokens
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "m")
        subprocess.run([PDIT] + [str(a) for a in ["tiny", d, "--heads", 4, "--head-dim", 8, "--layers", 2,
                                                  "--single-layers", 2, "--txt-len", 7, "--batch", 2,
                                                  "--seed", 31]], check=True, capture_output=True)
        base = ["--model", d, "--embeds", os.path.join(d, "embeds.safetensors"), "-H", H, "-W", Wd,
                "-s", 5, "--true-cfg-scale", cfg_scale]
        one = os.path.join(tmp, "one.safetensors")
        pdit(1, "generate", *base, "--steps", steps, "--out-latents", one, "-o", os.path.join(tmp, "one.png"))
        lat1 = nr.load_st(one)[0]
        exact = numpy_run(d, lat1, H, Wd, steps, cfg_scale, "exact", 1, 0, 0)[0]
        report("one process against the NumPy model", rel(lat1["latents.final"], exact), rel(
            lat1["latents.final"], exact) <= TOL)
        for label, world, flags, method, P, warm, M, thr in CASES:
            out = os.path.join(tmp, "par.safetensors")
            extra = (["--warmup-steps", warm] if method != "exact" else []) + \
                (["--fbcache-threshold", thr] if thr else [])
            log = pdit(world, "generate", *base, "--steps", steps, *flags, *extra, "--out-latents", out,
                       "-o", os.path.join(tmp, "par.png"))
            got = nr.load_st(out)[0]["latents.final"]
            ref, changes = numpy_run(d, lat1, H, Wd, steps, cfg_scale, method, P, warm, M, thr)
            e = rel(got, ref)
            report("%s: against the NumPy model" % label, e, e <= TOL)
            if thr:
                # the model's changes, per call: none may sit so near the threshold that rounding decides
                skipped = sum(c < thr for cs in changes for c in cs)
                near = min(abs(c - thr) for cs in changes for c in cs)
                m = re.search(r"skipped (\d+) of (\d+)", log)
                print("       changes %s, threshold %g: %d calls skipped" % (changes, thr, skipped))
                report("%s: pdit skipped %s calls, the model %d" % (label, m.group(1) if m else "?", skipped),
                       near, m is not None and int(m.group(1)) == skipped and skipped > 0 and near > 1e-3)
            if method != "exact" and not thr:
                cost = rel(got, lat1["latents.final"])
                print("       difference from one process (staleness): %.2e" % cost)
                if not (np.isfinite(cost) and cost > 1e-4):
                    report("%s: differs from one process" % label, cost, False)

        # pieces larger than Open MPI's eager limit (4 KB on shared memory): sends complete only when
        # received, so a buffer reused too early shows; 3 stages, 3 patches, 256 x 192 (192 image tokens)
        big = list(base)
        big[big.index("-H") + 1], big[big.index("-W") + 1] = 256, 192
        one_big = os.path.join(tmp, "oneb.safetensors")
        pdit(1, "generate", *big, "--steps", 3, "--out-latents", one_big, "-o", os.path.join(tmp, "oneb.png"))
        latb = nr.load_st(one_big)[0]
        out = os.path.join(tmp, "parb.safetensors")
        pdit(3, "generate", *big, "--steps", 3, "--pipefusion-degree", 3, "--warmup-steps", 1, "--out-latents", out,
             "-o", os.path.join(tmp, "parb.png"))
        ref, _ = numpy_run(d, latb, 256, 192, 3, cfg_scale, "pipefusion", 3, 1, 3)
        e = rel(nr.load_st(out)[0]["latents.final"], ref)
        report("PipeFusion 3 stages, 3 patches, 256x192, W=1: against the NumPy model", e, e <= TOL)

        # the price of staleness by warm-up length: latents (relative RMS difference) and pictures (PSNR)
        # against one process, over 8 steps; it must fall as W grows and vanish at W = steps
        steps = 8
        one = os.path.join(tmp, "one8.safetensors")
        pdit(1, "generate", *base, "--steps", steps, "--out-latents", one, "-o", os.path.join(tmp, "one8.png"))
        ref_lat = nr.load_st(one)[0]["latents.final"]
        ref_png = [read_png(os.path.join(tmp, "one8-%d.png" % b)) for b in range(2)]
        for label, flags in (("PipeFusion 2 stages, 2 patches", ["--pipefusion-degree", 2]),
                             ("DistriFusion 2 bands", ["--distrifusion-degree", 2])):
            print("%s, %d steps: W, relative RMS difference of the latents, PSNR of the pictures" % (label, steps))
            last = None
            for warm in (1, 2, 4, 6, steps):
                out = os.path.join(tmp, "w.safetensors")
                pdit(2, "generate", *base, "--steps", steps, *flags, "--warmup-steps", warm, "--out-latents", out,
                     "-o", os.path.join(tmp, "w.png"))
                diff = rms(nr.load_st(out)[0]["latents.final"], ref_lat)
                db = min(psnr(read_png(os.path.join(tmp, "w-%d.png" % b)), ref_png[b]) for b in range(2))
                print("       W = %d: %.3e  %.1f dB" % (warm, diff, db))
                if warm == steps:
                    report("%s, W = %d (every step): equal to one process" % (label, warm), diff, diff <= 1e-5)
                else:
                    report("%s, W = %d: finite, below the shorter warm-up's" % (label, warm), diff,
                           bool(np.isfinite(diff)) and diff > 0 and (last is None or diff < last))
                    last = diff
    print("ALL OK" if not failures else "FAILED: %s" % ", ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
