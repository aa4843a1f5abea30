#!/usr/bin/env python3
"""`pdit plan` against what pdit does, on a tiny model of random sizes.

1. For 2 and 4 processes, the bytes plan predicts per rank and step equal the bytes `pdit bench`
   measures for the same mesh (every mesh plan lists, PipeFusion and DistriFusion included), within 2%
   (sizes that split evenly; the few small collectives the model leaves out stay below that).
2. plan lists only valid meshes: the degrees multiply to the devices, tp x ulysses divide the heads,
   cfg only with true CFG; and ranks them by predicted seconds.
3. Impossible requests are refused with the reason: no mesh that fits the memory, bad numbers,
   unknown presets, --parallel given with degrees.
4. Nodes: with --per-node equal to the devices nothing crosses between nodes; with one device a node
   everything a rank sends does; in between, a mesh whose only split axis (tensor parallel, the fastest)
   fits in a node sends nothing between nodes. s/run = steps x s/step + the decode. --one-machine
   (namespaces of this machine): compute as when all share one node, bytes between nodes as when apart.
   The weights' time whatever the rows: (1 - 1/P) of a product's on sequence parallel P, the same per
   weight on every mesh.
5. The memory bandwidth bounds a step: compute seconds >= the rank's weights read once per forward pass;
   tensor parallel adds the elementwise passes each shard repeats over its rows (10 per double block,
   5 per single, (1 - 1/T) of them at the memory bandwidth), counted here from the config.
6. The text encoders' weights (a --full tiny model) equal the tensors of their safetensors headers
   without the token tables, at 2 bytes for bf16; memory per rank is at least that.
7. The VAE decode's work (its seconds at --gflops 1 on one device) equals a count from the decoder's weight
   shapes: 2 x out x in x k x k x pixels for every convolution at its block's resolution, the mid
   attention's four projections and 4 (h w)^2 c; on 4 devices of data parallel over 4 images it is
   the same per picture, on 4 in one group the bands divide it (exchanges aside).
8. `pdit generate --parallel auto` on 2 processes picks an exact mesh, says it was the cost model's,
   and gives the single-process latents (1e-5).
9. Wan2.1 (random heads, frames and size): as 1, every mesh of 2 processes and five of 4 (one with
   tensor parallel, one with PipeFusion); a tensor-parallel degree that divides the heads but not the FFN is neither
   planned nor run.
10. --lora: the adapter file's bytes in the weights a rank holds (its layers' share); -r: a Kontext
   reference of the picture's size costs what a picture twice as tall does; one not of whole rows
   leaves PipeFusion out.

    cli_plan.py PDIT MPIRUN...
"""
import array
import json
import os
import random
import subprocess
import sys
import tempfile

PDIT, MPIRUN = sys.argv[1], sys.argv[2:]
failures = []
AXES = ["dp", "cfg", "pp", "ring", "ulysses", "tp"]
FLAGS = {"dp": "--data-parallel-degree", "pp": "--pipefusion-degree", "ring": "--ring-degree",
         "ulysses": "--ulysses-degree", "tp": "--tensor-parallel-degree", "distrifusion": "--distrifusion-degree"}


def report(ok, label):
    print("  %-4s %s" % ("ok" if ok else "FAIL", label))
    if not ok:
        failures.append(label)


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


def header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)), 8 + n


def latents(path):
    h, off = header(path)
    t = h["latents.final"]
    assert t["dtype"] == "F32"
    a = array.array("f")
    with open(path, "rb") as f:
        f.seek(off + t["data_offsets"][0])
        a.frombytes(f.read(t["data_offsets"][1] - t["data_offsets"][0]))
    return a


def plan_rows(*args):
    r = run(PDIT, "plan", *args, "--json")
    if r.returncode:
        report(False, "plan %s: %s" % (args, r.stderr.strip()))
        return []
    return [json.loads(x) for x in r.stdout.splitlines()]


def degrees(mesh):
    return dict((k, int(v)) for k, v in (p.split("=") for p in mesh.split()))


def bench_bytes(label, np_, x, bench_args):
    """Runs pdit bench on NP_ processes on plan row X's mesh and reports its bytes per rank and step
    against the plan's prediction (2%)."""
    d = degrees(x["mesh"])
    flags = []
    for k, v in d.items():
        if v > 1 and k in FLAGS:
            flags += [FLAGS[k], v]
    if d["cfg"] > 1:
        flags += ["--cfg-parallel"]
    if "distrifusion" in d or d["pp"] > 1:
        flags += ["--warmup-steps", 1, "--warmup", 2]
    b = run(*MPIRUN, "-np", np_, PDIT, "bench", *bench_args, "--steps", 1, "--json", *flags)
    lines = [y for y in b.stdout.splitlines() if y.startswith("{")]
    if b.returncode or len(lines) != 1:
        report(False, "%s%s: bench failed: %s" % (label, x["mesh"], b.stderr.strip().splitlines()[-1:]))
        return
    j = json.loads(lines[0])
    got, want = j["bytes_sent_per_rank_per_step"], x["bytes_sent_per_rank_per_step"]
    report(j["mesh"] == x["mesh"] and abs(got - want) <= 0.02 * max(want, 1),
           "%s%s: bench sent %d bytes per rank and step, plan predicted %d" % (label, x["mesh"], got, want))
    return j


def wan_bytes(rnd, tmp):
    """9: a Wan2.1 folder of random sizes: the meshes plan lists for 2 and 4 processes send the bytes
    bench measures (the text is whole on every rank, only video rows travel; tensor parallel adds the
    RMSNorm's sums of squares), and the plan names the video and its decode."""
    heads = rnd.choice([4, 8])
    H, W = 16 * 2 * rnd.randint(10, 12), 16 * 2 * rnd.randint(10, 12)
    frames = rnd.choice([5, 9])
    m = os.path.join(tmp, "wan")
    r = run(PDIT, "tiny", m, "--family", "wan", "--heads", heads, "--head-dim", 8, "--layers", rnd.randint(2, 3),
            "--ffn-dim", 48, "--wan-vae-base", 4, "--umt5-layers", 1)
    if r.returncode:
        report(False, "pdit tiny --family wan: " + r.stderr.strip())
        return
    print("Wan model: %d heads, %d frames of %dx%d" % (heads, frames, W, H))
    size = ["--frames", frames, "-H", H, "-W", W]
    r = run(PDIT, "plan", "--model", m, "--devices", 2, "--gflops", 100, *size)
    report(r.returncode == 0 and ("frames %d" % frames) in r.stdout and "a video" in r.stdout and
           "x 2 branches" in r.stdout, "plan names the video, its decode and Wan's two CFG branches")
    for np_ in (2, 4):
        rows = plan_rows("--model", m, "--devices", np_, *size, "--dtype", "f32", "--gflops", 100)
        report(any(degrees(x["mesh"])["tp"] > 1 for x in rows) and any(degrees(x["mesh"])["pp"] > 1 for x in rows),
               "Wan plan %d devices: %d meshes, tensor parallel and PipeFusion among them" % (np_, len(rows)))
        if np_ > 2:
            # a random five of the 4-process meshes (three under the sanitizers), always one with
            # tensor parallel and one with PipeFusion (every mesh costs a bench run: minutes under
            # the sanitizers)
            tp = [x for x in rows if degrees(x["mesh"])["tp"] > 1]
            pp = [x for x in rows if degrees(x["mesh"])["pp"] > 1]
            rest = [x for x in rows if x is not tp[0] and x is not pp[0]]
            more = 1 if "ASAN_OPTIONS" in os.environ else 3
            rows = [tp[0], pp[0]] + rnd.sample(rest, min(more, len(rest)))
        for x in rows:
            bench_bytes("Wan ", np_, x, ["--model", m, "-p", "a fox", *size, "--dtype", "f32"])
    # a Q8_0 file on int8 products (with VNNI): tensor parallel gathers whole inputs and the
    # RMSNorm's whole rows instead of summing
    q = os.path.join(tmp, "wan-q8.gguf")
    r = run(PDIT, "quantize", os.path.join(m, "transformer"), q, "--type", "q8_0")
    report(r.returncode == 0, "a Q8_0 file of the Wan model" + (": " + r.stderr.strip() if r.returncode else ""))
    qargs = ["--diffusion-model", q, "--config", os.path.join(m, "transformer", "config.json"), "--dtype", "bf16"]
    for x in [x for x in plan_rows("--model", m, *qargs, "--devices", 2, *size, "--gflops", 100)
              if degrees(x["mesh"])["tp"] == 2]:
        bench_bytes("Wan Q8_0 ", 2, x, ["--model", m, "-p", "a fox", *qargs, *size])
    # tensor parallel splits the FFN too: a degree that divides the heads but not the FFN is no mesh
    m2 = os.path.join(tmp, "wan-ffn")
    r = run(PDIT, "tiny", m2, "--family", "wan", "--heads", 4, "--head-dim", 8, "--layers", 1, "--ffn-dim", 50,
            "--wan-vae-base", 4, "--umt5-layers", 1)
    rows = plan_rows("--model", m2, "--devices", 4, "--frames", 5, "-H", 64, "-W", 64, "--gflops", 100) if not r.returncode else []
    report(rows and not any(degrees(x["mesh"])["tp"] == 4 for x in rows) and
           any(degrees(x["mesh"])["tp"] == 2 for x in rows), "Wan FFN 50 over 4 heads: tp=2 planned, tp=4 not")
    g = run(*MPIRUN, "-np", 4, PDIT, "generate", "--model", m2, "-p", "a fox", "--frames", 5, "-H", 64, "-W", 64,
            "--steps", 1, "--tensor-parallel-degree", 4, "-o", os.path.join(tmp, "x.mp4"))
    report(g.returncode != 0 and "does not divide the model's 50 MLP columns" in g.stderr and
           not os.path.exists(os.path.join(tmp, "x.mp4")), "--tensor-parallel-degree 4 refused: %s" %
           [x for x in g.stderr.splitlines() if "MLP" in x][:1])


def write_png(path, w, h):
    import struct
    import zlib
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(b"".join(b"\0" + b"\x80" * 3 * w for _ in range(h)))) +
                chunk(b"IEND", b""))


def adapters_and_references(m, H, W, T, tmp):
    """10. A LoRA's file counted in the weights a rank holds (all of it on one rank, a tensor-parallel
    rank less); a Kontext reference of the picture's size costs what a picture twice as tall does
    (its tokens join every call's sequence: the same FLOPs, bytes and activations), and one whose
    tokens are not whole rows of the picture's width leaves PipeFusion out."""
    common = ("--model", m, "--devices", 2, "-H", H, "-W", W, "--txt-len", T, "--gflops", 100, "--dtype", "f32")
    lora = os.path.join(tmp, "adapter.safetensors")
    with open(lora, "wb") as f:
        f.truncate(8 * 10**6)
    bare = {x["mesh"]: x for x in plan_rows(*common)}
    with_lora = {x["mesh"]: x for x in plan_rows(*common, "--lora", lora + ":0.8")}
    one, tp = "dp=1 cfg=1 pp=1 ring=1 ulysses=2 tp=1", "dp=1 cfg=1 pp=1 ring=1 ulysses=1 tp=2"
    if one in bare and tp in bare and bare.keys() == with_lora.keys():
        d1 = with_lora[one]["weights_gb"] - bare[one]["weights_gb"]
        d2 = with_lora[tp]["weights_gb"] - bare[tp]["weights_gb"]
        report(abs(d1 - 0.008) < 1e-5 and 0.004 <= d2 < d1,
               "--lora (an 8 MB file): +%.4g GB a Ulysses rank (all of it), +%.4g GB a tensor-parallel one" % (d1, d2))
    else:
        report(False, "plan with --lora: the meshes %s" % sorted(with_lora))
    r = run(PDIT, "plan", *common, "--lora", os.path.join(tmp, "none.safetensors"))
    report(r.returncode != 0 and "none.safetensors" in r.stderr, "--lora of no file: %s" % r.stderr.strip())
    same, narrow = os.path.join(tmp, "ref.png"), os.path.join(tmp, "ref-narrow.png")
    write_png(same, W, H)
    # (one row of W/16 - 1 tokens, rounded down from 23 pixels: never whole rows of W/16)
    write_png(narrow, W - 16, 23)
    ref = {x["mesh"]: x for x in plan_rows(*common, "-r", same)}
    tall_args = list(common)
    tall_args[tall_args.index("-H") + 1] = 2 * H
    tall = {x["mesh"]: x for x in plan_rows(*tall_args)}
    keys = ("gflop_per_rank", "bytes_sent_per_rank_per_step", "activations_gb", "weights_gb")
    ok = len(ref) > 0 and ref.keys() == tall.keys() and any(degrees(k)["pp"] > 1 for k in ref)
    for k in ref.keys() & tall.keys():
        ok &= all(abs(ref[k][f] - tall[k][f]) <= 1e-9 * max(1, abs(tall[k][f])) for f in keys)
    report(ok, "-r, a %dx%d reference: every mesh's FLOPs, bytes, activations as a %dx%d picture's (%d meshes)"
           % (W, H, W, 2 * H, len(ref)))
    text = run(PDIT, "plan", *common, "-r", same).stdout
    n = (W // 16) * (H // 16)
    report(" + %d reference tokens" % n in text, "the plan's header counts the %d reference tokens" % n)
    rows = plan_rows(*common, "-r", narrow)
    report(len(rows) > 0 and all(degrees(x["mesh"])["pp"] == 1 for x in rows),
           "-r, a %dx%d reference (not whole rows of %d tokens): no PipeFusion mesh among %d"
           % (W - 16, 23, W // 16, len(rows)))


def main():
    seed = int(os.environ.get("PDIT_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
    print("seed %d (PDIT_TEST_SEED to repeat)" % seed)
    rnd = random.Random(seed)
    # sizes that split evenly over 4 ranks, and long enough (1000+ tokens) that the few small
    # collectives the model leaves out (modulation gathers, agreement flags) stay under 2%
    heads = rnd.choice([4, 8])
    H, W = 16 * 4 * rnd.randint(4, 6), 16 * 4 * rnd.randint(4, 5)
    with tempfile.TemporaryDirectory() as tmp:
        m = os.path.join(tmp, "m")
        r = run(PDIT, "tiny", m, "--heads", heads, "--head-dim", 8, "--layers", rnd.randint(1, 2),
                "--single-layers", rnd.randint(2, 4), "--txt-len", 4 * rnd.randint(4, 16))
        if r.returncode:
            print(r.stderr)
            sys.exit(1)
        embeds = os.path.join(m, "embeds.safetensors")
        txt = json.loads(open(embeds, "rb").read()[8:8 + int.from_bytes(open(embeds, "rb").read(8), "little")])
        T = txt["prompt_embeds"]["shape"][1]
        print("model: %d heads, %dx%d, %d text tokens" % (heads, W, H, T))
        for np_, extra in ((2, []), (4, []), (2, ["--true-cfg-scale", "2"])):
            r = run(PDIT, "plan", "--model", m, "--devices", np_, "-H", H, "-W", W, "--txt-len", T, "--dtype", "f32",
                    "--gflops", 100, "--json", *extra)
            if r.returncode:
                report(False, "plan %d devices %s: %s" % (np_, extra, r.stderr.strip()))
                continue
            rows = [json.loads(x) for x in r.stdout.splitlines()]
            secs = [x["seconds_per_step"] for x in rows]
            report(secs == sorted(secs), "plan %d devices %s: %d meshes ranked by predicted time" %
                   (np_, extra, len(rows)))
            for x in rows:
                d = degrees(x["mesh"])
                prod = 1
                for v in d.values():
                    prod *= v
                valid = prod == np_ and heads % (d["tp"] * d["ulysses"]) == 0 and (d["cfg"] == 1 or extra)
                report(valid, "%s: a valid mesh" % x["mesh"])
                bench_bytes("", np_, x, ["--model", m, "-H", H, "-W", W, *extra])
        # tensor parallel on a quantized file: on int8 products (auto with bf16 on a VNNI CPU) its
        # row-parallel layers gather their inputs and outputs instead of summing (more bytes),
        # otherwise it sums; either way the run sends what the plan counts
        q = os.path.join(tmp, "q8.gguf")
        r = run(PDIT, "quantize", os.path.join(m, "transformer"), q, "--type", "q8_0")
        report(r.returncode == 0, "a Q8_0 file of the model" + (": " + r.stderr.strip() if r.returncode else ""))
        qargs = ["--diffusion-model", q, "--config", os.path.join(m, "transformer", "config.json"), "--dtype", "bf16"]
        rows = plan_rows("--model", m, *qargs, "--devices", 2, "-H", H, "-W", W, "--txt-len", T, "--gflops", 100)
        tp = [x for x in rows if degrees(x["mesh"])["tp"] == 2]
        report(len(tp) == 1, "plan of the Q8_0 file: a tensor-parallel mesh")
        for x in tp:
            bench_bytes("Q8_0 ", 2, x, ["--model", m, *qargs, "-H", H, "-W", W])
        # the products named: int8 gathers the row-parallel layers' inputs whole, decoded (bf16)
        # products sum their shards and hold the file's blocks; each run sends what its plan counts
        named = {}
        for qp in ("int8", "bf16"):
            rows = plan_rows("--model", m, *qargs, "--devices", 2, "-H", H, "-W", W, "--txt-len", T, "--gflops", 100,
                             "--quant-products", qp)
            named[qp] = [x for x in rows if degrees(x["mesh"])["tp"] == 2]
            for x in named[qp]:
                bench_bytes("Q8_0 %s products " % qp, 2, x, ["--model", m, *qargs, "-H", H, "-W", W,
                                                             "--quant-products", qp])
        report(len(named["int8"]) == len(named["bf16"]) == 1 and
               named["int8"][0]["bytes_sent_per_rank_per_step"] > named["bf16"][0]["bytes_sent_per_rank_per_step"],
               "plan --quant-products: tensor parallel sends more on int8 products (%s) than decoded (%s)" %
               ([x["bytes_sent_per_rank_per_step"] for x in named["int8"]],
                [x["bytes_sent_per_rank_per_step"] for x in named["bf16"]]))
        # ring attention's forms (auto: gathered on int8 products): the same bytes; the gathered
        # one's whole-sequence K/V counted (an upper bound: the merged form's chunk buffers are not
        # taken off), so the plan adds at least what bench's backend held more
        form, held = {}, {}
        for f in ("merged", "gathered"):
            rows = plan_rows("--model", m, *qargs, "--devices", 2, "-H", H, "-W", W, "--txt-len", T, "--gflops", 100,
                             "--quant-products", "int8", "--ring-attention", f)
            form[f] = dict((x["mesh"], x) for x in rows)
            ring = [x for x in rows if degrees(x["mesh"]).get("ring", 1) == 2]
            j = ring and bench_bytes("Q8_0 int8 products, ring %s " % f, 2, ring[0],
                                     ["--model", m, *qargs, "-H", H, "-W", W, "--quant-products", "int8",
                                      "--ring-attention", f])
            report(bool(j) and j["ring_attention"] == f, "bench --ring-attention %s: %s" % (f, j and j["ring_attention"]))
            held[f] = (ring[0]["activations_gb"] * 1e3, j["activations_mb"]) if j else (0, 1e9)
        report(held["gathered"][0] - held["merged"][0] >= max(held["gathered"][1] - held["merged"][1], 1e-9),
               "plan --ring-attention gathered adds %.3f MB of activations, bench's backend held %.3f MB more" %
               (held["gathered"][0] - held["merged"][0], held["gathered"][1] - held["merged"][1]))
        more = [k for k in form["merged"] if form["gathered"][k]["activations_gb"] > form["merged"][k]["activations_gb"]]
        report(len(form["merged"]) > 2 and form["merged"].keys() == form["gathered"].keys() and
               [degrees(k)["ring"] for k in more] == [2] * len(more) and len(more) == 1,
               "plan --ring-attention gathered holds more only on the ring mesh (%s)" % more)
        # the int8 layers' speed (given: a timed one is a timing): their weights' share of the linear
        # work runs that many times the rate, attention and the rest as before; none on decoded products
        comp = {}
        for qp, s in (("int8", 1), ("int8", 2), ("int8", 4), ("bf16", 2)):
            rows = plan_rows("--model", m, *qargs, "--devices", 1, "-H", H, "-W", W, "--txt-len", T, "--gflops", 100,
                             "--quant-products", qp, "--int8-speed", s)
            comp[qp, s] = rows[0] if len(rows) == 1 else None
        ok = all(comp.values())
        if ok:
            c1, c2, c4, d2 = (comp[k]["compute_seconds"] for k in (("int8", 1), ("int8", 2), ("int8", 4), ("bf16", 2)))
            # t(s) = a + b / s: from s = 1 and 2, s = 4 follows
            b = 2 * (c1 - c2)
            ok = c1 > c2 > c4 > c1 / 4 and abs(c4 - (c1 - b + b / 4)) <= 5e-5 * c1 and d2 == c1 and \
                comp["int8", 2]["int8_speed"] == 2 and comp["bf16", 2]["int8_speed"] == 0
        report(ok, "plan --int8-speed: the int8 layers' work at that speed, the rest as the rate (compute %s)" %
               {"%s %s" % k: v and v["compute_seconds"] for k, v in comp.items()})
        rows = plan_rows("--model", m, *qargs, "--devices", 1, "-H", H, "-W", W, "--txt-len", T, "--quant-products",
                         "int8", "--matmul-gflops", 100, "--weight-ns", 0)
        report(len(rows) == 1 and rows[0]["int8_speed"] > 0, "plan on this machine times the int8 layers' "
               "products (%s x a bf16 product's rate)" % [x["int8_speed"] for x in rows])
        for bad, word in ((["--quant-products", "int4"], "int4"), (["--quant-products", "int8", "--device", "h100"],
                                                                    "GPU"), (["--int8-speed", 2, "--device", "h100"],
                                                                             "GPU"), (["--int8-speed", 0], "above 0"),
                          (["--quant-products", "int4", "--device", "h100"], "int4")):
            r = run(PDIT, "plan", "--model", m, *qargs, "--devices", 2, "-H", H, "-W", W, *bad)
            report(r.returncode != 0 and bad[0] in r.stderr and word in r.stderr,
                   "plan %s refused: %s" % (" ".join(map(str, bad)), r.stderr.strip()))
        # 4. nodes
        for k, check in ((8, "nothing between nodes"), (1, "everything between nodes")):
            rows = plan_rows("--model", m, "--devices", 8, "-H", H, "-W", W, "--txt-len", T, "--device", "h100",
                             "--per-node", k, "--steps", 7)
            ok = len(rows) > 0
            for x in rows:
                ok &= abs(x["seconds_per_run"] - 7 * x["seconds_per_step"] - x["vae_seconds"]) <= 1e-5 * x["seconds_per_run"]
                ok &= x["bytes_between_nodes"] == (0 if k == 8 else x["bytes_sent_per_rank_per_step"])
            report(ok, "per node %d: %s, s/run = 7 x s/step + VAE (%d meshes)" % (k, check, len(rows)))
        rows = plan_rows("--model", m, "--devices", 4, "-H", H, "-W", W, "--txt-len", T, "--gflops", 1000,
                         "--per-node", 2)
        tp2 = [x for x in rows if x["mesh"] == "dp=1 cfg=1 pp=1 ring=2 ulysses=1 tp=2"]
        ring4 = [x for x in rows if x["mesh"] == "dp=1 cfg=1 pp=1 ring=4 ulysses=1 tp=1"]
        report(len(tp2) == 1 and len(ring4) == 1 and 0 < tp2[0]["bytes_between_nodes"] <
               tp2[0]["bytes_sent_per_rank_per_step"] and ring4[0]["bytes_between_nodes"] ==
               ring4[0]["bytes_sent_per_rank_per_step"],
               "2 a node: ring 2 x tp 2 sends its ring hops between nodes and its all-reduces within, ring 4 all between")
        # nodes that are namespaces of this machine (tests/hosts): one process a node computes as
        # when the four share one node's cores (tensor parallel aside: its elementwise rate is timed
        # anew by each plan), and sends between nodes what one a node on separate machines sends
        common = ("--model", m, "--devices", 4, "-H", H, "-W", W, "--txt-len", T, "--matmul-gflops", 100)
        here = {x["mesh"]: x for x in plan_rows(*common)}
        apart = {x["mesh"]: x for x in plan_rows(*common, "--per-node", 1, "--inter-bandwidth", 0.1)}
        one = {x["mesh"]: x for x in plan_rows(*common, "--per-node", 1, "--one-machine", "--inter-bandwidth", 0.1)}
        ok, seen = len(one) > 0 and one.keys() == here.keys() == apart.keys(), 0
        for mesh, x in one.items():
            if ok and degrees(mesh)["tp"] == 1:
                seen += 1
                # (the weights' time per weight is timed anew by each plan; JSON's 6 digits of each)
                h = here[mesh]
                bare = x["compute_seconds"] - x["weight_seconds"]
                ok &= abs(bare - (h["compute_seconds"] - h["weight_seconds"])) <= 1e-5 * (
                    x["compute_seconds"] + x["weight_seconds"] + h["compute_seconds"] + h["weight_seconds"])
                ok &= bare > 1.5 * (apart[mesh]["compute_seconds"] - apart[mesh]["weight_seconds"])
                ok &= x["bytes_between_nodes"] == apart[mesh]["bytes_between_nodes"] == x["bytes_sent_per_rank_per_step"]
        report(ok and seen > 0, "--one-machine: %d meshes compute as on one node's cores, send as on separate "
               "nodes" % seen)
        # what a product spends on its weights whatever its rows (timed here): a rank of sequence
        # parallel P runs 1/P of the rows through all its weights, so it pays (1 - 1/P) of a
        # product's weight time beyond the rate (held at the whole sequence); the same figure per
        # weight on every mesh of the plan, none without sequence parallel, PipeFusion's patches more
        # (a figure given, so that the check does not rest on a timing: the timed one is checked above)
        given = {x["mesh"]: x for x in plan_rows(*common, "--weight-ns", 0.5)}
        ok, seen, per = len(given) > 0 and all(x["weight_seconds"] >= 0 for x in here.values()), 0, set()
        for mesh, x in given.items():
            d = degrees(mesh)
            P = d.get("ring", d.get("distrifusion", 1)) * d["ulysses"]
            if d["pp"] > 1:
                ok &= x["weight_seconds"] > 0
            elif P == 1:
                ok &= x["weight_seconds"] == 0
            else:
                seen += 1
                per.add(round(x["weight_seconds"] / ((1 - 1 / P) * x["weights_gb"]), 9))
                ok &= x["weight_seconds"] > 0 and x["weight_seconds"] < x["compute_seconds"]
        spread = (max(per) - min(per)) / max(per) if per and max(per) > 0 else 1
        report(ok and seen > 0 and spread < 2e-3, "weights' time whatever the rows: (1 - 1/P) of it on %d meshes of "
               "sequence parallel, none without, more with PipeFusion" % seen)
        r = run(PDIT, "plan", *common[:8], "--gflops", 100, "--one-machine")
        report(r.returncode != 0 and "--one-machine" in r.stderr, "--one-machine with --gflops refused: " +
               r.stderr.strip())
        # 5. memory bandwidth
        rows = plan_rows("--model", m, "--devices", 2, "-H", H, "-W", W, "--txt-len", T, "--gflops", 1e9,
                         "--memory-bandwidth", 0.001)
        ok = len(rows) > 0
        for x in rows:
            if "pp=1" in x["mesh"]:
                ok &= x["compute_seconds"] >= x["weights_gb"] * 1e9 / 1e6 * 0.999
        report(ok, "a step is no shorter than reading the weights at --memory-bandwidth")
        # tensor parallel repeats the elementwise passes over its rows on
        # every shard (two LayerNorms, 2 passes each, and two gated adds, 3
        # each, per double block; one of each per single block): the
        # (1 - 1/T) beyond the whole-step rate, at the memory bandwidth
        tcfg = json.load(open(os.path.join(m, "transformer", "config.json")))
        D = tcfg["num_attention_heads"] * tcfg["attention_head_dim"]
        passes = 10 * tcfg["num_layers"] + 5 * tcfg["num_single_layers"]
        S = T + (H // 16) * (W // 16)
        bw = 0.5
        rows = plan_rows("--model", m, "--devices", 4, "-H", H, "-W", W, "--txt-len", T, "--gflops", 1e9,
                         "--memory-bandwidth", bw)
        ok, seen = len(rows) > 0, 0
        for x in rows:
            d = degrees(x["mesh"])
            if d["pp"] > 1:
                continue
            P, tp = d.get("ring", d.get("distrifusion", 1)) * d["ulysses"], d["tp"]
            elem = passes * S / P * D * 4 * (1 - 1 / tp) / (bw * 1e9)
            want = max(x["weights_gb"] * 1e9 / (bw * 1e9), x["gflop_per_rank"] / 1e9 + elem)
            seen += tp > 1 and elem > x["weights_gb"] / bw
            ok &= abs(x["compute_seconds"] - want) <= 1e-3 * want
        report(ok and seen > 0, "tensor parallel repeats the elementwise passes over its rows (%d meshes where "
               "they exceed reading the weights)" % seen)
        # 7. the VAE's work from its weight shapes
        vh, _ = header(os.path.join(m, "vae", "diffusion_pytorch_model.safetensors"))
        vcfg = json.load(open(os.path.join(m, "vae", "config.json")))
        nb = len(vcfg["block_out_channels"])
        lh, lw = H // 2 ** (nb - 1), W // 2 ** (nb - 1)
        flop = 0.0
        for name, t in vh.items():
            if not name.startswith("decoder.") or not name.endswith(".weight"):
                continue
            sh = t["shape"]
            scale = 1
            if name.startswith("decoder.up_blocks."):
                i = int(name.split(".")[2])
                scale = 2 ** (i + 1) if ".upsamplers." in name else 2 ** i
            elif name.startswith(("decoder.conv_out", "decoder.conv_norm_out")):
                scale = 2 ** (nb - 1)
            px = lh * scale * lw * scale
            if len(sh) == 4:
                flop += 2.0 * sh[0] * sh[1] * sh[2] * sh[3] * px
            elif len(sh) == 2 and ".attentions." in name:
                flop += 2.0 * sh[0] * sh[1] * px
                if name.endswith("to_q.weight"):
                    flop += 4.0 * px * px * sh[0]
        rows = plan_rows("--model", m, "--devices", 1, "-H", H, "-W", W, "--txt-len", T, "--gflops", 1)
        got = rows[0]["vae_seconds"] if rows else -1
        report(abs(got - flop / 1e9) <= 1e-6 * flop / 1e9, "VAE decode %.6g GFLOP, from the weight shapes %.6g" %
               (got, flop / 1e9))
        dp4 = plan_rows("--model", m, "--devices", 4, "-H", H, "-W", W, "--txt-len", T, "--gflops", 1, "--batch", 4,
                        "--latency", 1e-9)
        ok = len(dp4) > 0
        for x in dp4:
            d = degrees(x["mesh"])
            per_group = (4 + d["dp"] - 1) // d["dp"]
            ok &= abs(x["vae_seconds"] - per_group * flop / 1e9 / (4 // d["dp"])) <= 1e-3 * x["vae_seconds"]
        report(ok, "4 devices, 4 images: each group decodes its pictures in bands over its ranks")
        # 6. text encoders
        full = os.path.join(tmp, "full")
        r = run(PDIT, "tiny", full, "--full")
        n_enc = 0
        for enc in ("text_encoder", "text_encoder_2"):
            d = os.path.join(full, enc)
            files = [f for f in os.listdir(d) if f.endswith(".safetensors")]
            for f in files:
                h, _ = header(os.path.join(d, f))
                for name, t in h.items():
                    if name == "__metadata__" or name.endswith(("shared.weight", "embed_tokens.weight",
                                                                "token_embedding.weight")):
                        continue
                    c = 1
                    for v in t["shape"]:
                        c *= v
                    n_enc += c
        rows = plan_rows("--model", full, "--devices", 2, "-H", 64, "-W", 64, "--gflops", 100)
        report(r.returncode == 0 and len(rows) > 0 and all(abs(x["encoders_gb"] - n_enc * 2 / 1e9) <= 1e-3 *
                                                           n_enc * 2 / 1e9 and x["memory_gb"] >=
                                                           x["encoders_gb"] * 0.999 for x in rows),
               "text encoders %.6f GB, from the headers %.6f" % (rows[0]["encoders_gb"] if rows else -1,
                                                                 n_enc * 2 / 1e9))
        # 8. generate --parallel auto
        out1, out2 = os.path.join(tmp, "one.safetensors"), os.path.join(tmp, "auto.safetensors")
        gen = ["generate", "--model", m, "--embeds", embeds, "-H", 32, "-W", 48, "--steps", 2, "--out-latents"]
        g1 = run(PDIT, *gen, out1, "-o", os.path.join(tmp, "one.png"))
        g2 = run(*MPIRUN, "-np", 2, PDIT, *gen, out2, "--parallel", "auto", "-o", os.path.join(tmp, "auto.png"))
        if g1.returncode or g2.returncode:
            report(False, "generate --parallel auto: %s %s" % (g1.stderr.strip()[-200:], g2.stderr.strip()[-200:]))
        else:
            line = [x for x in g2.stderr.splitlines() if "mesh" in x]
            a, b = latents(out1), latents(out2)
            diff = max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")
            report(len(line) == 1 and "chosen by the cost model" in line[0] and "pp=1" in line[0] and
                   "distrifusion" not in line[0] and diff <= 1e-5,
                   "--parallel auto: %s; latents differ by %.2g from one process's" %
                   (line[0].strip() if line else "no mesh line", diff))
        for args, want in ((["--parallel", "auto", "--ring-degree", 2], "not both"),
                           (["--parallel", "fast"], "--parallel must be")):
            r = run(*MPIRUN, "-np", 2, PDIT, *gen, out2, *args)
            said = [x for x in r.stderr.splitlines() if x.startswith("pdit")]
            report(r.returncode != 0 and want in r.stderr, "refused %s: %s" % (args, said[:1]))
        for args, want in (
                (["--devices", 2, "--device", "tpu"], "--device: unknown 'tpu'"),
                (["--devices", 2, "--link", "carrier-pigeon"], "--link: unknown"),
                (["--devices", 2, "--device", "h100", "--gflops", 5], "not both"),
                (["--devices", 2, "--device", "h100", "--efficiency", 2], "--efficiency"),
                (["--devices", 2, "--dtype", "f16"], "--dtype must be"),
                (["--devices", 2, "--gflops", 10, "--memory", 0.0000001], "fits in"),
                (["--devices", 0], "--devices must be"),
                (["--devices", 2, "-H", 20], "-H/--height must be a multiple of 16")):
            r = run(PDIT, "plan", "--model", m, "--txt-len", T, *args)
            report(r.returncode != 0 and want in r.stderr and r.stderr.count("\n") == 1,
                   "refused %s: %s" % (args, r.stderr.strip()))
        # 8b. a service keeps its text encoders beside the transformer: counted with it, not instead of it
        mf = os.path.join(tmp, "kept-encoders")
        r = run(PDIT, "tiny", mf, "--full")
        base = ["--model", mf, "--devices", 1, "-H", 256, "-W", 256, "--gflops", 100]
        free_, kept = (plan_rows(*base)[:1], plan_rows(*base, "--keep-encoders")[:1]) if not r.returncode else ([], [])
        if free_ and kept:
            f, k = free_[0], kept[0]
            held = max(f["weights_gb"] + f["activations_gb"], f["vae_gb"])
            report(f["encoders_gb"] > 0 and abs(f["memory_gb"] - max(held, f["encoders_gb"])) < 1e-3 * f["memory_gb"] and
                   abs(k["memory_gb"] - (held + k["encoders_gb"])) < 1e-3 * k["memory_gb"],
                   "--keep-encoders: %.4g GB (+ the encoders' %.4g GB) against %.4g GB freed before the transformer" %
                   (k["memory_gb"], k["encoders_gb"], f["memory_gb"]))
        else:
            report(False, "pdit plan on a --full model, with and without --keep-encoders")
        # 9. Wan: a video model whose text is a cross-attention context
        wan_bytes(rnd, tmp)
        # 10. adapters and Kontext's reference
        adapters_and_references(m, H, W, T, tmp)
    if failures:
        print("%d failed" % len(failures))
        sys.exit(1)
    print("all passed")


main()
