#!/usr/bin/env bash
# Qwen-Image against diffusers (tests/golden/qwen-tiny), as a user runs it:
#   pdit encode --model on each text case (Qwen2's tokenizer on the
#   pipeline's template, the language model, 34 tokens dropped): ids and
#   masks exact, prompt_embeds within 1e-4; the language model from a GGUF
#   in llama.cpp's names and from Qwen2.5-VL's newer single file (--llm);
#   pdit generate --model on each pipeline case (with and without a negative
#   prompt and true CFG, its norm rescale): latents.final within 1e-4, the
#   picture within 1 level; with MPIRUN, Ulysses, ring, tensor, PipeFusion
#   and CFG parallel on 2 processes equal to one process within 1e-5;
#   a model of unseen random sizes (pdit tiny --family qwen) makes a picture,
#   and its meshes equal one process; a batch of prompts of different
#   lengths (padded, masked) gives each picture its prompt's run alone, from
#   the prompts and from pdit encode's file; with MPIRUN also data parallel,
#   DistriFusion, First Block Cache and meshes of 4 processes (USP, TP4,
#   CFG x Ulysses, data x tensor, CFG x PipeFusion, DistriFusion 4, ring 4
#   with the cache), pictures decoded in bands;
#   the transformer in one file (ComfyUI's names and prefix; f32, and fp8
#   against its decoded values) equal to the folder's run;
#   a Q8_0 GGUF pdit quantize writes (architecture qwen_image) against its
#   dequantized weights;
#   a LoRA (PEFT names, ComfyUI's prefix) against weights merged by Python;
#   pdit quantize writes the text encoder as llama.cpp's GGUF (Q8_0, Q4_K),
#   read kept quantized as its dequantized values;
#   --aspect gives the model card's sizes;
#   pdit forward on each transformer case (a QwenImageTransformer2DModel
#   folder; the image grid from the case's height and width, the text's
#   padding from its mask): out.sample within 1e-4; a mask with a gap
#   refused naming the tensor.
# usage: cli_qwen.sh PDIT ST_COMPARE QWEN_GOLDEN [MPIRUN...]
set -u
pdit=$1 cmp=$2 g=$3
shift 3
mpirun=("$@")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

for f in "$g"/forward-*.safetensors; do
	name=$(basename "$f")
	if "$pdit" forward --transformer "$g/model/transformer" --inputs "$f" --out "$tmp/out.safetensors" > /dev/null \
		2> "$tmp/err" && "$cmp" tensors "$tmp/out.safetensors" "$f" 1e-4 out.sample > "$tmp/log"; then
		ok "$name: out.sample as diffusers' $(head -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "$name"
	fi
done
# pdit encode on each text case: the template's ids and mask exact, prompt_embeds (34 tokens dropped)
# within 1e-4, prompt_embeds_mask all ones
for f in "$g"/text-*.safetensors; do
	name=$(basename "$f")
	prompt=$("$cmp" meta "$f" prompt)
	rm -f "$tmp/e.safetensors"
	if "$pdit" encode --model "$g/model" -p "$prompt" --out "$tmp/e.safetensors" > /dev/null 2> "$tmp/err" &&
		"$cmp" tensors "$tmp/e.safetensors" "$f" 1e-4 prompt_embeds > "$tmp/log" &&
		python3 - "$tmp/e.safetensors" "$f" >> "$tmp/log" << 'PY'
import json, struct, sys
def ints(path, name):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    t = json.loads(raw[8:8 + n])[name]
    s, e = t["data_offsets"]
    assert t["dtype"] == "I64", name
    return t["shape"], struct.unpack("<%dq" % ((e - s) // 8), raw[8 + n + s:8 + n + e])
for k in ("input_ids", "attention_mask", "prompt_embeds_mask"):
    if ints(sys.argv[1], k) != ints(sys.argv[2], k):
        sys.exit("%s differs" % k)
print("input_ids, attention_mask, prompt_embeds_mask exact")
PY
	then
		ok "$name: pdit encode as transformers' and diffusers' $(tr '\n' ' ' < "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "pdit encode, $name"
	fi
done
# pdit generate on each pipeline case (the prompt, a negative one with true CFG where the case has one):
# latents.final within 1e-4 and the picture within 1 level; with MPIRUN the same on meshes of 2
# processes (Ulysses, ring, tensor, PipeFusion, CFG parallel where there is true CFG) within 1e-5
for f in "$g"/pipeline-*.safetensors; do
	name=$(basename "$f")
	args=(--model "$g/model" -p "$("$cmp" meta "$f" prompt)" -H "$("$cmp" meta "$f" height)" -W "$("$cmp" meta "$f" width)"
	      --steps "$("$cmp" meta "$f" num_inference_steps)" -s "$("$cmp" meta "$f" noise_seed)")
	meshes=("--ulysses-degree 2" "--ring-degree 2" "--tensor-parallel-degree 2"
	        "--pipefusion-degree 2 --warmup-steps $("$cmp" meta "$f" num_inference_steps)")
	if [ "$("$cmp" meta "$f" has_negative)" = true ]; then
		args+=(-n "$("$cmp" meta "$f" negative_prompt)" --true-cfg-scale "$("$cmp" meta "$f" true_cfg_scale)")
		meshes+=("--cfg-parallel")
	fi
	if "$pdit" generate "${args[@]}" --out-latents "$tmp/lat.safetensors" -o "$tmp/img.png" -q 2> "$tmp/err" &&
		"$cmp" tensors "$tmp/lat.safetensors" "$f" 1e-4 latents.final > "$tmp/log" &&
		"$cmp" png "$tmp/img.png" "$f" image.uint8 0 1 >> "$tmp/log"; then
		ok "$name: latents.final and the picture as diffusers' $(head -1 "$tmp/log") $(tail -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "pdit generate, $name"
		continue
	fi
	[ ${#mpirun[@]} -gt 0 ] || continue
	for mesh in "${meshes[@]}"; do
		# shellcheck disable=SC2086
		if "${mpirun[@]}" -np 2 "$pdit" generate "${args[@]}" $mesh --out-latents "$tmp/lat2.safetensors" \
			-o "$tmp/img2.png" -q < /dev/null 2> "$tmp/err" &&
			"$cmp" tensors "$tmp/lat2.safetensors" "$tmp/lat.safetensors" 1e-5 latents.final > "$tmp/log"; then
			ok "$name on 2 processes ($mesh): one process's latents"
		else
			cat "$tmp/err" "$tmp/log"; bad "$name, $mesh"
		fi
	done
done
# a model of sizes the golden set does not have (pdit tiny --family qwen, random heads, widths, blocks,
# language model): a picture from a prompt with a negative one, and on meshes of 2 processes the one
# process's latents within 1e-5
seed=${PDIT_TEST_SEED:-$((RANDOM))}
heads=$((2 + seed % 3 * 2)) hd=$((16 * (1 + seed % 2))) layers=$((1 + seed % 3)) lh=$((2 + seed % 2 * 2))
if "$pdit" tiny "$tmp/unseen" --family qwen --heads "$heads" --head-dim "$hd" --layers "$layers" --llm-width $((8 * lh)) \
	--llm-heads "$lh" --llm-kv-heads $((lh / 2)) --seed "$seed" > /dev/null 2> "$tmp/err"; then
	# (a negative prompt longer than the prompt: each keeps its own length)
	args=(--model "$tmp/unseen" -p "a red cat" -n "the text of the snow, in color" --true-cfg-scale 3 -H 48 -W 80 --steps 2 -s 5)
	if "$pdit" generate "${args[@]}" --out-latents "$tmp/u1.safetensors" -o "$tmp/u1.png" -q 2> "$tmp/err"; then
		ok "an unseen Qwen-Image ($heads heads x $hd, $layers blocks, language model $((8 * lh)) wide, seed $seed): a picture"
	else
		cat "$tmp/err"; bad "an unseen Qwen-Image (seed $seed)"
	fi
	for mesh in "--ulysses-degree 2" "--tensor-parallel-degree 2" "--cfg-parallel"; do
		[ ${#mpirun[@]} -gt 0 ] || break
		# shellcheck disable=SC2086
		if "${mpirun[@]}" -np 2 "$pdit" generate "${args[@]}" $mesh --out-latents "$tmp/u2.safetensors" -q \
			< /dev/null 2> "$tmp/err" && "$cmp" tensors "$tmp/u2.safetensors" "$tmp/u1.safetensors" 1e-5 latents.final \
			> "$tmp/log"; then
			ok "the unseen Qwen-Image on 2 processes ($mesh): one process's latents"
		else
			cat "$tmp/err" "$tmp/log"; bad "the unseen Qwen-Image, $mesh (seed $seed)"
		fi
	done
else
	cat "$tmp/err"; bad "pdit tiny --family qwen (seed $seed)"
fi
# a batch of prompts of different lengths (QwenImagePipeline pads the shorter with zeros and masks
# them, so no token sees the padding): pdit encode writes the padded embeddings and their mask, each
# prompt's rows exactly its own encode's; generate gives each picture exactly the latents of its prompt
# run alone with its seed (the batch's seed + its index), from the prompts and from the encoded file
printf 'a lighthouse at dusk\na small red boat on a calm lake at noon, seen from the hill\n' > "$tmp/mixed.txt"
margs=(--model "$g/model" -n "blurry" -H 64 -W 48 --steps 2)
if "$pdit" encode --model "$g/model" --prompts "$tmp/mixed.txt" -n "blurry" --out "$tmp/me.safetensors" > /dev/null 2> "$tmp/err" &&
	"$pdit" generate "${margs[@]}" --prompts "$tmp/mixed.txt" -s 7 --out-latents "$tmp/ml.safetensors" -q 2>> "$tmp/err" &&
	"$pdit" generate --model "$g/model" --embeds "$tmp/me.safetensors" --true-cfg-scale 4 -H 64 -W 48 --steps 2 -s 7 \
		--out-latents "$tmp/mle.safetensors" -q 2>> "$tmp/err"; then
	for i in 0 1; do
		p=$(sed -n "$((i + 1))p" "$tmp/mixed.txt")
		"$pdit" encode --model "$g/model" -p "$p" --out "$tmp/me$i.safetensors" > /dev/null 2>> "$tmp/err" &&
			"$pdit" generate "${margs[@]}" -p "$p" -s $((7 + i)) --out-latents "$tmp/ml$i.safetensors" -q 2>> "$tmp/err" ||
			bad "Qwen-Image, prompt $i alone"
	done
	if /usr/bin/python3 - "$tmp" > "$tmp/log" 2>&1 << 'PY'
import json, struct, sys
import numpy as np
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for k, v in json.loads(raw[8:8 + n]).items():
        if k != "__metadata__":
            s, e = v["data_offsets"]
            dt = {"F32": np.float32, "I64": np.int64}[v["dtype"]]
            out[k] = np.frombuffer(raw[8 + n + s:8 + n + e], dt).reshape(v["shape"])
    return out
d = sys.argv[1]
b = load(d + "/me.safetensors")
lens = []
for i in range(2):
    one = load(d + "/me%d.safetensors" % i)["prompt_embeds"][0]
    t = one.shape[0]
    lens.append(t)
    assert (b["prompt_embeds_mask"][i, :t] == 1).all() and (b["prompt_embeds_mask"][i, t:] == 0).all(), "mask %d" % i
    assert np.array_equal(b["prompt_embeds"][i, :t], one), "prompt %d's rows" % i
    assert (b["prompt_embeds"][i, t:] == 0).all(), "prompt %d's padding" % i
assert lens[0] != lens[1] and b["prompt_embeds"].shape[1] == max(lens), lens
lat = load(d + "/ml.safetensors")["latents.final"]
for i in range(2):
    assert np.array_equal(lat[i], load(d + "/ml%d.safetensors" % i)["latents.final"][0]), "picture %d" % i
assert np.array_equal(lat, load(d + "/mle.safetensors")["latents.final"]), "from the encoded file"
print("prompts of %d and %d tokens" % tuple(lens))
def save(path, tensors):
    h, blob = {}, b""
    for k, v in tensors.items():
        dt = {np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL"}.get(v.dtype, "F32")
        h[k] = {"dtype": dt, "shape": list(v.shape), "data_offsets": [len(blob), len(blob) + v.nbytes]}
        blob += v.tobytes()
    hj = json.dumps(h).encode()
    open(path, "wb").write(struct.pack("<Q", len(hj)) + hj + blob)
b = {k: np.array(v) for k, v in b.items()}
# the mask as torch saves a boolean one, for the run below; then a token after the first prompt's
# padding, for the refusal
save(d + "/boolmask.safetensors", dict(b, prompt_embeds_mask=b["prompt_embeds_mask"] != 0))
b["prompt_embeds_mask"][0, -1] = 1
save(d + "/gapped.safetensors", b)
PY
	then
		ok "Qwen-Image, a batch of prompts of different lengths: each picture its prompt's alone, byte for byte ($(cat "$tmp/log"))"
		if ! "$pdit" generate --model "$g/model" --embeds "$tmp/gapped.safetensors" -H 64 -W 48 --steps 2 \
			--out-latents "$tmp/gap-out.safetensors" -q 2> "$tmp/err" &&
			grep -q "gapped.safetensors: prompt_embeds_mask has a gap in prompt 0" "$tmp/err" && [ ! -e "$tmp/gap-out.safetensors" ]; then
			ok "an embeddings file whose mask has a token after padding: refused naming the file and the tensor"
		else
			cat "$tmp/err"; bad "a mask with a gap in --embeds"
		fi
		if "$pdit" generate --model "$g/model" --embeds "$tmp/boolmask.safetensors" --true-cfg-scale 4 -H 64 -W 48 --steps 2 \
			-s 7 --out-latents "$tmp/mlb.safetensors" -q 2> "$tmp/err" && cmp -s "$tmp/mlb.safetensors" "$tmp/mle.safetensors"; then
			ok "the same embeddings with a boolean mask: the same latents"
		else
			cat "$tmp/err"; bad "a boolean prompt_embeds_mask"
		fi
	else
		cat "$tmp/err" "$tmp/log"; bad "Qwen-Image, prompts of different lengths"
	fi
else
	cat "$tmp/err"; bad "Qwen-Image, a batch of prompts of different lengths"
fi
# with MPIRUN, the methods not above and meshes of 4 processes on the golden model, true CFG on (two
# branches of their own text lengths), two prompts of different lengths: one process's latents within 1e-5 and its pictures
# within 1 level (several processes decode in row bands); DistriFusion and PipeFusion during their exact
# warm-up; First Block Cache against one process with the same threshold
if [ ${#mpirun[@]} -gt 0 ]; then
	args=(--model "$g/model" --prompts "$tmp/mixed.txt" -n " " -H 64 -W 48 --steps 3 -s 11)
	if "$pdit" generate "${args[@]}" --out-latents "$tmp/m1.safetensors" -o "$tmp/m1.png" -q 2> "$tmp/err" &&
		"$pdit" generate "${args[@]}" --fbcache-threshold 1.1 --out-latents "$tmp/f1.safetensors" -q 2>> "$tmp/err"; then
		ok "two pictures on one process (Qwen-Image's default true CFG 4 with -n)"
		# (the threshold is over this random model's changes, 1.0 to 1.25: the cache must skip some)
		"$cmp" tensors "$tmp/f1.safetensors" "$tmp/m1.safetensors" 1e-6 latents.final > /dev/null 2>&1 &&
			bad "First Block Cache at 1.1 skipped no step"
	else
		cat "$tmp/err"; bad "Qwen-Image, one process"
	fi
	while read -r np mesh; do
		ref=m1
		case $mesh in *fbcache*) ref=f1 ;; esac
		# shellcheck disable=SC2086
		if "${mpirun[@]}" -np "$np" "$pdit" generate "${args[@]}" $mesh --out-latents "$tmp/m2.safetensors" \
			-o "$tmp/m2.png" -q < /dev/null 2> "$tmp/err" &&
			"$cmp" tensors "$tmp/m2.safetensors" "$tmp/$ref.safetensors" 1e-5 latents.final > "$tmp/log" &&
			{ [ $ref = f1 ] || { "$cmp" pngs "$tmp/m2-0.png" "$tmp/m1-0.png" 1 && "$cmp" pngs "$tmp/m2-1.png" "$tmp/m1-1.png" 1; }; } \
			>> "$tmp/log"; then
			ok "Qwen-Image on $np processes ($mesh): one process's latents and pictures"
		else
			cat "$tmp/err" "$tmp/log"; bad "Qwen-Image on $np processes, $mesh"
		fi
	done << 'MESHES'
2 --data-parallel-degree 2
2 --distrifusion-degree 2 --warmup-steps 3
4 --ulysses-degree 2 --ring-degree 2
4 --tensor-parallel-degree 4
4 --cfg-parallel --ulysses-degree 2
4 --data-parallel-degree 2 --tensor-parallel-degree 2
4 --cfg-parallel --pipefusion-degree 2 --warmup-steps 3
4 --distrifusion-degree 4 --warmup-steps 3
4 --ring-degree 4 --fbcache-threshold 1.1
MESHES
fi
# the transformer in one file as ComfyUI saves it (diffusers' names under model.diffusion_model.): in float32
# the folder's out.sample within 1e-6; in fp8 e4m3 (kept so), the run of the same values decoded into a
# folder within 1e-5; found as Qwen-Image's by its names alone
/usr/bin/python3 - "$g/model/transformer" "$tmp" << 'PY'
import json, os, struct, sys
import numpy as np
src, d = sys.argv[1], sys.argv[2]
raw = open(os.path.join(src, "diffusion_pytorch_model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
vals = {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32).reshape(v["shape"])
        for k, v in head.items() if k != "__metadata__"}
def save(path, tensors):
    h, blob = {}, b""
    for k, (dt, arr) in tensors.items():
        b = arr.tobytes()
        h[k] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [len(blob), len(blob) + len(b)]}
        blob += b
    hj = json.dumps(h).encode()
    open(path, "wb").write(struct.pack("<Q", len(hj)) + hj + blob)
# every e4m3fn value, and the nearest code of each weight (2-D weights only, as ComfyUI's files)
codes = np.arange(256, dtype=np.uint8)
e, m, sgn = (codes >> 3) & 15, codes & 7, np.where(codes >= 128, -1.0, 1.0)
dec = sgn * np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e.astype(np.float64) - 7))
valid = codes[(codes & 127) != 127]          # 0x7f and 0xff are NaN
order = valid[np.argsort(dec[valid])]
def to_fp8(a):
    i = np.clip(np.searchsorted(dec[order], a.ravel()), 1, len(order) - 1)
    lo, hi = order[i - 1], order[i]
    pick = np.where(np.abs(dec[lo] - a.ravel()) <= np.abs(dec[hi] - a.ravel()), lo, hi)
    return codes[pick].reshape(a.shape)
pre = "model.diffusion_model."
save(d + "/qwen-comfy.safetensors", {pre + k: ("F32", v) for k, v in vals.items()})
f8, back = {}, {}
for k, v in vals.items():
    if v.ndim == 2:
        c = to_fp8(v)
        f8[pre + k] = ("F8_E4M3", c)
        back[k] = ("F32", dec[c].astype(np.float32))
    else:
        f8[pre + k] = ("F32", v)
        back[k] = ("F32", v)
save(d + "/qwen-fp8.safetensors", f8)
os.makedirs(d + "/qwen-dequant")
open(d + "/qwen-dequant/config.json", "w").write(open(os.path.join(src, "config.json")).read())
save(d + "/qwen-dequant/diffusion_pytorch_model.safetensors", back)
PY
f="$g/forward-1.safetensors"
"$pdit" forward --transformer "$g/model/transformer" --inputs "$f" --out "$tmp/folder.safetensors" > /dev/null 2>&1
"$pdit" forward --transformer "$tmp/qwen-dequant" --inputs "$f" --out "$tmp/dequant.safetensors" > /dev/null 2>&1
for k in comfy:folder:1e-6 fp8:dequant:1e-5; do
	IFS=: read -r file ref tol <<< "$k"
	if "$pdit" forward --transformer "$tmp/qwen-$file.safetensors" --config "$g/model/transformer/config.json" \
		--inputs "$f" --out "$tmp/single.safetensors" > /dev/null 2> "$tmp/err" &&
		"$cmp" tensors "$tmp/single.safetensors" "$tmp/$ref.safetensors" "$tol" out.sample > "$tmp/log"; then
		ok "one file ($file, model.diffusion_model.): the $ref run's out.sample, $(head -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "one file ($file)"
	fi
done
# a Q8_0 GGUF as city96's (pdit quantize: general.architecture qwen_image), kept quantized: its decoded
# products equal the run of the same weights written back in f32 within 1e-5
if "$pdit" quantize "$g/model/transformer" "$tmp/q8.gguf" --type q8_0 > /dev/null 2> "$tmp/err" &&
	"$pdit" quantize "$tmp/q8.gguf" "$tmp/q8-f32.safetensors" --type f32 > /dev/null 2>> "$tmp/err" &&
	"$pdit" inspect "$tmp/q8.gguf" 2>&1 | grep -q 'general.architecture = "qwen_image"' &&
	"$pdit" forward --transformer "$tmp/q8.gguf" --config "$g/model/transformer/config.json" --inputs "$f" \
		--quant-products bf16 --out "$tmp/q.safetensors" > /dev/null 2>> "$tmp/err" &&
	"$pdit" forward --transformer "$tmp/q8-f32.safetensors" --config "$g/model/transformer/config.json" --inputs "$f" \
		--out "$tmp/d.safetensors" > /dev/null 2>> "$tmp/err" &&
	"$cmp" tensors "$tmp/q.safetensors" "$tmp/d.safetensors" 1e-5 out.sample > "$tmp/log"; then
	ok "a Q8_0 GGUF (qwen_image): its dequantized weights' out.sample, $(head -1 "$tmp/log")"
else
	cat "$tmp/err" "$tmp/log"; bad "a Q8_0 GGUF"
fi
# a LoRA on Qwen-Image's layers (diffusers/PEFT names, and ComfyUI's diffusion_model. prefix) against
# the weights with the same terms merged by Python: out.sample within 1e-5
lib=$(cd "$(dirname "$0")/../lib" && pwd)
python3 - "$lib" "$g/model/transformer" "$tmp" << 'PY'
import os, random, sys
sys.path.insert(0, sys.argv[1])
from st_tiny import load, merged_copy, save
src, d = sys.argv[2], sys.argv[3]
head, _ = load(os.path.join(src, "diffusion_pytorch_model.safetensors"))
rnd, r, tensors, deltas = random.Random(3), 2, {}, {}
for prefix, layer in (("transformer.", "transformer_blocks.0.attn.to_q"), ("transformer.", "txt_in"),
                      ("diffusion_model.", "transformer_blocks.1.img_mlp.net.2"),
                      ("diffusion_model.", "transformer_blocks.0.txt_mod.1")):
    o, i = head[layer + ".weight"]["shape"]
    A = [rnd.gauss(0, 0.2) for _ in range(r * i)]
    B = [rnd.gauss(0, 0.2) for _ in range(o * r)]
    tensors[prefix + layer + ".lora_A.weight"] = ([r, i], A)
    tensors[prefix + layer + ".lora_B.weight"] = ([o, r], B)
    deltas[layer + ".weight"] = [sum(B[a * r + k] * A[k * i + c] for k in range(r)) for a in range(o) for c in range(i)]
save(d + "/qwen-lora.safetensors", tensors)
merged_copy(src, d + "/qwen-merged", deltas)
PY
f="$g/forward-1.safetensors"
"$pdit" forward --transformer "$tmp/qwen-merged" --inputs "$f" --out "$tmp/m.safetensors" > /dev/null 2>&1
if "$pdit" forward --transformer "$g/model/transformer" --inputs "$f" --lora "$tmp/qwen-lora.safetensors" \
	--out "$tmp/l.safetensors" > /dev/null 2> "$tmp/err" &&
	"$cmp" tensors "$tmp/l.safetensors" "$tmp/m.safetensors" 1e-5 out.sample > "$tmp/log" &&
	! "$cmp" tensors "$tmp/l.safetensors" "$f" 1e-3 out.sample > /dev/null 2>&1; then
	ok "a LoRA on Qwen-Image's layers: the merged weights' out.sample, $(head -1 "$tmp/log")"
else
	cat "$tmp/err" "$tmp/log"; bad "a LoRA on Qwen-Image's layers"
fi
# the language model as a GGUF file in llama.cpp's names (token_embd, blk.N.attn_q, ..., output_norm; its
# sizes from the file's metadata) and as one safetensors file of Qwen2.5-VL's newer names
# (model.language_model., a vision tower beside it), through --llm: text-0's prompt_embeds within 1e-4
python3 - "$g/model/text_encoder" "$tmp" << 'PY'
import json, os, struct, sys
src, d = sys.argv[1], sys.argv[2]
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
cfg = json.load(open(os.path.join(src, "config.json")))
data = lambda k: raw[8 + n + head[k]["data_offsets"][0]:8 + n + head[k]["data_offsets"][1]]
names = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
         "self_attn.o_proj.weight": "attn_output.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
         "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
for q in "qkv":
    for wb in ("weight", "bias"):
        names["self_attn.%s_proj.%s" % (q, wb)] = "attn_%s.%s" % (q, wb)
tensors = []
for k, v in head.items():
    if k == "__metadata__" or v["dtype"] != "F32":
        continue
    if k == "model.embed_tokens.weight":
        g = "token_embd.weight"
    elif k == "model.norm.weight":
        g = "output_norm.weight"
    elif k == "lm_head.weight":
        g = "output.weight"
    elif k.startswith("model.layers."):
        i, rest = k[len("model.layers."):].split(".", 1)
        g = "blk.%s.%s" % (i, names[rest])
    else:
        continue
    tensors.append((g, v["shape"], data(k)))
s = lambda t: struct.pack("<Q", len(t.encode())) + t.encode()
kv = [("general.architecture", 8, s("qwen2vl")), ("qwen2vl.embedding_length", 4, struct.pack("<I", cfg["hidden_size"])),
      ("qwen2vl.block_count", 4, struct.pack("<I", cfg["num_hidden_layers"])),
      ("qwen2vl.feed_forward_length", 4, struct.pack("<I", cfg["intermediate_size"])),
      ("qwen2vl.attention.head_count", 4, struct.pack("<I", cfg["num_attention_heads"])),
      ("qwen2vl.attention.head_count_kv", 4, struct.pack("<I", cfg["num_key_value_heads"])),
      ("qwen2vl.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", cfg["rms_norm_eps"])),
      ("qwen2vl.rope.freq_base", 6, struct.pack("<f", cfg["rope_theta"]))]
out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
for k, t, v in kv:
    out += s(k) + struct.pack("<I", t) + v
off, blob = 0, b""
for name, shape, b in tensors:
    out += s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", x) for x in reversed(shape))
    out += struct.pack("<IQ", 0, off)
    pad = (-len(b)) % 32
    blob += b + b"\0" * pad
    off += len(b) + pad
out += b"\0" * ((-len(out)) % 32)
open(d + "/llm.gguf", "wb").write(out + blob)
# Qwen2.5-VL's newer file: the decoder under model.language_model., a vision tower beside it
h2, blob2 = {}, b""
for k, v in head.items():
    if k == "__metadata__":
        continue
    k2 = k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k
    b = data(k)
    h2[k2] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [len(blob2), len(blob2) + len(b)]}
    blob2 += b
vis = struct.pack("<4f", 9, 9, 9, 9)
h2["model.visual.patch_embed.proj.weight"] = {"dtype": "F32", "shape": [2, 2], "data_offsets": [len(blob2), len(blob2) + 16]}
blob2 += vis
# (its sizes: a head of 8 is no Qwen2.5's, so the config goes with it as metadata)
h2["__metadata__"] = {"config": json.dumps(cfg)}
hj = json.dumps(h2).encode()
open(d + "/llm-vl.safetensors", "wb").write(struct.pack("<Q", len(hj)) + hj + blob2)
PY
f="$g/text-0.safetensors"
for file in llm.gguf llm-vl.safetensors; do
	rm -f "$tmp/e.safetensors"
	if "$pdit" encode --model "$g/model" --llm "$tmp/$file" -p "$("$cmp" meta "$f" prompt)" --out "$tmp/e.safetensors" \
		> /dev/null 2> "$tmp/err" && "$cmp" tensors "$tmp/e.safetensors" "$f" 1e-4 prompt_embeds > "$tmp/log"; then
		ok "--llm $file: prompt_embeds as transformers', $(head -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "--llm $file"
	fi
done
# pdit quantize on a text encoder folder: a GGUF in llama.cpp's names and metadata (qwen2vl.*), its
# 2-D weights in Q8_0 (the golden encoder) or Q4_K (one 256 wide, pdit tiny's), read kept quantized
# through --llm: prompt_embeds (pdit encode) and a picture's latents (pdit generate) equal to the runs of
# the same values written back in f32 within 1e-5
p0=$("$cmp" meta "$g/text-0.safetensors" prompt)
"$pdit" tiny "$tmp/wide" --family qwen --llm-width 256 --llm-heads 2 --llm-kv-heads 1 > /dev/null 2>&1 ||
	bad "pdit tiny --family qwen --llm-width 256"
for c in "$g/model:q8_0" "$tmp/wide:q4_k"; do
	m=${c%:*} q=${c##*:}
	if "$pdit" quantize "$m/text_encoder" "$tmp/te.gguf" --type "$q" > /dev/null 2> "$tmp/err" &&
		"$pdit" inspect "$tmp/te.gguf" > "$tmp/inspect" 2>&1 && grep -q 'general.architecture = "qwen2vl"' "$tmp/inspect" &&
		grep -qi "blk.0.attn_q.weight  *$q " "$tmp/inspect" &&
		grep -q "^language model: Qwen2.5-VL's decoder, .*--llm FILE" "$tmp/inspect" &&
		"$pdit" quantize "$tmp/te.gguf" "$tmp/te-dq.safetensors" --type f32 > /dev/null 2>> "$tmp/err" &&
		"$pdit" encode --model "$m" --llm "$tmp/te.gguf" -p "$p0" --out "$tmp/eq.safetensors" > /dev/null 2>> "$tmp/err" &&
		"$pdit" encode --model "$m" --llm "$tmp/te-dq.safetensors" -p "$p0" --out "$tmp/ed.safetensors" > /dev/null \
			2>> "$tmp/err" &&
		"$cmp" tensors "$tmp/eq.safetensors" "$tmp/ed.safetensors" 1e-5 prompt_embeds > "$tmp/log" &&
		"$pdit" generate --model "$m" --llm "$tmp/te.gguf" -p "$p0" -H 32 -W 32 --steps 2 --out-latents "$tmp/gq.safetensors" \
			-o "$tmp/gq.png" -q 2>> "$tmp/err" &&
		"$pdit" generate --model "$m" --llm "$tmp/te-dq.safetensors" -p "$p0" -H 32 -W 32 --steps 2 \
			--out-latents "$tmp/gd.safetensors" -o "$tmp/gd.png" -q 2>> "$tmp/err" &&
		"$cmp" tensors "$tmp/gq.safetensors" "$tmp/gd.safetensors" 1e-5 latents.final >> "$tmp/log"; then
		ok "pdit quantize $(basename "$m")/text_encoder --type $q: llama.cpp's GGUF, kept $q, its f32 values' run $(head -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "pdit quantize text_encoder --type $q"
	fi
	rm -f "$tmp/te.gguf" "$tmp/te-dq.safetensors"
done
# a GGUF language model of another architecture (llama's converter permutes q and k): refused naming it
"$pdit" quantize "$g/model/text_encoder" "$tmp/te.gguf" --type q8_0 > /dev/null 2>&1
/usr/bin/python3 -c 'import sys; b = open(sys.argv[1], "rb").read(); open(sys.argv[2], "wb").write(b.replace(b"qwen2vl", b"llama2x"))' \
	"$tmp/te.gguf" "$tmp/llama.gguf"
if "$pdit" encode --model "$g/model" --llm "$tmp/llama.gguf" -p x --out "$tmp/no.safetensors" 2> "$tmp/err" ||
	! grep -q "architecture llama2x" "$tmp/err" || [ -e "$tmp/no.safetensors" ]; then
	cat "$tmp/err"; bad "a llama2x GGUF language model not refused"
else
	ok "a GGUF language model of another architecture refused: $(head -1 "$tmp/err")"
fi
# ... and one without general.architecture: inspected, and refused as a text encoder, naming the file
/usr/bin/python3 -c 'import sys; b = open(sys.argv[1], "rb").read()
open(sys.argv[2], "wb").write(b.replace(b"general.architecture", b"general.architecturx"))' "$tmp/te.gguf" "$tmp/noarch.gguf"
if "$pdit" inspect "$tmp/noarch.gguf" > /dev/null 2>&1 &&
	! "$pdit" encode --model "$g/model" --llm "$tmp/noarch.gguf" -p x --out "$tmp/no.safetensors" 2> "$tmp/err" &&
	grep -q "noarch.gguf: a GGUF file in llama.cpp's names without its sizes" "$tmp/err" && [ ! -e "$tmp/no.safetensors" ]; then
	ok "a GGUF language model without general.architecture: inspected, refused by --llm ($(head -1 "$tmp/err"))"
else
	cat "$tmp/err"; bad "a GGUF language model without general.architecture"
fi
# the model card's sizes by ratio: --aspect 4:3 is its 1472 x 1140, floored to 1136 as diffusers does; with
# -H refused, as a ratio that is not one
if "$pdit" generate --model "$g/model" -p "a lighthouse" --aspect 4:3 --steps 2 -o "$tmp/aspect.png" -q 2> "$tmp/err" &&
	[ "$(/usr/bin/python3 -c 'import sys; from PIL import Image; print("%dx%d" % Image.open(sys.argv[1]).size)' \
		"$tmp/aspect.png")" = 1472x1136 ]; then
	ok "--aspect 4:3: the card's 1472x1136"
else
	cat "$tmp/err"; bad "--aspect 4:3"
fi
for a in "--aspect 4:3 -H 64" "--aspect 4x3" "--aspect 0:1"; do
	# shellcheck disable=SC2086
	if "$pdit" generate --model "$g/model" -p x $a -o "$tmp/no.png" 2> "$tmp/err" || ! grep -q -- "--aspect" "$tmp/err" ||
		[ -e "$tmp/no.png" ]; then
		cat "$tmp/err"; bad "$a not refused"
	else
		ok "$a refused: $(head -1 "$tmp/err")"
	fi
done
# one step: the scheduler's stretch to shift_terminal would divide 0 by 0 (NaN in diffusers): refused
if "$pdit" generate --model "$g/model" -p x -H 32 -W 32 --steps 1 -o "$tmp/one.png" 2> "$tmp/err" ||
	! grep -q -- "--steps 1" "$tmp/err" || [ -e "$tmp/one.png" ]; then
	cat "$tmp/err"; bad "--steps 1 not refused"
else
	ok "--steps 1 refused: $(head -1 "$tmp/err")"
fi
# a text mask with a gap (a token after padding): refused, nothing written
python3 - "$g/forward-1.safetensors" "$tmp/gap.safetensors" << 'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
data = bytearray(raw[8 + n:])
s, e = head["in.encoder_hidden_states_mask"]["data_offsets"]
vals = list(struct.unpack("<%dq" % ((e - s) // 8), bytes(data[s:e])))
vals[-1] = 1
vals[-2] = 0
data[s:e] = struct.pack("<%dq" % len(vals), *vals)
open(sys.argv[2], "wb").write(raw[:8 + n] + bytes(data))
PY
rm -f "$tmp/no.safetensors"
if ! "$pdit" forward --transformer "$g/model/transformer" --inputs "$tmp/gap.safetensors" --out "$tmp/no.safetensors" \
	> /dev/null 2> "$tmp/err" && grep -q "in.encoder_hidden_states_mask has a gap" "$tmp/err" && [ ! -e "$tmp/no.safetensors" ]; then
	ok "a text mask with a gap: $(cat "$tmp/err")"
else
	cat "$tmp/err"; bad "a text mask with a gap"
fi
exit $fail
