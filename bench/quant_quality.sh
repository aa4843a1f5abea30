#!/usr/bin/env bash
# Pictures of int8 products against those of decoded (bf16) products on the
# same quantized weights: the FLUX-width model's transformer as Q8_0, Q4_K
# and fp8 e4m3 (bench/quant.sh writes them; TYPES="q8_0 fp8" a subset; fp8's
# int8 form also rounds its small weights), one process, bf16 products, for each
# prompt and seed; each pair's PSNR and largest level difference (st_compare
# pngs), the table of docs/quantization.md. The model's weights are random
# (pdit tiny --flux-width); prompt 1 is the embedding it ships, prompt K > 1
# another of the same shapes and law (unit normal, numpy's generator seeded K).
#
# Each pair's line is kept in bench/quant/quality-SIZE-STEPS.txt as it is
# measured, and a rerun with the same SIZE and STEPS skips the pairs found
# there: a 1024², 28-step table (about 20 minutes a pair on 2 cores) can be
# run a few pairs at a time (at `nice -n 19` while the machine does other work).
# The file knows nothing of the build or the machine: delete it (or its
# type's lines) when the int8 or decoded arithmetic changes, or the model (a
# line says the CPU of the run that printed the table). Each decoded picture
# is kept too (bench/quant/decoded-TYPE-SIZE-STEPS-pPROMPT-sSEED.png), so a
# change of the int8 arithmetic alone reruns only the int8 half of each
# pair: delete them when the decoded arithmetic or the model changes.
#
#   bench/quant_quality.sh [SIZE] [STEPS] [SEEDS...]     (default 512 8 1 2 3 4)
#   PROMPTS=N (default 1), TYPES="q8_0 q4_k fp8" (the default; q8_0-256: the
#   Q8_0 file on --quant-products int8-256, its layers a multiple of 256 wide
#   requantized to one scale per 256 inputs, against the same decoded picture)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
size=${1:-512} steps=${2:-8}
shift 2 || shift $#
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(1 2 3 4)
model=bench/flux-width qdir=bench/quant cmp=build/tests/st_compare
bench_model "$model"
[ -x "$cmp" ] || { echo "build the tests first ($cmp)" >&2; exit 1; }
mkdir -p "$qdir"
kept=$qdir/quality-$size-$steps.txt
touch "$kept"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
embeds() {	# K: prompt K's embeddings file
	local f=$qdir/embeds-$1.safetensors
	[ "$1" != 1 ] || f=$model/embeds.safetensors
	[ -e "$f" ] || /usr/bin/python3 - "$model/embeds.safetensors" "$f" "$1" <<'PY'
import json, struct, sys
import numpy as np
src, dst, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(src, "rb") as fh:
    n = struct.unpack("<Q", fh.read(8))[0]
    head = json.loads(fh.read(n))
rng = np.random.default_rng(k)
out, blobs, off = {"__metadata__": {"note": "random stand-ins for T5 and CLIP outputs, prompt %d" % k}}, [], 0
for name, t in head.items():
    if name == "__metadata__":
        continue
    a = rng.standard_normal(t["shape"], dtype=np.float32).tobytes()
    out[name] = {"dtype": "F32", "shape": t["shape"], "data_offsets": [off, off + len(a)]}
    blobs.append(a)
    off += len(a)
h = json.dumps(out).encode()
h += b" " * (-len(h) % 8)
with open(dst + ".tmp", "wb") as fh:
    fh.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
import os
os.replace(dst + ".tmp", dst)
PY
	echo "$f"
}
read -r -a types <<< "${TYPES:-q8_0 q4_k fp8}"
for t in "${types[@]}"; do
	b=${t%-256} int8=int8
	[ "$b" = "$t" ] || int8=int8-256
	f=$qdir/flux-width-$b.gguf
	[ "$b" != fp8 ] || f=$qdir/flux-width-$b.safetensors
	[ -e "$f" ] || "$pdit" quantize "$model/transformer/diffusion_pytorch_model.safetensors" "$f" --type "$b" >&2
	for p in $(seq "${PROMPTS:-1}"); do
		e=$(embeds "$p")
		for s in "${seeds[@]}"; do
			! grep -q "^| $t | $p | $s |" "$kept" || continue
			dec=$qdir/decoded-$b-$size-$steps-p$p-s$s.png
			for qp in bf16 int8; do
				# the int8 picture always made anew, the decoded one once
				[ "$qp" = int8 ] || [ ! -e "$dec" ] || continue
				echo "$t prompt $p seed $s: $qp ($(date +%H:%M))" >&2
				"$pdit" generate --model "$model" --diffusion-model "$f" --config "$model/transformer/config.json" \
					--embeds "$e" -H "$size" -W "$size" --steps "$steps" -s "$s" --dtype bf16 \
					--quant-products "${qp/int8/$int8}" -o "$tmp/$qp.png" -q < /dev/null
				[ "$qp" = int8 ] || mv "$tmp/$qp.png" "$dec"
			done
			line=$("$cmp" pngs "$tmp/int8.png" "$dec" 255)
			psnr=$(sed 's/.*PSNR \([^ ]*\) dB.*/\1/' <<< "$line") maxd=$(sed 's/.*pixels within \([0-9]*\).*/\1/' <<< "$line")
			echo "| $t | $p | $s | $psnr | $maxd |" >> "$kept"
		done
	done
done
echo "| weights | prompt | seed | PSNR int8 vs bf16 (dB) | largest level difference |"
echo "|---|---|---|---|---|"
for t in "${types[@]}"; do
	for p in $(seq "${PROMPTS:-1}"); do
		for s in "${seeds[@]}"; do
			grep -m1 "^| $t | $p | $s |" "$kept"
		done
	done
done
echo "(${size}², $steps steps, 1 process, bf16 products; $model; this run's CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-))"
