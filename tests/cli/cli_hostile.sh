#!/usr/bin/env bash
# Every input of the fuzz corpus and its regressions, fed to the pdit command
# where a user would give such a file: each valid-or-broken safetensors file
# as a transformer's weights and as --embeds, each sharded index with its
# shard as a transformer's weights, each configuration as a transformer's
# config.json, each pair of CLIP tokenizer files and each
# sentencepiece model to pdit encode. Whatever the file, pdit ends normally
# (no signal, no sanitizer report) and, when it refuses, with one line on
# stderr that starts with "pdit:" and a nonzero exit.
# usage: cli_hostile.sh PDIT FUZZ_DIR GOLDEN_TE_DIR
set -u
pdit=$1 fz=$2 te=$3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0 runs=0 refused=0

# run LABEL COMMAND...: no signal; a refusal is one "pdit:" line
run() {
	local label=$1 rc lines
	shift
	"$@" > /dev/null 2> "$tmp/err"
	rc=$?
	runs=$((runs + 1))
	lines=$(grep -c '' "$tmp/err")
	if [ $rc -ge 124 ]; then
		echo "FAIL $label: exit $rc (signal or sanitizer)"; cat "$tmp/err"; fail=1
	elif [ $rc -ne 0 ] && { [ "$lines" -ne 1 ] || ! grep -q '^pdit: ' "$tmp/err"; }; then
		echo "FAIL $label: exit $rc with $lines lines on stderr:"; cat "$tmp/err"; fail=1
	elif [ $rc -ne 0 ]; then
		refused=$((refused + 1))
	fi
}

"$pdit" tiny "$tmp/m" > /dev/null 2>&1 || { echo "FAIL: pdit tiny"; exit 1; }
cp -r "$tmp/m/transformer" "$tmp/t"
gen=(--transformer "$tmp/t" --vae "$tmp/m/vae" --scheduler "$tmp/m/scheduler" -H 32 -W 32 --steps 1)

for f in "$fz"/corpus/safetensors/* "$fz"/regressions/safetensors/*; do
	[ "$(basename "$f")" = README ] && continue
	cp "$f" "$tmp/t/diffusion_pytorch_model.safetensors"
	run "weights $(basename "$f")" "$pdit" generate "${gen[@]}" --embeds "$tmp/m/embeds.safetensors" -o "$tmp/o.png"
	cp "$tmp/m/transformer/diffusion_pytorch_model.safetensors" "$tmp/t/"
	run "embeds $(basename "$f")" "$pdit" generate "${gen[@]}" --embeds "$f" -o "$tmp/o.png"
done
for f in "$fz"/corpus/config/* "$fz"/regressions/config/*; do
	[ "$(basename "$f")" = README ] && continue
	cp "$f" "$tmp/t/config.json"
	run "config $(basename "$f")" "$pdit" generate "${gen[@]}" --embeds "$tmp/m/embeds.safetensors" -o "$tmp/o.png"
done
cp "$tmp/m/transformer/config.json" "$tmp/t/"
# sharded sets: the index (shard names that leave the folder included), then its first shard
rm "$tmp/t/diffusion_pytorch_model.safetensors"
for f in "$fz"/corpus/st_index/* "$fz"/regressions/st_index/*; do
	[ "$(basename "$f")" = README ] && continue
	awk -v i="$tmp/t/diffusion_pytorch_model.safetensors.index.json" -v s="$tmp/t/model-00001-of-00002.safetensors" \
		'BEGIN { out = i; printf "" > i; printf "" > s } $0 == "--shard--" && out == i { out = s; next }
		{ print > out }' "$f"
	run "index $(basename "$f")" "$pdit" generate "${gen[@]}" --embeds "$tmp/m/embeds.safetensors" -o "$tmp/o.png"
done
rm -f "$tmp/t/"*.index.json "$tmp/t/"model-*
cp "$tmp/m/transformer/diffusion_pytorch_model.safetensors" "$tmp/t/"

enc=(--text-encoder "$te/text_encoder" --text-encoder-2 "$te/text_encoder_2" -p "a cat" --max-sequence-length 16)
mkdir -p "$tmp/tok" "$tmp/spm"
cp "$te"/tokenizer/*.json "$tmp/tok/" 2> /dev/null
for f in "$fz"/corpus/clip_files/* "$fz"/regressions/clip_files/*; do
	[ "$(basename "$f")" = README ] && continue
	# vocab.json, then merges.txt after the separator line
	awk -v v="$tmp/tok/vocab.json" -v m="$tmp/tok/merges.txt" 'BEGIN { out = v; printf "" > v; printf "" > m }
		$0 == "--merges--" && out == v { out = m; next } { print > out }' "$f"
	run "CLIP files $(basename "$f")" "$pdit" encode "${enc[@]}" --tokenizer "$tmp/tok" \
		--tokenizer-2 "$te/tokenizer_2" --out "$tmp/e.safetensors"
done
for f in "$fz"/corpus/t5_model/* "$fz"/regressions/t5_model/*; do
	[ "$(basename "$f")" = README ] && continue
	cp "$f" "$tmp/spm/spiece.model"
	run "sentencepiece $(basename "$f")" "$pdit" encode "${enc[@]}" --tokenizer "$te/tokenizer" \
		--tokenizer-2 "$tmp/spm" --out "$tmp/e.safetensors"
done

echo "$runs runs, $refused refused with one line, none crashed"
[ $fail -eq 0 ] && [ $refused -gt 0 ] && echo "all passed"
exit $fail
