#!/usr/bin/env bash
# Wan2.1 through the command: pdit generate on the golden tiny folder
# reproduces the three WanPipeline runs (latents.init within 1e-6,
# latents.final within 1e-4, max|a - b| / max|ref|, written as the
# pipeline's [B, 16, F, h, w]); --init-latents takes the pipeline's own
# noise; bad video requests get one line each and write nothing.
# usage: cli_wan.sh PDIT ST_COMPARE WAN_TINY_DIR
set -u
pdit=$1 cmp=$2 g=$3
m=$g/model
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
neg="Bright tones, overexposed, static, blurred details, subtitles, style, works, paintings, images, static, overall gray, worst quality, low quality, JPEG compression residue, ugly, incomplete"

# run NAME GOLDEN ARGS...
run() {
	local name=$1 ref=$2
	shift 2
	if ! "$pdit" generate --model "$m" "$@" --out-latents "$tmp/$name.safetensors" -q 2> "$tmp/err"; then
		echo "FAIL $name: $(cat "$tmp/err")"; fail=1; return
	fi
	"$cmp" tensors "$tmp/$name.safetensors" "$ref" 1e-6 latents.init > /dev/null &&
		"$cmp" tensors "$tmp/$name.safetensors" "$ref" 1e-4 latents.final ||
		{ echo "FAIL $name: latents differ"; fail=1; return; }
	echo "ok   $name"
}
run cfg "$g/pipeline-cfg-n9-h32w48.safetensors" -p "A cat walks on the grass, realistic style." -n "$neg" \
	--frames 9 -H 32 -W 48 --steps 4 -s 42
run nocfg "$g/pipeline-nocfg-n5-h48w64.safetensors" -p "Two dogs, 3 balls & 1 frisbee: a sunny afternoon in the park!" \
	--guidance 1 --frames 5 -H 48 -W 64 --steps 3 -s 7 --flow-shift 5
run defaultneg "$g/pipeline-cfg-defaultneg-n5-h32w32.safetensors" \
	-p "A paper boat sails down a small stream after the rain." --guidance 3 --frames 5 -H 32 -W 32 --steps 5 -s 1234
# the pipeline's own noise, unpacked [1, 16, F, h, w]
run init "$g/pipeline-cfg-defaultneg-n5-h32w32.safetensors" --init-latents "$g/pipeline-cfg-defaultneg-n5-h32w32.safetensors" \
	-p "A paper boat sails down a small stream after the rain." --guidance 3 --frames 5 -H 32 -W 32 --steps 5 -s 99

# expect NAME SUBSTRING ARGS...: nonzero exit, one line naming the problem, no file
expect() {
	local name=$1 want=$2 rc
	shift 2
	rm -f "$tmp/bad.safetensors" "$tmp/bad.png"
	"$pdit" generate --model "$m" -p "a cat" -H 32 -W 32 --steps 1 "$@" > "$tmp/out" 2> "$tmp/err"
	rc=$?
	if [ $rc -eq 0 ] || [ $rc -ge 128 ] || [ "$(grep -c '' "$tmp/err")" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err" ||
		[ -e "$tmp/bad.safetensors" ] || [ -e "$tmp/bad.png" ]; then
		echo "FAIL $name (exit $rc):"; cat "$tmp/err"; fail=1
	else
		echo "ok   $name: $(cat "$tmp/err")"
	fi
}
expect "frames not 4k + 1" "9 or 13 are" --frames 10 --out-latents "$tmp/bad.safetensors"
expect "zero frames" "--frames must be positive" --frames 0 --out-latents "$tmp/bad.safetensors"
expect "true CFG scale on Wan" "give --guidance 4" --true-cfg-scale 4 --frames 5 --out-latents "$tmp/bad.safetensors"
expect "no latents to write" "--out-latents FILE" --frames 5 -o "$tmp/bad.png"
expect "bad flow shift" "--flow-shift must be positive" --flow-shift -1 --frames 5 --out-latents "$tmp/bad.safetensors"
exit $fail
