#!/usr/bin/env bash
# The command on the CUDA backend, as the device check drives it on a GPU,
# here on the CUDA emulation (PDIT_EMU: pdit linked with tests/emu's
# backend, whose device is the CPU): the quantized golden files through
# pdit forward --backend cuda (GGUF Q8_0 and Q4_K_S, plain and scaled fp8:
# f32 every tensor within 1e-4 of diffusers, bf16 out.sample within 2e-2,
# cli_quant.sh's tolerances); a picture on --backend cuda against the CPU
# build's (PDIT) within 2 levels; --backend auto finding the device and the
# log naming it; --device and --quant-products int8 refused with their flag
# named and nothing written; with MPIRUN, 2 processes sharing the one device
# (Ulysses, ring, CFG) against one process's picture.
# usage: cli_cuda_emu.sh PDIT_EMU PDIT ST_COMPARE QUANT_GOLDEN_DIR [MPIRUN...]
set -u
emu=$1 pdit=$2 cmp=$3 golden=$4
shift 4
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# 1. the quantized files, kept quantized on the device (the device check's
# own loop)
"$(dirname "$0")/quant_golden.sh" "$emu" "$cmp" "$golden" "$tmp/quant" --backend cuda || fail=1

# 2. a picture: cuda against the CPU build, and auto finding the device
model=$tmp/model
"$pdit" tiny "$model" > /dev/null 2>&1 || bad "pdit tiny $model"
gen=(generate -m "$model" --embeds "$model/embeds.safetensors" -H 64 -W 48 --steps 2 --true-cfg-scale 2)
"$pdit" "${gen[@]}" --backend cpu -o "$tmp/cpu.png" > /dev/null 2>&1 || bad "pdit generate --backend cpu"
if "$emu" "${gen[@]}" --backend auto -v -o "$tmp/cuda.png" > /dev/null 2> "$tmp/err"; then
	grep -q "computing on cuda (pdit's CUDA emulation" "$tmp/err" &&
		ok "--backend auto computes on the device and says so: $(grep -m1 'computing on' "$tmp/err")" ||
		{ cat "$tmp/err"; bad "--backend auto: no log line naming the CUDA device"; }
	"$cmp" pngs "$tmp/cuda.png" "$tmp/cpu.png" 2 > "$tmp/log" && ok "picture on cuda vs cpu: $(cat "$tmp/log")" ||
		{ cat "$tmp/log"; bad "picture on cuda vs cpu"; }
else
	cat "$tmp/err"
	bad "pdit generate --backend auto"
fi

# 3. refusals: the flag named, nonzero, no picture
refuse() { # FLAG-NAME ARGS...
	local flag=$1
	shift
	if "$emu" "${gen[@]}" --backend cuda "$@" -o "$tmp/refused.png" > /dev/null 2> "$tmp/err"; then
		bad "$* accepted on cuda"
	elif ! grep -q -- "$flag" "$tmp/err" || [ "$(wc -l < "$tmp/err")" -gt 2 ]; then
		cat "$tmp/err"
		bad "$*: not one message naming $flag"
	elif [ -e "$tmp/refused.png" ]; then
		bad "$*: a picture written"
	else
		ok "$* refused: $(head -1 "$tmp/err")"
	fi
}
refuse --device --device 1
refuse --quant-products --quant-products int8

# 4. processes sharing the device, through pinned host buffers
if [ $# -gt 0 ]; then
	for mesh in "--ulysses-degree 2" "--ring-degree 2" "--cfg-parallel"; do
		# shellcheck disable=SC2086
		if "$@" -np 2 "$emu" "${gen[@]}" --backend cuda $mesh -v -o "$tmp/mesh.png" > /dev/null 2> "$tmp/err"; then
			grep -q "sends through pinned host buffers" "$tmp/err" || { cat "$tmp/err"; bad "$mesh: staging not reported"; }
			"$cmp" pngs "$tmp/mesh.png" "$tmp/cuda.png" 2 > "$tmp/log" && ok "2 processes, $mesh: $(cat "$tmp/log")" ||
				{ cat "$tmp/log"; bad "2 processes, $mesh vs one"; }
		else
			tail -5 "$tmp/err"
			bad "2 processes on cuda, $mesh"
		fi
	done
fi
exit $fail
