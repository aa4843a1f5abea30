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
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
old=$1 new=$2 model=${3:-bench/flux-width} rounds=${4:-3} size=${5:-512}
read -r -d '' -a extra <<< "${ARGS:-}" || :
bench_model "$model"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((round = 1; round <= rounds; round++)); do
	for which in old new; do
		bin=$old
		[ $which = new ] && bin=$new
		echo "round $round/$rounds: $which" >&2
		j=$("$bin" bench --model "$model" "${extra[@]}" -H "$size" -W "$size" --steps 3 --dtype bf16 --json \
			2> /dev/null < /dev/null) || { echo "$which failed" >&2; exit 1; }
		field seconds_per_step "$j" >> "$tmp/$which.sps"
		field ratio "$j" >> "$tmp/$which.ratio"
	done
done
echo "| binary | s/step (median, min–max) | ratio to matmul rate (median) |"
echo "|---|---|---|"
for which in old new; do
	printf "| %s | %.3f (%.3f–%.3f) | %.3f |\n" "$which" "$(median < "$tmp/$which.sps")" \
		"$(sort -g "$tmp/$which.sps" | head -1)" "$(sort -g "$tmp/$which.sps" | tail -1)" \
		"$(median < "$tmp/$which.ratio")"
done
echo "(${size}², $rounds rounds interleaved, 1 process, bf16, 3 timed steps after 1 warm-up; $model${extra[*]:+ ${extra[*]}})"
