#!/usr/bin/env bash
# On paper: FLUX.1-dev as people download it for small machines
# (flux1-dev-Q8_0.gguf + t5xxl_fp8_e4m3fn.safetensors + clip_l + the VAE),
# against the BF16 release, planned by `pdit plan` from the files' headers
# (bench/paper_files.py writes them with their real names, types, shapes and
# sizes, sparse: nothing to download). For this machine (24 GiB, 2 cores)
# and GPUs of 8 and 16 GB (L40-class rates, --memory set): the first mesh
# that fits, the memory a process needs, and the text encoders' share.
# Prints Markdown (the table of docs/quantization.md).
#
#   bench/quant_paper.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 bench/paper_files.py "$tmp" > /dev/null
q8=(--diffusion-model "$tmp/flux1-dev-Q8_0.gguf" --t5xxl "$tmp/t5xxl_fp8_e4m3fn.safetensors" --clip_l "$tmp/clip_l.safetensors"
	--vae bench/configs/flux1-dev/vae)
bf=(--model bench/configs/flux1-dev)
short() {
	local s
	s=$(sed -e 's/dp=1 //; s/cfg=1 //; s/pp=1 //; s/ring=1 //; s/ulysses=1 //; s/ tp=1$//; s/^tp=1$//' <<< "$1")
	echo "${s:-one process}"
}
echo "| machine | weights | devices | first mesh that fits | GB per process (weights + activations, or the decode) | text encoders, GB (before the transformer) | fits |"
echo "|---|---|---:|---|---:|---:|---|"
for m in "this machine (24 GiB, 2 cores):--gflops 300 --memory 24" "16 GB GPU:--device l40 --memory 16" \
	"8 GB GPU:--device l40 --memory 8"; do
	what=${m%%:*} flags=${m#*:}
	for w in q8 bf; do
		# one process here: more would share the same 24 GiB
		ns="1 2 4"
		[[ $what == this* ]] && ns=1
		for n in $ns; do
			if [ $w = q8 ]; then args=("${q8[@]}") label="Q8_0 + T5 fp8"; else args=("${bf[@]}") label="BF16 (no encoders counted)"; fi
			# shellcheck disable=SC2086
			rows=$("$pdit" plan "${args[@]}" --devices $n $flags -H 1024 -W 1024 --json 2> /dev/null) || rows=""
			fit=$(grep -m1 '"fits": true' <<< "$rows" || true)
			r=${fit:-$(head -1 <<< "$rows")}
			[ -n "$r" ] || { printf "| %s | %s | %d | none | | | no |\n" "$what" "$label" "$n"; continue; }
			printf "| %s | %s | %d | %s | %.1f | %.1f | %s |\n" "$what" "$label" "$n" "$(short "$(field mesh "$r")")" \
				"$(field memory_gb "$r")" "$(field encoders_gb "$r")" "$([ -n "$fit" ] && echo yes || echo no)"
			[ -n "$fit" ] && break
		done
	done
done
echo "(1024², 512 text tokens, 1 image; \`pdit plan\` on the files' headers: Q8_0 blocks at 34 bytes per 32 weights, fp8 at 1 byte, the rest bf16)"
