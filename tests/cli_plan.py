#!/usr/bin/env python3
"""`pdit plan` against what pdit does, on a tiny model of random sizes.

1. For 2 and 4 processes, the bytes plan predicts per rank and step equal the bytes `pdit bench`
   measures for the same mesh (every mesh plan lists, PipeFusion and DistriFusion included), within 2%
   (sizes that split evenly; the few small collectives the model leaves out stay below that).
2. plan lists only valid meshes: the degrees multiply to the devices, tp x ulysses divide the heads,
   cfg only with true CFG; and ranks them by predicted seconds.
3. Impossible requests are refused with the reason: no mesh that fits the memory, bad numbers.

    cli_plan.py PDIT MPIRUN...
"""
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


def degrees(mesh):
    return dict((k, int(v)) for k, v in (p.split("=") for p in mesh.split()))


def main():
    rnd = random.Random(int.from_bytes(os.urandom(4), "little"))
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
                flags = []
                for k, v in d.items():
                    if v > 1 and k in FLAGS:
                        flags += [FLAGS[k], v]
                if d["cfg"] > 1:
                    flags += ["--cfg-parallel"]
                if "distrifusion" in d or d["pp"] > 1:
                    flags += ["--warmup-steps", 1, "--warmup", 2]
                b = run(*MPIRUN, "-np", np_, PDIT, "bench", "--model", m, "-H", H, "-W", W, "--steps", 1, "--json",
                        *extra, *flags)
                lines = [y for y in b.stdout.splitlines() if y.startswith("{")]
                if b.returncode or len(lines) != 1:
                    report(False, "%s: bench failed: %s" % (x["mesh"], b.stderr.strip().splitlines()[-1:]))
                    continue
                j = json.loads(lines[0])
                got, want = j["bytes_sent_per_rank_per_step"], x["bytes_sent_per_rank_per_step"]
                report(j["mesh"] == x["mesh"] and abs(got - want) <= 0.02 * max(want, 1),
                       "%s: bench sent %d bytes per rank and step, plan predicted %d" % (x["mesh"], got, want))
        for args, want in (
                (["--devices", 2, "--dtype", "f16"], "--dtype must be"),
                (["--devices", 2, "--gflops", 10, "--memory", 0.0000001], "fits in"),
                (["--devices", 0], "--devices must be"),
                (["--devices", 2, "-H", 20], "multiples of 16")):
            r = run(PDIT, "plan", "--model", m, "--txt-len", T, *args)
            report(r.returncode != 0 and want in r.stderr and r.stderr.count("\n") == 1,
                   "refused %s: %s" % (args, r.stderr.strip()))
    if failures:
        print("%d failed" % len(failures))
        sys.exit(1)
    print("all passed")


main()
