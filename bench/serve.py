#!/usr/bin/env python3
"""What pdit serve adds to a request, against pdit generate on the same machine, interleaved.

    bench/serve.py [MODEL] [--size 512] [--steps 4] [--rounds 3] [--dtype bf16]

MODEL defaults to bench/flux-width-full (pdit tiny --flux-width --full: FLUX.1's widths, 2 + 4
blocks, CLIP and a 2-layer T5 at their real widths), written when missing. One server stays up; each
round runs `pdit generate` (a fresh process: it loads the weights, as every run of it does) and the
same request through the server's job API, timed by the client:

  first step   from the POST to the first step's end, less one step: what comes before the first
               step once the model is loaded (the queue, the broadcast, encoding the prompt)
  overhead     the request's wall time less the engine's own work (encode + steps + decode, which
               the server logs per job): HTTP, JSON, the broadcast, gathering, PNG and base64
  step         seconds per step in the server (from its progress events)

and generate's phases from its summary line. Medians of the rounds; the numbers are printed with the
machine's core count. Nothing is asserted: this is a measurement.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PDIT = os.path.join(ROOT, "build", "pdit")


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def main():
    pos = [a for i, a in enumerate(sys.argv[1:], 1) if not a.startswith("--") and not sys.argv[i - 1].startswith("--")]
    model = pos[0] if pos else os.path.join(ROOT, "bench", "flux-width-full")
    size, steps, rounds, dtype = int(arg("--size", 512)), int(arg("--steps", 4)), int(arg("--rounds", 3)), arg("--dtype", "bf16")
    if not os.path.isdir(model):
        print("writing %s (pdit tiny --flux-width --full)" % model, flush=True)
        subprocess.run([PDIT, "tiny", model, "--flux-width", "--full"], check=True, capture_output=True)
    t0 = time.time()
    srv = subprocess.Popen([PDIT, "serve", "--model", model, "--dtype", dtype, "--listen", "127.0.0.1:0"],
                           stderr=subprocess.PIPE, text=True)
    lines, port = [], None
    for line in srv.stderr:
        lines.append(line)
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    load_s = time.time() - t0
    threading.Thread(target=lambda: [lines.append(l) for l in srv.stderr], daemon=True).start()
    base = "http://127.0.0.1:%d" % port

    def post(path, body):
        req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=3600) as r:
            return json.loads(r.read())

    def served(seed):
        """One request through /v1/jobs, its events read as they come: (first step, step, wall, the job)."""
        body = {"prompt": "a lighthouse on a cliff, round %d" % seed, "size": "%dx%d" % (size, size),
                "steps": steps, "seed": seed}
        t_post = time.time()
        job = post("/v1/jobs", body)
        times = {}
        with urllib.request.urlopen(base + "/v1/jobs/%s/events" % job["id"], timeout=3600) as r:
            for raw in r:
                line = raw.decode().strip()
                if line.startswith("data: "):
                    ev = json.loads(line[6:])
                    times.setdefault(ev["step"], time.time())
                    if ev["status"] in ("done", "failed", "cancelled"):
                        break
        with urllib.request.urlopen(base + "/v1/jobs/%s" % job["id"], timeout=60) as r:
            done = json.loads(r.read())
        wall = time.time() - t_post
        step = (times[steps] - times[1]) / (steps - 1) if steps > 1 else 0
        first = times[1] - t_post - step
        return first, step, wall, done

    def generate(seed):
        out = subprocess.run([PDIT, "generate", "--model", model, "--dtype", dtype, "-p",
                              "a lighthouse on a cliff, round %d" % seed, "-H", str(size), "-W", str(size),
                              "--steps", str(steps), "-s", str(seed), "-o", "/tmp/pdit-bench-serve.png"],
                             capture_output=True, text=True, check=True)
        m = re.search(r"done in ([\d.]+) s \(load ([\d.]+) s, encode ([\d.]+) s, \d+ steps ([\d.]+) s, "
                      r"decode ([\d.]+) s, write ([\d.]+) s\)", out.stderr)
        return [float(x) for x in m.groups()]

    # the first request loads the text encoders (kept for the next ones)
    served(999)
    rows = []
    for r in range(rounds):
        g = generate(r + 1)
        first, step, wall, done = served(r + 1)
        engine = done.get("engine_seconds", 0)
        rows.append((g, first, step, wall, engine))
        print("round %d: generate %.2f s (load %.2f, encode %.2f, steps %.2f, decode %.2f, write %.2f); served: wall "
              "%.3f s, first step after %.3f s, %.3f s/step, engine %.3f s" % (r + 1, *g, wall, first, step, engine),
              flush=True)
    srv.terminate()
    srv.wait(timeout=60)
    med = lambda k: statistics.median(k)
    g_steps = med([row[0][3] for row in rows])
    wall, first, step, engine = (med([row[i] for row in rows]) for i in (3, 1, 2, 4))
    overhead = wall - engine
    print()
    print("%s, %dx%d, %d steps, %s, %d cores; medians of %d interleaved rounds" % (os.path.basename(model), size, size,
                                                                                   steps, dtype, os.cpu_count(), rounds))
    print("server start to ready (weights loaded): %.2f s" % load_s)
    print("generate: %.2f s a run (%.2f s of it loading), %d steps %.3f s" % (med([row[0][0] for row in rows]),
                                                                           med([row[0][1] for row in rows]), steps, g_steps))
    print("served: %.3f s a request; first step %.3f s after the POST; %.3f s/step; engine %.3f s" % (
        wall, first, step, engine))
    print("server overhead: %.4f s a request = %.2f%% of the request, %.2f%% of generate's %d steps" % (
        overhead, 100 * overhead / wall, 100 * overhead / g_steps, steps))


if __name__ == "__main__":
    main()
