#!/usr/bin/env bash
# Each parallel method and a few hybrids on a FLUX-width model: seconds per
# step, bytes sent per rank per step (next to what `pdit plan` predicts:
# the arithmetic of parallel-methods.md for f32 activations, as pdit sends
# them), and peak resident memory per rank. Prints a Markdown table.
#
#   bench/parallel.sh [MODEL_DIR] [SIZE] [STEPS]
#
# The model is written by `pdit tiny --flux-width` when missing. Under
# oversubscription (more processes than cores) seconds per step measure
# contention, not speed-up; bytes and memory do not depend on it.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
model=${1:-bench/flux-width}
size=${2:-512}
steps=${3:-2}
bench_model "$model"

# expected bytes per rank per step: what `pdit plan` predicts for the same
# mesh and work (its model of each method's transfers)
expect() {
	local np=$1 mesh=$2 tokens=$3
	shift 3
	local cfg=() batch=()
	[[ " $* " == *" --true-cfg-scale "* ]] && cfg=(--true-cfg-scale 2)
	[[ " $* " == *" --batch 2 "* ]] && batch=(--batch 2)
	"$pdit" plan --model "$model" --devices "$np" -H "$size" -W "$size" --txt-len $((tokens - (size / 16) * (size / 16))) \
		--gflops 1 --json "${cfg[@]}" "${batch[@]}" 2> /dev/null |
		awk -v m="$mesh" 'index($0, "\"mesh\": \"" m "\"") { sub(/.*"bytes_sent_per_rank_per_step": /, ""); sub(/,.*/, "");
			printf "%.1f", $0 / 1e6; found = 1 } END { if (!found) printf "?" }'
}

run() {
	local np=$1
	shift
	# PipeFusion's and DistriFusion's first stale step makes the patches'
	# primitives: a second warm-up step keeps it out of the timing
	[[ " $* " == *" --pipefusion-degree "* || " $* " == *" --distrifusion-degree "* ]] && set -- "$@" --warmup 2
	if [ "$np" = 1 ]; then
		"$pdit" bench --model "$model" -H "$size" -W "$size" --steps "$steps" --dtype bf16 --json "$@" 2> /dev/null
	else
		mpirun --oversubscribe -np "$np" "$pdit" bench --model "$model" -H "$size" -W "$size" --steps "$steps" \
			--dtype bf16 --json "$@" 2> /dev/null
	fi
}

echo "| processes | mesh | work | s/step | GFLOP/s | MB sent/rank/step | expected MB | peak MB/rank (max) |"
echo "|---:|---|---|---:|---:|---:|---:|---:|"
while IFS='|' read -r np flags; do
	[ -z "$np" ] && continue
	# shellcheck disable=SC2086
	j=$(run "$np" $flags < /dev/null) || { echo "| $np | $flags | failed | | | | | |"; continue; }
	S=$(field tokens "$j")
	mesh=$(field mesh "$j")
	# the degrees above 1, and the work in words
	short=$(tr ' ' '\n' <<< "$mesh" | { grep -v '=1$' || true; } | tr '\n' ' ' | sed 's/ $//')
	images=$(field images "$j")
	work="$images image"
	[ "$images" -gt 1 ] && work+="s"
	[ "$(field branches "$j")" -gt 1 ] && work+=" × 2 branches"
	printf "| %s | %s | %s | %.2f | %.0f | %.1f | %s | %.0f |\n" "$np" "${short:-one process}" "$work" \
		"$(field seconds_per_step "$j")" "$(field achieved_gflops "$j")" \
		"$(awk -v b="$(field bytes_sent_per_rank_per_step "$j")" 'BEGIN { print b / 1e6 }')" \
		"$(expect "$np" "$mesh" "$S" $flags)" "$(field peak_rss_mb "$j")"
done << 'CONFIGS'
1|
1|--batch 2
2|--data-parallel-degree 2 --batch 2
1|--true-cfg-scale 2
2|--cfg-parallel --true-cfg-scale 2
2|--tensor-parallel-degree 2
2|--ulysses-degree 2
2|--ring-degree 2
4|--ulysses-degree 4
4|--ring-degree 4
4|--ulysses-degree 2 --ring-degree 2
4|--tensor-parallel-degree 2 --ulysses-degree 2
4|--cfg-parallel --true-cfg-scale 2 --ulysses-degree 2
2|--pipefusion-degree 2
4|--pipefusion-degree 4
4|--pipefusion-degree 2 --ulysses-degree 2
2|--distrifusion-degree 2
4|--distrifusion-degree 4
CONFIGS
