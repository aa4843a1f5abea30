#!/usr/bin/env bash
# Wan2.1 at real widths (`pdit tiny --family wan --wan-width`: 1536 wide, 12
# heads, FFN 8960, 2 blocks, Wan2.1's VAE), bf16: one process's seconds per
# step, its ratio to the matrix-product rate pdit measures in the same run,
# peak memory against the estimate (medians of ROUNDS runs); then one run
# per mesh of 2 and 4 processes with the bytes each rank sends per step
# next to what `pdit plan` predicts for it, and peak memory per rank. With
# VAE=1 the video decode's seconds too (minutes at 480x832). Prints
# Markdown tables.
#
#   bench/wan.sh [FRAMES] [HEIGHT] [WIDTH] [ROUNDS] [MODEL_DIR]
#
# Under oversubscription (4 processes on this machine's 2 cores) seconds per
# step measure contention, not speed-up; bytes and memory do not depend on it.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
frames=${1:-17} height=${2:-480} width=${3:-832} rounds=${4:-3} model=${5:-bench/wan-width}
[ -d "$model" ] || "$pdit" tiny "$model" --family wan --wan-width >&2
size=(--frames "$frames" -H "$height" -W "$width")
prompt=(-p "a red fox runs through the snow, cinematic")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for ((round = 1; round <= rounds; round++)); do
	echo "round $round/$rounds: one process" >&2
	j=$("$pdit" bench --model "$model" "${prompt[@]}" "${size[@]}" --steps 2 --dtype bf16 --json 2> /dev/null < /dev/null) ||
		{ echo "one process failed" >&2; exit 1; }
	for key in seconds_per_step ratio matmul_gflops achieved_gflops peak_rss_mb estimate_mb; do
		field "$key" "$j" >> "$tmp/one.$key"
	done
done
med() { median < "$tmp/one.$1"; }
echo "Wan-width, $frames frames of ${width}x$height, bf16, 1 process x $(nproc) threads, medians of $rounds runs:"
echo
echo "| s/step | GFLOP/s | matmul GFLOP/s | ratio | peak MB | estimate MB | peak / estimate |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
awk -v s="$(med seconds_per_step)" -v a="$(med achieved_gflops)" -v m="$(med matmul_gflops)" -v r="$(med ratio)" \
	-v p="$(med peak_rss_mb)" -v e="$(med estimate_mb)" \
	'BEGIN { printf "| %.2f | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |\n", s, a, m, r, p, e, p / e }'

if [ "${VAE:-0}" = 1 ]; then
	echo "decoding once" >&2
	j=$("$pdit" bench --model "$model" "${prompt[@]}" "${size[@]}" --steps 1 --warmup 1 --dtype bf16 --vae-time --json \
		2> /dev/null < /dev/null) || { echo "the decode failed" >&2; exit 1; }
	echo
	echo "VAE decode of the $frames frames: $(field vae_seconds "$j") s (one run, f32 convolutions)"
fi

# what `pdit plan` predicts a mesh's rank sends per step
expect() {
	local np=$1 mesh=$2
	"$pdit" plan --model "$model" --devices "$np" "${size[@]}" --gflops 1 --json 2> /dev/null |
		awk -v m="$mesh" 'index($0, "\"mesh\": \"" m "\"") { sub(/.*"bytes_sent_per_rank_per_step": /, ""); sub(/,.*/, "");
			printf "%.1f", $0 / 1e6; found = 1 } END { if (!found) printf "?" }'
}

echo
echo "| processes | mesh | s/step | MB sent/rank/step | plan's MB | peak MB/rank (max) |"
echo "|---:|---|---:|---:|---:|---:|"
while IFS='|' read -r np flags; do
	[ -z "$np" ] && continue
	echo "$np processes: $flags" >&2
	warm=1
	[[ " $flags " == *" --pipefusion-degree "* || " $flags " == *" --distrifusion-degree "* ]] && warm=2
	# shellcheck disable=SC2086
	j=$(mpirun --oversubscribe -np "$np" "$pdit" bench --model "$model" "${prompt[@]}" "${size[@]}" --steps 1 \
		--warmup "$warm" --dtype bf16 --json $flags 2> /dev/null < /dev/null) ||
		{ echo "| $np | $flags | failed | | | |"; continue; }
	mesh=$(field mesh "$j")
	short=$(tr ' ' '\n' <<< "$mesh" | { grep -v '=1$' || true; } | tr '\n' ' ' | sed 's/ $//')
	printf "| %s | %s | %.2f | %.1f | %s | %.0f |\n" "$np" "${short:-one process}" "$(field seconds_per_step "$j")" \
		"$(awk -v b="$(field bytes_sent_per_rank_per_step "$j")" 'BEGIN { print b / 1e6 }')" \
		"$(expect "$np" "$mesh")" "$(field peak_rss_mb "$j")"
done << 'CONFIGS'
2|--cfg-parallel
2|--ulysses-degree 2
2|--ring-degree 2
2|--tensor-parallel-degree 2
2|--pipefusion-degree 2
4|--cfg-parallel --ulysses-degree 2
4|--ulysses-degree 4
4|--ring-degree 4
4|--ulysses-degree 2 --ring-degree 2
4|--tensor-parallel-degree 2 --ulysses-degree 2
4|--pipefusion-degree 2 --ulysses-degree 2
CONFIGS
