#!/usr/bin/env bash
# Pictures of int8 products against those of decoded (bf16) products on the
# same quantized weights: the FLUX-width model's transformer as Q8_0, Q4_K
# and fp8 e4m3 (bench/quant.sh writes them; TYPES="q8_0 fp8" a subset; fp8's
# int8 form also rounds its small weights), one process, bf16 products, for each
# seed; each pair's PSNR and largest level difference (st_compare pngs),
# the table of docs/quantization.md. The model's weights are random (pdit
# tiny --flux-width) and its prompt embedding the one it ships: seeds give
# the variety.
#
#   bench/quant_quality.sh [SIZE] [STEPS] [SEEDS...]     (default 512 8 1 2 3 4)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
size=${1:-512} steps=${2:-8}
shift 2 || shift $#
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3 4)
model=bench/flux-width qdir=bench/quant cmp=build/tests/st_compare
bench_model "$model"
[ -x "$cmp" ] || { echo "build the tests first ($cmp)" >&2; exit 1; }
mkdir -p "$qdir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| weights | seed | PSNR int8 vs bf16 (dB) | largest level difference |"
echo "|---|---|---|---|"
read -r -a types <<< "${TYPES:-q8_0 q4_k fp8}"
for t in "${types[@]}"; do
	f=$qdir/flux-width-$t.gguf
	[ "$t" != fp8 ] || f=$qdir/flux-width-$t.safetensors
	[ -e "$f" ] || "$pdit" quantize "$model/transformer/diffusion_pytorch_model.safetensors" "$f" --type "$t" >&2
	for s in "${seeds[@]}"; do
		for qp in bf16 int8; do
			echo "$t seed $s: $qp" >&2
			"$pdit" generate --model "$model" --diffusion-model "$f" --config "$model/transformer/config.json" \
				--embeds "$model/embeds.safetensors" -H "$size" -W "$size" --steps "$steps" -s "$s" --dtype bf16 \
				--quant-products "$qp" -o "$tmp/$qp.png" -q < /dev/null
		done
		line=$("$cmp" pngs "$tmp/int8.png" "$tmp/bf16.png" 255)
		psnr=$(sed 's/.*PSNR \([^ ]*\) dB.*/\1/' <<< "$line") maxd=$(sed 's/.*pixels within \([0-9]*\).*/\1/' <<< "$line")
		echo "| $t | $s | $psnr | $maxd |"
	done
done
echo "(${size}², $steps steps, 1 process, bf16 products; $model)"
