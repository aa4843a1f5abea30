#!/usr/bin/env bash
# Ring attention's two forms on int8 products: `pdit bench` on the FLUX-width
# model's Q8_0 file (written by `pdit quantize` when missing), --ring-degree
# DEGREE processes, bf16 compute, --ring-attention merged (each chunk's
# partial result merged as the next travels) against gathered (auto's form
# on int8 products: every chunk's K/V gathered, one attention; one process's
# latents bit for bit), ROUNDS interleaved rounds (the machine is shared and
# its speed drifts): medians of seconds per step, peak memory per rank and
# the backend's activations (work_peak), gathered's each as a ratio to
# merged's in the same rounds.
#
#   bench/ring.sh [SIZE] [ROUNDS] [DEGREE] [MODEL_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
size=${1:-512} rounds=${2:-3} degree=${3:-2} model=${4:-bench/flux-width}
bench_model "$model"
mkdir -p bench/quant
q=bench/quant/flux-width-q8_0.gguf
[ -e "$q" ] || "$pdit" quantize "$model/transformer/diffusion_pytorch_model.safetensors" "$q" --type q8_0 >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
forms=(merged gathered)
for ((round = 1; round <= rounds; round++)); do
	for f in "${forms[@]}"; do
		echo "round $round/$rounds: $f" >&2
		j=$(mpirun --oversubscribe -np "$degree" "$pdit" bench --model "$model" --diffusion-model "$q" \
			--config "$model/transformer/config.json" --dtype bf16 --quant-products int8 -H "$size" -W "$size" \
			--steps 3 --ring-degree "$degree" --ring-attention "$f" --json 2> /dev/null < /dev/null) ||
			{ echo "$f failed" >&2; exit 1; }
		[ "$(field ring_attention "$j")" = "$f" ] || { echo "$f: bench ran $(field ring_attention "$j")" >&2; exit 1; }
		record "$tmp" "$f" "$j"
		field activations_mb "$j" >> "$tmp/$f.activations_mb"
	done
done
echo "(${size}², ring $degree, $rounds rounds interleaved, $q on int8 products, bf16, 3 timed steps after 1 warm-up)"
echo "| ring attention | s/step (median) | × merged | peak MB per rank | × merged | activations MB | × merged |"
echo "|---|---|---|---|---|---|---|"
for f in "${forms[@]}"; do
	awk -v f="$f" -v s="$(med "$tmp" "$f" seconds_per_step)" -v p="$(med "$tmp" "$f" peak_rss_mb)" \
		-v a="$(med "$tmp" "$f" activations_mb)" -v S="$(med "$tmp" merged seconds_per_step)" \
		-v P="$(med "$tmp" merged peak_rss_mb)" -v A="$(med "$tmp" merged activations_mb)" 'BEGIN {
		printf "| %s | %.3f | %.3f | %.0f | %.3f | %.0f | %.3f |\n", f, s, s / S, p, p / P, a, a / A }'
done
