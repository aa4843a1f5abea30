#!/usr/bin/env python3
"""Pictures in at another size: pdit's Lanczos (what -i/--init-img, --mask and -r/--ref-image go through
when the picture is not the request's size) against Pillow's Image.resize(LANCZOS), the resize diffusers'
VaeImageProcessor runs: byte for byte, on fresh random pictures of random sizes (shrinking, enlarging,
one side only, odd sizes), RGB and the masks' gray (PIL's "L" first, then resized); and JPEG pictures
(baseline, 4:4:4, progressive, gray) decoded to Pillow's pixels, turned by their EXIF orientation
(1-8) as ImageOps.exif_transpose turns them, a JPEG cut short refused as Pillow refuses it, a progressive
JPEG of 300 scans refused; a PNG with alpha read as Pillow's convert("RGB") (the alpha dropped).

    cli_resize.py ST_COMPARE
"""
import os
import random
import subprocess
import sys
import tempfile

from PIL import Image, ImageOps

CMP = sys.argv[1]
fails = 0
seed = int(os.environ.get("PDIT_TEST_SEED", random.randrange(1 << 30)))
rnd = random.Random(seed)
print("seed %d (PDIT_TEST_SEED to repeat)" % seed)
tmp = tempfile.mkdtemp()
cases = [(rnd.randint(1, 90), rnd.randint(1, 90), rnd.randint(1, 90), rnd.randint(1, 90)) for _ in range(10)]
cases += [(96, 64, 48, 32), (48, 32, 96, 64), (100, 37, 64, 37), (33, 70, 33, 16), (17, 17, 16, 16), (500, 300, 64, 48)]
for w, h, ow, oh in cases:
    # smooth gradients and noise: both kinds of picture people send
    img = Image.frombytes("RGB", (w, h), bytes(
        (x * 255 // max(w - 1, 1) + rnd.randint(-40, 40)) % 256 if c == 0 else
        (y * 255 // max(h - 1, 1)) % 256 if c == 1 else rnd.randint(0, 255)
        for y in range(h) for x in range(w) for c in range(3)))
    src = os.path.join(tmp, "in.png")
    img.save(src)
    for channels, want in ((3, img.resize((ow, oh), Image.LANCZOS)),
                           (1, img.convert("L").resize((ow, oh), Image.LANCZOS).convert("RGB"))):
        out = os.path.join(tmp, "out.png")
        r = subprocess.run([CMP, "resize", src, str(ow), str(oh), str(channels), out], capture_output=True, text=True)
        got = Image.open(out).convert("RGB").tobytes() if r.returncode == 0 else b""
        exp = want.tobytes()
        diff = sum(a != b for a, b in zip(got, exp)) if len(got) == len(exp) else -1
        ok = got == exp
        fails += not ok
        print("  %-4s %dx%d -> %dx%d, %s: %s" % ("ok" if ok else "FAIL", w, h, ow, oh,
                                             "RGB" if channels == 3 else "gray (a mask)",
                                             "Pillow's bytes" if ok else "%d bytes differ %s" % (diff, r.stderr)))
# JPEG in: pdit's decode (libjpeg's defaults) against Pillow's, as diffusers' load_image reads it
for w, h, kw in ((64, 48, {"quality": 85}), (37, 21, {"quality": 95, "subsampling": 0}),
                 (50, 30, {"quality": 70, "progressive": True}), (33, 17, {"quality": 80, "mode": "L"})):
    mode = kw.pop("mode", "RGB")
    img = Image.frombytes("RGB", (w, h), bytes(rnd.randint(0, 255) if (x // 4 + y // 4) % 2 else (x * 5 + c * 60) % 256
                                               for y in range(h) for x in range(w) for c in range(3)))
    if mode == "L":
        img = img.convert("L")
    src = os.path.join(tmp, "in.jpg")
    img.save(src, "JPEG", **kw)
    out = os.path.join(tmp, "out.png")
    r = subprocess.run([CMP, "resize", src, str(w), str(h), "3", out], capture_output=True, text=True)
    got = Image.open(out).convert("RGB").tobytes() if r.returncode == 0 else b""
    ok = got == Image.open(src).convert("RGB").tobytes()
    fails += not ok
    print("  %-4s a %dx%d %s JPEG %s: %s" % ("ok" if ok else "FAIL", w, h, mode, kw,
                                          "Pillow's pixels" if ok else "differs %s" % r.stderr))
# EXIF orientations 1-8: turned as diffusers' load_image turns them (ImageOps.exif_transpose), the sides
# swapped for 5-8
for o in range(1, 9):
    img = Image.frombytes("RGB", (20, 12), bytes(rnd.randint(0, 255) for _ in range(20 * 12 * 3)))
    src = os.path.join(tmp, "exif.jpg")
    ex = Image.Exif()
    ex[0x0112] = o
    img.save(src, "JPEG", quality=90, exif=ex.tobytes())
    want = ImageOps.exif_transpose(Image.open(src)).convert("RGB")
    r = subprocess.run([CMP, "resize", src, str(want.width), str(want.height), "3", out], capture_output=True, text=True)
    ok = r.returncode == 0 and Image.open(out).convert("RGB").tobytes() == want.tobytes()
    fails += not ok
    print("  %-4s a JPEG of EXIF orientation %d: Pillow's exif_transpose, %dx%d %s" % (
        "ok" if ok else "FAIL", o, want.width, want.height, r.stderr.strip()))
# a progressive JPEG whose first scan is repeated 300 times (libjpeg only warns): refused, not decoded
# scan after scan
img = Image.frombytes("RGB", (32, 32), bytes(rnd.randint(0, 255) for _ in range(32 * 32 * 3)))
src = os.path.join(tmp, "scans.jpg")
img.save(src, "JPEG", quality=80, progressive=True)
data = open(src, "rb").read()
i = data.index(b"\xff\xda")
j = i + 2 + int.from_bytes(data[i + 2:i + 4], "big")
while not (data[j] == 0xFF and data[j + 1] != 0 and not 0xD0 <= data[j + 1] <= 0xD7):
    j += 1
open(src, "wb").write(data[:j] + data[i:j] * 300 + data[j:])
r = subprocess.run([CMP, "resize", src, "32", "32", "3", out], capture_output=True, text=True)
ok = r.returncode != 0 and "scans" in r.stderr
fails += not ok
print("  %-4s a progressive JPEG of 300 repeated scans: refused (%s)" % ("ok" if ok else "FAIL", r.stderr.strip()))
# a PNG with alpha: its colours, the alpha dropped (PIL's convert("RGB"), not composited onto black)
img = Image.frombytes("RGBA", (20, 12), bytes(rnd.randint(0, 255) for _ in range(20 * 12 * 4)))
src = os.path.join(tmp, "alpha.png")
img.save(src)
r = subprocess.run([CMP, "resize", src, "20", "12", "3", out], capture_output=True, text=True)
ok = r.returncode == 0 and Image.open(out).convert("RGB").tobytes() == img.convert("RGB").tobytes()
fails += not ok
print("  %-4s an RGBA PNG: Pillow's convert(\"RGB\") %s" % ("ok" if ok else "FAIL", r.stderr))
# a JPEG cut short: refused, as Pillow refuses it
src = os.path.join(tmp, "cut.jpg")
Image.frombytes("RGB", (64, 48), bytes(rnd.randint(0, 255) for _ in range(64 * 48 * 3))).save(src, "JPEG")
data = open(src, "rb").read()
open(src, "wb").write(data[: len(data) * 2 // 3])
r = subprocess.run([CMP, "resize", src, "64", "48", "3", out], capture_output=True, text=True)
ok = r.returncode != 0 and "premature end" in r.stderr.lower()
fails += not ok
print("  %-4s a JPEG cut short: refused (%s)" % ("ok" if ok else "FAIL", r.stderr.strip()))
sys.exit(1 if fails else 0)
