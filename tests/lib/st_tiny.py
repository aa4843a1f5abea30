"""Small safetensors files for the tests' Python (no NumPy): a file's F32 tensors read as lists, and F32
tensors written (cut short on request, for the refusal tests)."""
import json
import os
import struct


def load(path):
    """(header, tensor): the file's header and a function giving tensor NAME's values as a list."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])

    def tensor(name):
        s, e = head[name]["data_offsets"]
        return list(struct.unpack("<%df" % ((e - s) // 4), raw[8 + n + s:8 + n + e]))
    return head, tensor


def save(path, tensors, cut=0):
    """TENSORS {name: (shape, values)} as F32 into PATH, its last CUT bytes left out."""
    header, data = {}, b""
    for k, (shape, vals) in tensors.items():
        raw = struct.pack("<%df" % len(vals), *vals)
        header[k] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    blob = struct.pack("<Q", len(h)) + h + data
    with open(path, "wb") as f:
        f.write(blob[:len(blob) - cut] if cut else blob)


def merged_copy(src, dst, deltas):
    """The transformer folder SRC into DST with DELTAS {weight name: [out * in] values} added."""
    head, tensor = load(os.path.join(src, "diffusion_pytorch_model.safetensors"))
    out = {k: (v["shape"], tensor(k)) for k, v in head.items() if k != "__metadata__"}
    for k, dv in deltas.items():
        w = out[k][1]
        for i, x in enumerate(dv):
            w[i] += x
    os.makedirs(dst)
    with open(os.path.join(src, "config.json"), "rb") as f, open(os.path.join(dst, "config.json"), "wb") as g:
        g.write(f.read())
    save(os.path.join(dst, "diffusion_pytorch_model.safetensors"), out)
