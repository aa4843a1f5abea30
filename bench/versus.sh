#!/usr/bin/env bash
# Two pdit binaries' step speed, interleaved (the machine is shared and its
# speed drifts): `pdit bench` on one process, bf16, ROUNDS times each, the
# binaries alternating; medians of seconds per step and of the ratio to the
# matrix-product rate each run measures itself. For a change that must not
# slow pdit down, against the commit before it.
#
#   bench/versus.sh OLD_PDIT NEW_PDIT [MODEL_DIR] [ROUNDS] [SIZE]
#
# The model is written by `pdit tiny --flux-width` when missing. ARGS adds
# options to both binaries' `pdit bench`, e.g. a quantized transformer:
#   ARGS="--diffusion-model bench/quant/flux-width-fp8.safetensors
#         --config bench/flux-width/transformer/config.json" bench/versus.sh ...
# KINDS="bf16 q8_0 q4_k" runs the model's own weights (bf16) and its
# transformer as bench/quant.sh writes it for each other type (its products
# as auto picks), all in each round: each kind's step for both binaries, new
# against old, and each binary's step against its own bf16 step (the first
# kind) in the same rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
old=$1 new=$2 model=${3:-bench/flux-width} rounds=${4:-3} size=${5:-512}
read -r -d '' -a extra <<< "${ARGS:-}" || :
read -r -a kinds <<< "${KINDS:-bf16}"
bench_model "$model"
for k in "${kinds[@]}"; do
	[ "$k" = bf16 ] || [ -e "bench/quant/flux-width-$k.gguf" ] ||
		{ echo "bench/quant/flux-width-$k.gguf is missing: KINDS=\"bf16 $k\" bench/quant.sh 512 1 writes it" >&2; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((round = 1; round <= rounds; round++)); do
	for k in "${kinds[@]}"; do
		args=(--model "$model" "${extra[@]}")
		[ "$k" = bf16 ] ||
			args+=(--diffusion-model "bench/quant/flux-width-$k.gguf" --config "$model/transformer/config.json")
		for which in old new; do
			bin=$old
			[ $which = new ] && bin=$new
			echo "round $round/$rounds: $k, $which" >&2
			j=$("$bin" bench "${args[@]}" -H "$size" -W "$size" --steps 3 --dtype bf16 --json \
				2> /dev/null < /dev/null) || { echo "$k, $which failed" >&2; exit 1; }
			field seconds_per_step "$j" >> "$tmp/$k.$which.sps"
			field ratio "$j" >> "$tmp/$k.$which.ratio"
		done
	done
done
echo "| weights | binary | s/step (median, min–max) | × old | × its ${kinds[0]} | ratio to matmul rate (median) |"
echo "|---|---|---|---|---|---|"
for k in "${kinds[@]}"; do
	for which in old new; do
		s=$(median < "$tmp/$k.$which.sps")
		printf "| %s | %s | %.3f (%.3f–%.3f) | %.3f | %.3f | %.3f |\n" "$k" "$which" "$s" \
			"$(sort -g "$tmp/$k.$which.sps" | head -1)" "$(sort -g "$tmp/$k.$which.sps" | tail -1)" \
			"$(awk -v s="$s" -v o="$(median < "$tmp/$k.old.sps")" 'BEGIN { print s / o }')" \
			"$(awk -v s="$s" -v b="$(median < "$tmp/${kinds[0]}.$which.sps")" 'BEGIN { print s / b }')" \
			"$(median < "$tmp/$k.$which.ratio")"
	done
done
echo "(${size}², $rounds rounds interleaved, 1 process, bf16, 3 timed steps after 1 warm-up; $model${extra[*]:+ ${extra[*]}})"
