#!/usr/bin/env bash
# Bad input ends in one line naming the problem and a nonzero exit, and
# leaves no file behind under the requested name.
# usage: cli_errors.sh PDIT GOLDEN_DIR [SERVE]   (SERVE 0: built with -DPDIT_SERVE=OFF)
set -u
pdit=$1 g=$2 serve=${3:-1}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# expect NAME SUBSTRING COMMAND...: nonzero exit, exactly one line on stderr
# containing SUBSTRING, nothing on stdout.
expect() {
	local name=$1 want=$2 rc lines
	shift 2
	"$@" > "$tmp/out" 2> "$tmp/err"
	rc=$?
	lines=$(grep -c '' "$tmp/err")
	if [ $rc -eq 0 ]; then
		echo "FAIL $name: exit status 0"; fail=1
	elif [ $rc -ge 128 ]; then
		echo "FAIL $name: killed by a signal ($rc)"; cat "$tmp/err"; fail=1
	elif [ "$lines" -ne 1 ]; then
		echo "FAIL $name: $lines lines on stderr, want 1:"; cat "$tmp/err"; fail=1
	elif ! grep -qF -- "$want" "$tmp/err"; then
		echo "FAIL $name: message lacks '$want':"; cat "$tmp/err"; fail=1
	elif [ -s "$tmp/out" ]; then
		echo "FAIL $name: wrote to stdout"; fail=1
	else
		echo "ok   $name: $(cat "$tmp/err")"
	fi
}

"$pdit" tiny "$tmp/m" > /dev/null 2>&1 || { echo "FAIL: pdit tiny"; exit 1; }
E="$tmp/m/embeds.safetensors"
run=(--model "$tmp/m" --embeds "$E" -H 32 -W 32 --steps 1 -o "$tmp/o.png")

expect "height not a multiple of 16" "multiples of 16" "$pdit" generate "${run[@]}" -H 100
expect "negative width" "-W/--width must be at least 1 (got -16)" "$pdit" generate "${run[@]}" -W -16
expect "non-numeric height" "-H/--height expects an integer" "$pdit" generate "${run[@]}" -H abc
expect "unknown option" "unknown option '--frobnicate'" "$pdit" generate "${run[@]}" --frobnicate
expect "missing value" "--steps needs a value" "$pdit" generate "${run[@]}" --steps
expect "zero steps" "--steps must be at least 1 (got 0)" "$pdit" generate "${run[@]}" --steps 0
# a count given as 0 (or negative) is refused, never taken as its default
for f in "-H/--height -H" "-W/--width -W" "--frames --frames" "-t/--threads -t" "--max-sequence-length --max-sequence-length" \
	"--num-patches --num-patches" "--fps --fps"; do
	expect "zero ${f##* }" "${f% *} must be at least 1 (got 0)" "$pdit" generate "${run[@]}" ${f##* } 0
done
expect "negative threads" "-t/--threads must be at least 1 (got -2)" "$pdit" generate "${run[@]}" -t -2
# a model without text encoders (pdit tiny's default): the flags that give one, or prompts encoded before
expect "a prompt without a text encoder" "--clip_l FILE, or --embeds FILE" "$pdit" generate --model "$tmp/m" -p "a fox" \
	-H 32 -W 32 --steps 1 -o "$tmp/o.png"
expect "bench's zero batch" "--batch must be at least 1 (got 0)" "$pdit" bench --model "$tmp/m" --batch 0
expect "check's zero width" "-W/--width must be at least 1 (got 0)" "$pdit" check --model "$tmp/m" -W 0
expect "serve's zero threads" "-t/--threads must be at least 1 (got 0)" "$pdit" serve --model "$tmp/m" -t 0
expect "encode's zero tokens" "--max-sequence-length must be at least 1 (got 0)" "$pdit" encode --model "$tmp/m" \
	-p x -o "$tmp/e.safetensors" --max-sequence-length 0
expect "plan's zero height" "-H/--height must be at least 1 (got 0)" "$pdit" plan --model "$tmp/m" --devices 2 -H 0
expect "tiny's zero heads" "--heads must be at least 1 (got 0)" "$pdit" tiny "$tmp/t0" --heads 0
expect "forward's zero threads" "-t/--threads must be at least 1 (got 0)" "$pdit" forward --transformer "$tmp/m/transformer" \
	--inputs "$E" --out "$tmp/f.safetensors" -t 0
# a picture is PNG: a .jpg name is refused, not filled with PNG bytes
expect "a .jpg output" "-o/--output $tmp/o.jpg: pdit writes pictures as PNG" "$pdit" generate "${run[@]}" -o "$tmp/o.jpg"
[ -e "$tmp/o.jpg" ] && { echo "FAIL a .jpg output: $tmp/o.jpg written"; fail=1; }
# the address is checked before the weights are read (a bad port, then a missing model: the port's line)
if [ "$serve" = 1 ]; then
	expect "serve's port 99999" "--listen 127.0.0.1:99999: the port must be 0 to 65535" "$pdit" serve --model "$tmp/none" \
		--listen 127.0.0.1:99999
else
	# without the HTTP service: said before the weights load (a missing model: the service's line)
	expect "serve without its HTTP service" "built without its HTTP service (-DPDIT_SERVE=OFF)" "$pdit" serve \
		--model "$tmp/none" --listen 127.0.0.1:0
fi
# Ctrl-C once the pictures are written and "done" said: exit 0, no "interrupted"
PDIT_INJECT_FAULT=exit:0:hang "$pdit" generate "${run[@]}" -o "$tmp/late.png" 2> "$tmp/late.err" &
late=$!
for _ in $(seq 1 300); do grep -q "hanging at exit" "$tmp/late.err" && break; sleep 0.1; done
kill -INT $late
wait $late
rc=$?
if [ $rc -eq 0 ] && [ -s "$tmp/late.png" ] && ! grep -q interrupted "$tmp/late.err" && grep -q "pdit: done" "$tmp/late.err"; then
	echo "ok   Ctrl-C after done: exit 0, the picture kept"
else
	echo "FAIL Ctrl-C after done: exit $rc"; cat "$tmp/late.err"; fail=1
fi
expect "bad dtype" "--dtype must be f32 or bf16" "$pdit" generate "${run[@]}" --dtype f8
expect "bad VAE dtype" "--vae-dtype must be f32 or bf16, not 'f16'" "$pdit" generate "${run[@]}" --vae-dtype f16
expect "no embeddings" "--embeds" "$pdit" generate --model "$tmp/m" -H 32 -W 32
expect "missing embeddings file" "nope.safetensors" "$pdit" generate "${run[@]}" --embeds "$tmp/nope.safetensors"
expect "model folder without model_index.json" "model_index.json" "$pdit" generate "${run[@]}" --model "$tmp"
expect "unknown command" "unknown command" "$pdit" frobnicate

# a model folder with a missing file
cp -r "$tmp/m" "$tmp/m2"
rm "$tmp/m2/transformer/diffusion_pytorch_model.safetensors"
expect "missing weights file" "diffusion_pytorch_model.safetensors" "$pdit" generate "${run[@]}" --model "$tmp/m2"
cp -r "$tmp/m" "$tmp/m3"
rm "$tmp/m3/vae/config.json"
expect "missing VAE config" "vae/config.json" "$pdit" generate "${run[@]}" --model "$tmp/m3"
rm -r "$tmp/m3/scheduler"
expect "model_index names a missing folder" "scheduler" "$pdit" generate "${run[@]}" --model "$tmp/m3"

# a file given to --model (stable-diffusion.cpp's -m), a folder that is not there, an empty .gguf
: > "$tmp/empty.gguf"
expect "a file as --model" "--diffusion-model" "$pdit" generate "${run[@]}" --model "$tmp/empty.gguf"
expect "no --model folder" "no such folder" "$pdit" generate "${run[@]}" --model "$tmp/nothere"
expect "an empty .gguf" "too short for a safetensors or GGUF file" "$pdit" generate "${run[@]}" \
	--diffusion-model "$tmp/empty.gguf"

# corrupt safetensors: truncated, and a header that lies
cp -r "$tmp/m" "$tmp/m4"
w="$tmp/m4/transformer/diffusion_pytorch_model.safetensors"
truncate -s 100000 "$w"
expect "truncated weights" "diffusion_pytorch_model.safetensors" "$pdit" generate "${run[@]}" --model "$tmp/m4"
printf '\xff\xff\xff\xff\x00\x00\x00\x00' | dd of="$w" conv=notrunc status=none
expect "header length beyond the file" "header length" "$pdit" generate "${run[@]}" --model "$tmp/m4"

# a config that does not match its weights
cp -r "$tmp/m" "$tmp/m5"
sed -i 's/"num_attention_heads":[[:space:]]*4/"num_attention_heads": 8/' "$tmp/m5/transformer/config.json"
grep -q '"num_attention_heads": 8' "$tmp/m5/transformer/config.json" || { echo "FAIL: could not edit the config"; fail=1; }
expect "config not matching the weights" "expected" "$pdit" generate "${run[@]}" --model "$tmp/m5"
cp -r "$tmp/m" "$tmp/m6"
echo '{ "in_channels": ' > "$tmp/m6/transformer/config.json"
expect "malformed config" "config.json" "$pdit" generate "${run[@]}" --model "$tmp/m6"

# embeddings that do not fit the model, true CFG without negatives
expect "embeddings of another width" "joint_attention_dim" "$pdit" generate "${run[@]}" \
	--embeds "$g/pipeline-schnell-h48w96.safetensors"
expect "true CFG without negative embeddings" "negative_prompt_embeds" "$pdit" generate \
	--transformer "$g/transformer-dev" --vae "$g/vae-dev" --embeds "$g/pipeline-dev-h64w48.safetensors" \
	-H 32 -W 32 --steps 1 --true-cfg-scale 4 -o "$tmp/o.png"

expect "a huge picture" "at most 16384" "$pdit" generate "${run[@]}" -H 1048576 -W 64
# FLUX's VAE width at the largest size: 275 GB for the decode, refused before anything is allocated
"$pdit" tiny "$tmp/wide" --vae-channels 128,32,32,32 > /dev/null 2>&1 || { echo "FAIL: pdit tiny"; exit 1; }
expect "a picture beyond the memory" "needs at least" "$pdit" generate --model "$tmp/wide" \
	--embeds "$tmp/wide/embeds.safetensors" -H 16384 -W 16384 --steps 1 -o "$tmp/o.png"
expect "too many steps" "--steps must be between 1 and 10000" "$pdit" generate "${run[@]}" --steps 2000000000
expect "a negative batch" "--batch must be at least 1 (got -3)" "$pdit" bench "${run[@]:0:8}" --batch -3
expect "a negative deadline" "--comm-timeout must be" "$pdit" generate "${run[@]}" --comm-timeout -1

# forward: missing inputs
expect "patches without PipeFusion" "--num-patches needs --pipefusion-degree" "$pdit" generate "${run[@]}" \
	--num-patches 3
expect "negative warm-up" "--warmup-steps must not be negative" "$pdit" generate "${run[@]}" --warmup-steps -1 \
	--pipefusion-degree 2
expect "warm-up without a stale method" "--warmup-steps goes with --distrifusion-degree or --pipefusion-degree" \
	"$pdit" generate "${run[@]}" --warmup-steps 2 --ulysses-degree 2
expect "DistriFusion and ring together" "cannot both be given" "$pdit" generate "${run[@]}" \
	--distrifusion-degree 2 --ring-degree 2
expect "vae parallel both ways" "contradict" "$pdit" generate "${run[@]}" --vae-parallel --no-vae-parallel
expect "forward without inputs" "--inputs" "$pdit" forward --transformer "$g/transformer-dev" --out "$tmp/x"
expect "forward inputs of another model" "in.hidden_states" "$pdit" forward --transformer "$g/transformer-dev" \
	--inputs "$g/forward-schnell-h64w48.safetensors" --out "$tmp/x"

# pdit's own commands join: the published (sharded) transformer folder quantizes as it is, and the
# file loads beside the folder, whose config.json serves it; inspect takes a folder, and a file of
# another kind is named so
"$pdit" tiny "$tmp/full" --full > /dev/null 2>&1 || { echo "FAIL: pdit tiny --full"; exit 1; }
if "$pdit" quantize "$tmp/full/transformer" "$tmp/q8.gguf" --type q8_0 > /dev/null 2>&1 &&
	"$pdit" generate --model "$tmp/full" --diffusion-model "$tmp/q8.gguf" -p "a fox" -H 32 -W 32 --steps 1 \
		-o "$tmp/q8.png" -q && [ -s "$tmp/q8.png" ]; then
	echo "ok   quantize a sharded transformer folder; --model DIR --diffusion-model the file"
else
	echo "FAIL quantize the folder, then --model DIR --diffusion-model FILE"; fail=1
fi
rm -f "$tmp/q8.png"
if "$pdit" inspect "$tmp/full/transformer" > "$tmp/inspect.txt" 2>&1 && grep -q "3 files" "$tmp/inspect.txt" &&
	"$pdit" inspect "$tmp/full/text_encoder_2" > /dev/null 2>&1; then
	echo "ok   inspect a folder: its weights"
else
	echo "FAIL inspect a folder: $(head -3 "$tmp/inspect.txt")"; fail=1
fi
printf '# a README\n\nnot weights at all, but long enough to have a header length\n' > "$tmp/README.md"
expect "inspect a text file" "$tmp/README.md: not a safetensors or GGUF file" "$pdit" inspect "$tmp/README.md"
expect "inspect a folder without weights" "a folder without" "$pdit" inspect "$tmp/full/scheduler"
# pdit quantize: a name of the other format, a VAE (no command loads a converted one); a text
# encoder's folder (model.safetensors) converts
expect "quantize: a GGUF named .safetensors" "--type q8_0 writes a GGUF file: give OUT a .gguf name" \
	"$pdit" quantize "$tmp/full/transformer" "$tmp/q.safetensors" --type q8_0
expect "quantize: safetensors named .gguf" "--type bf16 writes safetensors: give OUT a .safetensors name" \
	"$pdit" quantize "$tmp/full/transformer" "$tmp/q.gguf" --type bf16
expect "quantize a VAE" "$tmp/full/vae is a VAE" "$pdit" quantize "$tmp/full/vae" "$tmp/v.gguf" --type q8_0
if "$pdit" quantize "$tmp/full/text_encoder_2" "$tmp/t5.safetensors" --type bf16 > /dev/null 2>&1 && [ -s "$tmp/t5.safetensors" ]; then
	echo "ok   quantize a text encoder's folder to bf16"
else
	echo "FAIL quantize a text encoder's folder to bf16"; fail=1
fi
expect "quantize: a GGUF named .SafeTensors" "give OUT a .gguf name" \
	"$pdit" quantize "$tmp/full/transformer" "$tmp/q.SafeTensors" --type q8_0
# IN again under another name: it would be replaced by its own conversion
ln -s t5.safetensors "$tmp/t5-link.safetensors"
expect "quantize: OUT is IN through a link" "OUT must be another file than IN" \
	"$pdit" quantize "$tmp/t5-link.safetensors" "$tmp/t5.safetensors" --type f16
for f in q.safetensors q.gguf v.gguf q.SafeTensors; do [ -e "$tmp/$f" ] && { echo "FAIL quantize left $f"; fail=1; }; done
# pdit tiny: a model of no block, a fifth VAE width
expect "tiny without blocks" "a model needs at least one block" "$pdit" tiny "$tmp/t0b" --layers 0 --single-layers 0
expect "tiny, five VAE widths" "--vae-channels needs four numbers" "$pdit" tiny "$tmp/t5w" --vae-channels 8,16,16,16,16
expect "a count out of range" "-H/--height is out of range: 99999999999" "$pdit" generate "${run[@]}" -H 99999999999
expect "plan: a height not of 16" "-H/--height must be a multiple of 16 up to 16384 (got 17)" \
	"$pdit" plan --model "$tmp/m" --devices 2 -H 17
expect "check: a negative tolerance" "--tolerance must not be negative" "$pdit" check "${run[@]:0:10}" --tolerance -1
expect "bench: no warm-up step" "--warmup must be at least 1 (got 0)" "$pdit" bench "${run[@]:0:8}" --warmup 0
# text that is no UTF-8 (the pipelines' prompts are Python strings): refused naming the line or the flag,
# before anything is encoded; a NUL in a prompts file no longer cuts the prompt
printf 'a fox\n\xff\xfe a dog\n' > "$tmp/latin.txt"
printf 'a fox\na\0dog\n' > "$tmp/nul.txt"
printf 'caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x88\n' > "$tmp/utf8.txt"
expect "a prompts line that is no UTF-8" "$tmp/latin.txt:2: not UTF-8 text (byte 0xff at column 1)" \
	"$pdit" generate --model "$tmp/full" --prompts "$tmp/latin.txt" -H 32 -W 32 --steps 1 -o "$tmp/o.png"
expect "a NUL in a prompts line" "$tmp/nul.txt:2: a NUL byte" \
	"$pdit" generate --model "$tmp/full" --prompts "$tmp/nul.txt" -H 32 -W 32 --steps 1 -o "$tmp/o.png"
expect "an overlong form in -p" "-p/--prompt: not UTF-8 text (byte 0xc0 at byte 3)" \
	"$pdit" generate --model "$tmp/full" -p "$(printf 'a \xc0\xaf')" -H 32 -W 32 --steps 1 -o "$tmp/o.png"
expect "a surrogate in -n" "-n/--negative-prompt: not UTF-8 text" "$pdit" generate --model "$tmp/full" -p "a fox" \
	-n "$(printf 'x\xed\xa0\x80')" --true-cfg-scale 2 -H 32 -W 32 --steps 1 -o "$tmp/o.png"
expect "pdit encode, a prompt that is no UTF-8" "-p/--prompt: not UTF-8 text" \
	"$pdit" encode --model "$tmp/full" -p "$(printf '\xff')" -o "$tmp/e.safetensors"
if "$pdit" generate --model "$tmp/full" --prompts "$tmp/utf8.txt" -H 32 -W 32 --steps 1 -o "$tmp/u.png" -q; then
	echo "ok   a prompt of two-, three- and four-byte characters"
else
	echo "FAIL well-formed UTF-8 refused"; fail=1
fi
rm -f "$tmp/u.png"
# an embeddings file whose prompts (its metadata) are no UTF-8: the picture's parameters name the file instead
"$pdit" encode --model "$tmp/full" -p "a fox" -o "$tmp/fox.safetensors" > /dev/null 2>&1 &&
	perl -pi -e 's/a fox/a f\xffx/' "$tmp/fox.safetensors" &&
	"$pdit" generate --model "$tmp/full" --embeds "$tmp/fox.safetensors" -H 32 -W 32 --steps 1 -o "$tmp/fox.png" -q
if [ -s "$tmp/fox.png" ] && grep -q "fox.safetensors (prompt 0)" "$tmp/fox.png" &&
	! LC_ALL=C grep -a -q $'f\xffx' "$tmp/fox.png"; then
	echo "ok   an embeddings file's prompt that is no UTF-8 is left out of the picture's parameters"
else
	echo "FAIL an embeddings file's prompt that is no UTF-8"; fail=1
fi
# the third picture of an embeddings file's batch has a folder for its name: refused before the work
printf 'a\nb\nc\n' > "$tmp/three.txt"
mkdir -p "$tmp/three" "$tmp/three/x-2.png"
"$pdit" encode --model "$tmp/full" --prompts "$tmp/three.txt" -o "$tmp/three.safetensors" > /dev/null 2>&1
expect "--embeds of 3, picture 2's name a folder" "three/x-2.png: it is a folder" \
	"$pdit" generate --model "$tmp/full" --embeds "$tmp/three.safetensors" -H 32 -W 32 --steps 1 -o "$tmp/three/x.png"
[ -e "$tmp/three/x-0.png" ] && { echo "FAIL --embeds of 3: picture 0 written before the refusal"; fail=1; }
# outputs that are no plain file: a pipe and a device written in place, a link's target replaced, the
# link kept (a temporary renamed over them would put a plain file there: /dev/null as root)
# (the reader outlives the writer: neither waits for ever)
mkfifo "$tmp/pipe" && { timeout 300 cat "$tmp/pipe" > "$tmp/piped" & }
timeout 120 "$pdit" generate "${run[@]}" -o "$tmp/pipe" -q; rc_pipe=$?
[ $rc_pipe -eq 0 ] || timeout 5 cat /dev/null > "$tmp/pipe"   # lets the reader go
wait
mkdir "$tmp/away" && echo old > "$tmp/away/old.png"
ln -s target.png "$tmp/link.png" && ln -s away/old.png "$tmp/link2.png"
"$pdit" generate "${run[@]}" -o "$tmp/link.png" -q && "$pdit" generate "${run[@]}" -o "$tmp/link2.png" -q; rc_link=$?
# /tmp may be mounted nodev: the device then is one made where it can be opened, or none
nodev=1 rc_dev=0
if mknod "$tmp/null" c 1 3 2> /dev/null && echo x > "$tmp/null" 2> /dev/null; then
	nodev=0
	"$pdit" generate "${run[@]}" -o "$tmp/n.png" --out-latents "$tmp/null" -q; rc_dev=$?
fi
png() { [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = "211PNG" ]; }
if [ $rc_pipe -eq 0 ] && [ -p "$tmp/pipe" ] && png "$tmp/piped" && [ $rc_link -eq 0 ] && [ -L "$tmp/link.png" ] &&
	png "$tmp/target.png" && [ -L "$tmp/link2.png" ] && png "$tmp/away/old.png" && [ $rc_dev -eq 0 ] &&
	{ [ $nodev = 1 ] || [ -c "$tmp/null" ]; } && ! ls "$tmp"/*.tmp "$tmp"/away/*.tmp > /dev/null 2>&1; then
	echo "ok   a pipe and a device written in place, links' targets replaced (device checked: $((1 - nodev)))"
else
	echo "FAIL outputs that are no plain file (pipe $rc_pipe, links $rc_link, device $rc_dev):" \
		"$(ls -l "$tmp/pipe" "$tmp/link.png" "$tmp/link2.png" "$tmp/null" 2>&1 | tr '\n' ' ')"; fail=1
fi
rm -f "$tmp/n.png"
# a video is rewound to write its sizes: a pipe is refused before any work
mkfifo "$tmp/v.mp4"
expect "a video into a pipe" "a video is written where it can be rewound" "$pdit" generate "${run[@]}" --frames 5 \
	-o "$tmp/v.mp4"
# the files of pictures and adapters are named with their flag; an adapter's before any prompt is encoded
# (one line: no "encoded" line before it)
expect "a missing adapter" "--lora: $tmp/none.safetensors: No such file" "$pdit" generate --model "$tmp/full" \
	-p "a fox" -H 32 -W 32 --steps 1 --lora "$tmp/none.safetensors" -o "$tmp/o.png"
expect "a missing init picture" "-i/--init-img: $tmp/none.png: No such file" "$pdit" generate "${run[@]}" \
	-i "$tmp/none.png"
"$pdit" generate "${run[@]}" -o "$tmp/pic.png" -q || { echo "FAIL: a picture to start from"; fail=1; }
expect "a mask that is no picture" "--mask: $tmp/README.md: Not a PNG" "$pdit" generate "${run[@]}" \
	-i "$tmp/pic.png" --mask "$tmp/README.md"
expect "a reference that is no picture" "-r/--ref-image: $tmp/README.md: Not a PNG" "$pdit" generate "${run[@]}" \
	-r "$tmp/README.md"

[ -e "$tmp/o.png" ] && { echo "FAIL: a picture was written by a failing run"; fail=1; }
ls "$tmp"/*.tmp > /dev/null 2>&1 && { echo "FAIL: temporary files left behind"; fail=1; }
exit $fail
