#!/usr/bin/env bash
# Pictures and latents of two pdit binaries, byte for byte: the golden tiny
# model and a --full tiny model, on one process and on 2 processes (Ulysses,
# ring, tensor parallel, PipeFusion, CFG parallel, DistriFusion; First Block
# Cache on one process, Ulysses, PipeFusion and DistriFusion; DistriFusion with
# CFG parallel and the cost model's choice on 4); a Wan2.1 video's frames and
# a quantized (GGUF Q4_K) transformer on 1 and 2 processes; and a picture
# served by pdit serve (one process, and Ulysses 2). For restructurings
# that must not move a bit.
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
	"2:--pipefusion-degree 2 --fbcache-threshold 0.8" "3:--pipefusion-degree 3 --fbcache-threshold 0.8"
	"4:--distrifusion-degree 2 --cfg-parallel" "2:--distrifusion-degree 2 --fbcache-threshold 0.8"
	"4:--parallel auto-stale")
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

# frames of a Wan2.1 video, a GGUF transformer kept quantized
w=$g/../wan-tiny/model q=$g/../quant-tiny/flux
others=("--model $w -p 'a cat on a wall' -H 32 -W 48 --frames 5 --steps 3 -s 5:-o WORK/WHICH-%03d.png"
	"--diffusion-model $q/flux-tiny-dev-Q4_K_S.gguf --config $q/dequant-Q4_K_S/config.json --vae $g/vae-dev --scheduler $g/scheduler-dev --embeds $g/pipeline-dev-h64w48.safetensors -H 64 -W 48 --steps 4 -s 5:-o WORK/WHICH.png")
for x in "${others[@]}"; do
for m in "1:" "2:--ulysses-degree 2"; do
	np=${m%%:*} flags=${m#*:} model=${x%%:*} out=${x#*:}
	for which in old new; do
		bin=$old; [ $which = new ] && bin=$new
		run=("$bin")
		[ "$np" -gt 1 ] && run=(mpirun -np "$np" "$bin")
		eval "args=($model)"
		o=${out//WORK/$work}
		"${run[@]}" generate "${args[@]}" $flags ${o//WHICH/$which} --out-latents "$work/$which.safetensors" \
			> "$work/$which.log" 2>&1 || { echo "FAIL ($which) np=$np $flags"; cat "$work/$which.log"; exit 1; }
	done
	same=1
	for f in "$work"/old*.png; do
		cmp -s "$f" "$work/new${f##*/old}" || same=0
	done
	if [ $same = 1 ] && cmp -s "$work/old.safetensors" "$work/new.safetensors"; then
		echo "same: np=$np $flags ($(echo "$model" | awk '{ n = split($2, p, "/"); print $1, p[n] }'))"
	else
		echo "DIFFERENT: np=$np $flags (${model%% *})"; bad=1
	fi
	rm -f "$work"/old*.png "$work"/new*.png
done
done

# a served picture: the OpenAI request's PNG, byte for byte
serve_one() { # BIN NP FLAGS... -> the PNG in $work/BIN-NAME.png
	local which=$1 np=$2 bin=$old
	shift 2
	[ "$which" = new ] && bin=$new
	local run=("$bin")
	[ "$np" -gt 1 ] && run=(mpirun -np "$np" "$bin")
	"${run[@]}" serve --model "$work/tiny" "$@" --listen 127.0.0.1:0 2> "$work/serve.log" &
	local pid=$! port=""
	for _ in $(seq 600); do
		port=$(sed -n 's|.*serving.*http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.log" | head -1)
		[ -n "$port" ] && break
		sleep 0.1
	done
	[ -n "$port" ] || { echo "FAIL ($which) serve: no port"; cat "$work/serve.log"; kill $pid; return 1; }
	curl -sf -m 300 "http://127.0.0.1:$port/v1/images/generations" -H 'Content-Type: application/json' \
		-d '{"prompt": "a red fox", "size": "64x96", "steps": 3, "seed": 11, "negative_prompt": "blurry", "true_cfg_scale": 2}' |
		python3 -c 'import base64, json, sys; sys.stdout.buffer.write(base64.b64decode(json.load(sys.stdin)["data"][0]["b64_json"]))' \
		> "$work/$which-served.png"
	kill -TERM $pid
	wait $pid || :
}
for m in "1:" "2:--ulysses-degree 2"; do
	np=${m%%:*} flags=${m#*:}
	serve_one old "$np" $flags && serve_one new "$np" $flags || exit 1
	if [ -s "$work/old-served.png" ] && cmp -s "$work/old-served.png" "$work/new-served.png"; then
		echo "same: served np=$np $flags"
	else
		echo "DIFFERENT: served np=$np $flags"; bad=1
	fi
done
exit $bad
