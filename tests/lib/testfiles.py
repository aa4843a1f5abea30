"""Files for the Python tests (no PIL or safetensors package on the test machines): 8-bit RGB PNG
reading, safetensors reading (F32, F16, BF16, I64) and writing (F32, I64)."""
import json
import struct
import zlib

import numpy as np


def read_png(path):
    """8-bit RGB PNG decoder (no PIL here): zlib + the five row filters."""
    data = open(path, "rb").read()
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype == 2, "expected 8-bit RGB"
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride, out, prev = w * 3, [], bytearray(w * 3)
    for y in range(h):
        f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = row[i - 3] if i >= 3 else 0
            b, c = prev[i], prev[i - 3] if i >= 3 else 0
            if f == 1:
                row[i] = (row[i] + a) & 255
            elif f == 2:
                row[i] = (row[i] + b) & 255
            elif f == 3:
                row[i] = (row[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out.append(bytes(row))
        prev = row
    return np.frombuffer(b"".join(out), np.uint8).reshape(h, w, 3)


def load_st(path):
    buf = open(path, "rb").read()
    n = struct.unpack("<Q", buf[:8])[0]
    hdr = json.loads(buf[8:8 + n])
    hdr.pop("__metadata__", None)
    dt = {"F32": "<f4", "F16": "<f2", "I64": "<i8"}
    out = {}
    for k, v in hdr.items():
        b, e = v["data_offsets"]
        if v["dtype"] == "BF16":
            raw = np.frombuffer(buf[8 + n + b:8 + n + e], "<u2").astype(np.uint32) << 16
            out[k] = raw.view("<f4").reshape(v["shape"])
        else:
            a = np.frombuffer(buf[8 + n + b:8 + n + e], dt[v["dtype"]])
            out[k] = (a if v["dtype"] == "I64" else a.astype(np.float32)).reshape(v["shape"])
    return out


def save_st(path, tensors, meta=None):
    hdr, off, blobs = {"__metadata__": meta} if meta else {}, 0, []
    for k in sorted(tensors):
        ints = np.asarray(tensors[k]).dtype.kind in "iu"
        b = np.ascontiguousarray(tensors[k], "<i8" if ints else "<f4").tobytes()
        hdr[k] = {"dtype": "I64" if ints else "F32", "shape": list(np.shape(tensors[k])),
                  "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
