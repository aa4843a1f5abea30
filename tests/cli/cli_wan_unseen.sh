#!/usr/bin/env bash
# Wan2.1 on folders pdit writes itself, with sizes the golden model does not
# have (3 heads of 24, RoPE split 8/8/8, 3 blocks, FFN 42, a VAE of base 4,
# UMT5 of 3 layers; 13 frames of 48x80: 4 latent frames, 60 tokens): the run
# makes an MP4 of 13 frames at 80x48 and latents [1, 16, 4, 6, 10]; Ulysses
# 3, ring 2, tensor parallel 3, PipeFusion 3 and 2 (3 blocks: uneven stages)
# with every step warm equal one process (1e-5); bf16 runs; a truncated transformer
# file is refused with one line before any step.
# usage: cli_wan_unseen.sh PDIT ST_COMPARE MPIRUN...
set -u
pdit=$1 cmp=$2
shift 2
mpirun=("$@")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
m=$tmp/w
"$pdit" tiny "$m" --family wan --heads 3 --head-dim 24 --layers 3 --ffn-dim 42 --wan-vae-base 4 \
	--umt5-layers 3 --seed 7 > /dev/null 2> "$tmp/err" ||
	{ cat "$tmp/err"; bad "pdit tiny --family wan"; exit 1; }
run=(--model "$m" -p "a small boat & a lighthouse at dusk" --frames 13 -H 48 -W 80 --steps 3 -s 11 -q)
"$pdit" generate "${run[@]}" -o "$tmp/one.mp4" --out-latents "$tmp/one.safetensors" 2> "$tmp/err" &&
	ok "one process" || { cat "$tmp/err"; bad "one process"; }
probe=$(ffprobe -v error -show_entries stream=width,height,nb_frames -of default=nw=1 "$tmp/one.mp4" 2>&1)
for want in width=80 height=48 nb_frames=13; do
	grep -qx "$want" <<< "$probe" || { echo "$probe"; bad "mp4: no $want"; }
done
"$pdit" inspect "$tmp/one.safetensors" 2>&1 | grep -q "latents.final .*\[1, 16, 4, 6, 10\]" &&
	ok "latents [1, 16, 4, 6, 10]" || bad "latents shape"
for mesh in "3:--ulysses-degree 3" "2:--ring-degree 2" "3:--tensor-parallel-degree 3" \
	"3:--pipefusion-degree 3 --warmup-steps 3" "2:--pipefusion-degree 2 --warmup-steps 3"; do
	# shellcheck disable=SC2086
	"${mpirun[@]}" -np "${mesh%%:*}" "$pdit" generate "${run[@]}" ${mesh#*:} -o "$tmp/m.mp4" \
		--out-latents "$tmp/m.safetensors" 2> "$tmp/err" || { cat "$tmp/err"; bad "np ${mesh%%:*} ${mesh#*:}"; continue; }
	"$cmp" tensors "$tmp/m.safetensors" "$tmp/one.safetensors" 1e-5 --all > "$tmp/log" &&
		ok "np ${mesh%%:*} ${mesh#*:}: one process's latents within 1e-5" || { cat "$tmp/log"; bad "${mesh#*:}"; }
done
"$pdit" generate "${run[@]}" --dtype bf16 -o "$tmp/bf.mp4" 2> "$tmp/err" && ok "bf16" || { cat "$tmp/err"; bad "bf16"; }
# a truncated transformer: one line, no video
t=$m/transformer/diffusion_pytorch_model.safetensors
head -c $(($(stat -c %s "$t") / 2)) "$t" > "$tmp/half" && cp "$tmp/half" "$t"
"$pdit" generate "${run[@]}" -o "$tmp/bad.mp4" > /dev/null 2> "$tmp/err"
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$(grep -c '' "$tmp/err")" -eq 1 ] && ! [ -e "$tmp/bad.mp4" ]; then
	ok "truncated transformer: $(cat "$tmp/err")"
else
	cat "$tmp/err"; bad "truncated transformer (exit $rc)"
fi
exit $fail
