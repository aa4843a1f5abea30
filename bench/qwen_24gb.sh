#!/usr/bin/env bash
# Qwen-Image on a 24 GB machine: the transformer as a Q4_K GGUF and the
# language model as a Q8_0 GGUF in llama.cpp's names, loaded one after the
# other, at their real sizes (60 blocks of 24 heads x 128; 28 layers 3584
# wide and a vocabulary of 152019 rows): the files are grown from the
# Qwen-Image-width folder's 2 blocks and 2 layers (bench/gguf_grow.py copies
# a block's bytes; random values of real sizes), then `pdit plan --memory
# 24` says what fits and its estimate, and one `pdit generate` (2 steps,
# the fewest Qwen-Image's scheduler takes; no true CFG) measures the
# process's peak against it. Needs about 20 GB of disk under WORK and
# minutes of loading.
#
#   bench/qwen_24gb.sh [HEIGHT] [WIDTH] [WORK]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
height=${1:-512} width=${2:-512} work=${3:-bench/qwen-24gb} model=bench/qwen-width
[ -d "$model" ] || "$pdit" tiny "$model" --family qwen --qwen-width >&2
mkdir -p "$work"
t=$work/qwen-image-Q4_K.gguf l=$work/qwen2.5-vl-7b-Q8_0.gguf
if [ ! -e "$t" ]; then
	"$pdit" quantize "$model/transformer" "$work/t2.gguf" --type q4_k >&2
	/usr/bin/python3 bench/gguf_grow.py "$work/t2.gguf" "$t" --pattern 'transformer_blocks.{}.' --blocks 60 >&2
	rm -f "$work/t2.gguf"
fi
if [ ! -e "$l" ]; then
	"$pdit" quantize "$model/text_encoder" "$work/l2.gguf" --type q8_0 >&2
	/usr/bin/python3 bench/gguf_grow.py "$work/l2.gguf" "$l" --pattern 'blk.{}.' --blocks 28 \
		--key qwen2vl.block_count --rows token_embd.weight:152064 >&2
	rm -f "$work/l2.gguf"
fi
files=(--model "$model" --diffusion-model "$t" --llm "$l")
echo "Qwen-Image, transformer $(du -h "$t" | cut -f1) Q4_K GGUF (60 blocks), language model $(du -h "$l" | cut -f1) Q8_0 GGUF (28 layers):"
echo
echo '```'
echo "\$ pdit plan ${files[*]} --devices 1 --memory 24 -H 1328 -W 1328 --true-cfg-scale 4"
"$pdit" plan "${files[@]}" --devices 1 --memory 24 -H 1328 -W 1328 --true-cfg-scale 4 --gflops 400 2>&1 | sed -n '1,12p'
echo '```'
est=$("$pdit" plan "${files[@]}" --devices 1 -H "$height" -W "$width" --true-cfg-scale 1 --gflops 400 --json 2> /dev/null |
	sed -n 's/.*"memory_gb": \([0-9.e+-]*\).*/\1/p' | head -1)
echo "measuring: pdit generate at ${width}x$height, 2 steps, one process" >&2
"$pdit" generate "${files[@]}" -p "a lighthouse on a cliff at dusk" -H "$height" -W "$width" --steps 2 --dtype bf16 \
	-o "$work/out.png" 2> "$work/log" < /dev/null
peak=$(sed -n 's/.*peak memory \([0-9]*\) MB a process.*/\1/p' "$work/log" | tail -1)
echo
echo "| size | plan's estimate GB (1e9 bytes) | measured peak GB | measured / estimate |"
echo "|---|---:|---:|---:|"
awk -v s="${width}x$height" -v e="$est" -v p="$peak" \
	'BEGIN { g = p * 1048576 / 1e9; printf "| %s | %.2f | %.2f | %.3f |\n", s, e, g, g / e }'
