#!/usr/bin/env bash
# What img2img costs: `pdit generate` on the FLUX-width model, text-to-image
# with STEPS steps, then img2img from that picture at STRENGTH (the last
# STRENGTH x STEPS steps), one process, bf16 products, ROUNDS interleaved
# rounds; medians of the phases generate's summary line times (the steps,
# the pictures in through the VAE's encoder, the decode). Issue 37's claim:
# img2img at strength S costs S of the text-to-image steps plus one encode.
#
#   bench/img2img.sh [SIZE] [ROUNDS] [STEPS] [STRENGTH] [MODEL_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
size=${1:-512} rounds=${2:-3} steps=${3:-8} strength=${4:-0.5} model=${5:-bench/flux-width}
bench_model "$model"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "pdit: done in T s (load a s, pictures in p s, N steps s s, decode d s, write w s), ..."
phase() { sed -n "s/.*pdit: done in .*[(,] $1 \([0-9.]*\) s.*/\1/p" "$2"; }
args=(--model "$model" --embeds "$model/embeds.safetensors" -H "$size" -W "$size" --steps "$steps" -s 1 --dtype bf16)
for ((round = 1; round <= rounds; round++)); do
	for k in t2i i2i; do
		echo "round $round/$rounds: $k" >&2
		extra=()
		[ "$k" = i2i ] && extra=(-i "$tmp/t2i.png" --strength "$strength")
		"$pdit" generate "${args[@]}" "${extra[@]}" -o "$tmp/$k.png" 2> "$tmp/log" < /dev/null ||
			{ cat "$tmp/log" >&2; exit 1; }
		ran=$(sed -n 's/.*pdit: done in .*[(,] \([0-9]*\) steps [0-9.]* s.*/\1/p' "$tmp/log")
		phase "$ran steps" "$tmp/log" >> "$tmp/$k.steps"
		echo "$ran" > "$tmp/$k.ran"
		phase decode "$tmp/log" >> "$tmp/$k.decode"
		[ "$k" = i2i ] && phase "pictures in" "$tmp/log" >> "$tmp/$k.pictures"
	done
done
t_steps=$(median < "$tmp/t2i.steps") i_steps=$(median < "$tmp/i2i.steps") enc=$(median < "$tmp/i2i.pictures")
t_ran=$(cat "$tmp/t2i.ran") i_ran=$(cat "$tmp/i2i.ran")
echo "| run | steps run | steps s (median) | s/step | encode s | decode s |"
echo "|---|---|---|---|---|---|"
awk -v n="$t_ran" -v s="$t_steps" -v d="$(median < "$tmp/t2i.decode")" 'BEGIN {
	printf "| text-to-image | %d | %.2f | %.3f | – | %.2f |\n", n, s, s / n, d }'
awk -v n="$i_ran" -v s="$i_steps" -v e="$enc" -v d="$(median < "$tmp/i2i.decode")" -v S="$strength" 'BEGIN {
	printf "| img2img, strength %s | %d | %.2f | %.3f | %.2f | %.2f |\n", S, n, s, s / n, e, d }'
echo
awk -v t="$t_steps" -v i="$i_steps" -v e="$enc" -v S="$strength" 'BEGIN {
	printf "img2img steps: %.3f x the text-to-image steps (strength %s); with the encode: %.3f (= %.3f + %.3f)\n",
		i / t, S, (i + e) / t, i / t, e / t }'
echo "FLUX-width model ($model), ${size}x$size, $steps steps, bf16 products, $rounds rounds interleaved, $(nproc) threads"
