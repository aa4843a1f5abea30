#!/usr/bin/env bash
# Pictures in and adapters on every mesh, with true CFG: img2img, inpainting
# with an ordinary FLUX model, FLUX.1 Fill, FLUX.1 Kontext (a reference of
# another size) and a LoRA (kohya, with alpha), each run by one process with a
# negative prompt (--true-cfg-scale 4; flux-tiny's true-CFG embeddings, which
# carry negatives, on edit-tiny's pictures), then on CFG parallel (2
# processes) and on 4 processes: Ulysses 2 x ring 2, tensor 4, tensor 2 x
# Ulysses 2, CFG x ring 2, CFG x PipeFusion 2 (every step warm, so exact);
# latents.final of each mesh equal to one process's within 1e-5.
# (cli_edit checks the one-process runs against diffusers and the 2-process
# Ulysses, ring, tensor and PipeFusion meshes; cli_lora the adapters.)
# usage: cli_edit_meshes.sh PDIT ST_COMPARE EDIT_GOLDEN FLUX_GOLDEN MPIRUN...
set -u
pdit=$1 cmp=$2 g=$3 fg=$4
shift 4
mpirun=("$@")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

steps=4
"$cmp" topng "$g/img2img-dev-h64w48.safetensors" in.init_image "$tmp/init.png" &&
	"$cmp" topng "$g/inpaint-dev-h64w48.safetensors" in.mask "$tmp/mask.png" &&
	"$cmp" topng "$g/kontext-dev-h64w48.safetensors" in.ref_image "$tmp/ref.png" || { echo "FAIL: the pictures"; exit 1; }
dev=(--transformer "$fg/transformer-dev" --vae "$fg/vae-dev" --scheduler "$fg/scheduler-dev")
common=(--embeds "$fg/pipeline-dev-truecfg-h64w48.safetensors" --true-cfg-scale 4 --guidance 3.5 -W 48 -H 64
        --steps $steps -s 17)
declare -A kinds=(
	[img2img]="${dev[*]} -i $tmp/init.png --strength 0.8"
	[inpaint]="${dev[*]} -i $tmp/init.png --mask $tmp/mask.png --strength 0.9"
	[fill]="--transformer $g/transformer-fill --vae $fg/vae-dev --scheduler $fg/scheduler-dev -i $tmp/init.png --mask $tmp/mask.png"
	[kontext]="${dev[*]} -r $tmp/ref.png"
	[lora]="${dev[*]} --lora $g/lora-pipeline-dev-1351-kohya.safetensors:0.9"
)
meshes=("2 --cfg-parallel"
        "4 --ulysses-degree 2 --ring-degree 2"
        "4 --tensor-parallel-degree 4"
        "4 --tensor-parallel-degree 2 --ulysses-degree 2"
        "4 --cfg-parallel --ring-degree 2"
        "4 --cfg-parallel --pipefusion-degree 2 --warmup-steps $steps")
for kind in img2img inpaint fill kontext lora; do
	# shellcheck disable=SC2206
	args=(${kinds[$kind]} "${common[@]}")
	if ! "$pdit" generate "${args[@]}" --out-latents "$tmp/one.safetensors" -o "$tmp/one.png" -q 2> "$tmp/err"; then
		cat "$tmp/err"; bad "$kind with true CFG on one process"; continue
	fi
	# the negative prompt must count, or CFG parallel would compare nothing
	if "$pdit" generate "${args[@]}" --true-cfg-scale 1 --out-latents "$tmp/nocfg.safetensors" -q 2> "$tmp/err" &&
		! "$cmp" tensors "$tmp/nocfg.safetensors" "$tmp/one.safetensors" 1e-3 latents.final > /dev/null 2>&1; then
		ok "$kind: true CFG changes the latents"
	else
		cat "$tmp/err"; bad "$kind: the same latents without true CFG"
	fi
	for m in "${meshes[@]}"; do
		np=${m%% *} mesh=${m#* }
		rm -f "$tmp/mesh.safetensors"
		# shellcheck disable=SC2086
		if "${mpirun[@]}" -np "$np" "$pdit" generate "${args[@]}" $mesh --out-latents "$tmp/mesh.safetensors" \
			-o "$tmp/mesh.png" -q < /dev/null 2> "$tmp/err" &&
			"$cmp" tensors "$tmp/mesh.safetensors" "$tmp/one.safetensors" 1e-5 latents.final > "$tmp/log"; then
			ok "$kind, true CFG, $np processes ($mesh): one process's latents $(tail -1 "$tmp/log")"
		else
			cat "$tmp/err" "$tmp/log"; bad "$kind, true CFG, $np processes ($mesh)"
		fi
	done
done
exit $fail
