#!/usr/bin/env python3
"""One FLUX.1 transformer step in PyTorch bf16, written from the model's
published definition (diffusers' FluxTransformer2DModel: 19 double-stream and
38 single-stream blocks, width 3072, 24 heads of 128, MLP 12288, RoPE over
16/56/56 channels, scaled_dot_product_attention), random weights on the GPU:
the baseline pdit's CUDA step is timed against on the same device, in the
same run (scripts/device-check.sh). Also the device's bf16 matrix-product
rate (8192^3), which the step's achieved TFLOP/s is compared with.

usage: torch_flux_step.py [--size 1024] [--steps 5] [--double 19] [--single 38] [--json FILE]
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F

D, H, HD, MLP = 3072, 24, 128, 12288


def lin(i, o, bias=True):
    w = torch.randn(o, i, device="cuda", dtype=torch.bfloat16) * (1.0 / math.sqrt(i))
    b = torch.randn(o, device="cuda", dtype=torch.bfloat16) * 0.02 if bias else None
    return (w, b)


def run(l, x):
    return F.linear(x, l[0], l[1])


def rms(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope(x, cos, sin):
    # x [B, H, S, HD], interleaved pairs as FLUX's apply_rotary_emb
    xr = x.float().reshape(*x.shape[:-1], -1, 2)
    a, b = xr[..., 0], xr[..., 1]
    c, s = cos[..., 0::2], sin[..., 0::2]
    out = torch.stack((a * c - b * s, b * c + a * s), dim=-1)
    return out.flatten(-2).to(x.dtype)


def ln(x, eps=1e-6):
    return F.layer_norm(x, (x.shape[-1],), eps=eps)


class Double:
    def __init__(self):
        self.mod, self.cmod = lin(D, 6 * D), lin(D, 6 * D)
        self.q, self.k, self.v = lin(D, D), lin(D, D), lin(D, D)
        self.aq, self.ak, self.av = lin(D, D), lin(D, D), lin(D, D)
        self.nq, self.nk, self.naq, self.nak = [torch.ones(HD, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
        self.out, self.aout = lin(D, D), lin(D, D)
        self.ff1, self.ff2, self.cff1, self.cff2 = lin(D, MLP), lin(MLP, D), lin(D, MLP), lin(MLP, D)

    def __call__(self, img, txt, temb, cos, sin):
        B, L, T = img.shape[0], img.shape[1], txt.shape[1]
        m = run(self.mod, F.silu(temb)).chunk(6, -1)
        cm = run(self.cmod, F.silu(temb)).chunk(6, -1)
        xi = ln(img) * (1 + m[1][:, None]) + m[0][:, None]
        xt = ln(txt) * (1 + cm[1][:, None]) + cm[0][:, None]

        def heads(t):
            return t.view(B, -1, H, HD).transpose(1, 2)
        q = torch.cat((rms(heads(run(self.aq, xt)), self.naq), rms(heads(run(self.q, xi)), self.nq)), 2)
        k = torch.cat((rms(heads(run(self.ak, xt)), self.nak), rms(heads(run(self.k, xi)), self.nk)), 2)
        v = torch.cat((heads(run(self.av, xt)), heads(run(self.v, xi))), 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T + L, D)
        img = img + m[2][:, None] * run(self.out, a[:, T:])
        txt = txt + cm[2][:, None] * run(self.aout, a[:, :T])
        img = img + m[5][:, None] * run(self.ff2, F.gelu(run(self.ff1, ln(img) * (1 + m[4][:, None]) + m[3][:, None]), approximate="tanh"))
        txt = txt + cm[5][:, None] * run(self.cff2, F.gelu(run(self.cff1, ln(txt) * (1 + cm[4][:, None]) + cm[3][:, None]), approximate="tanh"))
        return img, txt


class Single:
    def __init__(self):
        self.mod = lin(D, 3 * D)
        self.q, self.k, self.v = lin(D, D), lin(D, D), lin(D, D)
        self.nq, self.nk = [torch.ones(HD, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
        self.mlp = lin(D, MLP)
        self.out = lin(D + MLP, D)

    def __call__(self, x, temb, cos, sin):
        B, S = x.shape[0], x.shape[1]
        m = run(self.mod, F.silu(temb)).chunk(3, -1)
        n = ln(x) * (1 + m[1][:, None]) + m[0][:, None]

        def heads(t):
            return t.view(B, -1, H, HD).transpose(1, 2)
        q, k = rope(rms(heads(run(self.q, n)), self.nq), cos, sin), rope(rms(heads(run(self.k, n)), self.nk), cos, sin)
        a = F.scaled_dot_product_attention(q, k, heads(run(self.v, n))).transpose(1, 2).reshape(B, S, D)
        h = torch.cat((a, F.gelu(run(self.mlp, n), approximate="tanh")), -1)
        return x + m[2][:, None] * run(self.out, h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--double", type=int, default=19)
    ap.add_argument("--single", type=int, default=38)
    ap.add_argument("--txt", type=int, default=512)
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.cuda.get_device_name()
    # the device's bf16 matrix-product rate
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        x @ x
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        x @ x
    torch.cuda.synchronize()
    rate = 10 * 2 * 8192 ** 3 / (time.perf_counter() - t) / 1e12
    del x
    L, T = (a.size // 16) ** 2, a.txt
    S = L + T
    xe, ce, te, ge, pe = lin(64, D), lin(4096, D), (lin(256, D), lin(D, D)), (lin(256, D), lin(D, D)), (lin(768, D), lin(D, D))
    doubles = [Double() for _ in range(a.double)]
    singles = [Single() for _ in range(a.single)]
    no, po = lin(D, 2 * D), lin(D, 64)
    lat = torch.randn(1, L, 64, device="cuda", dtype=torch.bfloat16)
    ctx = torch.randn(1, T, 4096, device="cuda", dtype=torch.bfloat16)
    pooled = torch.randn(1, 768, device="cuda", dtype=torch.bfloat16)
    ang = torch.randn(S, HD, device="cuda")
    cos, sin = ang.cos(), ang.sin()

    def tproj(v):
        half = 128
        f = torch.exp(-math.log(10000) * torch.arange(half, device="cuda") / half)
        e = v * 1000 * f
        return torch.cat((e.cos(), e.sin()))[None].to(torch.bfloat16)

    def step():
        temb = run(te[1], F.silu(run(te[0], tproj(0.5)))) + run(ge[1], F.silu(run(ge[0], tproj(0.0035)))) + \
            run(pe[1], F.silu(run(pe[0], pooled)))
        img, txt = run(xe, lat), run(ce, ctx)
        for b in doubles:
            img, txt = b(img, txt, temb, cos, sin)
        x = torch.cat((txt, img), 1)
        for b in singles:
            x = b(x, temb, cos, sin)
        m = run(no, F.silu(temb)).chunk(2, -1)
        return run(po, ln(x[:, T:]) * (1 + m[1][:, None]) + m[0][:, None])

    with torch.no_grad():
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(a.steps):
            t = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
    times.sort()
    med = times[len(times) // 2]
    # products and attention, as pdit counts them (2 per multiply-add)
    flop = 2.0 * (a.double * (L * (4 * D * D + 2 * D * MLP) + T * (4 * D * D + 2 * D * MLP))
                  + a.single * S * (3 * D * D + D * MLP + (D + MLP) * D)) + 4.0 * S * S * D * (a.double + a.single)
    res = {"device": dev, "size": a.size, "double": a.double, "single": a.single, "txt": T,
           "step_s": med, "tflops": flop / med / 1e12, "matmul_tflops": rate,
           "peak_gb": torch.cuda.max_memory_allocated() / 1e9}
    print(json.dumps(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
