#!/usr/bin/env bash
# Pictures and latents of two pdit binaries, byte for byte: the golden tiny
# model and a --full tiny model, on one process and on 2 processes (Ulysses,
# ring, tensor parallel, PipeFusion, CFG parallel, DistriFusion; First Block
# Cache on one process, Ulysses and PipeFusion). For restructurings that
# must not move a bit.
#
#   bench/same_as.sh OLD_PDIT NEW_PDIT [WORKDIR]
set -euo pipefail
old=$1 new=$2 work=${3:-$(mktemp -d)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$work"
[ -d "$work/tiny" ] || "$new" tiny "$work/tiny" --full > /dev/null
g=$(cd "$(dirname "$0")/.." && pwd)/tests/golden/flux-tiny
models=("--model $work/tiny -p 'a red fox in the snow' -n blurry --true-cfg-scale 3 -H 64 -W 96 --steps 6 -s 7"
	"--transformer $g/transformer-dev --vae $g/vae-dev --scheduler $g/scheduler-dev --embeds $g/pipeline-dev-truecfg-h64w48.safetensors --true-cfg-scale 4 -H 64 -W 48 --steps 6 -s 3")
meshes=("1:" "2:--ulysses-degree 2" "2:--ring-degree 2" "2:--tensor-parallel-degree 2"
	"2:--pipefusion-degree 2" "2:--cfg-parallel" "2:--distrifusion-degree 2"
	"1:--fbcache-threshold 0.8" "2:--ulysses-degree 2 --fbcache-threshold 0.8"
	"2:--pipefusion-degree 2 --fbcache-threshold 0.8" "3:--pipefusion-degree 3 --fbcache-threshold 0.8")
bad=0
for model in "${models[@]}"; do
for m in "${meshes[@]}"; do
	np=${m%%:*} flags=${m#*:}
	for which in old new; do
		bin=$old; [ $which = new ] && bin=$new
		run=("$bin")
		[ "$np" -gt 1 ] && run=(mpirun -np "$np" "$bin")
		eval "args=($model)"
		"${run[@]}" generate "${args[@]}" $flags -o "$work/$which.png" --out-latents "$work/$which.safetensors" \
			> "$work/$which.log" 2>&1 || { echo "FAIL ($which) np=$np $flags"; cat "$work/$which.log"; exit 1; }
	done
	if cmp -s "$work/old.png" "$work/new.png" && cmp -s "$work/old.safetensors" "$work/new.safetensors"; then
		echo "same: np=$np $flags (${model%% *}) $(sed -n 's/^pdit: First Block Cache/FBCache/p' "$work/new.log")"
	else
		echo "DIFFERENT: np=$np $flags (${model%% *})"; bad=1
	fi
done
done
exit $bad
