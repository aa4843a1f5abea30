#!/usr/bin/env bash
# A LoRA adapter's cost: `pdit bench` on the FLUX-width model without and with
# a random diffusers/PEFT adapter of RANK on every linear layer of its blocks
# (q, k, v, the outputs, both MLPs, the modulations; single blocks' too), put
# beside the layers (never merged), one process, bf16 products, ROUNDS
# interleaved rounds (the machine is shared and its speed drifts): medians of
# seconds per step and of peak memory, each as a ratio to the run without in
# the same rounds. Issue 37's bound: at most 1.05 x a step at rank 32.
#
#   bench/lora.sh [SIZE] [ROUNDS] [RANK] [MODEL_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
size=${1:-512} rounds=${2:-3} rank=${3:-32} model=${4:-bench/flux-width}
bench_model "$model"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
adapter=$tmp/lora-r$rank.safetensors
# the layers' shapes from the model's weights; values small and random (the
# cost does not depend on them)
python3 - "$model/transformer" "$adapter" "$rank" << 'PY'
import array, json, os, random, struct, sys
tdir, out, r = sys.argv[1], sys.argv[2], int(sys.argv[3])
shapes = {}
for f in os.listdir(tdir):
    if f.endswith(".safetensors"):
        with open(os.path.join(tdir, f), "rb") as h:
            n = struct.unpack("<Q", h.read(8))[0]
            shapes.update({k: v["shape"] for k, v in json.loads(h.read(n)).items() if k != "__metadata__"})
layers = sorted(k[:-7] for k, s in shapes.items()
                if k.endswith(".weight") and len(s) == 2 and "transformer_blocks." in k)
rnd = random.Random(1)
header, chunks, off = {}, [], 0
for layer in layers:
    o, i = shapes[layer + ".weight"]
    for half, shape in (("A", [r, i]), ("B", [o, r])):
        a = array.array("f", (rnd.random() * 0.02 - 0.01 for _ in range(shape[0] * shape[1])))
        b = a.tobytes()
        header["transformer.%s.lora_%s.weight" % (layer, half)] = {"dtype": "F32", "shape": shape,
                                                                    "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
h = json.dumps(header).encode()
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for c in chunks:
        f.write(c)
print("adapter: %d layers, rank %d, %.1f M parameters" % (len(layers), r, off / 4e6), file=sys.stderr)
PY
for ((round = 1; round <= rounds; round++)); do
	for k in plain lora; do
		args=(--model "$model" -H "$size" -W "$size" --steps 3 --dtype bf16 --json)
		[ "$k" = lora ] && args+=(--lora "$adapter")
		echo "round $round/$rounds: $k" >&2
		j=$("$pdit" bench "${args[@]}" 2> /dev/null < /dev/null) || { echo "$k failed" >&2; exit 1; }
		record "$tmp" "$k" "$j"
	done
done
echo "| run | s/step (median) | × without | peak MB | × without | weights MB |"
echo "|---|---|---|---|---|---|"
for k in plain lora; do
	awk -v k="$k" -v s="$(med "$tmp" "$k" seconds_per_step)" -v p="$(med "$tmp" "$k" peak_rss_mb)" -v w="$(med "$tmp" "$k" weights_mb)" \
		-v S="$(med "$tmp" plain seconds_per_step)" -v P="$(med "$tmp" plain peak_rss_mb)" -v r="$rank" 'BEGIN {
		printf "| %s | %.3f | %.3f | %.0f | %.3f | %.0f |\n", k == "lora" ? "rank " r " adapter" : "without", s, s / S, p, p / P, w
	}'
done
echo
echo "FLUX-width model ($model), ${size}x$size, 3 steps, bf16 products, $rounds rounds interleaved, $(nproc) threads"
