#!/usr/bin/env bash
# pdit inspect: a GGUF file's pairs and tensors as manifest.json lists them
# (name, type, shape in torch order); a safetensors file's tensors; every
# broken GGUF file one line naming the file, exit 1.
# usage: cli_inspect.sh PDIT QUANT_GOLDEN_DIR PYTHON3
set -u
pdit=$1 q=$2 py=$3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

out=$("$pdit" inspect "$q/types/ggml-types.gguf") || bad "inspect the types file"
printf '%s\n' "$out" > "$tmp/out"
"$py" - "$q/manifest.json" "$tmp/out" <<'PY' && ok "inspect lists every tensor with the manifest's type and shape" || bad "inspect's tensors"
import json, sys
m = json.load(open(sys.argv[1]))["types"]["gguf"]
lines = [l.split() for l in open(sys.argv[2]).read().splitlines() if l.startswith("  ") and "bytes" in l and "=" not in l]
got = {l[0]: (l[1], " ".join(l[2:-2])) for l in lines}
want = {k: (v["type"], "[" + ", ".join(str(x) for x in reversed(v["ne"])) + "]") for k, v in m.items()}
sys.exit(0 if got == want else 1)
PY
grep -q '^  test.string = "' <<< "$out" && grep -q "^  general.alignment\|alignment 32" <<< "$out" &&
	ok "inspect shows the pairs and the alignment" || bad "inspect's pairs"
"$pdit" inspect "$q/types/fp8-codes.safetensors" | grep -q "e4m3fn.all_codes *F8_E4M3 \[256\] 256 bytes" &&
	ok "inspect reads safetensors" || bad "inspect on safetensors"
n=0
for f in "$q"/broken/*.gguf; do
	"$pdit" inspect "$f" > /dev/null 2> "$tmp/err"
	rc=$?
	if [ $rc -ne 1 ] || [ "$(wc -l < "$tmp/err")" -ne 1 ] || ! grep -q "^pdit: $f: " "$tmp/err"; then
		cat "$tmp/err"; bad "inspect $f (exit $rc)"
	fi
	n=$((n + 1))
done
[ $n -ge 28 ] && ok "$n broken GGUF files: one line each, naming the file, exit 1" || bad "only $n broken files"
exit $fail
