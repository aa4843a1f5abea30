#!/usr/bin/env bash
# One process, bf16, at each SIZE: `pdit bench --vae-time` on a FLUX-width
# model, ROUNDS times with the sizes interleaved (the machine is shared and
# its speed drifts). Each figure is the median over the rounds; the ratio is
# each run's own (achieved over the matmul rate measured in that run).
# Prints a Markdown table.
#
#   bench/single.sh [MODEL_DIR] [ROUNDS] [SIZE...]
#
# The model is written by `pdit tiny --flux-width` when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
model=${1:-bench/flux-width}
rounds=${2:-3}
shift $(($# < 2 ? $# : 2))
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(512 1024)
bench_model "$model"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
keys="seconds_per_step step_gflop achieved_gflops matmul_gflops ratio peak_rss_mb weights_mb activations_mb estimate_mb peak_over_estimate vae_seconds"

for ((round = 1; round <= rounds; round++)); do
	for s in "${sizes[@]}"; do
		echo "round $round/$rounds: ${s}x$s" >&2
		j=$("$pdit" bench --model "$model" -H "$s" -W "$s" --steps 3 --dtype bf16 --vae-time --json \
			2> /dev/null < /dev/null) || { echo "${s}x$s failed" >&2; exit 1; }
		for k in $keys; do
			field "$k" "$j" >> "$tmp/$s.$k"
		done
		field tokens "$j" > "$tmp/$s.tokens"
		field threads "$j" > "$tmp/$s.threads"
	done
done

m() { median < "$tmp/$1.$2"; }
echo "| size | tokens | s/step | step GFLOP | achieved GFLOP/s | matmul GFLOP/s | ratio (min–max) | peak MB | estimate MB (weights + activations) | peak / estimate | VAE decode s |"
echo "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"
for s in "${sizes[@]}"; do
	printf "| %s² | %s | %.2f | %.0f | %.0f | %.0f | %.2f (%.2f–%.2f) | %.0f | %.0f (%.0f + %.0f) | %.2f | %.1f |\n" "$s" \
		"$(cat "$tmp/$s.tokens")" "$(m "$s" seconds_per_step)" "$(m "$s" step_gflop)" \
		"$(m "$s" achieved_gflops)" "$(m "$s" matmul_gflops)" "$(m "$s" ratio)" \
		"$(sort -g "$tmp/$s.ratio" | head -1)" "$(sort -g "$tmp/$s.ratio" | tail -1)" "$(m "$s" peak_rss_mb)" \
		"$(m "$s" estimate_mb)" "$(m "$s" weights_mb)" "$(m "$s" activations_mb)" "$(m "$s" peak_over_estimate)" \
		"$(m "$s" vae_seconds)"
done
echo "($rounds rounds, 1 process × $(cat "$tmp/${sizes[0]}.threads") threads, bf16, 3 timed steps after 1 warm-up per run)"
