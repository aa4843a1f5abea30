#!/usr/bin/env python3
"""Two binary PPM pictures of the same size whose bytes differ by at most one
(pictures from latents equal within 1e-5 round to 8 bits alike but for a few
values). Exit 0 when they do, 1 with the largest difference otherwise."""
import sys


def read_ppm(path):
    data = open(path, "rb").read()
    parts = data.split(b"\n", 3)
    if parts[0] != b"P6" or parts[2] != b"255":
        sys.exit("%s: not a binary PPM" % path)
    w, h = map(int, parts[1].split())
    pixels = parts[3]
    if len(pixels) != w * h * 3:
        sys.exit("%s: %d bytes of pixels for %dx%d" % (path, len(pixels), w, h))
    return (w, h), pixels


(sa, a), (sb, b) = read_ppm(sys.argv[1]), read_ppm(sys.argv[2])
if sa != sb:
    sys.exit("%s is %s, %s is %s" % (sys.argv[1], sa, sys.argv[2], sb))
worst = max(abs(x - y) for x, y in zip(a, b))
print("%s ~ %s: largest difference %d" % (sys.argv[1], sys.argv[2], worst))
sys.exit(0 if worst <= 1 else 1)
