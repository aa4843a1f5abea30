#!/usr/bin/env bash
# Qwen-Image against diffusers (tests/golden/qwen-tiny), as a user runs it:
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
