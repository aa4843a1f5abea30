#!/usr/bin/env bash
# Single-file checkpoints, written by tests/lib/bfl_convert.py (independently of
# pdit's loader) from diffusers folders:
#   the golden tiny transformers in Black Forest Labs' layout (with a prefix
#   and their config as metadata): pdit forward equals the golden outputs
#   within 1e-5, as the folders do; a file without the final modulation's
#   swap gives a different result (the swap is checked, scale != shift);
#   a tiny model with FLUX.1's head width of 128, transformer and VAE as
#   files without any config: the picture equals the folder's (pixels);
#   a damaged file is refused with one line.
# usage: cli_single_file.sh PDIT ST_COMPARE GOLDEN_DIR PYTHON3
set -u
pdit=$1 cmp=$2 g=$3 py=$4
conv="$(dirname "$0")/../lib/bfl_convert.py"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

for cfg in dev schnell; do
	"$py" "$conv" transformer "$g/transformer-$cfg" "$tmp/t-$cfg.safetensors" --prefix model.diffusion_model. \
		--config-metadata > /dev/null || { bad "converting transformer-$cfg"; continue; }
	for f in "$g"/forward-$cfg-*.safetensors; do
		if "$pdit" forward --transformer "$tmp/t-$cfg.safetensors" --inputs "$f" --out "$tmp/o.safetensors" \
			2> "$tmp/err" && "$cmp" tensors "$tmp/o.safetensors" "$f" 1e-5 out.sample > "$tmp/log"; then
			ok "BFL file of transformer-$cfg on $(basename "$f"): $(head -1 "$tmp/log")"
		else
			cat "$tmp/err" "$tmp/log"; bad "BFL file of transformer-$cfg on $(basename "$f")"
		fi
	done
done
# without the swap the result must be wrong: the test can see a missing swap
"$py" "$conv" transformer "$g/transformer-dev" "$tmp/noswap.safetensors" --config-metadata --no-swap > /dev/null
f=$(ls "$g"/forward-dev-*.safetensors | head -1)
"$pdit" forward --transformer "$tmp/noswap.safetensors" --inputs "$f" --out "$tmp/o.safetensors" 2> /dev/null
if "$cmp" tensors "$tmp/o.safetensors" "$f" 1e-2 out.sample > /dev/null 2>&1; then
	bad "a file without the final modulation's swap gave the right output: the swap goes unchecked"
else
	ok "a file without the final modulation's swap differs (as it must)"
fi

# FLUX.1's head width: files carry no config, sizes come from the shapes
"$pdit" tiny "$tmp/m" --heads 2 --head-dim 128 --layers 1 --single-layers 1 --vae-channels 32,32,64,64 \
	--vae-groups 32 > /dev/null 2>&1 || bad "pdit tiny"
"$py" "$conv" transformer "$tmp/m/transformer" "$tmp/flux.safetensors" > /dev/null || bad "converting the transformer"
"$py" "$conv" vae "$tmp/m/vae" "$tmp/ae.safetensors" --prefix first_stage_model. > /dev/null || bad "converting the VAE"
run=(--embeds "$tmp/m/embeds.safetensors" -H 64 -W 96 --steps 2 -s 4)
"$pdit" generate --model "$tmp/m" "${run[@]}" -o "$tmp/folder.png" 2> /dev/null || bad "generate from the folder"
if "$pdit" generate --diffusion-model "$tmp/flux.safetensors" --vae "$tmp/ae.safetensors" \
	--scheduler "$tmp/m/scheduler" "${run[@]}" -o "$tmp/file.png" 2> "$tmp/err" &&
	"$cmp" pngs "$tmp/folder.png" "$tmp/file.png" 0 > /dev/null; then
	ok "--diffusion-model and --vae files without configs: the folder's picture"
else
	cat "$tmp/err"; bad "single files give another picture"
fi

# damaged: a truncated file
head -c 5000 "$tmp/flux.safetensors" > "$tmp/cut.safetensors"
"$pdit" generate --diffusion-model "$tmp/cut.safetensors" "${run[@]}" -o "$tmp/x.png" > /dev/null 2> "$tmp/err"
if [ $? -ne 0 ] && [ "$(grep -c '' "$tmp/err")" -eq 1 ] && grep -q "cut.safetensors" "$tmp/err" && [ ! -e "$tmp/x.png" ]; then
	ok "a truncated single file: $(cat "$tmp/err")"
else
	cat "$tmp/err"; bad "a truncated single file"
fi
exit $fail
