#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets into fuzz/corpus/ (committed; rerun to remake it).

    fuzz/make_seeds.py PDIT [lora|pictures|qwen|serve]   (only fuzz_lora's, fuzz_png's and fuzz_multipart's,
                                                          fuzz_qwen_files' and fuzz_llm's, or fuzz_serve_params' seeds)

Valid inputs come from `pdit tiny --full` (made-up tokenizers in the real formats, small configs) and
the golden configs; broken ones are those valid files cut, bent or stuffed in the ways the parsers
must refuse. The golden prompts seed the prompt tokenizers.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PDIT = sys.argv[1]


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def st(tensors, meta=None, pad=0, header_len=None):
    """A safetensors file from {name: (dtype, shape, bytes)}."""
    h, off, blob = {}, 0, b""
    for name, (dt, shape, raw) in tensors.items():
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blob += raw
    if meta:
        h["__metadata__"] = meta
    hj = json.dumps(h).encode() + b" " * pad
    return struct.pack("<Q", len(hj) if header_len is None else header_len) + hj + blob


def main():
    shutil.rmtree(os.path.join(HERE, "corpus"), ignore_errors=True)
    f4 = struct.pack("<4f", 1, 2, 3, 4)
    good = st({"a": ("F32", [2, 2], f4), "b": ("BF16", [3], b"\x80\x3f" * 3), "c": ("F16", [1], b"\x00\x3c")},
              {"config": "{}"})
    # safetensors: valid, then the ways a file goes wrong
    put("safetensors", "valid", good)
    put("safetensors", "valid-empty", st({}))
    put("safetensors", "valid-scalar", st({"s": ("F32", [], f4[:4])}))
    put("safetensors", "truncated-data", good[:-3])
    put("safetensors", "truncated-header", good[:20])
    put("safetensors", "short", b"\x05\x00")
    put("safetensors", "header-too-long", st({"a": ("F32", [1], f4[:4])}, header_len=1 << 40))
    put("safetensors", "bad-json", struct.pack("<Q", 5) + b"{\"a\":")
    put("safetensors", "bad-dtype", st({"a": ("Q4", [1], f4[:4])}))
    put("safetensors", "shape-mismatch", st({"a": ("F32", [3], f4[:8])}))
    put("safetensors", "negative-dim", st({"a": ("F32", [-1], f4[:4])}))
    put("safetensors", "huge-shape", st({"a": ("F32", [1 << 31, 1 << 31, 1 << 31], f4)}))
    hj = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}'
    put("safetensors", "overlap", struct.pack("<Q", len(hj)) + hj + f4[:12])
    hj = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}'
    put("safetensors", "reversed-offsets", struct.pack("<Q", len(hj)) + hj + f4[:8])
    hj = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}}'
    put("safetensors", "offset-overflow", struct.pack("<Q", len(hj)) + hj + f4[:8])
    hj = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    put("safetensors", "duplicate-name", struct.pack("<Q", len(hj)) + hj + f4[:4])
    put("safetensors", "metadata-not-string", st({"a": ("F32", [1], f4[:4])}, {"x": 5}))
    # sharded sets: index, separator, first shard
    sep = b"\n--shard--\n"
    shard1 = st({"a": ("F32", [2], f4[:8])})
    index = {"metadata": {"total_size": 16},
             "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    put("st_index", "valid", json.dumps(index).encode() + sep + shard1)
    bad = dict(index, weight_map={"a": "../../etc/passwd", "b": "model-00002-of-00002.safetensors"})
    put("st_index", "escaping-name", json.dumps(bad).encode() + sep + shard1)
    bad = dict(index, weight_map={"a": "/etc/passwd"})
    put("st_index", "absolute-name", json.dumps(bad).encode() + sep + shard1)
    bad = dict(index, weight_map={"a": "model-00002-of-00002.safetensors"})
    put("st_index", "tensor-not-in-shard", json.dumps(bad).encode() + sep + shard1)
    put("st_index", "missing-shard", json.dumps(dict(index, weight_map={"a": "nope.safetensors"})).encode())
    put("st_index", "not-an-object", b"[1,2]" + sep + shard1)
    put("st_index", "map-not-strings", b'{"weight_map":{"a":5}}' + sep + shard1)
    put("st_index", "duplicate-across-shards",
        json.dumps(index).encode() + sep + st({"a": ("F32", [2], f4[:8]), "b": ("F32", [2], f4[:8])}))
    # configurations
    g = os.path.join(ROOT, "tests", "golden", "flux-tiny")
    for comp in ("transformer-dev", "transformer-schnell", "vae-dev"):
        put("config", comp, open(os.path.join(g, comp, "config.json"), "rb").read())
    put("config", "scheduler-dev", open(os.path.join(g, "scheduler-dev", "scheduler_config.json"), "rb").read())
    put("config", "empty-object", "{}")
    put("config", "not-json", "{\"num_layers\": ")
    put("config", "wrong-types", json.dumps({"num_layers": "19", "attention_head_dim": 1e300,
                                             "axes_dims_rope": [16, -56, 56], "num_attention_heads": -24}))
    put("config", "huge-values", json.dumps({"num_layers": 1 << 40, "num_single_layers": 1 << 31,
                                             "attention_head_dim": 1 << 20, "num_attention_heads": 1 << 20,
                                             "block_out_channels": [1 << 30] * 8, "num_train_timesteps": -5}))
    put("config", "deep", "[" * 5000 + "]" * 5000)
    # tokenizer files from pdit tiny --full
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([PDIT, "tiny", os.path.join(tmp, "m"), "--full"], check=True, capture_output=True)
        vocab = open(os.path.join(tmp, "m", "tokenizer", "vocab.json"), "rb").read()
        merges = open(os.path.join(tmp, "m", "tokenizer", "merges.txt"), "rb").read()
        spm = open(os.path.join(tmp, "m", "tokenizer_2", "spiece.model"), "rb").read()
    ms = b"\n--merges--\n"
    put("clip_files", "valid", vocab + ms + merges)
    put("clip_files", "no-merges", vocab + ms)
    put("clip_files", "truncated-vocab", vocab[: len(vocab) // 2] + ms + merges)
    put("clip_files", "vocab-not-ints", b'{"a</w>": "x", "<|endoftext|>": -3}' + ms + merges)
    put("clip_files", "merges-odd-lines", vocab + ms + b"#version: 0.2\na\nb c d\n\n\xff\xfe x\n")
    put("t5_model", "valid", spm)
    put("t5_model", "truncated", spm[: len(spm) // 3])
    put("t5_model", "empty", b"")
    put("t5_model", "bit-flipped", bytes(b ^ (0x40 if i % 97 == 5 else 0) for i, b in enumerate(spm)))
    put("t5_model", "varint-overflow", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f")
    # prompts: the golden ones and a few awkward strings
    te = os.path.join(ROOT, "tests", "golden", "text-encoders-tiny", "cases")
    for i, name in enumerate(sorted(os.listdir(te))):
        if not name.endswith(".safetensors"):
            continue
        raw = open(os.path.join(te, name), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        meta = json.loads(raw[8:8 + n]).get("__metadata__", {})
        if "prompt" in meta:
            put("prompt", "golden-%02d" % i, json.loads(meta["prompt"]).encode())
    for i, s in enumerate([b"", b"\xff\xfe\xfd", b"a" * 5000, "🏳️‍🌈" * 100, b"\x00\x01\x02", "ǅ ß ﬃ İ ẞ".encode(),
                           b"<|startoftext|><|endoftext|></s><pad><unk>", " \t\n\r\u3000\u200b".encode()]):
        put("prompt", "odd-%02d" % i, s if isinstance(s, bytes) else s.encode())
    # command lines: first byte picks generate (0), check (1), bench (2); arguments split at NUL
    for i, (cmd, args) in enumerate([
            (0, ["--model", "m", "-p", "a cat", "-H", "512", "-W", "768", "--steps", "4", "-s", "7", "-o", "x.png"]),
            (0, ["--ulysses-degree=2", "--ring-degree", "2", "--dtype", "bf16", "-t2", "--true-cfg-scale", "4.5"]),
            (1, ["--pipefusion-degree", "2", "--num-patches", "4", "--warmup-steps", "1", "--golden", "g"]),
            (2, ["--json", "--vae-time", "--warmup", "2", "--steps", "3", "--tensor-parallel-degree", "2"]),
            (0, ["-H", "99999999999999999999", "--steps", "-1", "--guidance", "nan", "-s", "-5"]),
            (0, ["--height"]), (1, ["--", "-x", "--unknown", "-Hx", "--model"]), (2, ["--help"]),
            (0, ["-p", "", "-n", "\xff", "--prompts", "--max-sequence-length", "0", "--batch", "1e9"])]):
        put("args", "cmd-%02d" % i, bytes([cmd]) + b"\0".join(a.encode() for a in args))
    lora_seeds()
    picture_seeds()
    qwen_seeds()
    serve_seeds()
    for d in ("safetensors", "st_index", "config", "clip_files", "t5_model", "prompt", "args", "lora", "png", "multipart",
              "qwen_files", "llm", "serve_params"):
        os.makedirs(os.path.join(HERE, "regressions", d), exist_ok=True)
        keep = os.path.join(HERE, "regressions", d, "README")
        if not os.path.exists(keep):
            open(keep, "w").write("Inputs that once crashed or hung fuzz_%s; each replays in CTest.\n" % d)


def lora_seeds():
    """Adapters for fuzz_lora's FLUX model (dim 8, MLP 16, one block of each kind) in every layout, and
    the same bent: shapes that do not fit, a lone half, NaN, a key of no layer, an alpha not a number."""
    f32 = lambda n, v=0.01: struct.pack("<%df" % n, *([v] * n))
    pair = lambda a, b, r, n_in, n_out: {a: ("F32", [r, n_in], f32(r * n_in)), b: ("F32", [n_out, r], f32(n_out * r))}
    peft = {}
    for m, (o, i) in {"transformer_blocks.0.attn.to_q": (8, 8), "single_transformer_blocks.0.proj_out": (8, 24),
                      "norm_out.linear": (16, 8), "x_embedder": (8, 4)}.items():
        peft.update(pair("transformer.%s.lora_A.weight" % m, "transformer.%s.lora_B.weight" % m, 2, i, o))
    put("lora", "peft", st(peft))
    kohya = pair("lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight",
                 "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight", 3, 8, 24)
    kohya.update(pair("lora_unet_single_blocks_0_linear1.lora_down.weight",
                      "lora_unet_single_blocks_0_linear1.lora_up.weight", 3, 8, 40))
    kohya["lora_unet_double_blocks_0_img_attn_qkv.alpha"] = ("F32", [], f32(1, 1.5))
    put("lora", "kohya", st(kohya))
    bfl = pair("diffusion_model.final_layer.adaLN_modulation.1.lora_A.weight",
               "diffusion_model.final_layer.adaLN_modulation.1.lora_B.weight", 2, 8, 16)
    bfl.update(pair("diffusion_model.single_blocks.0.linear2.lora_A.weight",
                    "diffusion_model.single_blocks.0.linear2.lora_B.weight", 2, 24, 8))
    bfl["diffusion_model.single_blocks.0.linear2.alpha"] = ("BF16", [], b"\x80\x3f")
    put("lora", "bfl", st(bfl))
    put("lora", "bad-shape", st(pair("transformer.proj_out.lora_A.weight", "transformer.proj_out.lora_B.weight",
                                     2, 9, 4)))
    put("lora", "lone-half", st({"transformer.proj_out.lora_A.weight": ("F32", [2, 8], f32(16))}))
    put("lora", "nan", st(pair("transformer.proj_out.lora_A.weight", "transformer.proj_out.lora_B.weight", 2, 8, 4)
                          | {"transformer.proj_out.lora_A.weight": ("F32", [2, 8], f32(16, float("nan")))}))
    put("lora", "no-layer", st(pair("transformer.blocks.7.q.lora_A.weight", "transformer.blocks.7.q.lora_B.weight",
                                     2, 8, 8) | {"other.weight": ("F32", [1], f32(1))}))
    put("lora", "alpha-not-one", st(kohya | {"lora_unet_double_blocks_0_img_attn_qkv.alpha": ("F32", [2], f32(2))}))
    put("lora", "rank-zero", st(pair("transformer.proj_out.lora_A.weight", "transformer.proj_out.lora_B.weight",
                                     0, 8, 4)))
    put("lora", "truncated", st(peft)[:-40])


def png_bytes(w, h, color_type, row, extra=b""):
    """A PNG of W x H of COLOR_TYPE (0 gray, 2 RGB, 6 RGBA) whose rows are ROW(y)."""
    import zlib
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    raw = b"".join(b"\0" + row(y) for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0)) + extra +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def picture_seeds():
    """fuzz_png: pictures and masks in the colour types people send, and broken ones; fuzz_multipart: the
    forms OpenAI's SDKs and curl -F send images.edit, and broken ones."""
    rgb = png_bytes(16, 8, 2, lambda y: bytes((x * 16 + y) % 256 for x in range(48)))
    put("png", "rgb", rgb)
    put("png", "rgba-mask", png_bytes(8, 8, 6, lambda y: bytes(v for x in range(8) for v in (0, 0, 0, 0 if x < 4 else 255))))
    put("png", "gray", png_bytes(8, 4, 0, lambda y: bytes(range(8))))
    put("png", "truncated", rgb[: len(rgb) // 2])
    put("png", "huge", png_bytes(100000, 100000, 2, lambda y: b"", b"")[:33] + b"\0" * 16)
    put("png", "not-png", b"GIF89a not a png at all")
    put("png", "bad-crc", rgb[:29] + b"\xff\xff\xff\xff" + rgb[33:])
    try:
        import io
        from PIL import Image
        buf = io.BytesIO()
        Image.frombytes("RGB", (16, 8), bytes((i * 7) % 256 for i in range(16 * 8 * 3))).save(buf, "JPEG", quality=80)
        put("png", "jpeg", buf.getvalue())
        put("png", "jpeg-truncated", buf.getvalue()[: len(buf.getvalue()) // 2])
        put("png", "jpeg-huge", buf.getvalue()[:163] + b"\xff\xff\xff\xff" + buf.getvalue()[167:])
        # an EXIF orientation to turn by (a TIFF directory in APP1: its parser is fuzzed)
        ex = Image.Exif()
        ex[0x0112] = 6
        buf = io.BytesIO()
        Image.frombytes("RGB", (16, 8), bytes((i * 5) % 256 for i in range(16 * 8 * 3))).save(buf, "JPEG", quality=80,
                                                                                            exif=ex.tobytes())
        put("png", "jpeg-exif", buf.getvalue())
    except ImportError:
        print("no Pillow: the JPEG seeds are not remade", file=sys.stderr)
    b = "XyZbOuNdArY"
    part = lambda name, data, fn=None: (("--%s\r\nContent-Disposition: form-data; name=\"%s\"%s\r\n%s\r\n" %
                                        (b, name, '; filename="%s"' % fn if fn else "",
                                         "Content-Type: image/png\r\n" if fn else "")).encode() + data + b"\r\n")
    ct = ("multipart/form-data; boundary=%s\n" % b).encode()
    form = part("image", rgb, "a.png") + part("prompt", b"a lake") + part("n", b"1") + part("size", b"16x8") + \
        part("strength", b"0.6") + part("response_format", b"b64_json")
    put("multipart", "edit", ct + form + ("--%s--\r\n" % b).encode())
    put("multipart", "edit-mask-list", ct + part("image[]", rgb, "a.png") + part("mask", rgb, "m.png") +
        part("prompt", b"x") + ("--%s--\r\n" % b).encode())
    put("multipart", "two-images", ct + part("image", rgb, "a.png") + part("image", rgb, "b.png") +
        part("prompt", b"x") + ("--%s--\r\n" % b).encode())
    put("multipart", "unterminated", ct + form[:-10])
    put("multipart", "no-boundary", b"multipart/form-data\n" + form)
    put("multipart", "quoted-boundary", ('multipart/form-data; boundary="%s"\n' % b).encode() + form +
        ("--%s--\r\n" % b).encode())
    put("multipart", "no-disposition", ct + ("--%s\r\nX: y\r\n\r\nz\r\n--%s--\r\n" % (b, b)).encode())


def serve_seeds():
    """fuzz_serve_params: each route's body as its clients send it (the first byte: the dialect, pd_serve.h's
    enum pd_serve_api, 128 added for strict mode), and bent ones: wrong types, limits passed, broken JSON."""
    rgb = png_bytes(32, 16, 2, lambda y: bytes((x * 16 + y) % 256 for x in range(96)))
    b64 = __import__("base64").b64encode(rgb).decode()
    openai, a1111, video, img2img, edit, jobs = range(6)
    bodies = {
        "openai": (openai, {"prompt": "a red fox", "n": 2, "size": "64x48", "response_format": "b64_json",
                            "model": "pdit", "steps": 2, "seed": 7, "negative_prompt": "blurry", "true_cfg_scale": 3,
                            "background": "auto", "stream": False}),
        "openai-video": (openai, {"prompt": "a kite", "size": "48x32", "frames": 5, "fps": 8, "output_format": "mp4",
                                  "ref_image": b64}),
        "a1111": (a1111, {"prompt": "a boat", "width": 48, "height": 32, "steps": 3, "seed": 11, "batch_size": 1,
                          "sampler_name": "euler", "cfg_scale": 3.5, "distilled_cfg_scale": 2.5, "n_iter": 2,
                          "override_settings": {}, "styles": []}),
        "sdcpp-video": (video, {"prompt": "a red kite", "width": 48, "height": 32, "seed": 9, "video_frames": 5,
                                "fps": 16, "clip_skip": -1, "strength": 0.75, "init_image": None, "lora": [],
                                "sample_params": {"scheduler": "discrete", "sample_method": "euler", "sample_steps": 2,
                                                  "flow_shift": 0.0, "guidance": {"txt_cfg": 3.0,
                                                  "slg": {"layers": [7, 8], "scale": 0.0}}}}),
        "img2img": (img2img, {"prompt": "a lake", "init_images": ["data:image/png;base64," + b64], "mask": b64,
                              "denoising_strength": 0.6, "steps": 4, "seed": 5, "mask_blur": 4, "inpainting_fill": 1}),
        "edit": (edit, {"prompt": "a lake", "image": b64, "mask": b64, "strength": 0.6, "size": "32x16", "n": 1}),
        "jobs": (jobs, {"prompt": "a kite", "size": "32x16", "steps": 2, "image": b64, "strength": 0.5,
                        "fbcache_threshold": 0.1}),
        "strict-unknown": (a1111 + 128, {"prompt": "x", "colour": "red"}),
        "strict-noted": (openai + 128, {"prompt": "x", "partial_images": 2}),
        "wrong-types": (openai, {"prompt": 5, "n": "two", "size": [64, 48], "seed": -1.5}),
        "too-big": (a1111, {"prompt": "x", "width": 1 << 20, "height": 16, "steps": 100000, "batch_size": 4096}),
        "odd-size": (openai, {"prompt": "x", "size": "17x9999999999999999999"}),
        "bad-image": (img2img, {"prompt": "x", "init_images": ["bm90IGEgcGljdHVyZQ=="]}),
        "nested-deep": (video, {"prompt": "x", "sample_params": {"guidance": {"slg": {"layers": [[[[1]]]]}}}}),
    }
    for name, (api, body) in bodies.items():
        put("serve_params", name, bytes([api]) + json.dumps(body).encode())
    put("serve_params", "not-json", bytes([openai]) + b'{"prompt": "x", ')
    put("serve_params", "not-object", bytes([a1111]) + b'["prompt"]')
    put("serve_params", "nul-in-prompt", bytes([openai]) + b'{"prompt": "a\u0000b"}')
    put("serve_params", "empty", bytes([jobs]))


def qwen_seeds():
    """Qwen2's tokenizer files (qwen-tiny's, in both forms) and language-model files (a tiny random one of
    Qwen2's names, inferred from its shapes), each valid, cut and bent."""
    tok = os.path.join(ROOT, "tests", "golden", "qwen-tiny", "model", "tokenizer")
    vocab, merges, config = (open(os.path.join(tok, f), "rb").read() for f in
                             ("vocab.json", "merges.txt", "tokenizer_config.json"))
    put("qwen_files", "valid", vocab + b"\n--merges--\n" + merges + b"\n--config--\n" + config)
    put("qwen_files", "no-config", vocab + b"\n--merges--\n" + merges)
    put("qwen_files", "cut-vocab", vocab[: len(vocab) // 3] + b"\n--merges--\n" + merges)
    put("qwen_files", "bad-added", vocab + b"\n--merges--\n" + merges + b'\n--config--\n{"added_tokens_decoder": '
        b'{"x": {"content": ""}, "7": {"content": 5}}}')
    tj = {"model": {"type": "BPE", "vocab": json.loads(vocab),
                    "merges": [l.split(" ") for l in merges.decode().splitlines() if l and not l.startswith("#")]},
          "added_tokens": [{"id": 516, "content": "<|endoftext|>"}, {"id": 517, "content": "<|im_start|>"}]}
    put("qwen_files", "tokenizer-json", b"--json--\n" + json.dumps(tj).encode())
    put("qwen_files", "tokenizer-json-cut", b"--json--\n" + json.dumps(tj).encode()[:300])
    D, F, V, r = 8, 16, 12, [0]

    def f32(n):
        r[0] += 1
        return struct.pack("<%df" % n, *[((i * 7 + r[0]) % 13 - 6) / 20 for i in range(n)])
    t = {"model.embed_tokens.weight": ("F32", [V, D], f32(V * D)), "model.norm.weight": ("F32", [D], f32(D))}
    for name, shape in (("input_layernorm.weight", [D]), ("post_attention_layernorm.weight", [D]),
                        ("self_attn.q_proj.weight", [D, D]), ("self_attn.q_proj.bias", [D]),
                        ("self_attn.k_proj.weight", [D, D]), ("self_attn.k_proj.bias", [D]),
                        ("self_attn.v_proj.weight", [D, D]), ("self_attn.v_proj.bias", [D]),
                        ("self_attn.o_proj.weight", [D, D]), ("mlp.gate_proj.weight", [F, D]),
                        ("mlp.up_proj.weight", [F, D]), ("mlp.down_proj.weight", [D, F])):
        n = 1
        for k in shape:
            n *= k
        t["model.layers.0." + name] = ("F32", shape, f32(n))
    good = st(t)
    put("llm", "valid", good)
    put("llm", "truncated", good[: len(good) * 2 // 3])
    put("llm", "no-layers", st({"model.embed_tokens.weight": ("F32", [V, D], f32(V * D))}))
    bad = dict(t)
    bad["model.layers.0.mlp.down_proj.weight"] = ("F32", [D + 1, F], f32((D + 1) * F))
    put("llm", "bad-shape", st(bad))
    bad = dict(t)
    bad["model.layers.0.self_attn.k_proj.weight"] = ("F32", [3, D], f32(3 * D))
    put("llm", "bad-heads", st(bad))


if len(sys.argv) > 2 and sys.argv[2] == "lora":
    lora_seeds()
elif len(sys.argv) > 2 and sys.argv[2] == "qwen":
    qwen_seeds()
elif len(sys.argv) > 2 and sys.argv[2] == "pictures":
    picture_seeds()
elif len(sys.argv) > 2 and sys.argv[2] == "serve":
    serve_seeds()
else:
    main()
