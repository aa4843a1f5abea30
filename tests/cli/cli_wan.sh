#!/usr/bin/env bash
# Wan2.1 through the command: pdit generate on the golden tiny folder
# reproduces the three WanPipeline runs (latents.init within 1e-6,
# latents.final within 1e-4, max|a - b| / max|ref|, written as the
# pipeline's [B, 16, F, h, w]); --init-latents takes the pipeline's own
# noise; bad video requests get one line each and write nothing.
# The frames of a run (-o frame-%03d.png) equal the pipeline's video.uint8
# (export_to_video's truncation) within 1; the MP4 of the same run has its
# 9 frames at 48x32, 16 fps, H.264 and the parameters in its tags, and
# decodes (FFmpeg's command) as close to those frames as FFmpeg's own
# encoding of them does (PSNR within 0.5 dB: H.264 4:2:0 is lossy, and the
# tiny model's frames are noise to it). pdit forward on the golden forward
# files gives their out.sample (as latents [B, 16, F, h, w]) within 1e-5.
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
	if ! "$pdit" generate --model "$m" "$@" -o "$tmp/$name.mp4" --out-latents "$tmp/$name.safetensors" -q 2> "$tmp/err"; then
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

# frames and video of the first run
cfg=(-p "A cat walks on the grass, realistic style." -n "$neg" --frames 9 -H 32 -W 48 --steps 4 -s 42)
mkdir -p "$tmp/fr"
if "$pdit" generate --model "$m" "${cfg[@]}" -o "$tmp/fr/frame-%03d.png" -q 2> "$tmp/err" &&
	"$pdit" generate --model "$m" "${cfg[@]}" -o "$tmp/clip.mp4" -q 2>> "$tmp/err"; then
	n=$(ls "$tmp/fr" | wc -l)
	[ "$n" -eq 9 ] || { echo "FAIL frames: $n PNGs, want 9"; fail=1; }
	for f in 0 1 4 8; do
		"$cmp" png "$tmp/fr/frame-00$f.png" "$g/pipeline-cfg-n9-h32w48.safetensors" video.uint8 $f 1 || fail=1
	done
	probe=$(ffprobe -v error -show_entries stream=codec_name,width,height,nb_frames,r_frame_rate:format_tags=comment \
		-of default=nw=1 "$tmp/clip.mp4")
	for want in codec_name=h264 width=48 height=32 nb_frames=9 r_frame_rate=16/1 "seed: 42" "frames: 9"; do
		grep -qF -- "$want" <<< "$probe" || { echo "FAIL mp4: no '$want' in:"; echo "$probe"; fail=1; }
	done
	ffmpeg -v error -i "$tmp/clip.mp4" -f rawvideo -pix_fmt rgb24 -y "$tmp/mine.rgb" &&
		ffmpeg -v error -i "$tmp/fr/frame-%03d.png" -f rawvideo -pix_fmt rgb24 -y "$tmp/png.rgb" &&
		ffmpeg -v error -framerate 16 -i "$tmp/fr/frame-%03d.png" -c:v libx264 -crf 16 -pix_fmt yuv420p -y "$tmp/ref.mp4" &&
		ffmpeg -v error -i "$tmp/ref.mp4" -f rawvideo -pix_fmt rgb24 -y "$tmp/ref.rgb" ||
		{ echo "FAIL mp4: ffmpeg could not decode"; fail=1; }
	python3 - "$tmp/mine.rgb" "$tmp/ref.rgb" "$tmp/png.rgb" <<'PY' || fail=1
import math, sys
mine, ref, png = (open(p, "rb").read() for p in sys.argv[1:])
def psnr(a, b):
    assert len(a) == len(b), (len(a), len(b))
    mse = sum((x - y) ** 2 for x, y in zip(a, b)) / len(a)
    return 10 * math.log10(255 * 255 / mse) if mse else 99.0
p, r = psnr(mine, png), psnr(ref, png)
print("%s   mp4: PSNR %.2f dB against the frames (FFmpeg's own encoding: %.2f dB)" % ("ok" if p >= r - 0.5 else "FAIL", p, r))
sys.exit(0 if p >= r - 0.5 else 1)
PY
else
	echo "FAIL frames/mp4: $(cat "$tmp/err")"; fail=1
fi

# expect NAME SUBSTRING ARGS...: nonzero exit, one line naming the problem, no file
expect() {
	local name=$1 want=$2 rc
	shift 2
	rm -f "$tmp/bad.safetensors" "$tmp/bad.png" "$tmp/bad.mp4"
	"$pdit" generate --model "$m" -p "a cat" -H 32 -W 32 --steps 1 "$@" > "$tmp/out" 2> "$tmp/err"
	rc=$?
	if [ $rc -eq 0 ] || [ $rc -ge 128 ] || [ "$(grep -c '' "$tmp/err")" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err" ||
		[ -e "$tmp/bad.safetensors" ] || [ -e "$tmp/bad.png" ] || [ -e "$tmp/bad.mp4" ]; then
		echo "FAIL $name (exit $rc):"; cat "$tmp/err"; fail=1
	else
		echo "ok   $name: $(cat "$tmp/err")"
	fi
}
expect "frames not 4k + 1" "9 or 13 are" --frames 10 --out-latents "$tmp/bad.safetensors"
expect "zero frames" "--frames must be at least 1 (got 0)" --frames 0 --out-latents "$tmp/bad.safetensors"
expect "true CFG scale on Wan" "give --guidance 4" --true-cfg-scale 4 --frames 5 --out-latents "$tmp/bad.safetensors"
expect "a video as one PNG" "--frames 5 makes a video, written as .mp4" --frames 5 -o "$tmp/bad.png"
expect "bad frame pattern" "a single %d or %03d" --frames 5 -o "$tmp/frame-%s.png"
# a frame's name that is a folder: refused before anything is computed or written
mkdir -p "$tmp/ff/fr-003.png"
expect "a frame's name taken by a folder" "fr-003.png: it is a folder" --frames 5 -o "$tmp/ff/fr-%03d.png"
[ -e "$tmp/ff/fr-000.png" ] && { echo "FAIL frames written before the refusal"; fail=1; }
# the same with the family's 81 frames (no --frames): checked once the engine knows them, before a step
mkdir -p "$tmp/fd/fr-050.png"
expect "frame 50 of the default 81 taken by a folder" "fr-050.png: it is a folder" -q -o "$tmp/fd/fr-%03d.png"
[ -e "$tmp/fd/fr-000.png" ] && { echo "FAIL default frames written before the refusal"; fail=1; }
# a %d in a video's name numbers the videos: MP4s, not PNG frames
if printf 'a cat\na dog\n' > "$tmp/two.txt" &&
	"$pdit" generate --model "$m" --prompts "$tmp/two.txt" -H 32 -W 32 --steps 1 --frames 5 -o "$tmp/v-%d.mp4" -q &&
	[ "$(head -c 8 "$tmp/v-1.mp4" | tail -c 4)" = ftyp ] && [ "$(head -c 8 "$tmp/v-0.mp4" | tail -c 4)" = ftyp ]; then
	echo "ok   -o v-%d.mp4 with two prompts: v-0.mp4 and v-1.mp4, videos"
else
	echo "FAIL -o v-%d.mp4: $(ls "$tmp" | grep '^v-' | tr '\n' ' ')"; fail=1
fi
expect "bad fps" "--fps must be at least 1 (got 0)" --frames 5 --fps 0 -o "$tmp/bad.mp4"
expect "bad flow shift" "--flow-shift must be positive" --flow-shift -1 --frames 5 --out-latents "$tmp/bad.safetensors"
# the text encoders' flags follow the family's list: Wan has one encoder (UMT5, --t5xxl)
expect "CLIP's file on Wan" "--clip_l: the wan family has no such text encoder (--t5xxl (UMT5))" \
	--clip_l "$m/text_encoder/config.json" --frames 5 --out-latents "$tmp/bad.safetensors"
expect "a second encoder on Wan" "--text-encoder-2: the wan family has 1 text encoder" \
	--text-encoder-2 "$m/text_encoder" --frames 5 --out-latents "$tmp/bad.safetensors"
expect "Wan's slot given twice" "give each component once: --text-encoder or --t5xxl" \
	--text-encoder "$m/text_encoder" --t5xxl "$m/text_encoder/config.json" --frames 5 --out-latents "$tmp/bad.safetensors"
# pdit forward on every golden forward file: the prediction, in the file's
# latent shape, and the time and text embeddings within 1e-5
for f in "$g"/forward-*.safetensors; do
	"$pdit" forward --transformer "$m/transformer" --inputs "$f" --out "$tmp/fwd.safetensors" --dump 2> "$tmp/err" ||
		{ echo "FAIL forward $(basename "$f"): $(cat "$tmp/err")"; fail=1; continue; }
	if "$cmp" tensors "$tmp/fwd.safetensors" "$f" 1e-5 out.sample emb.temb emb.timestep_proj > "$tmp/log"; then
		echo "ok   forward $(basename "$f"): $(tail -1 "$tmp/log")"
	else
		cat "$tmp/log"; echo "FAIL forward $(basename "$f")"; fail=1
	fi
done
exit $fail
