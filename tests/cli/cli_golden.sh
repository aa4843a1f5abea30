#!/usr/bin/env bash
# The command line against the golden files, as a user would run it:
#   pdit forward --dump on every forward case: every tensor within 1e-5 x max|ref|
#   pdit generate on every pipeline case (parameters from the file's metadata):
#     latents.init and latents.final within 1e-4, every PNG within 1 per pixel
# usage: cli_golden.sh PDIT ST_COMPARE GOLDEN_DIR
set -u
pdit=$1 cmp=$2 g=$3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
meta() { "$cmp" meta "$1" "$2"; }

for f in "$g"/forward-*.safetensors; do
	cfg=$(meta "$f" config)
	if ! "$pdit" forward --transformer "$g/transformer-$cfg" --inputs "$f" --out "$tmp/fwd.safetensors" --dump; then
		echo "FAIL: pdit forward on $f"; fail=1; continue
	fi
	if ! "$cmp" tensors "$tmp/fwd.safetensors" "$f" 1e-5 --all > "$tmp/log"; then
		cat "$tmp/log"; echo "FAIL: pdit forward output differs on $f"; fail=1
	else
		echo "ok   forward $(basename "$f"): $(tail -1 "$tmp/log")"
	fi
done

for f in "$g"/pipeline-*.safetensors; do
	cfg=$(meta "$f" config)
	seed=$(meta "$f" noise_seed | tr -d '[]' | cut -d, -f1)
	gs=$(meta "$f" guidance_scale)
	tc=$(meta "$f" true_cfg_scale || echo 1)
	batch=$(meta "$f" batch_size || echo 1)
	args=(--transformer "$g/transformer-$cfg" --vae "$g/vae-$cfg" --scheduler "$g/scheduler-$cfg"
	      --embeds "$f" -H "$(meta "$f" height)" -W "$(meta "$f" width)"
	      --steps "$(meta "$f" num_inference_steps)" --true-cfg-scale "$tc" -s "$seed"
	      --out-latents "$tmp/lat.safetensors" -o "$tmp/img.png")
	[ "$gs" != null ] && args+=(--guidance "$gs")
	rm -f "$tmp"/img*.png
	if ! "$pdit" generate "${args[@]}" 2> "$tmp/err"; then
		cat "$tmp/err"; echo "FAIL: pdit generate on $f"; fail=1; continue
	fi
	if ! "$cmp" tensors "$tmp/lat.safetensors" "$f" 1e-4 latents.init latents.final > "$tmp/log"; then
		cat "$tmp/log"; echo "FAIL: latents differ on $f"; fail=1
	fi
	for ((b = 0; b < batch; b++)); do
		png="$tmp/img.png"
		[ "$batch" -gt 1 ] && png="$tmp/img-$b.png"
		if ! "$cmp" png "$png" "$f" image.uint8 "$b" 1; then
			echo "FAIL: picture $b differs on $f"; fail=1
		fi
	done
	grep -q "parameters" "$tmp"/img*.png || { echo "FAIL: no parameters text chunk"; fail=1; }
	echo "ok   generate $(basename "$f")"
done

# --init-latents: the golden file's own latents.init with a different seed must
# give the golden final latents (the seed then plays no part).
f="$g/pipeline-dev-h64w48.safetensors"
if ! "$pdit" generate --transformer "$g/transformer-dev" --scheduler "$g/scheduler-dev" --embeds "$f" \
	-H 64 -W 48 --steps 4 -s 1 --init-latents "$f" --out-latents "$tmp/lat2.safetensors" 2> "$tmp/err"; then
	cat "$tmp/err"; echo "FAIL: generate --init-latents"; fail=1
elif ! "$cmp" tensors "$tmp/lat2.safetensors" "$f" 1e-4 latents.init latents.final > "$tmp/log"; then
	cat "$tmp/log"; echo "FAIL: --init-latents result differs"; fail=1
else
	echo "ok   generate --init-latents"
fi
exit $fail
