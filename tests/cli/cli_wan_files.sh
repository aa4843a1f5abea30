#!/usr/bin/env bash
# Wan2.1 transformers as published outside diffusers, written from the
# golden tiny folder by tests/lib/wan_convert.py (independently of pdit's
# loader): the original layout (Wan-AI's WanModel, ComfyUI's single files
# under "model.diffusion_model.") as a file with its config as metadata, a
# file with Wan-AI's config.json (--config), and a folder in Wan-AI's
# layout: each gives the folder's latents exactly (f32).
# Quantized (pdit quantize from the original-layout file, as city96's
# wan2.1-*.gguf): the GGUF's types (Q8_0 block weights, F16 embedders and
# head, F32 modulation tables and the 5-D patch weight, architecture
# "wan"); a run on it equals the run on its dequantized weights (f32:
# exactly; bf16 within 1e-5: both round the same decoded values) and the
# golden WanPipeline latents within 2e-2 (Q8_0's error; the unquantized
# run is within 1e-4); Q4_0 puts ffn.2 in Q4_1 as lcpp.patch does; fp8 (prefix
# and config metadata kept) against its dequantized weights within 1e-5. A file without a config beside
# --model DIR takes the folder's; of a width that is no multiple of 128 and without any config, it is
# refused with one line naming the file.
# usage: cli_wan_files.sh PDIT ST_COMPARE WAN_TINY_DIR PYTHON3
set -u
pdit=$1 cmp=$2 g=$3 py=$4
m=$g/model
conv="$(dirname "$0")/../lib/wan_convert.py"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
neg="Bright tones, overexposed, static, blurred details, subtitles, style, works, paintings, images, static, overall gray, worst quality, low quality, JPEG compression residue, ugly, incomplete"
ref=$g/pipeline-cfg-n9-h32w48.safetensors
args=(-p "A cat walks on the grass, realistic style." -n "$neg" --frames 9 -H 32 -W 48 --steps 4 -s 42 -q)

# gen NAME [ARGS...]: the golden run's latents with other transformer weights
gen() {
	local name=$1
	shift
	"$pdit" generate --model "$m" "${args[@]}" "$@" --out-latents "$tmp/out-$name.safetensors" 2> "$tmp/err" ||
		{ cat "$tmp/err"; bad "$name: generate"; return 1; }
}
same() {	# NAME OTHER TOL: latents.final of two runs
	"$cmp" tensors "$tmp/out-$1.safetensors" "$tmp/out-$2.safetensors" "$3" latents.final > "$tmp/log" &&
		ok "$1 = $2 within $3 ($(grep latents.final "$tmp/log" | awk '{print $3}'))" ||
		{ cat "$tmp/log"; bad "$1 differs from $2"; }
}

"$py" "$conv" "$m/transformer" "$tmp/comfy.safetensors" --prefix model.diffusion_model. --config-metadata > /dev/null &&
	"$py" "$conv" "$m/transformer" "$tmp/plain.safetensors" --original-config "$tmp/wan.json" > /dev/null &&
	mkdir "$tmp/wanai" && cp "$tmp/plain.safetensors" "$tmp/wanai/diffusion_pytorch_model.safetensors" &&
	cp "$tmp/wan.json" "$tmp/wanai/config.json" || { bad "writing the original layout"; exit 1; }

gen folder && "$cmp" tensors "$tmp/out-folder.safetensors" "$ref" 1e-4 latents.final > /dev/null ||
	bad "the folder's run is not the golden one"
gen comfy --diffusion-model "$tmp/comfy.safetensors" && same comfy folder 0
gen config --diffusion-model "$tmp/plain.safetensors" --config "$tmp/wan.json" && same config folder 0
gen wanai --transformer "$tmp/wanai" && same wanai folder 0

# beside --model, the folder's config.json serves a file that carries none
gen plainfolder --diffusion-model "$tmp/plain.safetensors" && same plainfolder folder 0
# no config anywhere and a width that is not a multiple of Wan2.1's heads of 128
"$pdit" generate --diffusion-model "$tmp/plain.safetensors" --vae "$m/vae" --scheduler "$m/scheduler" \
	--text-encoder "$m/text_encoder" --tokenizer "$m/tokenizer" "${args[@]}" -o "$tmp/x.mp4" 2> "$tmp/err"
if [ $? -ne 0 ] && [ "$(grep -c '' "$tmp/err")" -eq 1 ] && grep -q "plain.safetensors.*--config" "$tmp/err" &&
	[ ! -e "$tmp/x.mp4" ]; then
	ok "no config, width 64: $(cat "$tmp/err")"
else
	cat "$tmp/err"; bad "a file without a config"
fi

# Q8_0 as city96's files
"$pdit" quantize "$tmp/comfy.safetensors" "$tmp/q8.gguf" --type q8_0 2> /dev/null &&
	"$pdit" inspect "$tmp/q8.gguf" > "$tmp/insp" || bad "quantize q8_0"
for want in 'general.architecture = "wan"' "blocks.1.self_attn.v.weight *q8_0" "blocks.0.ffn.2.weight *q8_0" \
	"blocks.0.modulation *f32 *\[1, 6, 64\]" "head.modulation *f32" "patch_embedding.weight *f32 *\[64, 16, 1, 2, 2\]" \
	"text_embedding.0.weight *f16" "time_projection.1.weight *f16" "head.head.weight *f16" "blocks.0.norm3.weight *f32"; do
	grep -q "$want" "$tmp/insp" || { bad "q8_0 GGUF: no '$want'"; grep -v "^  blocks.[1-9]" "$tmp/insp"; }
done
"$pdit" quantize "$tmp/q8.gguf" "$tmp/q8-dq.safetensors" --type f32 2> /dev/null || bad "dequantize"
gen q8 --diffusion-model "$tmp/q8.gguf" --config "$tmp/wan.json" &&
	gen q8dq --diffusion-model "$tmp/q8-dq.safetensors" --config "$tmp/wan.json" && same q8 q8dq 1e-5
"$cmp" tensors "$tmp/out-q8.safetensors" "$ref" 2e-2 latents.final > "$tmp/log" &&
	ok "Q8_0 against the golden latents: $(grep latents.final "$tmp/log" | awk '{print $3}') (<= 2e-2)" ||
	{ cat "$tmp/log"; bad "Q8_0 far from the golden latents"; }
gen q8b --diffusion-model "$tmp/q8.gguf" --config "$tmp/wan.json" --dtype bf16 --quant-products bf16 &&
	gen q8dqb --diffusion-model "$tmp/q8-dq.safetensors" --config "$tmp/wan.json" --dtype bf16 && same q8b q8dqb 1e-5
# int8 products (inputs quantized in blocks of 32: this model is 64 wide): the golden run within
# Q8_0's own 2e-2, and the decoded products' run within 3e-2 (measured
# 1.2e-2 on the AVX-512 EPYC: 8-bit inputs through 30 layers and 4 steps)
gen q8i --diffusion-model "$tmp/q8.gguf" --config "$tmp/wan.json" --dtype bf16 --quant-products int8 &&
	same q8i q8b 3e-2 &&
	"$cmp" tensors "$tmp/out-q8i.safetensors" "$ref" 2e-2 latents.final > "$tmp/log" &&
	ok "Q8_0 on int8 products against the golden latents: $(grep latents.final "$tmp/log" | awk '{print $3}') (<= 2e-2)" ||
	{ cat "$tmp/log" "$tmp/err"; bad "Q8_0 on int8 products"; }

# Q4_0: lcpp.patch's ffn.2 in Q4_1
"$pdit" quantize "$tmp/comfy.safetensors" "$tmp/q4.gguf" --type q4_0 2> /dev/null &&
	"$pdit" inspect "$tmp/q4.gguf" > "$tmp/insp" && grep -q "blocks.1.ffn.2.weight *q4_1" "$tmp/insp" &&
	grep -q "blocks.1.ffn.0.weight *q4_0" "$tmp/insp" && ok "q4_0: ffn.2 in Q4_1, ffn.0 in Q4_0" || bad "q4_0 types"
# the same rule on the diffusers folder's names (ffn.net.2)
"$pdit" quantize "$m/transformer" "$tmp/q4d.gguf" --type q5_0 2> /dev/null &&
	"$pdit" inspect "$tmp/q4d.gguf" > "$tmp/insp" && grep -q "blocks.1.ffn.net.2.weight *q5_1" "$tmp/insp" &&
	grep -q "blocks.1.ffn.net.0.proj.weight *q5_0" "$tmp/insp" && ok "q5_0 of the folder: ffn.net.2 in Q5_1" ||
	{ grep "ffn" "$tmp/insp"; bad "q5_0 types of the folder"; }

# fp8: the prefix and the config metadata kept
"$pdit" quantize "$tmp/comfy.safetensors" "$tmp/fp8.safetensors" --type fp8 2> /dev/null &&
	"$pdit" quantize "$tmp/fp8.safetensors" "$tmp/fp8-dq.safetensors" --type f32 2> /dev/null || bad "quantize fp8"
gen fp8 --diffusion-model "$tmp/fp8.safetensors" && gen fp8dq --diffusion-model "$tmp/fp8-dq.safetensors" &&
	same fp8 fp8dq 1e-5

# sizes the golden model lacks, heads of 128 (pdit tiny: 2 x 128, FFN 256, one
# block): the original-layout file without any config (sizes from the shapes)
# gives the folder's latents; its Q4_K (rows of 256 whole blocks) equals its
# dequantized weights within 1e-5 (pdit quantize decodes with the scalar
# code, the layers with the AVX-512 one: last bits of K-quant values)
"$pdit" tiny "$tmp/w" --family wan --heads 2 --head-dim 128 --layers 1 --ffn-dim 256 --seed 5 > /dev/null 2>&1 &&
	"$py" "$conv" "$tmp/w/transformer" "$tmp/w128.safetensors" --prefix model.diffusion_model. > /dev/null ||
	bad "a tiny folder with heads of 128"
m=$tmp/w args=(-p "a lighthouse" --frames 5 -H 32 -W 32 --steps 2 -s 3 -q)
gen w && gen wfile --diffusion-model "$tmp/w128.safetensors" && same wfile w 0
"$pdit" quantize "$tmp/w128.safetensors" "$tmp/wq4.gguf" --type q4_k 2> /dev/null &&
	"$pdit" quantize "$tmp/wq4.gguf" "$tmp/wq4-dq.safetensors" --type f32 2> /dev/null &&
	"$pdit" inspect "$tmp/wq4.gguf" | grep -q "blocks.0.ffn.0.weight *q4_K" || bad "quantize q4_k"
gen wq4 --diffusion-model "$tmp/wq4.gguf" && gen wq4dq --diffusion-model "$tmp/wq4-dq.safetensors" && same wq4 wq4dq 1e-5
exit $fail
