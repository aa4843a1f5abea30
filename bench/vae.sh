#!/usr/bin/env bash
# The VAE decode (FLUX.1's VAE: 128/256/512/512 channels, 2 resnets a block,
# 32 groups, 16 latent channels) at SIZE², f32 against bf16 convolutions and
# one process against row bands over two, ROUNDS interleaved rounds (the
# machine is shared and its speed drifts), medians. The model is a tiny
# transformer with that VAE (bench/vae-width), so the rounds time the decode,
# not the steps. Columns: seconds, GFLOP counted from the shapes, GFLOP/s,
# the ratio to the product rate pdit measures in the same run at the middle
# convolutions' shape in bf16 (per process, times the bands), and the
# speed against one process of one thread in bf16 and against f32 on the
# whole machine.
#
#   bench/vae.sh [SIZE] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
size=${1:-1024} rounds=${2:-2} model=bench/vae-width
[ -d "$model" ] || "$pdit" tiny "$model" --vae-channels 128,256,512,512 --vae-layers 2 --vae-groups 32 >&2

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# name: VAE precision, processes, threads per process
runs=("f32 1 2" "bf16 1 2" "bf16 1 1" "bf16 2 1" "f32 2 1")
for ((round = 1; round <= rounds; round++)); do
	for r in "${runs[@]}"; do
		read -r dt np th <<< "$r"
		echo "round $round/$rounds: $dt, $np x $th" >&2
		cmd=("$pdit" bench --model "$model" -H "$size" -W "$size" --steps 1 --dtype bf16 --vae-time
			--vae-dtype "$dt" -t "$th" --json)
		[ "$np" -gt 1 ] && cmd=(scripts/mpirun -np "$np" "${cmd[@]}")
		j=$("${cmd[@]}" 2> /dev/null < /dev/null) || { echo "$r failed" >&2; exit 1; }
		for key in vae_seconds vae_gflop vae_gflops vae_ratio vae_bands; do
			field "$key" "$j" >> "$tmp/$dt-$np-$th.$key"
		done
	done
done
med() { median < "$tmp/$1.$2"; }
echo "| convolutions | processes x threads | bands | seconds | GFLOP | GFLOP/s | ratio to the product rate | × bf16 1x1 | × f32 1x2 |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for r in "${runs[@]}"; do
	read -r dt np th <<< "$r"
	k=$dt-$np-$th
	awk -v dt="$dt" -v np="$np" -v th="$th" -v b="$(med "$k" vae_bands)" -v s="$(med "$k" vae_seconds)" \
		-v g="$(med "$k" vae_gflop)" -v r="$(med "$k" vae_gflops)" -v q="$(med "$k" vae_ratio)" \
		-v one="$(med bf16-1-1 vae_seconds)" -v f32="$(med f32-1-2 vae_seconds)" 'BEGIN {
		printf "| %s | %d x %d | %d | %.2f | %.0f | %.1f | %.2f | %.2f | %.2f |\n", dt, np, th, b, s, g, r, q,
			one / s, f32 / s }'
done
echo "(${size}², $rounds rounds interleaved, medians; $model: FLUX.1's VAE, random weights)"
