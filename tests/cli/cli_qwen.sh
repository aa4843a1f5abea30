#!/usr/bin/env bash
# Qwen-Image against diffusers (tests/golden/qwen-tiny), as a user runs it:
#   pdit encode --model on each text case (Qwen2's tokenizer on the
#   pipeline's template, the language model, 34 tokens dropped): ids and
#   masks exact, prompt_embeds within 1e-4;
#   pdit forward on each transformer case (a QwenImageTransformer2DModel
#   folder; the image grid from the case's height and width, the text's
#   padding from its mask): out.sample within 1e-4; a mask with a gap
#   refused naming the tensor.
# usage: cli_qwen.sh PDIT ST_COMPARE QWEN_GOLDEN
set -u
pdit=$1 cmp=$2 g=$3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

for f in "$g"/forward-*.safetensors; do
	name=$(basename "$f")
	if "$pdit" forward --transformer "$g/model/transformer" --inputs "$f" --out "$tmp/out.safetensors" > /dev/null \
		2> "$tmp/err" && "$cmp" tensors "$tmp/out.safetensors" "$f" 1e-4 out.sample > "$tmp/log"; then
		ok "$name: out.sample as diffusers' $(head -1 "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "$name"
	fi
done
# pdit encode on each text case: the template's ids and mask exact, prompt_embeds (34 tokens dropped)
# within 1e-4, prompt_embeds_mask all ones
for f in "$g"/text-*.safetensors; do
	name=$(basename "$f")
	prompt=$("$cmp" meta "$f" prompt)
	rm -f "$tmp/e.safetensors"
	if "$pdit" encode --model "$g/model" -p "$prompt" --out "$tmp/e.safetensors" > /dev/null 2> "$tmp/err" &&
		"$cmp" tensors "$tmp/e.safetensors" "$f" 1e-4 prompt_embeds > "$tmp/log" &&
		python3 - "$tmp/e.safetensors" "$f" >> "$tmp/log" << 'PY'
import json, struct, sys
def ints(path, name):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    t = json.loads(raw[8:8 + n])[name]
    s, e = t["data_offsets"]
    assert t["dtype"] == "I64", name
    return t["shape"], struct.unpack("<%dq" % ((e - s) // 8), raw[8 + n + s:8 + n + e])
for k in ("input_ids", "attention_mask", "prompt_embeds_mask"):
    if ints(sys.argv[1], k) != ints(sys.argv[2], k):
        sys.exit("%s differs" % k)
print("input_ids, attention_mask, prompt_embeds_mask exact")
PY
	then
		ok "$name: pdit encode as transformers' and diffusers' $(tr '\n' ' ' < "$tmp/log")"
	else
		cat "$tmp/err" "$tmp/log"; bad "pdit encode, $name"
	fi
done
# a text mask with a gap (a token after padding): refused, nothing written
python3 - "$g/forward-1.safetensors" "$tmp/gap.safetensors" << 'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
data = bytearray(raw[8 + n:])
s, e = head["in.encoder_hidden_states_mask"]["data_offsets"]
vals = list(struct.unpack("<%dq" % ((e - s) // 8), bytes(data[s:e])))
vals[-1] = 1
vals[-2] = 0
data[s:e] = struct.pack("<%dq" % len(vals), *vals)
open(sys.argv[2], "wb").write(raw[:8 + n] + bytes(data))
PY
rm -f "$tmp/no.safetensors"
if ! "$pdit" forward --transformer "$g/model/transformer" --inputs "$tmp/gap.safetensors" --out "$tmp/no.safetensors" \
	> /dev/null 2> "$tmp/err" && grep -q "in.encoder_hidden_states_mask has a gap" "$tmp/err" && [ ! -e "$tmp/no.safetensors" ]; then
	ok "a text mask with a gap: $(cat "$tmp/err")"
else
	cat "$tmp/err"; bad "a text mask with a gap"
fi
exit $fail
