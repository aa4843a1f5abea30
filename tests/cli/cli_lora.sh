#!/usr/bin/env bash
# LoRA adapters as a user applies them, against diffusers (tests/golden/edit-tiny):
#   every forward case (diffusers/PEFT, kohya with alpha and fused q/k/v, Black
#   Forest Labs' names, a stack of two layouts with a negative scale) through
#   `pdit forward --lora FILE:SCALE`: out.sample within 1e-4, and pdit's run
#   without the adapters within 1e-4 of out.sample_without_lora (so the
#   adapters are what moves it); the whole-run case through `pdit generate
#   --lora`: latents.final within 1e-4, the picture within 1 level;
#   kept-quantized weights (Q8_0 GGUF, fp8, decoded products, f32) with an
#   adapter equal to the same adapter on their dequantized weights within 1e-5;
#   with MPIRUN: tensor parallel 2 and 4 (the adapters' B rows and A columns
#   sharded with their layers), Ulysses 2, ring 2, PipeFusion 2, tensor 2 x
#   Ulysses 2, and tensor 2 on the Q8_0 file, each equal to one process within
#   1e-5 (on int8 products tensor 2 on the Q8_0 file bit for bit);
#   pdit inspect names each layout and the rank its file's metadata says;
#   refusals, one line naming the file and nonzero with nothing written: a key of
#   no layer (and --lora-lenient skipping it), shapes that do not fit the model,
#   NaN in an adapter, a lone lora_A, one module's down matrix in two spellings, a truncated file, a
#   missing file.
#   Wan2.1: adapters in diffusers' names and in the original layout's (ComfyUI's
#   prefix, kohya's lora_down/lora_up with alpha) through `pdit forward` on
#   wan-tiny's forward case, each against the transformer with the same terms
#   merged into its weights by Python here (not by pdit): out.sample within 1e-5;
#   FLUX's final modulation adapted under diffusers' names and under Black
#   Forest Labs' (its halves swapped) against weights merged by Python;
#   XLabs' layout and fal's Kontext trainer's against weights merged by Python;
#   LyCORIS' plain low-rank names against the same adapter's PEFT file;
# usage: cli_lora.sh PDIT ST_COMPARE EDIT_GOLDEN FLUX_GOLDEN QUANT_GOLDEN WAN_GOLDEN [MPIRUN...]
set -u
pdit=$1 cmp=$2 g=$3 fg=$4 qg=$5 wg=$6
shift 6
mpirun=("$@")
lib=$(cd "$(dirname "$0")/../lib" && pwd)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
meta() { "$cmp" meta "$1" "$2"; }
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
# --lora FILE:SCALE for each of a case's adapters (its loras and scales lists)
lora_args() {
	python3 - "$g" "$(meta "$1" loras)" "$(meta "$1" scales)" << 'PY'
import json, sys
for f, s in zip(json.loads(sys.argv[2]), json.loads(sys.argv[3])):
    print("--lora\n%s/%s:%r" % (sys.argv[1], f, s))
PY
}

for f in "$g"/lora-dev-????.safetensors; do
	name=$(basename "$f")
	mapfile -t la < <(lora_args "$f")
	tr=(--transformer "$fg/transformer-$(meta "$f" config)" --inputs "$f")
	if "$pdit" forward "${tr[@]}" "${la[@]}" --out "$tmp/out.safetensors" > /dev/null 2> "$tmp/err" &&
		"$cmp" tensors "$tmp/out.safetensors" "$f" 1e-4 out.sample > "$tmp/log"; then
		ok "$name ($(meta "$f" layout), scales $(meta "$f" scales)): $(head -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "$name with its adapters"
	fi
	"$pdit" forward "${tr[@]}" --out "$tmp/plain.safetensors" > /dev/null 2>&1
	if python3 - "$tmp/plain.safetensors" "$f" << 'PY'
import json, struct, sys
def rd(p, k):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); s, e = h[k]["data_offsets"]
    return struct.unpack("<%df" % ((e - s) // 4), b[8 + n + s:8 + n + e])
mine, ref, ref_plain = rd(sys.argv[1], "out.sample"), rd(sys.argv[2], "out.sample"), rd(sys.argv[2], "out.sample_without_lora")
scale = max(abs(v) for v in ref_plain)
plain_err = max(abs(a - b) for a, b in zip(mine, ref_plain)) / scale
moved = max(abs(a - b) for a, b in zip(ref, ref_plain)) / scale
print("without adapters %.2e of out.sample_without_lora; the adapters move it %.2e" % (plain_err, moved))
sys.exit(0 if plain_err <= 1e-4 and moved > 1e-2 else 1)
PY
	then ok "$name without its adapters"; else bad "$name: without adapters, or adapters that change nothing"; fi
done

# pdit inspect: the layout and the rank the file's metadata says
for x in "kohya:kohya" "peft:diffusers/PEFT" "bfl:native (ComfyUI)"; do
	a=$(ls "$g"/lora-dev-????-"${x%%:*}".safetensors | head -1)
	if "$pdit" inspect "$a" > "$tmp/insp" 2>&1 &&
		grep -q "^LoRA adapter: ${x#*:} layout, .* rank $(meta "$a" rank)[,.]" "$tmp/insp"; then
		ok "pdit inspect $(basename "$a"): $(grep '^LoRA' "$tmp/insp")"
	else
		cat "$tmp/insp"; bad "pdit inspect $(basename "$a")"
	fi
done

# the whole run
f="$g/lora-pipeline-dev-1351.safetensors"
mapfile -t la < <(lora_args "$f")
gen=(--transformer "$fg/transformer-dev" --vae "$fg/vae-dev" --scheduler "$fg/scheduler-dev" --embeds "$f"
     --steps "$(meta "$f" num_inference_steps)" -s "$(meta "$f" noise_seed)" --guidance "$(meta "$f" guidance_scale)"
     -W "$(meta "$f" width)" -H "$(meta "$f" height)" "${la[@]}")
if "$pdit" generate "${gen[@]}" --out-latents "$tmp/lat.safetensors" -o "$tmp/img.png" -q 2> "$tmp/err" &&
	"$cmp" tensors "$tmp/lat.safetensors" "$f" 1e-4 latents.final > "$tmp/log" &&
	"$cmp" png "$tmp/img.png" "$f" image.uint8 0 1 >> "$tmp/log"; then
	ok "generate --lora on $(basename "$f"): $(head -1 "$tmp/log"); $(tail -1 "$tmp/log")"
	# the PNG's parameters name the adapter, its hash and scale (A1111's "Lora hashes")
	if grep -qa 'Lora hashes: "lora-pipeline-dev-1351-kohya: [0-9a-f]\{16\}"; loras: lora-pipeline-dev-1351-kohya.safetensors:0.9' \
		"$tmp/img.png"; then
		ok "the PNG's parameters name the adapter, its hash and its scale"
	else
		bad "the PNG's parameters do not name the adapter"
	fi
else
	cat "$tmp/err" "$tmp/log"; bad "generate --lora on $(basename "$f")"
fi

# the memory check counts the adapters' files (PDIT_MEM_AVAILABLE_MB: too little for anything, so
# the refusal says what it counted)
need() { PDIT_MEM_AVAILABLE_MB=0.01 "$pdit" generate "${gen[@]:0:12}" "$@" -o "$tmp/no.png" 2>&1 |
	sed -n 's/.*transformer weights[a-z ]* \([0-9.]*\) MB.*/\1/p'; }
w0=$(need) w1=$(need --lora "$g/lora-dev-1342-kohya.safetensors")
if awk -v a="$w0" -v b="$w1" -v f="$(stat -c %s "$g/lora-dev-1342-kohya.safetensors")" \
	'BEGIN { exit !(a > 0 && (b - a) * 1048576 > 0.9 * f && (b - a) * 1048576 < 1.1 * f) }'; then
	ok "the memory check adds the adapter's file: weights $w0 MB, with the adapter $w1 MB"
else
	bad "the memory check and adapters: weights $w0 MB, with the adapter $w1 MB"
fi

# kept-quantized weights: the adapter beside their blocks, as on the decoded weights
adapter="$g/lora-dev-1342-kohya.safetensors:0.8"
for q in Q8_0.gguf fp8_e4m3fn_scaled.safetensors; do
	t=${q%.*}
	in=(--inputs "$qg/forward-$t-h64w48.safetensors" --lora "$adapter")
	if "$pdit" forward --transformer "$qg/flux-tiny-dev-$q" --config "$qg/dequant-$t/config.json" "${in[@]}" \
		--quant-products bf16 --out "$tmp/q.safetensors" > /dev/null 2> "$tmp/err" &&
		"$pdit" forward --transformer "$qg/dequant-$t" "${in[@]}" --out "$tmp/d.safetensors" > /dev/null 2>> "$tmp/err" &&
		"$cmp" tensors "$tmp/q.safetensors" "$tmp/d.safetensors" 1e-5 out.sample > "$tmp/log"; then
		ok "an adapter on $q as on its dequantized weights: $(head -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "an adapter on $q"
	fi
done

if [ ${#mpirun[@]} -gt 0 ]; then
	while read -r np mesh; do
		rm -f "$tmp/lat2.safetensors"
		# shellcheck disable=SC2086
		if "${mpirun[@]}" -np "$np" "$pdit" generate "${gen[@]}" $mesh --out-latents "$tmp/lat2.safetensors" \
			-o "$tmp/img2.png" -q < /dev/null 2> "$tmp/err" &&
			"$cmp" tensors "$tmp/lat2.safetensors" "$tmp/lat.safetensors" 1e-5 latents.final > "$tmp/log"; then
			ok "generate --lora on $np processes ($mesh): one process's latents, $(head -1 "$tmp/log")"
		else
			cat "$tmp/err" "$tmp/log"; bad "generate --lora, $np processes, $mesh"
		fi
	done << 'EOF'
2 --tensor-parallel-degree 2
2 --ulysses-degree 2
2 --ring-degree 2
2 --pipefusion-degree 2 --warmup-steps 4
4 --tensor-parallel-degree 4
4 --tensor-parallel-degree 2 --ulysses-degree 2
EOF
	q=(--diffusion-model "$qg/flux-tiny-dev-Q8_0.gguf" --config "$qg/dequant-Q8_0/config.json" --vae "$fg/vae-dev"
	   --scheduler "$fg/scheduler-dev" --embeds "$f" --steps 2 -s 5 --lora "$adapter" --quant-products bf16 -q)
	if "$pdit" generate "${q[@]}" --out-latents "$tmp/q1.safetensors" -o "$tmp/q1.png" 2> "$tmp/err" &&
		"${mpirun[@]}" -np 2 "$pdit" generate "${q[@]}" --tensor-parallel-degree 2 --out-latents "$tmp/q2.safetensors" \
			-o "$tmp/q2.png" < /dev/null 2>> "$tmp/err" &&
		"$cmp" tensors "$tmp/q2.safetensors" "$tmp/q1.safetensors" 1e-5 latents.final > "$tmp/log"; then
		ok "an adapter on the Q8_0 file, tensor parallel 2: one process's latents, $(head -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "an adapter on the Q8_0 file, tensor parallel 2"
	fi
	# on int8 products tensor parallel gathers whole inputs (the adapters'
	# A whole, B by the shard's output rows): one process's bits, where
	# this CPU's products keep a row's bits whatever the rows and columns
	# of a call (tests/lib/pd_test_rows.h); else int8's 2e-2
	tol=$("$(dirname "$cmp")/rows_exact" 2e-2)
	q+=(--quant-products int8 --dtype bf16)
	if "$pdit" generate "${q[@]}" --out-latents "$tmp/q1.safetensors" -o "$tmp/q1.png" 2> "$tmp/err" &&
		"${mpirun[@]}" -np 2 "$pdit" generate "${q[@]}" --tensor-parallel-degree 2 --out-latents "$tmp/q2.safetensors" \
			-o "$tmp/q2.png" < /dev/null 2>> "$tmp/err" &&
		"$cmp" tensors "$tmp/q2.safetensors" "$tmp/q1.safetensors" "$tol" latents.final > "$tmp/log"; then
		ok "an adapter on the Q8_0 file on int8 products, tensor parallel 2: one process's latents within $tol"
	else
		cat "$tmp/err" "$tmp/log"; bad "an adapter on the Q8_0 file on int8 products, tensor parallel 2"
	fi
fi

# Wan2.1: the same terms in two layouts, against the weights with them merged
python3 - "$lib" "$wg/model/transformer" "$tmp" << 'PY'
import os, random, sys
sys.path.insert(0, sys.argv[1])
from st_tiny import load, merged_copy, save
src, d = sys.argv[2], sys.argv[3]
head, _ = load(os.path.join(src, "diffusion_pytorch_model.safetensors"))
# (diffusers name, original name): self- and cross-attention, the MLP, the time projection
layers = [("blocks.0.attn1.to_q", "blocks.0.self_attn.q"), ("blocks.1.attn2.to_v", "blocks.1.cross_attn.v"),
          ("blocks.1.attn1.to_out.0", "blocks.1.self_attn.o"), ("blocks.0.ffn.net.2", "blocks.0.ffn.2"),
          ("condition_embedder.time_proj", "time_projection.1")]
rnd, r, alpha, scale = random.Random(7), 3, 1.5, 0.8
peft, orig, deltas = {}, {}, {}
for ours, native in layers:
    o, i = head[ours + ".weight"]["shape"]
    A = [rnd.gauss(0, 0.3) for _ in range(r * i)]
    B = [rnd.gauss(0, 0.3) for _ in range(o * r)]
    peft["transformer.%s.lora_A.weight" % ours] = ([r, i], A)
    peft["transformer.%s.lora_B.weight" % ours] = ([o, r], [v * alpha / r for v in B])
    orig["diffusion_model.%s.lora_down.weight" % native] = ([r, i], A)
    orig["diffusion_model.%s.lora_up.weight" % native] = ([o, r], B)
    orig["diffusion_model.%s.alpha" % native] = ([], [alpha])
    deltas[ours + ".weight"] = [scale * alpha / r * sum(B[a * r + k] * A[k * i + c] for k in range(r))
                                for a in range(o) for c in range(i)]
save(d + "/wan-peft.safetensors", peft)
save(d + "/wan-orig.safetensors", orig)
merged_copy(src, d + "/wan-merged", deltas)
PY
wf="$wg/forward-n9-h32w48.safetensors"
"$pdit" forward --transformer "$tmp/wan-merged" --inputs "$wf" --out "$tmp/wan-merged.safetensors" > /dev/null 2>&1
"$pdit" forward --transformer "$wg/model/transformer" --inputs "$wf" --out "$tmp/wan-plain.safetensors" > /dev/null 2>&1
for a in "wan-peft.safetensors:0.8" "wan-orig.safetensors:0.8"; do
	if "$pdit" forward --transformer "$wg/model/transformer" --inputs "$wf" --lora "$tmp/$a" --out "$tmp/wan.safetensors" \
		> /dev/null 2> "$tmp/err" && "$cmp" tensors "$tmp/wan.safetensors" "$tmp/wan-merged.safetensors" 1e-5 out.sample \
		> "$tmp/log" && ! "$cmp" tensors "$tmp/wan-plain.safetensors" "$tmp/wan-merged.safetensors" 1e-3 out.sample \
		> /dev/null 2>&1; then
		ok "Wan2.1, --lora $a: the merged weights' out.sample, $(head -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "Wan2.1, --lora $a"
	fi
done

# FLUX's final modulation: diffusers' norm_out.linear is (scale, shift), Black Forest Labs'
# final_layer.adaLN_modulation.1 (shift, scale): an adapter in either names, against the weights with the
# term merged by Python
python3 - "$lib" "$fg/transformer-dev" "$tmp" << 'PY'
import os, random, sys
sys.path.insert(0, sys.argv[1])
from st_tiny import load, merged_copy, save
src, d = sys.argv[2], sys.argv[3]
head, _ = load(os.path.join(src, "diffusion_pytorch_model.safetensors"))
o, i = head["norm_out.linear.weight"]["shape"]
r, rnd = 2, random.Random(11)
A = [rnd.gauss(0, 0.3) for _ in range(r * i)]
B = [rnd.gauss(0, 0.3) for _ in range(o * r)]
half = o // 2
B_bfl = B[half * r:] + B[:half * r]        # rows (shift, scale)
save(d + "/final-peft.safetensors", {"transformer.norm_out.linear.lora_A.weight": ([r, i], A),
                                     "transformer.norm_out.linear.lora_B.weight": ([o, r], B)})
save(d + "/final-bfl.safetensors", {"diffusion_model.final_layer.adaLN_modulation.1.lora_A.weight": ([r, i], A),
                                    "diffusion_model.final_layer.adaLN_modulation.1.lora_B.weight": ([o, r], B_bfl)})
merged_copy(src, d + "/flux-merged", {"norm_out.linear.weight": [sum(B[a * r + k] * A[k * i + c] for k in range(r))
                                                                 for a in range(o) for c in range(i)]})
PY
ff="$g/lora-dev-1341.safetensors"
"$pdit" forward --transformer "$tmp/flux-merged" --inputs "$ff" --out "$tmp/fm.safetensors" > /dev/null 2>&1
for a in final-peft final-bfl; do
	if "$pdit" forward --transformer "$fg/transformer-dev" --inputs "$ff" --lora "$tmp/$a.safetensors" \
		--out "$tmp/f.safetensors" > /dev/null 2> "$tmp/err" &&
		"$cmp" tensors "$tmp/f.safetensors" "$tmp/fm.safetensors" 1e-5 out.sample > "$tmp/log"; then
		ok "FLUX's final modulation, $a: the merged weights' out.sample, $(head -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "FLUX's final modulation, $a"
	fi
done

# XLabs' layout (processor names: qkv_lora1 = to_q, to_k, to_v with up's rows stacked, no alpha) and fal's
# Kontext trainer's (Black Forest Labs' names after base_model.model.), against the weights with the same
# terms merged by Python as diffusers' converters split them
python3 - "$lib" "$fg/transformer-dev" "$tmp" << 'PY'
import os, random, sys
sys.path.insert(0, sys.argv[1])
from st_tiny import load, merged_copy, save
src, d = sys.argv[2], sys.argv[3]
head, _ = load(os.path.join(src, "diffusion_pytorch_model.safetensors"))
shape = lambda k: head[k + ".weight"]["shape"]
rnd, r = random.Random(5), 2
def pair(o, i):
    return [rnd.gauss(0, 0.2) for _ in range(r * i)], [rnd.gauss(0, 0.2) for _ in range(o * r)]
def add(deltas, layer, A, B, rows, scale):
    """LAYER's weight += scale * B[rows] A"""
    o, i = shape(layer)
    dv = [scale * sum(B[(rows + a) * r + k] * A[k * i + c] for k in range(r)) for a in range(o) for c in range(i)]
    old = deltas.get(layer + ".weight")
    deltas[layer + ".weight"] = dv if old is None else [x + y for x, y in zip(old, dv)]
def run(deltas, A, B, layers, scale):
    rows = 0
    for layer in layers:
        add(deltas, layer, A, B, rows, scale)
        rows += shape(layer)[0]
    return rows
D = shape("transformer_blocks.0.attn.to_q")[0]
xl, xd, scale = {}, {}, 0.7
for proc, layers in (("double_blocks.0.processor.qkv_lora1", ["transformer_blocks.0.attn.to_%s" % q for q in "qkv"]),
                     ("double_blocks.1.processor.qkv_lora2", ["transformer_blocks.1.attn.add_%s_proj" % q for q in "qkv"]),
                     ("double_blocks.1.processor.proj_lora1", ["transformer_blocks.1.attn.to_out.0"]),
                     ("double_blocks.0.processor.proj_lora2", ["transformer_blocks.0.attn.to_add_out"]),
                     ("single_blocks.1.processor.qkv_lora", ["single_transformer_blocks.1.attn.to_%s" % q for q in "qkv"])):
    o = sum(shape(l)[0] for l in layers)
    A, B = pair(o, D)
    xl[proc + ".down.weight"], xl[proc + ".up.weight"] = ([r, D], A), ([o, r], B)
    run(xd, A, B, layers, scale)
save(d + "/xlabs.safetensors", xl)
merged_copy(src, d + "/xlabs-merged", xd)
fal, fd = {}, {}
for native, layers in (("double_blocks.1.img_attn.qkv", ["transformer_blocks.1.attn.to_%s" % q for q in "qkv"]),
                       ("single_blocks.0.linear1", ["single_transformer_blocks.0.attn.to_%s" % q for q in "qkv"] +
                        ["single_transformer_blocks.0.proj_mlp"]),
                       ("final_layer.linear", ["proj_out"])):
    o = sum(shape(l)[0] for l in layers)
    A, B = pair(o, D)
    fal["base_model.model." + native + ".lora_A.weight"] = ([r, D], A)
    fal["base_model.model." + native + ".lora_B.weight"] = ([o, r], B)
    run(fd, A, B, layers, 1.0)
save(d + "/fal.safetensors", fal)
merged_copy(src, d + "/fal-merged", fd)
PY
for a in xlabs:0.7 fal; do
	m=${a%%:*}
	"$pdit" forward --transformer "$tmp/$m-merged" --inputs "$ff" --out "$tmp/m.safetensors" > /dev/null 2>&1
	if "$pdit" forward --transformer "$fg/transformer-dev" --inputs "$ff" --lora "$tmp/$m.safetensors${a#"$m"}" \
		--out "$tmp/f.safetensors" > /dev/null 2> "$tmp/err" &&
		"$cmp" tensors "$tmp/f.safetensors" "$tmp/m.safetensors" 1e-5 out.sample > "$tmp/log" &&
		! "$cmp" tensors "$tmp/f.safetensors" "$tmp/fm.safetensors" 1e-3 out.sample > /dev/null 2>&1; then
		ok "$m's layout: the merged weights' out.sample, $(head -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "$m's layout"
	fi
done
"$pdit" inspect "$tmp/xlabs.safetensors" > "$tmp/out" 2>&1
grep -q "XLabs" "$tmp/out" && ok "pdit inspect names XLabs' layout" || { cat "$tmp/out"; bad "pdit inspect on XLabs' layout"; }

# LyCORIS' plain low-rank names (lycoris_<diffusers module with _>.lora_down/lora_up, alpha): the PEFT
# case's adapter renamed so (alpha = its rank: the same scale) gives the PEFT file's out.sample
f=$g/lora-dev-1341.safetensors
python3 - "$g/lora-dev-1341-peft.safetensors" "$tmp/lycoris.safetensors" << 'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
head, data = json.loads(b[8:8 + n]), b[8 + n:]
out, blobs, off = {}, [], 0
for k, v in sorted(head.items()):
    if k == "__metadata__":
        continue
    mod, half = k[len("transformer."):].rsplit(".lora_", 1)
    name = "lycoris_" + mod.replace(".", "_") + (".lora_down.weight" if half.startswith("A") else ".lora_up.weight")
    s, e = v["data_offsets"]
    blobs.append(data[s:e])
    out[name] = {"dtype": v["dtype"], "shape": v["shape"], "data_offsets": [off, off + e - s]}
    off += e - s
    if half.startswith("A"):
        alpha = struct.pack("<f", float(v["shape"][0]))
        blobs.append(alpha)
        out["lycoris_" + mod.replace(".", "_") + ".alpha"] = {"dtype": "F32", "shape": [], "data_offsets": [off, off + 4]}
        off += 4
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
PY
tr=(--transformer "$fg/transformer-$(meta "$f" config)" --inputs "$f")
if "$pdit" forward "${tr[@]}" --lora "$tmp/lycoris.safetensors" --out "$tmp/ly.safetensors" > /dev/null 2> "$tmp/err" &&
	"$pdit" forward "${tr[@]}" --lora "$g/lora-dev-1341-peft.safetensors" --out "$tmp/pe.safetensors" > /dev/null 2>> "$tmp/err" &&
	"$cmp" tensors "$tmp/ly.safetensors" "$tmp/pe.safetensors" 1e-6 out.sample > "$tmp/log" &&
	"$pdit" inspect "$tmp/lycoris.safetensors" 2>&1 | grep -q "LyCORIS"; then
	ok "LyCORIS' plain low-rank names: the PEFT file's out.sample, $(head -1 "$tmp/log"); pdit inspect names it"
else
	cat "$tmp/err" "$tmp/log"; bad "LyCORIS' plain low-rank names"
fi

# refusals: one line naming the file, nonzero, nothing written
python3 - "$lib" "$tmp" << 'PY'
import sys
sys.path.insert(0, sys.argv[1])
from st_tiny import save
d, r, D = sys.argv[2], 2, 64
down = lambda n_in: ([r, n_in], [0.01] * (r * n_in))
up = lambda n_out: ([n_out, r], [0.01] * (n_out * r))
q = "transformer.transformer_blocks.0.attn.to_q"
save(d + "/unknown.safetensors", {q + ".lora_A.weight": down(D), q + ".lora_B.weight": up(D),
     "transformer.transformer_blocks.99.attn.to_q.lora_A.weight": down(D),
     "transformer.transformer_blocks.99.attn.to_q.lora_B.weight": up(D)})
save(d + "/shape.safetensors", {q + ".lora_A.weight": down(D + 1), q + ".lora_B.weight": up(D)})
nan = down(D); nan[1][5] = float("nan")
save(d + "/nan.safetensors", {q + ".lora_A.weight": nan, q + ".lora_B.weight": up(D)})
save(d + "/lone.safetensors", {q + ".lora_A.weight": down(D)})
save(d + "/twice.safetensors", {q + ".lora_A.weight": down(D), q + ".lora_down.weight": down(D),
     q + ".lora_B.weight": up(D)})
save(d + "/trunc.safetensors", {q + ".lora_A.weight": down(D), q + ".lora_B.weight": up(D)}, cut=100)
PY
f="$g/lora-dev-1341.safetensors"
expect() {
	local what=$1 want=$2
	shift 2
	rm -f "$tmp/no.safetensors"
	"$pdit" forward --transformer "$fg/transformer-dev" --inputs "$f" "$@" --out "$tmp/no.safetensors" > "$tmp/out" 2> "$tmp/err"
	local rc=$?
	if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(grep -c '' "$tmp/err")" -eq 1 ] && grep -qF -- "$want" "$tmp/err" &&
		[ ! -e "$tmp/no.safetensors" ]; then
		ok "$what: $(cat "$tmp/err")"
	else
		echo "exit $rc:"; cat "$tmp/err"; bad "$what"
	fi
}
expect "a key of no layer" "transformer.transformer_blocks.99.attn.to_q' is no layer" --lora "$tmp/unknown.safetensors"
expect "shapes that do not fit" "$tmp/shape.safetensors" --lora "$tmp/shape.safetensors"
expect "NaN in an adapter" "holds NaN" --lora "$tmp/nan.safetensors"
expect "a lone lora_A" "no up (B) matrix" --lora "$tmp/lone.safetensors"
expect "one module's down matrix twice (lora_A, lora_down)" "are the same part of one module" --lora "$tmp/twice.safetensors"
expect "a truncated adapter" "$tmp/trunc.safetensors" --lora "$tmp/trunc.safetensors"
expect "a missing adapter" "$tmp/none.safetensors" --lora "$tmp/none.safetensors"
if "$pdit" forward --transformer "$fg/transformer-dev" --inputs "$f" --lora "$tmp/unknown.safetensors" --lora-lenient \
	--out "$tmp/lenient.safetensors" > /dev/null 2> "$tmp/err" && grep -q "1 keys of no layer skipped" "$tmp/err"; then
	ok "--lora-lenient skips the key of no layer and says so"
else
	cat "$tmp/err"; bad "--lora-lenient"
fi
exit $fail
