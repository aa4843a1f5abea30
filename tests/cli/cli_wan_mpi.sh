#!/usr/bin/env bash
# Wan2.1 meshes equal one process: pdit generate on N processes writes the
# latents (and the MP4's frames come from them) of one process's run within
# 1e-5, for Ulysses 2, ring 2 and 3, USP 2x2 (18 video tokens over 4 ranks:
# a count the degree does not divide), CFG parallel, CFG x Ulysses, data
# parallel over two prompts, First Block Cache under Ulysses, DistriFusion
# with every step warm, tensor parallel 2 (and x ring 2), PipeFusion 2 with
# every step warm (alone, x Ulysses 2, x tensor parallel 2, with First
# Block Cache), a Q8_0 GGUF under tensor parallel 2 and Ulysses 2 x
# PipeFusion 2, and on int8 products tensor parallel 2 (alone and inside
# PipeFusion 2's stages), Ulysses 2, data parallel 2 and ring 2 (gathered) bit
# for bit;
# PipeFusion with patches near it; pdit check says PASS for
# ring, data-parallel, tensor-parallel and PipeFusion meshes; the video
# decoded in 2 row bands gives one process's frames.
# usage: cli_wan_mpi.sh PDIT ST_COMPARE WAN_TINY_DIR MPIRUN...
set -u
pdit=$1 cmp=$2 g=$3
shift 3
mpirun=("$@")
m=$g/model
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
printf 'A cat walks on the grass, realistic style.\nA paper boat sails down a small stream.\n' > "$tmp/prompts.txt"
one=(--model "$m" -p "A cat walks on the grass, realistic style." --frames 9 -H 32 -W 48 --steps 3 -s 42 -q)
two=(--model "$m" --prompts "$tmp/prompts.txt" --frames 5 -H 32 -W 32 --steps 2 -s 3 -q)
fbc=(--model "$m" -p "a cat" --frames 5 -H 32 -W 32 --steps 10 --fbcache-threshold 5 -q)
"$pdit" generate "${one[@]}" -o "$tmp/one.mp4" --out-latents "$tmp/one.safetensors" || bad "one process"
"$pdit" generate "${two[@]}" -o "$tmp/two.mp4" --out-latents "$tmp/two.safetensors" || bad "one process, 2 prompts"
"$pdit" generate "${fbc[@]}" -o "$tmp/fbc.mp4" --out-latents "$tmp/fbc.safetensors" || bad "one process, cache"

tol=1e-5
mesh() {	# NAME REF NP FLAGS...: the run's latents against REF's (within $tol)
	local name=$1 ref=$2 np=$3
	shift 3
	rm -f "$tmp/m.safetensors"
	"${mpirun[@]}" -np "$np" "$pdit" generate "$@" -o "$tmp/m.mp4" --out-latents "$tmp/m.safetensors" \
		2> "$tmp/err" || { cat "$tmp/err"; bad "$name"; return; }
	"$cmp" tensors "$tmp/m.safetensors" "$tmp/$ref.safetensors" "$tol" --all > "$tmp/log" &&
		ok "$name: one process's latents within $tol" || { cat "$tmp/log"; bad "$name"; }
}
mesh "Ulysses 2" one 2 "${one[@]}" --ulysses-degree 2
mesh "ring 2" one 2 "${one[@]}" --ring-degree 2
mesh "ring 3" one 3 "${one[@]}" --ring-degree 3
mesh "USP 2x2" one 4 "${one[@]}" --ulysses-degree 2 --ring-degree 2
mesh "CFG parallel" one 2 "${one[@]}" --cfg-parallel
mesh "CFG x Ulysses" one 4 "${one[@]}" --cfg-parallel --ulysses-degree 2
mesh "data parallel" two 2 "${two[@]}" --data-parallel-degree 2
mesh "First Block Cache, Ulysses 2" fbc 2 "${fbc[@]}" --ulysses-degree 2
mesh "DistriFusion 2, every step warm" one 2 "${one[@]}" --distrifusion-degree 2 --warmup-steps 3
mesh "tensor parallel 2" one 2 "${one[@]}" --tensor-parallel-degree 2
mesh "tensor parallel 2 x ring 2" one 4 "${one[@]}" --tensor-parallel-degree 2 --ring-degree 2
mesh "PipeFusion 2, every step warm" one 2 "${one[@]}" --pipefusion-degree 2 --warmup-steps 3
mesh "PipeFusion 2 x Ulysses 2, every step warm" one 4 "${one[@]}" --pipefusion-degree 2 --ulysses-degree 2 \
	--warmup-steps 3
mesh "PipeFusion 2 x tensor parallel 2, every step warm" one 4 "${one[@]}" --pipefusion-degree 2 \
	--tensor-parallel-degree 2 --warmup-steps 3
mesh "First Block Cache, PipeFusion 2" fbc 2 "${fbc[@]}" --pipefusion-degree 2 --warmup-steps 10
# a Q8_0 GGUF of the transformer (diffusers' names): the shards keep their
# rows and columns of blocks
"$pdit" quantize "$m/transformer/diffusion_pytorch_model.safetensors" "$tmp/q8.gguf" --type q8_0 2> /dev/null ||
	bad "quantize q8_0"
q8=("${one[@]}" --diffusion-model "$tmp/q8.gguf" --config "$m/transformer/config.json")
"$pdit" generate "${q8[@]}" -o "$tmp/q8.mp4" --out-latents "$tmp/q8.safetensors" || bad "one process, Q8_0"
mesh "Q8_0, tensor parallel 2" q8 2 "${q8[@]}" --tensor-parallel-degree 2
mesh "Q8_0, Ulysses 2 x PipeFusion 2, every step warm" q8 4 "${q8[@]}" --ulysses-degree 2 --pipefusion-degree 2 \
	--warmup-steps 3
# int8 products: tensor parallel's row-parallel layers gather their whole
# inputs and its RMSNorms across heads normalise the gathered rows, so no
# sum is split over shards (with split sums: 1.1e-2 here, an 8-bit
# rounding moved by a last bit)
q8i=("${q8[@]}" --dtype bf16 --quant-products int8)
"$pdit" generate "${q8i[@]}" -o "$tmp/q8i.mp4" --out-latents "$tmp/q8i.safetensors" || bad "one process, Q8_0 on int8"
# Bit for bit needs products that give each row its bits whatever the
# rows a call has (tests/lib/pd_test_rows.h: oneDNN's on AVX-512); with
# oneDNN's AVX2 products an ulp moves with the split, which the next
# layer's 8-bit rounding can make a step of 1/127 (5.8e-3 seen with ring's
# merge): there, int8's 2e-2 instead of 0
tol=$("$(dirname "$cmp")/rows_exact" 2e-2)
mesh "Q8_0 on int8 products, tensor parallel 2" q8i 2 "${q8i[@]}" --tensor-parallel-degree 2
mesh "Q8_0 on int8 products, tensor parallel 2 x PipeFusion 2, every step warm" q8i 4 "${q8i[@]}" \
	--tensor-parallel-degree 2 --pipefusion-degree 2 --warmup-steps 3
# Ulysses' gathered rows in the sequence's order: one process's softmax
# order, bit for bit; so is ring's gathered form, which int8 products take
# (its merged key blocks moved last f32 bits that 8-bit roundings carried:
# 1.2e-2 here)
mesh "Q8_0 on int8 products, Ulysses 2" q8i 2 "${q8i[@]}" --ulysses-degree 2
mesh "Q8_0 on int8 products, ring 2 (gathered)" q8i 2 "${q8i[@]}" --ring-degree 2
q8t=("${two[@]}" --diffusion-model "$tmp/q8.gguf" --config "$m/transformer/config.json" --dtype bf16 --quant-products int8)
"$pdit" generate "${q8t[@]}" -o "$tmp/q8t.mp4" --out-latents "$tmp/q8t.safetensors" || bad "one process, Q8_0 on int8, 2 prompts"
mesh "Q8_0 on int8 products, data parallel 2" q8t 2 "${q8t[@]}" --data-parallel-degree 2
tol=1e-5

# PipeFusion's patches after the warm-up attend to a step-old video: near
# one process, not equal (the tiny model: about 3e-2)
rm -f "$tmp/m.safetensors"
"${mpirun[@]}" -np 2 "$pdit" generate "${one[@]}" --pipefusion-degree 2 -o "$tmp/m.mp4" \
	--out-latents "$tmp/m.safetensors" 2> "$tmp/err" || { cat "$tmp/err"; bad "PipeFusion 2 with patches"; }
"$cmp" tensors "$tmp/m.safetensors" "$tmp/one.safetensors" 0.2 --all > "$tmp/log" &&
	ok "PipeFusion 2 with patches: within 0.2 of one process" || { cat "$tmp/log"; bad "PipeFusion with patches"; }

# the decode in row bands (the default over 2 processes) against one
# process's decode of the same latents: frames within one 8-bit step
"${mpirun[@]}" -np 2 "$pdit" generate "${one[@]}" --ulysses-degree 2 -o "$tmp/b-%03d.png" 2> "$tmp/err" &&
	"${mpirun[@]}" -np 2 "$pdit" generate "${one[@]}" --ulysses-degree 2 --no-vae-parallel -o "$tmp/n-%03d.png" \
		2>> "$tmp/err" || { cat "$tmp/err"; bad "the banded decode's runs"; }
nb=0
for f in "$tmp"/n-*.png; do
	"$cmp" pngs "$tmp/b-${f##*/n-}" "$f" 1 > "$tmp/log" || { cat "$tmp/log"; bad "banded decode: ${f##*/}"; }
	nb=$((nb + 1))
done
[ "$nb" -eq 9 ] && ok "the decode in 2 bands: 9 frames within 1 of one process's" || bad "banded decode: $nb frames"

for c in "2:--ring-degree 2:${one[*]}" "2:--data-parallel-degree 2:" "2:--tensor-parallel-degree 2:${one[*]}" \
	"2:--pipefusion-degree 2 --warmup-steps 3:${one[*]}"; do
	np=${c%%:*} rest=${c#*:} flags=${rest%%:*}
	if [ -n "${rest#*:}" ]; then
		args=("${one[@]}")
	else
		args=("${two[@]}")
	fi
	# shellcheck disable=SC2086
	out=$("${mpirun[@]}" -np "$np" "$pdit" check "${args[@]}" $flags 2>&1)
	if grep -q '^PASS' <<< "$out"; then ok "pdit check $flags: PASS"; else echo "$out"; bad "pdit check $flags"; fi
done

exit $fail
