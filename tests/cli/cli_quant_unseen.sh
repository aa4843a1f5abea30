#!/usr/bin/env bash
# Quantized files pdit has never seen: a random FLUX-shaped model of other
# sizes (pdit tiny: heads, widths, blocks, text widths drawn per run; rows
# of 256 so the K-types quantize too) and a random seed, quantized by pdit
# quantize to a few of its types drawn per run (mixes: the embedders stay
# BF16, small tensors F32). Each file's generate (f32) equals the same run
# on its own dequantization (pdit quantize --type f32) within 1e-5, and in
# bf16 within 1e-2 (an activation at a bf16 rounding boundary rounds the
# other way when only the order of a sum differs). The draw is printed: rerun with the seed as $2.
# usage: cli_quant_unseen.sh PDIT ST_COMPARE [SEED]
set -u
pdit=$1 cmp=$2 seed=${3:-$RANDOM}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
RANDOM=$seed
pick() { local a=("$@"); echo "${a[RANDOM % ${#a[@]}]}"; }
heads=$(pick 2 4) hd=$((256 / heads)) layers=$(pick 1 2) singles=$(pick 1 2 3) joint=$(pick 32 48 64)
pooled=$(pick 24 40) txt=$(pick 8 13) s=$((RANDOM % 1000 + 1))
echo "seed $seed: heads $heads x $hd, $layers double + $singles single blocks, text width $joint, pooled $pooled," \
	"$txt text tokens, weights seed $s (rerun: $0 PDIT ST_COMPARE $seed)"
"$pdit" tiny "$tmp/m" --heads "$heads" --head-dim "$hd" --layers "$layers" --single-layers "$singles" \
	--joint-dim "$joint" --pooled-dim "$pooled" --txt-len "$txt" --dtype bf16 -s "$s" > /dev/null 2>&1 ||
	{ bad "pdit tiny"; exit 1; }
types=(q8_0 q4_0 q4_1 q5_0 q5_1 q4_k fp8 f8_e5m2)
# three different types
chosen=()
while [ ${#chosen[@]} -lt 3 ]; do
	t=$(pick "${types[@]}")
	[[ " ${chosen[*]} " == *" $t "* ]] || chosen+=("$t")
done
src=$tmp/m/transformer/diffusion_pytorch_model.safetensors cfg=$tmp/m/transformer/config.json
run=(--model "$tmp/m" --config "$cfg" --embeds "$tmp/m/embeds.safetensors" -H 32 -W 48 --steps 2 -s $((s + 1)) -q)
for t in "${chosen[@]}"; do
	ext=gguf
	[[ $t == f* ]] && ext=safetensors
	"$pdit" quantize "$src" "$tmp/q.$ext" --type "$t" > /dev/null 2> "$tmp/err" &&
		"$pdit" quantize "$tmp/q.$ext" "$tmp/dq.safetensors" --type f32 > /dev/null 2>> "$tmp/err" ||
		{ cat "$tmp/err"; bad "quantize --type $t"; continue; }
	for dt in f32 bf16; do
		tol=1e-5
		[ $dt = bf16 ] && tol=1e-2
		"$pdit" generate "${run[@]}" --diffusion-model "$tmp/q.$ext" --dtype $dt --quant-products bf16 -o "$tmp/a.png" \
			--out-latents "$tmp/a.safetensors" 2> "$tmp/err" &&
			"$pdit" generate "${run[@]}" --diffusion-model "$tmp/dq.safetensors" --dtype $dt -o "$tmp/b.png" \
				--out-latents "$tmp/b.safetensors" 2>> "$tmp/err" ||
			{ cat "$tmp/err"; bad "generate on $t ($dt)"; continue; }
		"$cmp" tensors "$tmp/a.safetensors" "$tmp/b.safetensors" $tol --all > "$tmp/log" &&
			ok "$t, $dt: the latents of its dequantization within $tol" || { cat "$tmp/log"; bad "$t $dt"; }
	done
	rm -f "$tmp/q.$ext" "$tmp/dq.safetensors"
done
exit $fail
