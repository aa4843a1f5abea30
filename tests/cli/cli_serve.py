#!/usr/bin/env python3
"""`pdit serve` against `pdit generate`, with clients no one here wrote (curl, Python's urllib).

1. One process on a tiny FLUX folder (port 0: the server prints the one it got): the OpenAI request
   through curl and through the OpenAI JavaScript SDK's images.generate (n = 2, a negative prompt
   with true CFG; tests/js, installed by scripts/setup.sh) and the A1111 request through urllib give
   PNGs byte for byte equal to `pdit generate`'s with the same arguments (pixels and the parameters
   chunk); /health and /v1/models answer. A Qwen-Image folder: negative prompts longer and shorter than
   the prompt give generate's PNGs. A Wan2.1 folder served the same way: A1111's cfg_scale as its
   guidance, one frame, generate's PNG. Nothing is read again: with the model folder moved away after
   the first requests, later ones still give generate's PNGs (the text encoders stay loaded). Its videos:
   POST /v1/jobs with frames and fps gives pdit generate's MP4 byte for byte (GET /v1/jobs/ID/video and
   the result), output_format png generate's frames; stable-diffusion.cpp's POST /sdcpp/v1/vid_gen and
   its poll_url the same MP4, its refusals naming its fields; a long video's progress through the decode
   (the event stream), a cancel during the decode and a waiting client that hangs up during it end the
   job, the next one right; the page plays the video in headless Chromium. A1111's
   cfg_scale without a negative prompt is true CFG with "" and Forge's distilled_cfg_scale the guidance
   (generate's PNG); its other fields are accepted, those pdit does not honour named in the log, n_iter
   honoured. Adapters per request (<lora:NAME:SCALE> in the prompt, --lora-model-dir): two requests with
   different adapters, then none, then the first again (its terms from the cache), each generate's PNG byte
   for byte, no reload; an unknown adapter
   name and a path for a name get 400. OpenAI's images.edit through curl -F (multipart: the picture, a
   mask transparent where it repaints, pdit's fields): generate -i --mask's PNG byte for byte; no
   picture, a mask of another size, a picture that is no PNG get 400 naming the field, text/plain 415;
   A1111's txt2img with pdit's ref_image (FLUX.1 Kontext's reference): generate -r's PNG byte for byte.
   The web page in headless Chromium: a prompt submitted,
   the picture shown is a PNG of the size asked for, its parameters beside it.
2. Bad requests get a 4xx with a JSON error naming the field, and the server keeps answering: broken
   and truncated JSON, a misspelt field on OpenAI's route (A1111's logs it and goes on), wrong types, sizes not multiples of 16 or negative, n = 10^9, a 1 MB prompt,
   a 10 MB body, a wrong content type, an unknown path, GET on a generation endpoint, a missing
   prompt, response_format "url", a client that sends half its headers and stops (closed by
   --io-timeout), unknown fields and A1111's fields pdit does not honour with --strict; the engine's
   refusals (true CFG without a negative prompt; Wan's guidance) name the JSON field, never a flag.
3. The queue: while a long request runs, a second waits (--queue 1) and a third gets 429 with
   Retry-After; SIGTERM then lets the running one finish (200), answers the waiting one 503 and
   exits 0.
4. --api-key: no or a wrong Bearer token gets 401, the right one 200; listening on another address
   than 127.0.0.1 without a key is refused at start with one line. The memory check counts the text
   encoders the service keeps (PDIT_MEM_AVAILABLE_MB: room for the request alone is refused, naming
   them; room for both runs).
5. The async job API: POST /v1/jobs answers 202 with an id at once; GET shows queued/running with
   step i of n, then done with generate's PNG and its parameters; its event stream (Server-Sent
   Events, read by curl) sends progress and an end; DELETE of a running job stops it between steps
   (cancelled, the engine alive: the next request gives generate's PNG), of a queued one at once, of
   an ended one 409; the web page GET / is one self-contained file (no external URLs).
6. Load: 8 clients, 50 requests of mixed sizes and seeds, --queue 3: every request answered once with
   its own picture (the seed in its PNG's parameters; each client's in its order), 429s counted and
   retried after Retry-After, the queue never past 3, the server's memory flat after warm-up (not
   under the sanitizers, whose quarantine keeps freed memory).
7. With mpirun (when given): 2 processes (Ulysses 2, and data parallel 2 over n = 2) give the same
   PNGs as `pdit generate` on one process; a cancel there stops both ranks and the next request is
   right; rank 1 killed (SIGKILL) in the middle of a request: that request and a queued one get 503,
   the job ends within 10 s, non-zero, mpirun naming rank 1. The clean stop of a job: SIGUSR1 to
   mpirun (examples/pdit-serve.service's stop, which systemd-analyze verify reads without a warning)
   and SIGTERM to the pid --pid-file wrote: the running request 200, the queued one 503, exit 0, the
   pid file removed; a pid file naming a live process refused at start.

    cli_serve.py PDIT [MPIRUN...]
"""
import base64
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

PDIT, MPIRUN = sys.argv[1], sys.argv[2:]
failures = []


def report(ok, label):
    print("  %-4s %s" % ("ok" if ok else "FAIL", label))
    if not ok:
        failures.append(label)


class Server:
    """pdit serve in the background; its port from its first lines (within 60 s)."""

    def __init__(self, args, mpi=0, env=None):
        cmd = ([*MPIRUN, "-np", str(mpi)] if mpi else []) + [PDIT, "serve", *args, "--listen", "127.0.0.1:0"]
        self.p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                  env=dict(os.environ, **env) if env else None)
        self.lines, self.port, self.ready = [], None, threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.ready.wait(60)
        if self.port is None:
            self.p.kill()
            raise RuntimeError("no port from pdit serve: %s" % "".join(self.lines))

    def _read(self):
        for line in self.p.stderr:
            self.lines.append(line)
            if self.port is None and "serving" in line and "http://127.0.0.1:" in line:
                self.port = int(line.split("http://127.0.0.1:")[1].split()[0])
                self.ready.set()
        self.ready.set()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def stop(self, sig=signal.SIGTERM, rank0_pid=None, timeout=30):
        try:
            os.kill(rank0_pid or self.p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None


def post(srv, path, body, headers=None, timeout=120):
    """(status, parsed JSON or None, headers) through urllib."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    req = urllib.request.Request(srv.url(path), data=data, headers=h, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw), dict(e.headers)
        except ValueError:
            return e.code, None, dict(e.headers)


def get(srv, path):
    try:
        with urllib.request.urlopen(srv.url(path), timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def generate(model, out, prompts, extra, np=1):
    """pdit generate's PNGs; NP > 1: under mpirun (a mesh in EXTRA)."""
    with open(out + ".txt", "w") as f:
        f.write("".join(p + "\n" for p in prompts))
    launch = [*MPIRUN, "-np", str(np)] if np > 1 else []
    subprocess.run([*launch, PDIT, "generate", "--model", model, "--prompts", out + ".txt", "-o", out + "-%d.png", "-q",
                    *extra], check=True)
    return [open(out + "-%d.png" % b, "rb").read() for b in range(len(prompts))]


def write_rgba_png(path, w, h, alpha):
    """An RGBA PNG of W x H, black, whose pixel (x, y) has ALPHA(x, y): OpenAI's edit masks."""
    import struct
    import zlib
    rows = b"".join(b"\0" + bytes(v for x in range(w) for v in (0, 0, 0, alpha(x, y))) for y in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def write_png(path, w, h, gray):
    """An RGB PNG of W x H whose pixel (x, y) is GRAY(x, y) on every channel."""
    import struct
    import zlib
    rows = b"".join(b"\0" + bytes(v for x in range(w) for v in (gray(x, y),) * 3) for y in range(h))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def write_adapters(model, folder):
    """Two diffusers/PEFT adapters of rank 2 for the tiny model in MODEL (its shapes from its weights):
    FOLDER/style.safetensors and FOLDER/other.safetensors."""
    import random
    import struct
    tdir = os.path.join(model, "transformer")
    shapes = {}
    for f in os.listdir(tdir):
        if f.endswith(".safetensors"):
            raw = open(os.path.join(tdir, f), "rb").read(8)
            n = struct.unpack("<Q", raw)[0]
            with open(os.path.join(tdir, f), "rb") as h:
                head = json.loads(h.read(8 + n)[8:])
            shapes.update({k: v["shape"] for k, v in head.items() if k != "__metadata__"})
    os.makedirs(folder, exist_ok=True)
    rnd = random.Random(3)
    for name, layers in (("style", ["transformer_blocks.0.attn.to_q", "single_transformer_blocks.0.proj_mlp"]),
                         ("other", ["transformer_blocks.0.ff.net.2", "norm_out.linear"])):
        header, data = {}, b""
        for layer in layers:
            out_f, in_f = shapes[layer + ".weight"]
            for half, shape in (("A", [2, in_f]), ("B", [out_f, 2])):
                vals = [rnd.gauss(0, 0.3) for _ in range(shape[0] * shape[1])]
                blob = struct.pack("<%df" % len(vals), *vals)
                header["transformer.%s.lora_%s.weight" % (layer, half)] = {
                    "dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
                data += blob
        h = json.dumps(header).encode()
        with open(os.path.join(folder, name + ".safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + data)


def pngs_openai(answer):
    return [base64.b64decode(d["b64_json"]) for d in answer["data"]]


def browser(srv, tmp, init=None, model=None):
    """The page in headless Chromium, driven through its DevTools protocol by a small Node script."""
    exe = next((shutil.which(p) for p in ("chromium", "chromium-browser", "google-chrome") if shutil.which(p)), None)
    if not exe:
        report(False, "the page in a browser: no chromium (scripts/setup.sh installs Debian's)")
        return
    js = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "js", "page_test.mjs")
    shot = os.path.join(tmp, "page.png")
    r = subprocess.run(["node", js, exe, srv.url("/"), shot, "64", "48"], capture_output=True, text=True, timeout=240)
    try:
        got = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        got = {}
    png = base64.b64decode(got.get("src", "").split(",", 1)[-1]) if got.get("src", "").startswith("data:image/png") else b""
    w, h = (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) if png[:8] == b"\x89PNG\r\n\x1a\n" else (0, 0)
    report(w == 64 and h == 48 and "seed: 5" in got.get("parameters", "") and os.path.getsize(shot) > 1000
           if os.path.exists(shot) else False,
           "the page in headless Chromium: a %dx%d PNG shown, its parameters, a screenshot %s" % (
               w, h, r.stderr.strip()[-1500:] if r.returncode else ""))
    if not init:
        return
    # a picture uploaded and a mask painted over it with the mouse: what the
    # page sent, run by pdit generate -i --mask, is the picture it shows
    r = subprocess.run(["node", js, exe, srv.url("/"), shot, "0", "0", "--image=" + init, "--strength=0.7"],
                       capture_output=True, text=True, timeout=240)
    try:
        got = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        got = {}
    sent = got.get("sent") or {}
    shown = base64.b64decode(got.get("src", "").split(",", 1)[-1]) if got.get("src") else b""
    mask = os.path.join(tmp, "page-mask.png")
    painted = ""
    if (sent.get("mask") or "").startswith("data:image/png;base64,"):
        with open(mask, "wb") as f:
            f.write(base64.b64decode(sent["mask"].split(",", 1)[1]))
        try:
            from PIL import Image
            im = Image.open(mask).convert("L")
            hist = im.histogram()
            painted = "%dx%d, %d white and %d black pixels" % (im.width, im.height, hist[255], hist[0])
            ok_mask = im.size == (48, 32) and hist[255] > 20 and hist[0] > 20
        except ImportError:
            ok_mask, painted = True, "(no PIL to look inside)"
        want = generate(model, os.path.join(tmp, "page-edit"), ["a lighthouse at dusk"],
                        ["-i", init, "--mask", mask, "--strength", "0.7", "--steps", "2", "-s", "5",
                         "-W", "48", "-H", "32"])
    else:
        ok_mask, want = False, [None]
    report(ok_mask and sent.get("size") == "48x32" and sent.get("strength") == 0.7 and shown == want[0],
           "the page in headless Chromium: a picture uploaded (its size taken), a mask painted with the mouse "
           "(%s), strength 0.7: generate -i --mask's PNG byte for byte %s" % (
               painted or "no mask sent", got.get("error", "") or (r.stderr.strip()[-1500:] if r.returncode else "")))


def wait_job(srv, jid, states, t=60):
    t_end = time.time() + t
    while time.time() < t_end:
        st, j = get(srv, "/v1/jobs/%s" % jid)
        if j.get("status") in states:
            return j
        time.sleep(0.02)
    return j


def cancel_running(srv, body, want):
    """A long async job cancelled while it runs; then BODY gives WANT."""
    st, j, _ = post(srv, "/v1/jobs", {"prompt": "long", "size": "64x64", "steps": 1000, "seed": 3})
    jid = j["id"]
    t_end = time.time() + 60
    while time.time() < t_end and get(srv, "/v1/jobs/" + jid)[1]["step"] < 2:
        time.sleep(0.02)
    req = urllib.request.Request(srv.url("/v1/jobs/" + jid), method="DELETE")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            st = r.status
    except urllib.error.HTTPError as e:
        st = e.code
    j = wait_job(srv, jid, ("cancelled", "done", "failed"))
    report(st == 202 and j["status"] == "cancelled" and 2 <= j["step"] < 1000 and
           "cancelled after step" in j["result"]["error"]["message"],
           "DELETE a running job: %s, %s after step %s of %s" % (st, j["status"], j["step"], j["steps"]))
    # its end is logged, with the reason (no connection waits on a /v1/jobs job to log it)
    t_end = time.time() + 10
    while time.time() < t_end and not any("job %s -> 409" % jid in l and "cancelled after step" in l
                                          for l in srv.lines):
        time.sleep(0.05)
    report(any("job %s -> 409" % jid in l and "cancelled after step" in l for l in srv.lines),
           "the cancelled /v1/jobs job's end in the log")
    st, ans, _ = post(srv, "/v1/images/generations", body)
    report(st == 200 and pngs_openai(ans) == want, "the request after the cancel: generate's PNGs")


def event_stream(srv, jid, max_time):
    """curl on a job's events, returned once the stream is connected (its
    first line read): a job must not move on before the stream sees it."""
    ev = subprocess.Popen(["curl", "-sN", "--max-time", str(max_time), srv.url("/v1/jobs/%s/events" % jid)],
                          stdout=subprocess.PIPE, bufsize=0)
    # a byte at a time: communicate(timeout=) reads the pipe itself, so
    # what a buffered readline took past the line would be lost (once all
    # of a stream's events before its end)
    line = b""
    while not line.endswith(b"\n"):
        c = os.read(ev.stdout.fileno(), 1)
        if not c:
            break
        line += c
    return ev, line.decode()


def jobs_api(srv, body, want, tmp):
    st, j, _ = post(srv, "/v1/jobs", body)
    report(st == 202 and j["status"] in ("queued", "running") and j["id"], "POST /v1/jobs -> %s, id %s" % (st, j.get("id")))
    ev, first = event_stream(srv, j["id"], 60)
    done = wait_job(srv, j["id"], ("done", "failed", "cancelled"))
    got = pngs_openai(done["result"]) if done["status"] == "done" else []
    report(got == want and "seed: 7" in done["parameters"] and done["step"] == done["steps"] == 2,
           "GET /v1/jobs/ID: done, step 2 of 2, generate's PNGs, the parameters")
    out = first + ev.communicate(timeout=60)[0].decode()
    events = [l[7:] for l in out.splitlines() if l.startswith("event: ")]
    report(events and events[-1] == "end" and '"status":"done"' in out.split("event: end")[-1],
           "its event stream: %d events, the last '%s'" % (len(events), events[-1] if events else None))
    cancel_running(srv, body, want)
    # a queued job, behind a long one
    st, a, _ = post(srv, "/v1/jobs", {"prompt": "long", "size": "64x64", "steps": 1000})
    wait_job(srv, a["id"], ("running",))
    st, b, _ = post(srv, "/v1/jobs", {"prompt": "queued", "size": "64x64", "steps": 1})
    q = get(srv, "/v1/jobs/" + b["id"])[1]
    req = urllib.request.Request(srv.url("/v1/jobs/" + b["id"]), method="DELETE")
    with urllib.request.urlopen(req, timeout=30) as r:
        st = r.status
    report(q["status"] == "queued" and q["queue_position"] == 1 and st == 200 and
           get(srv, "/v1/jobs/" + b["id"])[1]["status"] == "cancelled", "DELETE a queued job: %s, cancelled" % st)
    req = urllib.request.Request(srv.url("/v1/jobs/" + a["id"]), method="DELETE")
    urllib.request.urlopen(req, timeout=30).read()
    wait_job(srv, a["id"], ("cancelled", "done"))
    req = urllib.request.Request(srv.url("/v1/jobs/" + a["id"]), method="DELETE")
    try:
        urllib.request.urlopen(req, timeout=30)
        st = 200
    except urllib.error.HTTPError as e:
        st = e.code
    report(st == 409, "DELETE an ended job -> %s" % st)
    st, _ = get(srv, "/v1/jobs/999999")
    report(st == 404, "an unknown job -> %s" % st)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def load(model):
    srv = Server(["--model", model, "--queue", "3"])
    sizes = ["32x32", "64x48", "48x64", "64x64"]
    results, lock, peak_queue = {}, threading.Lock(), [0]
    stop_watch = threading.Event()

    def watch():
        while not stop_watch.is_set():
            q = get(srv, "/health")[1]["queue"]
            peak_queue[0] = max(peak_queue[0], q)
            time.sleep(0.01)

    def client(c):
        mine = []
        for k in range(c, 50, 8):
            body = {"prompt": "load %d" % k, "size": sizes[k % 4], "steps": 1 + k % 2, "seed": 1000 + k}
            refused, t_end = 0, time.time() + 240
            while time.time() < t_end:
                st, ans, hdr = post(srv, "/v1/images/generations", body)
                if st != 429:
                    break
                refused += 1
                # Retry-After is whole seconds: tiny requests take less
                time.sleep(min(float(hdr.get("Retry-After", "1")), 0.1))
            png = pngs_openai(ans)[0] if st == 200 else b""
            mine.append((k, st, refused, b"seed: %d;" % (1000 + k) in png, len(png)))
        with lock:
            results[c] = mine

    # warm-up, then the memory before the load
    for k in range(5):
        post(srv, "/v1/images/generations", {"prompt": "warm", "size": sizes[k % 4], "steps": 2})
    before = rss_kb(srv.p.pid)
    w = threading.Thread(target=watch)
    w.start()
    ts = [threading.Thread(target=client, args=(c,)) for c in range(8)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    stop_watch.set()
    w.join()
    after = rss_kb(srv.p.pid)
    flat = [r for c in sorted(results) for r in results[c]]
    ok = len(flat) == 50 and all(st == 200 and seed_ok for _, st, _, seed_ok, _ in flat)
    ordered = all([r[0] for r in results[c]] == list(range(c, 50, 8)) for c in results)
    refused = sum(r[2] for r in flat)
    report(ok and ordered and len({r[0] for r in flat}) == 50,
           "50 requests from 8 clients in %.1f s: each answered 200 once with its own seed, in each client's order"
           % (time.time() - t0))
    report(refused > 0 and peak_queue[0] <= 3, "%d 429s (retried), the queue at most %d (limit 3)" % (refused, peak_queue[0]))
    sanitized = "ASAN_OPTIONS" in os.environ
    report(sanitized or after - before < 8192, "memory after warm-up %d MB, after the load %d MB%s"
           % (before >> 10, after >> 10, " (not checked under the sanitizers)" if sanitized else ""))
    st, h = get(srv, "/health")
    report(h["served"] == 55 and h["queue"] == 0, "/health: served %s" % h["served"])
    srv.stop()


def one_running_one_queued(srv, run, first, second, steps=1000):
    """RUN(FIRST, a request of STEPS) in a thread until the server runs it, then RUN(SECOND, a short
    one) until it waits in the queue: the two threads."""
    t1 = threading.Thread(target=run, args=(first, {"prompt": "long", "size": "64x64", "steps": steps, "seed": 1}))
    t1.start()
    t_end = time.time() + 30
    while time.time() < t_end and get(srv, "/health")[1]["running"] != 1:
        time.sleep(0.02)
    if get(srv, "/health")[1]["running"] != 1:
        # (a request the server refused never runs: what follows would test nothing)
        report(False, "the %d-step request never ran: %s" % (steps, "".join(srv.lines[-3:])))
    t2 = threading.Thread(target=run, args=(second, {"prompt": "queued", "size": "64x64", "steps": 1}))
    t2.start()
    while time.time() < t_end and get(srv, "/health")[1]["queue"] != 1:
        time.sleep(0.02)
    return t1, t2


def statuses_into(srv, res):
    """A RUN for one_running_one_queued: each request's HTTP status (or its
    connection's error) into RES under its name."""
    def run(name, body):
        try:
            res[name] = post(srv, "/v1/images/generations", body, timeout=300)[0]
        except (OSError, urllib.error.URLError) as e:
            res[name] = str(e)
    return run


def rank_pid(mpirun_pid, rank):
    """The pid of RANK among mpirun's children (from their environment)."""
    for line in subprocess.run(["pgrep", "-P", str(mpirun_pid)], capture_output=True, text=True).stdout.split():
        try:
            env = open("/proc/%s/environ" % line, "rb").read().split(b"\0")
        except OSError:
            continue
        if b"OMPI_COMM_WORLD_RANK=%d" % rank in env:
            return int(line)
    return None


def kill_rank(model):
    srv = Server(["--model", model, "--ulysses-degree", "2"], mpi=2)
    res = {}

    def run(name, body):
        try:
            res[name] = post(srv, "/v1/images/generations", body, timeout=60)[0]
        except (OSError, urllib.error.URLError) as e:
            res[name] = str(e)

    t1, t2 = one_running_one_queued(srv, run, "running", "queued")
    pid = rank_pid(srv.p.pid, 1)
    t0 = time.time()
    if pid:
        os.kill(pid, signal.SIGKILL)
    try:
        rc = srv.p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        srv.p.kill()
        rc = None
    took = time.time() - t0
    t1.join(30)
    t2.join(30)
    srv.reader.join(10)  # the last lines (mpirun's) read before they are looked at
    log = "".join(srv.lines)
    report(pid and res.get("running") == 503 and res.get("queued") == 503,
           "rank 1 killed mid-request: the running request %s, the queued one %s" % (res.get("running"), res.get("queued")))
    report(rc not in (0, None) and took < 10 and "rank 1" in log, "the job ended in %.1f s, exit %s, mpirun names rank 1"
           % (took, rc))


def raw(srv, path):
    """(status, bytes, content type) of a GET."""
    try:
        with urllib.request.urlopen(srv.url(path), timeout=60) as r:
            return r.status, r.read(), r.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type")


def videos(wan, tmp):
    """A Wan2.1 folder's videos through the service: the job API with frames and fps (the MP4 of pdit
    generate -o clip.mp4, byte for byte, at /v1/jobs/ID/video and in the result), its frames as
    generate's PNGs, stable-diffusion.cpp's vid_gen and job routes, progress through the decode, a
    cancel during the decode, a client that hangs up, the page playing the video. The MP4 is made in
    memory: the server's TMPDIR names no folder, and none appears."""
    gen = [PDIT, "generate", "--model", wan, "-p", "a red kite", "-H", "32", "-W", "48", "--steps", "2", "-s", "9",
           "--guidance", "3", "-q", "--frames", "5"]
    subprocess.run([*gen, "--fps", "8", "-o", os.path.join(tmp, "kite.mp4")], check=True)
    subprocess.run([*gen, "-o", os.path.join(tmp, "kite16.mp4")], check=True)
    subprocess.run([*gen, "-o", os.path.join(tmp, "kite-%d.png")], check=True)
    mp4 = open(os.path.join(tmp, "kite.mp4"), "rb").read()
    mp4_16 = open(os.path.join(tmp, "kite16.mp4"), "rb").read()
    frames = [open(os.path.join(tmp, "kite-%d.png" % f), "rb").read() for f in range(5)]
    no_tmp = os.path.join(tmp, "no-such-folder")
    srv = Server(["--model", wan, "--queue", "4"], env={"TMPDIR": no_tmp})
    body = {"prompt": "a red kite", "size": "48x32", "steps": 2, "seed": 9, "guidance": 3, "frames": 5, "fps": 8}
    st, j, _ = post(srv, "/v1/jobs", body)
    j = wait_job(srv, j["id"], ("done", "failed", "cancelled")) if st == 202 else {}
    res = j.get("result") or {}
    st2, got, ctype = raw(srv, "/v1/jobs/%s/video" % j.get("id"))
    report(j.get("status") == "done" and got == mp4 and ctype == "video/mp4" and
           base64.b64decode(res.get("b64_json", "")) == mp4 and res.get("mime_type") == "video/mp4" and
           res.get("frame_count") == 5 and res.get("fps") == 8,
           "POST /v1/jobs with frames 5, fps 8: GET /v1/jobs/ID/video (%s, %s) and the result are pdit generate's "
           "MP4 byte for byte (%d bytes)" % (st2, ctype, len(mp4)))
    st, ans, _ = post(srv, "/v1/images/generations", dict(body, fps=16, output_format="png"))
    report(st == 200 and pngs_openai(ans) == frames, "frames 5, output_format png: generate -o kite-%%d.png's frames "
           "byte for byte (%s)" % st)
    # stable-diffusion.cpp's video job, its body as its api.md writes it
    sd = {"prompt": "a red kite", "negative_prompt": "", "width": 48, "height": 32, "seed": 9, "video_frames": 5,
          "fps": 16, "clip_skip": -1, "strength": 0.75, "moe_boundary": 0.875, "vace_strength": 1.0,
          "init_image": None, "end_image": None, "control_frames": [], "lora": [], "output_format": "mp4",
          "sample_params": {"scheduler": "discrete", "sample_method": "euler", "sample_steps": 2, "eta": 1.0,
                            "shifted_timestep": 0, "custom_sigmas": [], "flow_shift": 0.0,
                            "guidance": {"txt_cfg": 3.0, "img_cfg": 3.0, "distilled_guidance": 3.5,
                                         "slg": {"layers": [7, 8, 9], "layer_start": 0.01, "layer_end": 0.2,
                                                 "scale": 0.0}}}}
    sd.pop("negative_prompt")
    st, ack, _ = post(srv, "/sdcpp/v1/vid_gen", sd)
    ok = st == 202 and ack.get("kind") == "vid_gen" and ack.get("status") == "queued" and \
        ack.get("poll_url") == "/sdcpp/v1/jobs/%s" % ack.get("id")
    t_end, j = time.time() + 60, {}
    while ok and time.time() < t_end:
        j = get(srv, ack["poll_url"])[1]
        if j.get("status") in ("completed", "failed", "cancelled"):
            break
        time.sleep(0.05)
    res = j.get("result") or {}
    report(ok and j.get("status") == "completed" and base64.b64decode(res.get("b64_json", "")) == mp4_16 and
           res.get("frame_count") == 5 and res.get("mime_type") == "video/mp4" and j.get("error") is None,
           "POST /sdcpp/v1/vid_gen (stable-diffusion.cpp's body): 202 with its poll_url; GET it: completed, "
           "generate's MP4 byte for byte (%s, %s)" % (st, j.get("status")))
    st, ans, _ = post(srv, "/sdcpp/v1/vid_gen", dict(sd, output_format="webm"))
    st2, ans2, _ = post(srv, "/sdcpp/v1/vid_gen", dict(sd, sample_params={"sample_steps": 0}))
    report(st == 400 and ans["error"]["param"] == "output_format" and st2 == 400 and
           ans2["error"]["param"] == "sample_params.sample_steps", "vid_gen: output_format webm -> %s (%s), "
           "sample_params.sample_steps 0 -> %s (%s)" % (st, ans["error"]["param"], st2, ans2["error"]["param"]))
    # the family's frames rule before the job is queued (it was accepted, then failed)
    st, ans, _ = post(srv, "/sdcpp/v1/vid_gen", dict(sd, video_frames=6))
    err = (ans or {}).get("error") or {}
    st2, ans2, _ = post(srv, "/v1/jobs", dict(body, frames=6))
    err2 = (ans2 or {}).get("error") or {}
    report(st == 400 and err.get("param") == "video_frames" and "video_frames" in err.get("message", "") and
           "--" not in err.get("message", "") and st2 == 400 and err2.get("param") == "frames",
           "vid_gen video_frames 6 -> %s (%s), /v1/jobs frames 6 -> %s (%s)" % (st, err.get("message"), st2,
                                                                             err2.get("message")))

    # a long video: its progress through the steps and the decode; a cancel
    # during the decode ends it when the decode ends, the next one is right
    long_body = {"prompt": "a long kite", "size": "96x96", "steps": 1, "frames": 81}
    st, j, _ = post(srv, "/v1/jobs", long_body)
    ev, first = event_stream(srv, j["id"], 300)
    seen = wait_job_phase(srv, j["id"], "decoding")
    st_del, _, _ = post_method(srv, "DELETE", "/v1/jobs/%s" % j["id"])
    end = wait_job(srv, j["id"], ("done", "failed", "cancelled"), t=300)
    out = first + ev.communicate(timeout=60)[0].decode()
    report(seen and st_del == 202 and end.get("status") == "cancelled" and raw(srv, "/v1/jobs/%s/video" % j["id"])[0] == 404,
           "DELETE during the decode (phase decoding seen: %s) -> %s: the job %s, no video" % (seen, st_del, end.get("status")))
    # the stream starts from the job's state when it connects: on a busy
    # machine its one step may be over by then (all steps shown done)
    evs = [json.loads(l[5:]) for l in out.splitlines() if l.startswith("data:")]
    first = evs[0] if evs else {}
    report(bool(evs) and ('"phase":"denoising"' in out or (first.get("phase") == "decoding" and
                                                        first.get("step") == first.get("steps"))) and
           '"phase":"decoding"' in out and "event: end" in out and
           all(e.get("phase") is None for e in evs if e.get("status") in ("done", "failed", "cancelled")),
           "its event stream shows the steps (or, joined after them, all done) and the decode, no phase at the "
           "end (%s)" %
           " ".join(sorted(set("%s/%s" % (e.get("phase"), e.get("status")) for e in evs)) +
                    (["end"] if "event: end" in out else [])))
    st, j, _ = post(srv, "/v1/jobs", body)
    j = wait_job(srv, j["id"], ("done", "failed", "cancelled"))
    report(j.get("status") == "done" and raw(srv, "/v1/jobs/%s/video" % j["id"])[1] == mp4,
           "the next video: generate's MP4 again")
    # a waiting client of a video that hangs up during the decode cancels it
    before = sum("video of 81" in l for l in srv.lines)
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
    b = json.dumps(dict(long_body, prompt="left")).encode()
    sock.sendall(b"POST /v1/images/generations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(b), b))
    t_end = time.time() + 120
    while time.time() < t_end and sum("video of 81" in l for l in srv.lines) == before:
        time.sleep(0.02)
    jid = [l for l in srv.lines if "video of 81" in l][-1].split("job ")[1].split(":")[0]
    seen = wait_job_phase(srv, jid, "decoding")
    sock.close()
    t_end = time.time() + 300
    while time.time() < t_end and not any("job %s ->" % jid in l for l in srv.lines):
        time.sleep(0.05)
    left = [l for l in srv.lines if "job %s ->" % jid in l]
    report(seen and left and "-> 409" in left[0] and "client left" in left[0],
           "a client that hangs up during a video's decode: its job cancelled (%s)"
           % (left[0].strip() if left else "not logged"))
    st, j, _ = post(srv, "/v1/jobs", body)
    j = wait_job(srv, j["id"], ("done", "failed", "cancelled"))
    report(j.get("status") == "done" and raw(srv, "/v1/jobs/%s/video" % j["id"])[1] == mp4,
           "and the next: generate's MP4")
    exe = next((shutil.which(p) for p in ("chromium", "chromium-browser", "google-chrome") if shutil.which(p)), None)
    if exe:
        js = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "js", "page_test.mjs")
        r = subprocess.run(["node", js, exe, srv.url("/"), os.path.join(tmp, "video-page.png"), "48", "32", "9"],
                           capture_output=True, text=True, timeout=240)
        try:
            v = json.loads(r.stdout.strip().splitlines()[-1]).get("video", {})
        except (ValueError, IndexError):
            v = {}
        report(v.get("shown") and v.get("width") == 48 and v.get("height") == 32 and v.get("readyState", 0) >= 2
               and not v.get("error") and v.get("duration", 0) > 0,
               "the page plays the video in headless Chromium: %s %s" % (v, r.stderr.strip()[-500:] if r.returncode else ""))
    srv.stop()
    report(not os.path.exists(no_tmp), "the videos were made in memory: the server's TMPDIR (%s) never made" % no_tmp)


def wait_job_phase(srv, jid, phase, t=120):
    """Whether job JID was seen running in PHASE within T seconds."""
    t_end = time.time() + t
    while time.time() < t_end:
        j = get(srv, "/v1/jobs/%s" % jid)[1]
        if j.get("status") == "running" and j.get("phase") == phase:
            return True
        if j.get("status") in ("done", "failed", "cancelled"):
            return False
        time.sleep(0.02)
    return False


def post_method(srv, method, path):
    req = urllib.request.Request(srv.url(path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def kept_encoders(tmp):
    """The memory check counts the text encoders a service keeps (PDIT_MEM_AVAILABLE_MB sets the memory
    the machine has): with room for the request but not for the encoders too, the first request is
    refused naming them; with room for both it runs."""
    mf = os.path.join(tmp, "mf")
    subprocess.run([PDIT, "tiny", mf, "--full"], check=True, capture_output=True)
    body = {"prompt": "a", "size": "256x256", "steps": 1}
    pat = re.compile(r"activations ([0-9.]+) MB and the VAE decode ([0-9.]+) MB beside the loaded weights; "
                     r"the kept text encoders ([0-9.]+) MB\) and ([0-9.]+) MB are available")

    def ask(mb):
        os.environ["PDIT_MEM_AVAILABLE_MB"] = "%.4f" % mb
        try:
            srv = Server(["--model", mf])
        finally:
            del os.environ["PDIT_MEM_AVAILABLE_MB"]
        st, ans, _ = post(srv, "/v1/images/generations", body)
        srv.stop()
        return st, (ans or {}).get("error", {}).get("message", "")

    st, msg = ask(0.01)
    m = pat.search(msg)
    if not m:
        report(False, "PDIT_MEM_AVAILABLE_MB 0.01: a refusal with its parts (%s %s)" % (st, msg))
        return
    act, vae, enc = float(m.group(1)), float(m.group(2)), float(m.group(3))
    st, msg = ask(act + vae + enc / 2)
    st2, _ = ask(act + vae + enc * 2)
    report(enc > 0 and st == 400 and "kept text encoders" in msg and st2 == 200,
           "the kept text encoders counted: %.2f MB for the request fits, with the encoders' %.2f MB beside "
           "it refused (%s: %s), with room for both %s" % (act + vae, enc, st, msg[:60], st2))


def clean_stop(model, tmp):
    """The supported ways to stop a job under mpirun: SIGUSR1 to mpirun (examples/pdit-serve.service's
    KillSignal, which mpirun passes on to every rank) and SIGTERM to the pid in --pid-file."""
    pf = os.path.join(tmp, "serve.pid")
    for how in ("SIGUSR1 to mpirun (the example unit's stop)", "SIGTERM to the pid in --pid-file"):
        srv = Server(["--model", model, "--ulysses-degree", "2", "--pid-file", pf], mpi=2)
        res = {}
        t1, t2 = one_running_one_queued(srv, statuses_into(srv, res), "long", "waiting", steps=400)
        try:
            pid = int(open(pf).read())
        except (OSError, ValueError):
            pid = None
        rank0 = rank_pid(srv.p.pid, 0)
        if how.startswith("SIGUSR1"):
            # rank 1 stopped mid-request: /health's since_progress_s grows (its status stays "ok")
            rank1 = rank_pid(srv.p.pid, 1)
            moving = get(srv, "/health")[1].get("since_progress_s", -1)
            os.kill(rank1, signal.SIGSTOP)
            time.sleep(2.5)
            stalled = get(srv, "/health")[1].get("since_progress_s", -1)
            os.kill(rank1, signal.SIGCONT)
            report(0 <= moving < 2 and stalled >= 2, "/health while a rank is stopped: since_progress_s %.2f, then "
                   "%.2f" % (moving, stalled))
        rc = srv.stop(signal.SIGUSR1, timeout=150) if how.startswith("SIGUSR1") else \
            srv.stop(signal.SIGTERM, rank0_pid=pid, timeout=150)
        t1.join(30)
        t2.join(30)
        report(pid is not None and pid == rank0, "--pid-file holds rank 0's pid (%s, rank 0: %s)" % (pid, rank0))
        good = res.get("long") == 200 and res.get("waiting") == 503 and rc == 0 and not os.path.exists(pf)
        report(good, "%s: the running request %s, the queued one %s, exit %s, the pid file removed: %s%s"
               % (how, res.get("long"), res.get("waiting"), rc, not os.path.exists(pf),
                  "" if good else "\n" + "".join(srv.lines[-20:])))
    # a second SIGTERM stops at once (130), a request of the most steps running: the first is said at
    # once, the pid file goes with the process
    srv = Server(["--model", model, "--pid-file", pf])
    res = {}
    t1, t2 = one_running_one_queued(srv, statuses_into(srv, res), "long", "waiting", steps=1000)
    os.kill(srv.p.pid, signal.SIGTERM)
    t_end = time.time() + 30
    while time.time() < t_end and not any("the running request, if any, finishes first" in l for l in srv.lines):
        time.sleep(0.05)
    said = any("the running request, if any, finishes first" in l for l in srv.lines)
    rc = srv.stop(signal.SIGTERM, timeout=60)
    t1.join(30)
    t2.join(30)
    report(said and rc == 130 and res.get("long") != 200 and not os.path.exists(pf), "two SIGTERMs: the first said "
           "at once (%s), exit %s, the running request cut off (%s), the pid file removed: %s"
           % (said, rc, res.get("long"), not os.path.exists(pf)))
    # a pid file naming a live process is another server's: refused at start
    with open(pf, "w") as f:
        f.write("%d\n" % os.getpid())
    r = subprocess.run([PDIT, "serve", "--model", model, "--pid-file", pf, "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=60)
    report(r.returncode != 0 and r.stderr.count("\n") == 1 and "--pid-file" in r.stderr and
           open(pf).read() == "%d\n" % os.getpid(), "--pid-file naming a running process: %s" % r.stderr.strip())
    os.unlink(pf)
    # the example unit is one systemd reads without a warning
    unit = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "pdit-serve.service")
    if shutil.which("systemd-analyze"):
        text = open(unit).read().replace("/usr/local/bin/pdit", os.path.abspath(PDIT))
        with open(os.path.join(tmp, "pdit-serve.service"), "w") as f:
            f.write(text)
        r = subprocess.run(["systemd-analyze", "verify", os.path.join(tmp, "pdit-serve.service")],
                           capture_output=True, text=True, timeout=60)
        report(r.returncode == 0 and not r.stderr.strip() and "KillSignal=SIGUSR1" in text,
               "examples/pdit-serve.service: systemd-analyze verify says nothing %s" % r.stderr.strip()[-200:])
    else:
        print("  skip examples/pdit-serve.service: no systemd-analyze here")


def main():
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "m")
    subprocess.run([PDIT, "tiny", model, "--full"], check=True, capture_output=True)
    fox_args = ["-W", "64", "-H", "48", "--steps", "2", "-s", "7", "-n", "blurry", "--true-cfg-scale", "3"]
    boat_args = ["-W", "48", "-H", "32", "--steps", "3", "-s", "11"]
    fox = generate(model, os.path.join(tmp, "fox"), ["a red fox"] * 2, fox_args)
    boat = generate(model, os.path.join(tmp, "boat"), ["a boat"], boat_args)
    # A1111's cfg_scale 3.5 without a negative prompt: true CFG with "" (as
    # stable-diffusion.cpp and Forge); Forge's distilled_cfg_scale: guidance
    cfgboat = generate(model, os.path.join(tmp, "cfgboat"), ["a boat"],
                       [*boat_args, "-n", "", "--true-cfg-scale", "3.5", "--guidance", "2.5"])
    openai_body = {"prompt": "a red fox", "n": 2, "size": "64x48", "response_format": "b64_json", "model": "pdit",
                   "steps": 2, "seed": 7, "negative_prompt": "blurry", "true_cfg_scale": 3}
    a1111_body = {"prompt": "a boat", "width": 48, "height": 32, "steps": 3, "seed": 11, "batch_size": 1,
                  "sampler_name": "euler"}

    print("1. one process: the pictures of pdit generate")
    loras = os.path.join(tmp, "loras")
    write_adapters(model, loras)
    srv = Server(["--model", model, "--queue", "1", "--io-timeout", "2", "--lora-model-dir", loras])
    out = subprocess.run(["curl", "-s", "-S", "--max-time", "120", srv.url("/v1/images/generations"),
                          "-H", "Content-Type: application/json", "-d", json.dumps(openai_body)],
                         capture_output=True, text=True)
    try:
        got = pngs_openai(json.loads(out.stdout))
    except (ValueError, KeyError):
        got = []
    report(got == fox, "curl, OpenAI images API, n 2, negative prompt, true CFG: generate's PNGs byte for byte")
    js = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "js")
    r = subprocess.run(["node", os.path.join(js, "openai_images.mjs"), srv.url("/v1"), os.path.join(tmp, "js"),
                        json.dumps(openai_body)], capture_output=True, text=True, timeout=180)
    got = [open(os.path.join(tmp, "js-%d.png" % b), "rb").read() for b in range(2)] if r.returncode == 0 else []
    report(got == fox, "the OpenAI JavaScript SDK's images.generate: generate's PNGs byte for byte %s"
           % (r.stdout.strip() or r.stderr.strip()[-300:]))
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", a1111_body)
    got = [base64.b64decode(x) for x in ans["images"]] if st == 200 else []
    report(got == boat and ans["parameters"]["seed"] == 11 and "seed: 11" in ans["info"],
           "urllib, A1111 txt2img: generate's PNG byte for byte, parameters and info")
    # what an A1111 client sends: cfg_scale, Forge's distilled_cfg_scale, and
    # the API's other fields; those asking for what pdit does not do are
    # named in the job's log line
    forge = dict(a1111_body, cfg_scale=3.5, distilled_cfg_scale=2.5, sampler_name="DPM++ 2M", scheduler="Karras",
                 restore_faces=True, tiling=False, enable_hr=False, hr_scale=2, denoising_strength=0.7,
                 override_settings={}, override_settings_restore_afterwards=True, s_noise=1, subseed=-1,
                 styles=[], send_images=True, save_images=False, alwayson_scripts={}, eta=0)
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", forge)
    got = [base64.b64decode(x) for x in ans["images"]] if st == 200 else []
    logged = [l for l in srv.lines if "ignored:" in l]
    report(got == cfgboat, "A1111 cfg_scale 3.5 without negative_prompt (true CFG with \"\"), distilled_cfg_scale 2.5 "
           "(guidance): generate's PNG byte for byte (%s %s)" % (st, (ans or {}).get("error", "")))
    report(len(logged) == 1 and logged[0].rstrip().endswith("(ignored: sampler_name, scheduler, restore_faces)"),
           "A1111's other fields accepted; those pdit does not honour named in the log: %s"
           % (logged[0].strip() if logged else "nothing logged"))
    # A1111's route ignores a field it does not know, naming it in the log
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", dict(a1111_body, colour="red"))
    report(st == 200 and any(l.rstrip().endswith("(ignored: colour)") for l in srv.lines),
           "A1111, an unknown field: 200, named in the log (%s)" % st)
    # what runs is logged, the model's own size and steps where the request leaves them out
    st, j, _ = post(srv, "/v1/jobs", {"prompt": "the defaults"})
    post_method(srv, "DELETE", "/v1/jobs/%s" % j.get("id"))
    t_end = time.time() + 10
    while time.time() < t_end and not [l for l in srv.lines if "job %s: POST" % j.get("id") in l]:
        time.sleep(0.02)
    line = [l for l in srv.lines if "job %s: POST" % j.get("id") in l]
    report(st == 202 and line and "0x0" not in line[0] and " 0 step(s)" not in line[0] and "1024x1024" in line[0],
           "a request with the model's defaults logs what runs: %s" % (line[0].strip() if line else "no line"))
    wait_job(srv, j.get("id"), ("done", "failed", "cancelled"), t=120)
    # A1111's img2img: the boat picture repainted on its left half, generate -i --mask's PNG
    mask = os.path.join(tmp, "mask.png")
    write_png(mask, 48, 32, lambda x, y: 255 if x < 24 else 0)
    init = os.path.join(tmp, "boat-0.png")
    lake = generate(model, os.path.join(tmp, "lake"), ["a lake"],
                    ["-i", init, "--mask", mask, "--strength", "0.6", "--steps", "4", "-s", "5"])
    b64 = lambda path: base64.b64encode(open(path, "rb").read()).decode()
    i2i = {"prompt": "a lake", "init_images": ["data:image/png;base64," + b64(init)], "mask": b64(mask),
           "denoising_strength": 0.6, "steps": 4, "seed": 5, "mask_blur": 4, "resize_mode": 0, "inpainting_fill": 1}
    st, ans, _ = post(srv, "/sdapi/v1/img2img", i2i)
    report(st == 200 and [base64.b64decode(x) for x in ans["images"]] == lake,
           "A1111 img2img with a mask (a data URL and plain base64): generate -i --mask's PNG byte for byte (%s %s)"
           % (st, (ans or {}).get("error", "")))
    # OpenAI's images.edit through curl -F (multipart): the picture, a mask transparent where it is
    # repainted, pdit's strength, steps and seed: the same PNG
    amask = os.path.join(tmp, "mask-alpha.png")
    write_rgba_png(amask, 48, 32, lambda x, y: 0 if x < 24 else 255)
    form = ["-F", "image=@%s;type=image/png" % init, "-F", "mask=@%s;type=image/png" % amask, "-F", "prompt=a lake",
            "-F", "strength=0.6", "-F", "steps=4", "-F", "seed=5", "-F", "response_format=b64_json", "-F", "model=pdit"]
    out = subprocess.run(["curl", "-s", "-S", "--max-time", "120", srv.url("/v1/images/edits"), *form],
                         capture_output=True, text=True)
    try:
        got = pngs_openai(json.loads(out.stdout))
    except (ValueError, KeyError):
        got = []
    report(got == lake, "curl -F, OpenAI images.edit (multipart, a mask transparent where it repaints): generate -i "
           "--mask's PNG byte for byte%s" % ("" if got == lake else " (%s)" % out.stdout[:200]))
    # without a mask, OpenAI's rule: the picture's own transparent pixels are what is edited
    try:
        from PIL import Image
        rgba = os.path.join(tmp, "boat-rgba.png")
        im = Image.open(init).convert("RGBA")
        im.putalpha(Image.frombytes("L", im.size, bytes(0 if x < 24 else 255 for y in range(im.height)
                                                        for x in range(im.width))))
        im.save(rgba)
        fields = ["image=@%s;type=image/png" % rgba] + [a for a in form[1::2] if not a.startswith(("image=", "mask="))]
        f2 = [y for x in fields for y in ("-F", x)]
        out = subprocess.run(["curl", "-s", "-S", "--max-time", "120", srv.url("/v1/images/edits"), *f2],
                             capture_output=True, text=True)
        got = pngs_openai(json.loads(out.stdout))
    except (ImportError, ValueError, KeyError) as e:
        got, out = [], str(e)
    report(got == lake, "images.edit without a mask, a picture transparent where it repaints: generate -i --mask's "
           "PNG byte for byte%s" % ("" if got == lake else " (%s)" % str(out)[:200]))
    # a picture declaring 5000 x 5000 (16M pixels at most, whatever the size asked): 400 before any decode
    import struct
    import zlib
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    big = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 5000, 5000, 8, 2, 0, 0, 0)) + chunk(b"IEND", b"")
    st, ans, _ = post(srv, "/v1/jobs", {"prompt": "x", "image": base64.b64encode(big).decode(), "size": "64x48"})
    report(st == 400 and ans["error"]["param"] == "image" and "more than" in ans["error"]["message"],
           "a picture of 5000x5000 -> %s (%s)" % (st, (ans or {}).get("error", {}).get("message")))
    small = os.path.join(tmp, "mask-alpha-small.png")
    write_rgba_png(small, 16, 16, lambda x, y: 0)
    nul = os.path.join(tmp, "nul-prompt.txt")
    with open(nul, "wb") as f:
        f.write(b"a lake\x00 at night")
    bad = [("no image", [a for a in form if not a.startswith("image=")], "image"),
           ("a mask of another size", [a if not a.startswith("mask=") else "mask=@" + small for a in form], "mask"),
           ("an image that is no PNG", [a if not a.startswith("image=") else "image=not a picture" for a in form],
            "image"),
           ("a NUL byte in the prompt (curl -F prompt=<file)",
            [a if not a.startswith("prompt=") else "prompt=<" + nul for a in form], "prompt")]
    for what, f, param in bad:
        f = [x for x in f if x != "-F"]
        args = [y for x in f for y in ("-F", x)]
        r = subprocess.run(["curl", "-s", "--max-time", "60", "-w", "\n%{http_code}", srv.url("/v1/images/edits"),
                            *args], capture_output=True, text=True)
        body, _, code = r.stdout.rpartition("\n")
        try:
            err = json.loads(body)["error"]
        except (ValueError, KeyError):
            err = {}
        report(code == "400" and err.get("param") == param, "images.edit, %s -> %s (%s: %s)"
               % (what, code, err.get("param"), err.get("message")))
    st, _, _ = post(srv, "/v1/images/edits", b"prompt=x", {"Content-Type": "text/plain"})
    report(st == 415, "images.edit as text/plain -> %s" % st)
    # FLUX.1 Kontext's reference picture (pdit's ref_image field): generate -r's PNG
    kont = generate(model, os.path.join(tmp, "kontext"), ["a lake"],
                    ["-r", init, "-W", "32", "-H", "48", "--steps", "2", "-s", "3"])
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", {"prompt": "a lake", "width": 32, "height": 48, "steps": 2, "seed": 3,
                                                 "ref_image": b64(init)})
    report(st == 200 and [base64.b64decode(x) for x in ans["images"]] == kont,
           "A1111 txt2img with ref_image (FLUX.1 Kontext's reference): generate -r's PNG byte for byte (%s %s)"
           % (st, (ans or {}).get("error", "")))
    # pdit's job API (what the page sends): a picture, a mask in the command line's convention (white
    # repaints) and strength in JSON; a picture that is none named
    st, j, _ = post(srv, "/v1/jobs", {"prompt": "a lake", "image": b64(init), "mask": "data:image/png;base64," + b64(mask),
                                      "strength": 0.6, "steps": 4, "seed": 5, "response_format": "b64_json"})
    j = wait_job(srv, j.get("id"), ("done", "failed", "cancelled"), t=120) if st == 202 else j
    got = [base64.b64decode(d["b64_json"]) for d in j["result"]["data"]] if j.get("status") == "done" else []
    st2, ans2, _ = post(srv, "/v1/jobs", {"prompt": "a lake", "image": "bm90IGEgcGljdHVyZQ==", "strength": 0.6})
    st3, ans3, _ = post(srv, "/v1/jobs", {"prompt": "a lake", "strength": 0.6})
    report(got == lake and st2 == 400 and ans2["error"]["param"] == "image" and st3 == 400
           and ans3["error"]["param"] == "strength" and "--" not in ans3["error"]["message"],
           "POST /v1/jobs with image, mask and strength: generate -i --mask's PNG byte for byte; no picture -> %s "
           "(%s), strength without one -> %s (%s: %s)" % (st2, ans2["error"]["param"], st3,
                                                         ans3.get("error", {}).get("param"),
                                                         ans3.get("error", {}).get("message")))
    bad_mask = os.path.join(tmp, "mask-small.png")
    write_png(bad_mask, 16, 16, lambda x, y: 255)
    st, ans, _ = post(srv, "/sdapi/v1/img2img", dict(i2i, init_images=["bm90IGEgcGljdHVyZQ=="]))
    st2, ans2, _ = post(srv, "/sdapi/v1/img2img", dict(i2i, mask=b64(bad_mask)))
    st3, ans3, _ = post(srv, "/sdapi/v1/img2img", {k: v for k, v in i2i.items() if k != "init_images"})
    report(st == 400 and ans["error"]["param"] == "init_images" and st2 == 400 and ans2["error"]["param"] == "mask"
           and "--" not in ans2["error"]["message"] and st3 == 400 and ans3["error"]["param"] == "init_images",
           "img2img: not a PNG -> %s (%s), a mask of another size -> %s (%s: %s), no picture -> %s"
           % (st, ans["error"]["param"], st2, ans2["error"]["param"], ans2["error"]["message"][:60], st3))
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", dict(a1111_body, n_iter=2))
    report(st == 200 and len(ans["images"]) == 2 and base64.b64decode(ans["images"][0]) == boat[0],
           "A1111 n_iter 2: two pictures, the first generate's (%s)" % st)
    browser(srv, tmp, init, model)
    # nothing is read again: the folder moved away, the next requests are still generate's
    os.rename(model, model + "-away")
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", a1111_body)
    st2, ans2, _ = post(srv, "/v1/images/generations", openai_body)
    os.rename(model + "-away", model)
    report(st == 200 and [base64.b64decode(x) for x in ans["images"]] == boat and st2 == 200 and
           pngs_openai(ans2) == fox, "the model folder moved away after loading: later requests read no file "
           "(the text encoders stay loaded), still generate's PNGs (%s, %s)" % (st, st2))
    st, h = get(srv, "/health")
    report(st == 200 and h["status"] == "ok" and h["ranks"] == 1 and h["served"] == 15 and h["queue"] == 0,
           "GET /health: %s" % h)
    st, m = get(srv, "/v1/models")
    report(st == 200 and m["data"][0]["id"] == model, "GET /v1/models")
    # adapters per request (<lora:NAME:SCALE> in the prompt, stable-diffusion.cpp's), no reload: two
    # requests with different adapters, then none, each generate's PNG byte for byte
    # then the first set again: its terms from the server's cache (--lora-cache), the same PNG
    for k, prompt in enumerate(("a boat <lora:style:0.8>", "a boat <lora:style:0.5> <lora:other:-1.5>", "a boat",
                                "a boat <lora:style:0.8>")):
        want = generate(model, os.path.join(tmp, "lora"), [prompt], [*boat_args, "--lora-model-dir", loras])
        seen = len(srv.lines)
        st, ans, _ = post(srv, "/sdapi/v1/txt2img", dict(a1111_body, prompt=prompt))
        got = [base64.b64decode(x) for x in ans["images"]] if st == 200 else []
        # (the log line is read from the server's stderr by another thread: it may come just after
        # the answer; a request that did not use the cache never logs it, so the wait is bounded)
        t_end = time.time() + (5 if k == 3 else 0.5)
        while time.time() < t_end and not any("its adapters' terms from the cache" in l for l in srv.lines[seen:]):
            time.sleep(0.05)
        cached = any("its adapters' terms from the cache" in l for l in srv.lines[seen:])
        report(got == want and (got == boat) == (prompt == "a boat") and cached == (k == 3),
               "A1111, prompt %r: generate's PNG byte for byte, %s the adapter-less one%s (%s %s)"
               % (prompt, "equal to" if prompt == "a boat" else "not", ", from the cache" if cached else "",
                  st, (ans or {}).get("error", "")))
    st, ans, _ = post(srv, "/v1/images/generations", dict(openai_body, prompt="a fox <lora:nope:1>"))
    st2, ans2, _ = post(srv, "/v1/images/generations", dict(openai_body, prompt="a fox <lora:../m/x:1>"))
    report(st == 400 and "nope" in ans["error"]["message"] and st2 == 400,
           "an unknown adapter -> %s (%s), a path for a name -> %s" % (st, (ans or {}).get("error", {}).get("message"),
                                                                     st2))

    # another family through the same server: a Wan folder makes one-frame pictures, generate's
    wan = os.path.join(tmp, "wan")
    subprocess.run([PDIT, "tiny", wan, "--family", "wan"], check=True, capture_output=True)
    subprocess.run([PDIT, "generate", "--model", wan, "-p", "a red kite", "--frames", "1", "-H", "32", "-W", "48",
                    "--steps", "2", "-s", "9", "--guidance", "3", "-o", os.path.join(tmp, "wan.png"), "-q"], check=True)
    wsrv = Server(["--model", wan])
    st, ans, _ = post(wsrv, "/sdapi/v1/txt2img", {"prompt": "a red kite", "width": 48, "height": 32, "steps": 2,
                                                  "seed": 9, "cfg_scale": 3})
    report(st == 200 and [base64.b64decode(x) for x in ans["images"]] == [open(os.path.join(tmp, "wan.png"), "rb").read()],
           "a Wan2.1 folder, A1111 (cfg_scale as Wan's guidance): generate's one-frame PNG byte for byte (%s)" % st)
    # the engine's refusals in the request's field names, never a flag
    st, ans, _ = post(wsrv, "/v1/images/generations", {"prompt": "a kite", "size": "48x32", "true_cfg_scale": 3})
    err = (ans or {}).get("error", {})
    report(st == 400 and err.get("param") == "guidance" and "true_cfg_scale" in err.get("message", "") and
           "--" not in err.get("message", ""), "Wan, true_cfg_scale 3 -> %s, in field names: %s (%s)"
           % (st, err.get("message"), err.get("param")))
    wsrv.stop()
    videos(wan, tmp)
    # Qwen-Image through the service, its text encoder kept: two requests whose negative prompts are
    # longer and shorter than the prompt (each its own length), generate's PNGs byte for byte
    qwen = os.path.join(tmp, "qwen")
    subprocess.run([PDIT, "tiny", qwen, "--family", "qwen"], check=True, capture_output=True)
    qsrv = Server(["--model", qwen])
    for k, neg in enumerate(("the blurry text of a photo, in color", "blur")):
        png = os.path.join(tmp, "qwen-%d.png" % k)
        subprocess.run([PDIT, "generate", "--model", qwen, "-p", "a red fox", "-n", neg, "--true-cfg-scale", "3", "-H",
                        "32", "-W", "48", "--steps", "2", "-s", "4", "-o", png, "-q"], check=True)
        st, ans, _ = post(qsrv, "/v1/images/generations", {"prompt": "a red fox", "negative_prompt": neg,
                                                            "true_cfg_scale": 3, "size": "48x32", "steps": 2, "seed": 4})
        got = pngs_openai(ans) if st == 200 else []
        report(got == [open(png, "rb").read()], "a Qwen-Image folder, a negative prompt %s than the prompt: generate's "
               "PNG byte for byte (%s %s)" % ("longer" if k == 0 else "shorter", st, (ans or {}).get("error", "")))
    qsrv.stop()

    print("2. bad requests: 4xx naming the field, the server stays up")
    big = {"prompt": "x" * (1 << 20)}
    cases = [
        ("broken JSON", b'{"prompt": "a cat", ', 400, None),
        ("not an object", b'["a cat"]', 400, None),
        ("empty body", b"", 400, None),
        ("n as a string", {"prompt": "a", "n": "2"}, 400, "n"),
        ("n = 10^9", {"prompt": "a", "n": 10 ** 9}, 400, "n"),
        ("n = 0", {"prompt": "a", "n": 0}, 400, "n"),
        ("size 65x64", {"prompt": "a", "size": "65x64"}, 400, "size"),
        ("size -64x64", {"prompt": "a", "size": "-64x64"}, 400, "size"),
        ("size as a number", {"prompt": "a", "size": 64}, 400, "size"),
        ("size 99999x64", {"prompt": "a", "size": "99999x64"}, 400, "size"),
        ("steps 0", {"prompt": "a", "steps": 0}, 400, "steps"),
        ("steps 2.5", {"prompt": "a", "steps": 2.5}, 400, "steps"),
        ("seed -5", {"prompt": "a", "seed": -5}, 400, "seed"),
        ("prompt a number", {"prompt": 5}, 400, "prompt"),
        ("no prompt", {"n": 1}, 400, "prompt"),
        ("response_format url", {"prompt": "a", "response_format": "url"}, 400, "response_format"),
        ("guidance a string", {"prompt": "a", "guidance": "high"}, 400, "guidance"),
        ("a misspelt field (OpenAI's API refuses unknown arguments)", {"prompt": "a", "sizee": "64x64"}, 400, "sizee"),
        ("frames 5 on FLUX", {"prompt": "a", "size": "32x32", "frames": 5}, 400, "frames"),
        ("fps without frames", {"prompt": "a", "fps": 8}, 400, "fps"),
        ("a video of n 2", {"prompt": "a", "frames": 5, "n": 2}, 400, "n"),
        ("true_cfg_scale 3 without negative_prompt", {"prompt": "a", "size": "32x32", "true_cfg_scale": 3}, 400,
         "true_cfg_scale"),
        ("16 pictures of 4096x4096", {"prompt": "a", "n": 16, "size": "4096x4096"}, 400, "n"),
        ("a NUL in the prompt (cJSON would end it there)", {"prompt": "a cat\x00 on a mat"}, 400, "prompt"),
        ("a NUL in negative_prompt", {"prompt": "a", "negative_prompt": "\x00dogs"}, 400, "negative_prompt"),
        ("a 1 MB prompt", big, 413, None),
        ("a 10 MB body (read to its end, then refused)", b"{" + b" " * (10 << 20) + b"}", 413, None),
    ]
    for label, body, want, field in cases:
        try:
            st, ans, _ = post(srv, "/v1/images/generations", body)
        except (ConnectionError, urllib.error.URLError) as e:
            st, ans = "connection: %s" % e, None
        err = (ans or {}).get("error", {})
        report(st == want and (field is None or err.get("param") == field) and err.get("message")
               and "--" not in err.get("message") and " -n " not in err.get("message"),
               "%s -> %s %s" % (label, st, err.get("message", "")[:70]))
    # the text \u0000 (its backslash escaped) is no NUL: taken
    st, ans, _ = post(srv, "/v1/images/generations", {"prompt": "a \\u0000 b", "size": "32x32", "steps": 1})
    report(st == 200, "a prompt holding the text \\u0000, no NUL -> %s %s" % (st, (ans or {}).get("error", "")))
    # curl asks "Expect: 100-continue" for a large body: refused before it is sent
    with open(os.path.join(tmp, "big.json"), "wb") as f:
        f.write(b'{"prompt": "' + b"x" * (10 << 20) + b'"}')
    out = subprocess.run(["curl", "-s", "--max-time", "60", "-o", "/dev/null", "-w", "%{http_code} %{size_upload}",
                          "-H", "Content-Type: application/json", "-H", "Expect: 100-continue",
                          "--data-binary", "@" + os.path.join(tmp, "big.json"), srv.url("/v1/images/generations")],
                         capture_output=True, text=True)
    code, sent = (out.stdout.split() + ["", ""])[:2]
    report(code == "413" and float(sent or 0) < (1 << 20), "curl, 10 MB with Expect: 100-continue -> %s, %s bytes sent"
           % (code, sent))
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", {"prompt": "a", "width": -64, "height": 64})
    report(st == 400 and ans["error"]["param"] == "width", "A1111 width -64 -> 400 (width)")
    st, ans, _ = post(srv, "/v1/images/generations", {"prompt": "a", "size": "100000x100000"})
    report(st == 400 and "4096" in (ans or {}).get("error", {}).get("message", ""),
           "size 100000x100000 -> %s, called too large (%s)" % (st, (ans or {}).get("error", {}).get("message")))
    # a job the model cannot make is refused, not accepted to fail later
    st, ans, _ = post(srv, "/v1/jobs", {"prompt": "a", "size": "32x32", "frames": 5})
    report(st == 400 and (ans or {}).get("error", {}).get("param") == "frames",
           "/v1/jobs frames 5 on FLUX -> %s (%s)" % (st, (ans or {}).get("error", {}).get("message")))
    st, ans, _ = post(srv, "/v1/images/generations", b'{"prompt": "a"}', {"Content-Type": "text/plain"})
    report(st == 415, "Content-Type text/plain -> %s" % st)
    st, ans, _ = post(srv, "/v1/nothing", {"prompt": "a"})
    report(st == 404, "unknown path -> %s" % st)
    try:
        urllib.request.urlopen(srv.url("/v1/images/generations"), timeout=10)
        st = 200
    except urllib.error.HTTPError as e:
        st = e.code
    report(st == 405, "GET on a generation endpoint -> %s" % st)
    # half a request, then silence: the server closes it after --io-timeout (2 s)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
    s.sendall(b"POST /v1/images/generations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Le")
    t0 = time.time()
    try:
        closed = s.recv(100) == b""
    except (ConnectionResetError, socket.timeout):
        closed = False
    report(closed and time.time() - t0 < 10, "a client that stops mid-headers is closed after %.1f s" % (time.time() - t0))
    s.close()
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", a1111_body)
    report(st == 200 and [base64.b64decode(x) for x in ans["images"]] == boat, "after all that: a good request, 200")

    # a waiting client that hangs up cancels its job; the next request is right. The job's last log line
    # comes from the connection's thread after the engine has let it go (/health's running 0 before it):
    # wait for that line, not for running (and not for any job's last line: the request before may log
    # its own after its answer)
    seen = len(srv.lines)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
    b = json.dumps({"prompt": "left", "size": "64x64", "steps": 1000}).encode()
    s.sendall(b"POST /v1/images/generations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(b), b))
    t_end = time.time() + 30
    while time.time() < t_end and get(srv, "/health")[1]["running"] != 1:
        time.sleep(0.02)
    time.sleep(0.2)
    s.close()
    ended = lambda: [l for l in srv.lines[seen:] if " -> " in l and "client left" in l]
    while time.time() < t_end and not ended():
        time.sleep(0.02)
    left = ended()
    report(len(left) == 1 and time.time() < t_end, "a client that hangs up: its job cancelled (%s)"
           % (left[0].strip() if left else "not logged"))
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", a1111_body)
    report(st == 200 and [base64.b64decode(x) for x in ans["images"]] == boat, "the next request: generate's PNG")

    print("3. the queue, and SIGTERM")
    res = {}

    def run(name, body):
        try:
            res[name] = post(srv, "/v1/images/generations", body, timeout=300)
        except (OSError, urllib.error.URLError) as e:
            res[name] = ("%s" % e, None, {})

    t1, t2 = one_running_one_queued(srv, run, "long", "waiting", steps=400)
    st, ans, hdr = post(srv, "/v1/images/generations", {"prompt": "one too many", "size": "64x64", "steps": 1})
    report(st == 429 and int(hdr.get("Retry-After", "0")) >= 1, "queue full -> %s, Retry-After %s" % (st, hdr.get("Retry-After")))
    # the running request's 400 steps first: on a machine busy with other
    # tests (OpenMP's spinning threads oversubscribed) they took over 30 s
    rc = srv.stop(signal.SIGTERM, timeout=150)
    t1.join(60)
    t2.join(60)
    report(res.get("long", (0,))[0] == 200 and len(pngs_openai(res["long"][1])) == 1,
           "SIGTERM: the running request finishes (%s)" % (res.get("long", ("none",))[0],))
    report(res.get("waiting", (0,))[0] == 503, "SIGTERM: the queued request gets %s" % (res.get("waiting", ("none",))[0],))
    report(rc == 0, "SIGTERM: exit %s" % rc)

    srv = Server(["--model", model, "--queue", "0"])
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", a1111_body)
    report(st == 200, "--queue 0: an idle server still runs a request (%s)" % st)
    srv.stop()

    print("4. --api-key")
    srv = Server(["--model", model, "--api-key", "s3cret"])
    st, _, hdr = post(srv, "/v1/images/generations", a1111_body)
    st2, _, _ = post(srv, "/v1/images/generations", a1111_body, {"Authorization": "Bearer nope"})
    st3, ans, _ = post(srv, "/sdapi/v1/txt2img", a1111_body, {"Authorization": "Bearer s3cret"})
    report(st == 401 and st2 == 401 and st3 == 200 and "Bearer" in hdr.get("WWW-Authenticate", ""),
           "no token %s, a wrong one %s, the right one %s" % (st, st2, st3))
    report(srv.stop() == 0, "stopped")
    r = subprocess.run([PDIT, "serve", "--model", model, "--listen", "0.0.0.0:0"], capture_output=True, text=True,
                       timeout=60, env={k: v for k, v in os.environ.items() if k != "PDIT_API_KEY"})
    report(r.returncode != 0 and r.stderr.count("\n") == 1 and "--api-key" in r.stderr,
           "0.0.0.0 without a key: %s" % r.stderr.strip())
    srv = Server(["--model", model, "--strict"])
    # its port again: refused before the weights load (no "loaded" line), one line naming --listen
    r = subprocess.run([PDIT, "serve", "--model", model, "--listen", "127.0.0.1:%d" % srv.port], capture_output=True,
                       text=True, timeout=60)
    report(r.returncode != 0 and r.stderr.count("\n") == 1 and "--listen" in r.stderr and "in use" in r.stderr,
           "a port in use, before loading: %s" % r.stderr.strip())
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", dict(a1111_body, colour="red"))
    report(st == 400 and ans["error"]["param"] == "colour", "--strict: an unknown field -> %s (%s)" % (st, ans["error"]["param"]))
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", dict(a1111_body, restore_faces=True))
    st2, _, _ = post(srv, "/sdapi/v1/txt2img", dict(a1111_body, restore_faces=False, sampler_name="Euler"))
    report(st == 400 and ans["error"]["param"] == "restore_faces" and st2 == 200,
           "--strict: an A1111 field pdit does not honour -> %s (%s); the same at its no-op value -> %s"
           % (st, ans["error"]["param"], st2))
    srv.stop()

    kept_encoders(tmp)

    print("5. jobs")
    srv = Server(["--model", model, "--queue", "4"])
    jobs_api(srv, openai_body, fox, tmp)
    page = urllib.request.urlopen(srv.url("/"), timeout=10).read().decode()
    report("<form" in page and "/v1/jobs" in page and "http://" not in page and "https://" not in page
           and "<script src" not in page, "GET /: a self-contained page (%d bytes)" % len(page))
    # SIGTERM with a /v1/jobs job running and one queued: the running one
    # ends (200), the queued one's 503 is logged by its id (no connection
    # waits on it to log its end)
    st, a, _ = post(srv, "/v1/jobs", {"prompt": "long", "size": "64x64", "steps": 40})
    wait_job(srv, a["id"], ("running",))
    st, b, _ = post(srv, "/v1/jobs", {"prompt": "queued", "size": "64x64", "steps": 1})
    rc = srv.stop(signal.SIGTERM, timeout=150)
    t_end = time.time() + 10
    said = lambda: [l.strip() for l in srv.lines if "job %s of /v1/jobs -> 503" % b["id"] in l]
    while time.time() < t_end and not said():
        time.sleep(0.05)
    report(rc == 0 and said() and any("job %s -> 200" % a["id"] in l for l in srv.lines),
           "SIGTERM: the running /v1/jobs job ends 200, the queued one's 503 logged: %s (exit %s)"
           % (said()[0] if said() else "not logged", rc))

    print("6. load")
    load(model)

    if MPIRUN:
        print("7. two processes")
        # Ulysses' sums run in another order than one process's: its pictures
        # are generate's on the same mesh (one process's within a level)
        ufox = generate(model, os.path.join(tmp, "ufox"), ["a red fox"] * 2, [*fox_args, "--ulysses-degree", "2"], 2)
        uboat = generate(model, os.path.join(tmp, "uboat"), ["a boat"], [*boat_args, "--ulysses-degree", "2"], 2)
        one = (fox, boat)
        for mesh in (["--ulysses-degree", "2"], ["--data-parallel-degree", "2"]):
            srv = Server(["--model", model, *mesh], mpi=2)
            fox, boat = (ufox, uboat) if mesh[0] == "--ulysses-degree" else one
            st, ans, _ = post(srv, "/v1/images/generations", openai_body)
            report(st == 200 and pngs_openai(ans) == fox, "%s, urllib: generate's PNGs byte for byte" % " ".join(mesh))
            if mesh[0] == "--ulysses-degree":
                out = subprocess.run(["curl", "-s", "-S", "--max-time", "120", srv.url("/sdapi/v1/txt2img"),
                                      "-H", "Content-Type: application/json", "-d", json.dumps(a1111_body)],
                                     capture_output=True, text=True)
                try:
                    got = [base64.b64decode(x) for x in json.loads(out.stdout)["images"]]
                except (ValueError, KeyError):
                    got = []
                report(got == boat, "%s, curl (A1111): generate's PNG byte for byte" % " ".join(mesh))
                r = subprocess.run(["node", os.path.join(js, "openai_images.mjs"), srv.url("/v1"),
                                    os.path.join(tmp, "js2"), json.dumps(openai_body)], capture_output=True, text=True,
                                   timeout=180)
                got = [open(os.path.join(tmp, "js2-%d.png" % b), "rb").read() for b in range(2)] if r.returncode == 0 else []
                report(got == fox, "%s, the OpenAI JavaScript SDK: generate's PNGs byte for byte" % " ".join(mesh))
            st, h = get(srv, "/health")
            report(h["ranks"] == 2, "/health: %s" % h["mesh"])
            if mesh[0] == "--ulysses-degree":
                cancel_running(srv, openai_body, fox)
            srv.stop()
        kill_rank(model)
        clean_stop(model, tmp)
    print("%d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
