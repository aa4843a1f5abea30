#!/usr/bin/env bash
# Quantized weights against BF16: `pdit bench` on the FLUX-width model and on
# its transformer quantized by `pdit quantize` (Q8_0 and Q4_K GGUF, fp8
# safetensors), one process, bf16 products, ROUNDS interleaved rounds (the
# machine is shared and its speed drifts); medians of seconds per step, of
# peak resident memory and of the weights the backend holds, each as a ratio
# to BF16's in the same rounds. Memory check of issue 16: peak <= 1.05 x the
# weights held + the activations, where the activations (and the process
# itself: libraries, oneDNN's code, scratch) are what the BF16 run holds
# beyond its weights.
#
#   bench/quant.sh [SIZE] [ROUNDS] [MODEL_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
size=${1:-512} rounds=${2:-3} model=${3:-bench/flux-width} qdir=bench/quant
bench_model "$model"
mkdir -p "$qdir"
src=$model/transformer/diffusion_pytorch_model.safetensors
qfile() {	# TYPE: the transformer quantized to TYPE (written when missing)
	local f=$qdir/flux-width-$1.gguf
	[ "$1" != fp8 ] || f=$qdir/flux-width-$1.safetensors
	[ -e "$f" ] || "$pdit" quantize "$src" "$f" --type "$1" >&2
	echo "$f"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# KINDS="bf16 q8_0 ..." runs a subset; any type pdit quantize writes (q8_0,
# q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, fp8) on auto's products, TYPE-decoded
# the same file decoded to bf16 for its products (what auto picks without
# VNNI, and where the bf16 products take AMX tiles; fp8's values exact),
# TYPE-int8 on int8 products whatever the CPU (--quant-products int8: the
# AVX2 or portable kernel without VNNI, AMX-INT8's tiles for Q8_0's layout
# where the CPU has them), TYPE-vnni on int8 products with AMX turned off
# (PDIT_NO_AMX: on an AMX Xeon, KINDS="bf16 q8_0-int8 q8_0-vnni" times the
# AMX kernel beside VNNI's); TYPE-256 on --quant-products int8-256 (a Q8_0
# file's layers a multiple of 256 wide requantized at load to one scale per
# 256 inputs; AMX-INT8 where the CPU has it), TYPE-256-vnni the same with
# AMX turned off
read -r -a kinds <<< "${KINDS:-bf16 q8_0 q4_k fp8 q8_0-decoded fp8-decoded}"
for k in "${kinds[@]}"; do
	t=${k%-decoded} t=${t%-int8} t=${t%-vnni} t=${t%-256}
	[ "$k" = bf16 ] || qfile "$t" > /dev/null
done
for ((round = 1; round <= rounds; round++)); do
	for k in "${kinds[@]}"; do
		args=(--model "$model")
		t=${k%-decoded} t=${t%-int8} t=${t%-vnni} t=${t%-256}
		[ "$k" = bf16 ] || args+=(--diffusion-model "$(qfile "$t")" --config "$model/transformer/config.json")
		pre=()
		case $k in
		*-decoded) args+=(--quant-products bf16) ;;
		*-int8) args+=(--quant-products int8) ;;
		*-256) args+=(--quant-products int8-256) ;;
		*-256-vnni) args+=(--quant-products int8-256); pre=(env PDIT_NO_AMX=1) ;;
		*-vnni) args+=(--quant-products int8); pre=(env PDIT_NO_AMX=1) ;;
		esac
		echo "round $round/$rounds: $k" >&2
		j=$("${pre[@]}" "$pdit" bench "${args[@]}" -H "$size" -W "$size" --steps 3 --dtype bf16 --json 2> /dev/null < /dev/null) ||
			{ echo "$k failed" >&2; exit 1; }
		record "$tmp" "$k" "$j"
	done
done
echo "| weights | s/step (median) | × BF16 | peak MB | × BF16 | weights MB | × BF16 | peak ≤ 1.05 × weights + activations |"
echo "|---|---|---|---|---|---|---|---|"
for k in "${kinds[@]}"; do
	sps=$(med "$tmp" "$k" seconds_per_step) peak=$(med "$tmp" "$k" peak_rss_mb) wts=$(med "$tmp" "$k" weights_mb)
	awk -v k="$k" -v s="$sps" -v p="$peak" -v w="$wts" -v S="$(med "$tmp" bf16 seconds_per_step)" \
		-v P="$(med "$tmp" bf16 peak_rss_mb)" -v W="$(med "$tmp" bf16 weights_mb)" 'BEGIN {
		bound = 1.05 * w + (P - W)
		printf "| %s | %.3f | %.3f | %.0f | %.3f | %.0f | %.3f | %s (%.0f ≤ %.0f) |\n", k, s, s / S, p, p / P, w, w / W,
			p <= bound ? "yes" : "no", p, bound }'
done
echo "(${size}², $rounds rounds interleaved, 1 process, bf16 products (quantized layers: --quant-products auto, int8 with VNNI (AVX-512 or 256-bit) unless the bf16 products are AMX's; *-decoded: bf16; *-int8: int8 (AMX-INT8 tiles for Q8_0's layout where the CPU has them); *-vnni: int8 without AMX; *-256: int8-256, *-256-vnni without AMX), 3 timed steps after 1 warm-up; $model)"
