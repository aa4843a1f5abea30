#!/usr/bin/env bash
# Each parallel method and a few hybrids on a FLUX-width model: seconds per
# step, bytes sent per rank per step (next to the arithmetic of
# parallel-methods.md, for f32 activations as pdit sends them), and peak
# resident memory per rank. Prints a Markdown table.
#
#   bench/parallel.sh [MODEL_DIR] [SIZE] [STEPS]
#
# The model is written by `pdit tiny --flux-width` when missing. Under
# oversubscription (more processes than cores) seconds per step measure
# contention, not speed-up; bytes and memory do not depend on it.
set -euo pipefail
cd "$(dirname "$0")/.."
pdit=build/pdit
model=${1:-bench/flux-width}
size=${2:-512}
steps=${3:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$pdit" ] || { echo "build first: cmake -S . -B build && cmake --build build" >&2; exit 1; }
[ -d "$model" ] || "$pdit" tiny "$model" --flux-width >&2

field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"]*\)\"\{0,1\}[,}].*/\1/p" <<< "$2"; }

# config.json sizes for the arithmetic
cfg="$model/transformer/config.json"
num() { grep -o "\"$1\":[[:space:]]*[0-9]*" "$cfg" | grep -o '[0-9]*$'; }
heads=$(num num_attention_heads)
hd=$(num attention_head_dim)
nd=$(num num_layers)
ns=$(num num_single_layers)
D=$((heads * hd))
[ "$D" -gt 0 ] || { echo "cannot read the sizes in $cfg" >&2; exit 1; }

# expected bytes per rank per step: awk formula over A = S x D x 4 bytes
expect() {
	local S=$1 L=$2 mesh=$3 branches=$4
	awk -v S="$S" -v L="$L" -v D="$D" -v nd="$nd" -v ns="$ns" -v m="$mesh" -v br="$branches" 'BEGIN {
		split(m, kv, " "); for (i in kv) { split(kv[i], p, "="); d[p[1]] = p[2] }
		A = S * D * 4; layers = nd + ns; U = d["ulysses"]; T = d["tp"]; N = d["pp"]
		R = ("ring" in d) ? d["ring"] : 1; F = ("distrifusion" in d) ? d["distrifusion"] : 1; P = U * R
		b = 0
		# DistriFusion: every layer'"'"'s own K and V rows to every other band (as ring, but overlapped)
		if (F > 1) b += layers * 2 * A / F * (F - 1) + L * 64 * 4 / F * (F - 1)
		# PipeFusion, stage 0: its hidden states to stage 1 once per step; with sequence parallel
		# inside the stage, its K/V rows of each of its layers to the stage'"'"'s other ranks
		if (N > 1) { b += A / P; if (P > 1) b += int((layers + N - 1) / N) * 2 * A / (P * T) * (P - 1); P = 1 }
		# Ulysses and ring move only the heads a tensor-parallel shard holds
		if (N > 1) U = R = 1
		if (U > 1) b += layers * 4 * A / (U * R * T) * (U - 1) / U  # q, k, v, o all-to-alls
		if (R > 1) b += layers * 2 * A / (U * R * T) * (R - 1)      # K/V hops of the ring
		if (T > 1) b += (2 * nd + ns) * A / P * 2 * (T - 1) / T      # row-parallel all-reduces
		if (P > 1) b += L * 64 * 4 / P * (P - 1)                     # prediction all-gather
		if (d["cfg"] > 1) b += L * 64 * 4                            # CFG exchange
		printf "%.1f", b * (d["cfg"] > 1 ? 1 : br) / 1e6 }'
}

run() {
	local np=$1
	shift
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
	L=$((S - 512))
	mesh=$(field mesh "$j")
	# the degrees above 1, and the work in words
	short=$(tr ' ' '\n' <<< "$mesh" | grep -v '=1$' | tr '\n' ' ' | sed 's/ $//')
	images=$(field images "$j")
	work="$images image$([ "$images" -gt 1 ] && echo s)$([ "$(field branches "$j")" -gt 1 ] && echo " × 2 branches")"
	printf "| %s | %s | %s | %.2f | %.0f | %.1f | %s | %.0f |\n" "$np" "${short:-one process}" "$work" \
		"$(field seconds_per_step "$j")" "$(field achieved_gflops "$j")" \
		"$(awk -v b="$(field bytes_sent_per_rank_per_step "$j")" 'BEGIN { print b / 1e6 }')" \
		"$(expect "$S" "$L" "$mesh" "$(field branches "$j")")" "$(field peak_rss_mb "$j")"
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
