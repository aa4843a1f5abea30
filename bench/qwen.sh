#!/usr/bin/env bash
# Qwen-Image at real widths (`pdit tiny --family qwen --qwen-width`: 24
# heads of 128, 2 of its 60 blocks; the language model 3584 wide, 28 heads
# over 4 key/value heads, MLP 18944, 2 of its 28 layers), bf16, one
# process: seconds per step (one branch), the ratio to the matrix-product
# rate pdit measures in the same run, peak memory against the estimate; and
# the language model's pass over the prompt (`pdit encode -v`'s seconds of
# the pass alone, not the loading) as a rate: its products' and attention's
# work counted here from the model's config and the prompt's tokens, against
# the matrix-product rate of the bench run before it. Medians of ROUNDS
# rounds, each a bench run and an encode; Markdown tables.
#
#   bench/qwen.sh [HEIGHT] [WIDTH] [ROUNDS] [MODEL_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
height=${1:-1024} width=${2:-1024} rounds=${3:-3} model=${4:-bench/qwen-width}
[ -d "$model" ] || "$pdit" tiny "$model" --family qwen --qwen-width >&2
prompt="A coffee shop entrance features a chalkboard sign reading \"Qwen Coffee 2 dollars a cup\", with a neon light beside it, warm ambient lighting, realistic details"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the prompt's tokens after the template (the encoder's rows): pdit encode writes the ids
"$pdit" encode --model "$model" -p "$prompt" --out "$tmp/e.safetensors" > /dev/null 2>&1
tokens=$(/usr/bin/python3 - "$tmp/e.safetensors" << 'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
head = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
print(head["input_ids"]["shape"][-1])
PY
)
# the encoder's work for those rows: q, k, v, o, the gated MLP, attention (causal: half the square)
gflop=$(/usr/bin/python3 - "$model/text_encoder/config.json" "$tokens" << 'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c = c.get("text_config", c)
t, d, f, L = int(sys.argv[2]), c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
hd = d // c["num_attention_heads"]
kv = c["num_key_value_heads"] * hd
per = 2 * t * (d * d * 2 + d * kv * 2 + 3 * d * f) + 2 * 2 * c["num_attention_heads"] * hd * t * (t + 1) / 2
print("%.3f" % (L * per / 1e9))
PY
)
for ((round = 1; round <= rounds; round++)); do
	echo "round $round/$rounds" >&2
	j=$("$pdit" bench --model "$model" -p "$prompt" -H "$height" -W "$width" --steps 2 --dtype bf16 --json 2> /dev/null \
		< /dev/null) ||
		{ echo "the run failed" >&2; exit 1; }
	for key in seconds_per_step ratio matmul_gflops achieved_gflops peak_rss_mb estimate_mb; do
		field "$key" "$j" >> "$tmp/one.$key"
	done
	"$pdit" encode --model "$model" -p "$prompt" --dtype bf16 --out "$tmp/e.safetensors" -v 2>&1 < /dev/null |
		sed -n 's/.*the language model ran [0-9]* tokens in \([0-9.]*\) s.*/\1/p' >> "$tmp/one.encode_seconds"
done
med() { median < "$tmp/one.$1"; }
echo "Qwen-Image-width (2 blocks; language model 2 layers), ${width}x$height, bf16, 1 process x $(nproc) threads, medians of $rounds runs:"
echo
echo "| s/step | GFLOP/s | matmul GFLOP/s | step / matmul | peak MB | estimate MB | peak / estimate |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
awk -v s="$(med seconds_per_step)" -v a="$(med achieved_gflops)" -v m="$(med matmul_gflops)" -v r="$(med ratio)" \
	-v p="$(med peak_rss_mb)" -v e="$(med estimate_mb)" \
	'BEGIN { printf "| %.2f | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |\n", s, a, m, r, p, e, p / e }'
echo
echo "| encoder tokens | GFLOP | s | GFLOP/s | encoder / matmul |"
echo "|---:|---:|---:|---:|---:|"
awk -v t="$tokens" -v g="$gflop" -v s="$(med encode_seconds)" -v m="$(med matmul_gflops)" \
	'BEGIN { printf "| %d | %.1f | %.3f | %.0f | %.2f |\n", t, g, s, g / s, g / s / m }'
