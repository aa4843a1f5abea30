#!/usr/bin/env bash
# Two cores used two ways: one process with 2 threads against 2 processes
# with 1 thread each, for Ulysses, CFG and tensor parallel on a FLUX-width
# model. The runs are interleaved over ROUNDS rounds (the machine is shared
# and its speed drifts) and each figure is the median over the rounds.
# Prints a Markdown table.
#
#   bench/threads.sh [MODEL_DIR] [SIZE] [ROUNDS]
#
# The model is written by `pdit tiny --flux-width` when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
model=${1:-bench/flux-width}
size=${2:-512}
rounds=${3:-3}
bench_model "$model"

# name|processes|flags; each parallel run has the one-process run of the same work before it
configs=(
	"one process|1|"
	"Ulysses 2|2|--ulysses-degree 2"
	"tensor parallel 2|2|--tensor-parallel-degree 2"
	"one process, true CFG|1|--true-cfg-scale 2"
	"CFG parallel|2|--cfg-parallel --true-cfg-scale 2"
)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for ((round = 1; round <= rounds; round++)); do
	for i in "${!configs[@]}"; do
		IFS='|' read -r name np flags <<< "${configs[$i]}"
		echo "round $round/$rounds: $name" >&2
		# shellcheck disable=SC2086
		if [ "$np" = 1 ]; then
			j=$("$pdit" bench --model "$model" -H "$size" -W "$size" --steps 3 --dtype bf16 -t 2 --json \
				$flags 2> /dev/null < /dev/null)
		else
			j=$(mpirun --oversubscribe -np "$np" "$pdit" bench --model "$model" -H "$size" -W "$size" \
				--steps 3 --dtype bf16 -t 1 --json $flags 2> /dev/null < /dev/null)
		fi || { echo "$name failed" >&2; exit 1; }
		field seconds_per_step "$j" >> "$tmp/$i.s"
		field peak_rss_mb "$j" >> "$tmp/$i.m"
		field bytes_sent_per_rank_per_step "$j" >> "$tmp/$i.b"
		field threads "$j" > "$tmp/$i.t"
	done
done

echo "| work | layout | s/step (median of $rounds) | speed-up over 1 × 2 | peak MB per process | MB sent per process per step |"
echo "|---|---|---:|---:|---:|---:|"
base=
for i in "${!configs[@]}"; do
	IFS='|' read -r name np flags <<< "${configs[$i]}"
	s=$(median < "$tmp/$i.s")
	[ "$np" = 1 ] && base=$s
	printf "| %s | %s × %s | %.2f | %.2f | %.0f | %.1f |\n" "$name" "$np" "$(cat "$tmp/$i.t")" "$s" \
		"$(awk -v b="$base" -v s="$s" 'BEGIN { print b / s }')" "$(median < "$tmp/$i.m")" \
		"$(median < "$tmp/$i.b" | awk '{ print $1 / 1e6 }')"
done
