#!/usr/bin/env python3
"""`pdit serve` against `pdit generate`, with clients no one here wrote (curl, Python's urllib).

1. One process on a tiny FLUX folder (port 0: the server prints the one it got): the OpenAI request
   through curl (n = 2, a negative prompt with true CFG) and the A1111 request through urllib give
   PNGs byte for byte equal to `pdit generate`'s with the same arguments (pixels and the parameters
   chunk); /health and /v1/models answer.
2. Bad requests get a 4xx with a JSON error naming the field, and the server keeps answering: broken
   and truncated JSON, wrong types, sizes not multiples of 16 or negative, n = 10^9, a 1 MB prompt,
   a 10 MB body, a wrong content type, an unknown path, GET on a generation endpoint, a missing
   prompt, response_format "url", a client that sends half its headers and stops (closed by
   --io-timeout), unknown fields with --strict.
3. The queue: while a long request runs, a second waits (--queue 1) and a third gets 429 with
   Retry-After; SIGTERM then lets the running one finish (200), answers the waiting one 503 and
   exits 0.
4. --api-key: no or a wrong Bearer token gets 401, the right one 200; listening on another address
   than 127.0.0.1 without a key is refused at start with one line.
5. With mpirun (when given): 2 processes (Ulysses 2, and data parallel 2 over n = 2) give the same
   PNGs as `pdit generate` on one process.

    cli_serve.py PDIT [MPIRUN...]
"""
import base64
import http.client
import json
import os
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

    def __init__(self, args, mpi=0):
        cmd = ([*MPIRUN, "-np", str(mpi)] if mpi else []) + [PDIT, "serve", *args, "--listen", "127.0.0.1:0"]
        self.p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines, self.port, self.ready = [], None, threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
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

    def stop(self, sig=signal.SIGTERM, rank0_pid=None):
        try:
            os.kill(rank0_pid or self.p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return self.p.wait(timeout=30)
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


def generate(model, out, prompts, extra):
    with open(out + ".txt", "w") as f:
        f.write("".join(p + "\n" for p in prompts))
    subprocess.run([PDIT, "generate", "--model", model, "--prompts", out + ".txt", "-o", out + "-%d.png", "-q",
                    *extra], check=True)
    return [open(out + "-%d.png" % b, "rb").read() for b in range(len(prompts))]


def pngs_openai(answer):
    return [base64.b64decode(d["b64_json"]) for d in answer["data"]]


def main():
    tmp = tempfile.mkdtemp()
    model = os.path.join(tmp, "m")
    subprocess.run([PDIT, "tiny", model, "--full"], check=True, capture_output=True)
    fox = generate(model, os.path.join(tmp, "fox"), ["a red fox"] * 2,
                   ["-W", "64", "-H", "48", "--steps", "2", "-s", "7", "-n", "blurry", "--true-cfg-scale", "3"])
    boat = generate(model, os.path.join(tmp, "boat"), ["a boat"], ["-W", "48", "-H", "32", "--steps", "3", "-s", "11"])
    openai_body = {"prompt": "a red fox", "n": 2, "size": "64x48", "response_format": "b64_json", "model": "pdit",
                   "steps": 2, "seed": 7, "negative_prompt": "blurry", "true_cfg_scale": 3}
    a1111_body = {"prompt": "a boat", "width": 48, "height": 32, "steps": 3, "seed": 11, "batch_size": 1,
                  "sampler_name": "euler"}

    print("1. one process: the pictures of pdit generate")
    srv = Server(["--model", model, "--queue", "1", "--io-timeout", "2"])
    out = subprocess.run(["curl", "-s", "-S", "--max-time", "120", srv.url("/v1/images/generations"),
                          "-H", "Content-Type: application/json", "-d", json.dumps(openai_body)],
                         capture_output=True, text=True)
    try:
        got = pngs_openai(json.loads(out.stdout))
    except (ValueError, KeyError):
        got = []
    report(got == fox, "curl, OpenAI images API, n 2, negative prompt, true CFG: generate's PNGs byte for byte")
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", a1111_body)
    got = [base64.b64decode(x) for x in ans["images"]] if st == 200 else []
    report(got == boat and ans["parameters"]["seed"] == 11 and "seed: 11" in ans["info"],
           "urllib, A1111 txt2img: generate's PNG byte for byte, parameters and info")
    st, h = get(srv, "/health")
    report(st == 200 and h["status"] == "ok" and h["ranks"] == 1 and h["served"] == 2 and h["queue"] == 0,
           "GET /health: %s" % h)
    st, m = get(srv, "/v1/models")
    report(st == 200 and m["data"][0]["id"] == model, "GET /v1/models")

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
        ("a 1 MB prompt", big, 413, None),
        ("a 10 MB body (read to its end, then refused)", b"{" + b" " * (10 << 20) + b"}", 413, None),
    ]
    for label, body, want, field in cases:
        try:
            st, ans, _ = post(srv, "/v1/images/generations", body)
        except (ConnectionError, urllib.error.URLError) as e:
            st, ans = "connection: %s" % e, None
        err = (ans or {}).get("error", {})
        report(st == want and (field is None or err.get("param") == field) and err.get("message"),
               "%s -> %s %s" % (label, st, err.get("message", "")[:70]))
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

    print("3. the queue, and SIGTERM")
    long_body = {"prompt": "a long one", "size": "64x64", "steps": 400, "seed": 1}
    res = {}

    def run(name, body):
        try:
            res[name] = post(srv, "/v1/images/generations", body, timeout=300)
        except (OSError, urllib.error.URLError) as e:
            res[name] = ("%s" % e, None, {})

    t1 = threading.Thread(target=run, args=("long", long_body))
    t1.start()
    t_end = time.time() + 30
    while time.time() < t_end and get(srv, "/health")[1]["running"] != 1:
        time.sleep(0.05)
    t2 = threading.Thread(target=run, args=("waiting", {"prompt": "queued", "size": "64x64", "steps": 1}))
    t2.start()
    while time.time() < t_end and get(srv, "/health")[1]["queue"] != 1:
        time.sleep(0.05)
    st, ans, hdr = post(srv, "/v1/images/generations", {"prompt": "one too many", "size": "64x64", "steps": 1})
    report(st == 429 and int(hdr.get("Retry-After", "0")) >= 1, "queue full -> %s, Retry-After %s" % (st, hdr.get("Retry-After")))
    rc = srv.stop(signal.SIGTERM)
    t1.join(60)
    t2.join(60)
    report(res.get("long", (0,))[0] == 200 and len(pngs_openai(res["long"][1])) == 1,
           "SIGTERM: the running request finishes (%s)" % (res.get("long", ("none",))[0],))
    report(res.get("waiting", (0,))[0] == 503, "SIGTERM: the queued request gets %s" % (res.get("waiting", ("none",))[0],))
    report(rc == 0, "SIGTERM: exit %s" % rc)

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
    st, ans, _ = post(srv, "/sdapi/v1/txt2img", dict(a1111_body, colour="red"))
    report(st == 400 and ans["error"]["param"] == "colour", "--strict: an unknown field -> %s (%s)" % (st, ans["error"]["param"]))
    srv.stop()

    if MPIRUN:
        print("5. two processes")
        for mesh in (["--ulysses-degree", "2"], ["--data-parallel-degree", "2"]):
            srv = Server(["--model", model, *mesh], mpi=2)
            st, ans, _ = post(srv, "/v1/images/generations", openai_body)
            report(st == 200 and pngs_openai(ans) == fox, "%s: generate's PNGs byte for byte" % " ".join(mesh))
            st, h = get(srv, "/health")
            report(h["ranks"] == 2, "/health: %s" % h["mesh"])
            srv.stop()
    print("%d failure(s)" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
