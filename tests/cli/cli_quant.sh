#!/usr/bin/env bash
# Quantized FLUX files through pdit forward, against diffusers run on their
# exactly dequantized weights (tests/golden/quant-tiny/flux): ComfyUI-GGUF's
# Q8_0 and Q4_K_S, plain and scaled fp8, every intermediate within 1e-4 x
# max|ref| (the golden README's tolerance; f32), out.sample within 2e-2
# with bf16 products; stable-diffusion.cpp's Q8_0 gives exactly ComfyUI's
# output.
# pdit quantize writes ComfyUI-GGUF's files byte for byte (ggml's blocks,
# its type choices and layout) and the fp8 file's codes.
# usage: cli_quant.sh PDIT ST_COMPARE QUANT_GOLDEN_DIR PYTHON3
set -u
pdit=$1 cmp=$2 q=$3/flux py=$4
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

run() {	# VARIANT FILE DTYPE OUT [FLAGS...]
	local v=$1 f=$2 dt=$3 out=$4
	shift 4
	"$pdit" forward --transformer "$q/$f" --config "$q/dequant-$v/config.json" --dtype "$dt" "$@" \
		--inputs "$q/forward-$v-h64w48.safetensors" --out "$out" --dump > /dev/null 2> "$tmp/err" ||
		{ cat "$tmp/err"; bad "pdit forward on $f ($dt $*)"; }
}
# f32 and bf16 products (the files' f32 and bf16 outputs stay in $tmp as
# NAME-f32.safetensors and NAME-bf16.safetensors)
"$(dirname "$0")/quant_golden.sh" "$pdit" "$cmp" "$3" "$tmp" || fail=1
# int8 products, against the same golden outputs: the inputs' 8-bit blocks
# add to bf16's error (measured on the AVX-512 EPYC: Q8_0 1.3e-2 with its
# MLP output layers' inputs in blocks of 256 (1.0e-2 in blocks of 32), Q4_K_S
# 8.4e-3 with its inputs in blocks of 256, where bf16's products give
# 5.2e-3 and 4.1e-3); fp8 converted to
# int8 blocks rounds its small values too (2.1e-2 and 1.9e-2 scaled, bf16
# 6.8e-3 and 6.2e-3): out.sample within 2e-2 and 3e-2
for v in Q8_0:flux-tiny-dev-Q8_0.gguf Q4_K_S:flux-tiny-dev-Q4_K_S.gguf fp8_e4m3fn:flux-tiny-dev-fp8_e4m3fn.safetensors \
	fp8_e4m3fn_scaled:flux-tiny-dev-fp8_e4m3fn_scaled.safetensors; do
	name=${v%%:*} file=${v#*:}
	tol=2e-2
	case $name in fp8*) tol=3e-2 ;; esac
	run "$name" "$file" bf16 "$tmp/$name-int8.safetensors" --quant-products int8
	"$cmp" tensors "$tmp/$name-int8.safetensors" "$q/forward-$name-h64w48.safetensors" $tol out.sample > "$tmp/log" &&
		! cmp -s "$tmp/$name-int8.safetensors" "$tmp/$name-bf16.safetensors" &&
		ok "$file, int8 products: out.sample within $tol ($(awk '/out.sample/ {print $3}' "$tmp/log"))" ||
		{ cat "$tmp/log"; bad "$file int8"; }
	# auto with bf16 products: int8 on a CPU with VNNI, AVX-512's or
	# 256-bit (AVX-VNNI, or AVX-512 VNNI with AVX-512 off), every type that
	# has an int8 form (fp8 included); decoded without VNNI, and where
	# oneDNN's bf16 products take AMX tiles (a Xeon's: decoded products beat
	# int8 ones there)
	run "$name" "$file" bf16 "$tmp/$name-auto.safetensors"
	want=bf16
	if [ -n "${PDIT_NO_VNNI:-}" ]; then
		:
	elif grep -q amx_bf16 /proc/cpuinfo && [ -z "${ONEDNN_MAX_CPU_ISA:-}" ]; then
		:
	elif grep -q avx512_vnni /proc/cpuinfo && grep -q avx512bw /proc/cpuinfo && [ -z "${PDIT_NO_AVX512:-}" ]; then
		want=int8
	elif grep -q "avx512_vnni\|avx_vnni" /proc/cpuinfo && grep -q f16c /proc/cpuinfo && [ -z "${PDIT_NO_AVX2:-}" ]; then
		want=int8
	fi
	cmp -s "$tmp/$name-auto.safetensors" "$tmp/$name-$want.safetensors" &&
		ok "$file, auto with bf16 on this CPU: the $want products' output byte for byte" || bad "$file auto ($want expected)"
	# AVX-512 off: 256-bit VNNI only (AVX-512 VNNI's 256-bit form here,
	# AVX-VNNI where the CPU has no AVX-512; oneDNN below AMX, as such CPUs)
	if grep -q "avx512_vnni\|avx_vnni" /proc/cpuinfo && [ -z "${PDIT_NO_VNNI:-}${PDIT_NO_AVX2:-}" ]; then
		want=int8 other=bf16
		for qp in auto int8 bf16; do
			PDIT_NO_AVX512=1 ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 run "$name" "$file" bf16 \
				"$tmp/$name-n512-$qp.safetensors" --quant-products $qp
		done
		cmp -s "$tmp/$name-n512-auto.safetensors" "$tmp/$name-n512-$want.safetensors" &&
			! cmp -s "$tmp/$name-n512-auto.safetensors" "$tmp/$name-n512-$other.safetensors" &&
			ok "$file, auto with 256-bit VNNI only: the $want products' output byte for byte" ||
			bad "$file auto with 256-bit VNNI ($want expected)"
	fi
	PDIT_NO_VNNI=1 run "$name" "$file" bf16 "$tmp/$name-auto.safetensors"
	cmp -s "$tmp/$name-auto.safetensors" "$tmp/$name-bf16.safetensors" &&
		ok "$file, auto without VNNI: decoded products, byte for byte" || bad "$file auto without VNNI"
done
run Q8_0 flux-tiny-dev-Q8_0-sdcpp.gguf f32 "$tmp/sdcpp.safetensors"
"$cmp" tensors "$tmp/sdcpp.safetensors" "$tmp/Q8_0-f32.safetensors" 0 --all > "$tmp/log" &&
	ok "stable-diffusion.cpp's Q8_0 gives exactly ComfyUI-GGUF's output" || { cat "$tmp/log"; bad "sdcpp Q8_0"; }
# pdit quantize to plain safetensors: the forward of the written file is still diffusers'
for v in Q4_K_S:flux-tiny-dev-Q4_K_S.gguf fp8_e4m3fn_scaled:flux-tiny-dev-fp8_e4m3fn_scaled.safetensors; do
	name=${v%%:*} file=${v#*:}
	"$pdit" quantize "$q/$file" "$tmp/plain.safetensors" --type f32 > /dev/null 2> "$tmp/err" &&
		"$pdit" forward --transformer "$tmp/plain.safetensors" --config "$q/dequant-$name/config.json" \
			--inputs "$q/forward-$name-h64w48.safetensors" --out "$tmp/pf.safetensors" --dump > /dev/null 2>&1 &&
		"$cmp" tensors "$tmp/pf.safetensors" "$q/forward-$name-h64w48.safetensors" 1e-4 --all > "$tmp/log" &&
		! "$pdit" inspect "$tmp/plain.safetensors" | grep -q "scale_weight\|scaled_fp8\|F8_\|BF16" &&
		ok "quantize $file --type f32: plain F32 names, forward within 1e-4" || { cat "$tmp/err" "$tmp/log"; bad "quantize $file"; }
done
"$pdit" quantize "$q/flux-tiny-dev-Q8_0.gguf" "$tmp/b.safetensors" --type bf16 > /dev/null 2>&1 &&
	"$pdit" forward --transformer "$tmp/b.safetensors" --config "$q/dequant-Q8_0/config.json" \
		--inputs "$q/forward-Q8_0-h64w48.safetensors" --out "$tmp/bf.safetensors" > /dev/null 2>&1 &&
	"$cmp" tensors "$tmp/bf.safetensors" "$q/forward-Q8_0-h64w48.safetensors" 2e-2 out.sample > /dev/null &&
	"$pdit" inspect "$tmp/b.safetensors" | grep -q "img_in.weight *BF16" && ok "quantize --type bf16" || bad "quantize bf16"
"$pdit" quantize "$q/flux-tiny-dev-Q8_0.gguf" "$tmp/x.gguf" --type q3_k > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q -- "--type q3_k" "$tmp/err" && [ ! -e "$tmp/x.gguf" ] && ok "an unsupported --type refused" ||
	{ cat "$tmp/err"; bad "quantize --type q3_k"; }

# pdit quantize to GGUF and fp8 from the BF16 BFL checkpoint the golden
# files were made from (the tiny FLUX renamed by tests/lib/bfl_convert.py,
# rounded to BF16): ComfyUI-GGUF's Q8_0 and Q4_K_S files, every byte; the
# fp8 file's codes
fg=$(dirname "$q")/../flux-tiny
"$py" "$(dirname "$0")/../lib/bfl_convert.py" transformer "$fg/transformer-dev" "$tmp/bfl32.safetensors" > /dev/null &&
	"$pdit" quantize "$tmp/bfl32.safetensors" "$tmp/bfl.safetensors" --type bf16 > /dev/null 2>&1 ||
	bad "the BF16 BFL checkpoint"
for v in q8_0:flux-tiny-dev-Q8_0.gguf q4_k:flux-tiny-dev-Q4_K_S.gguf; do
	"$pdit" quantize "$tmp/bfl.safetensors" "$tmp/${v%%:*}.gguf" --type "${v%%:*}" 2> "$tmp/err" &&
		cmp "$tmp/${v%%:*}.gguf" "$q/${v#*:}" && ok "quantize --type ${v%%:*}: ${v#*:} byte for byte" ||
		{ cat "$tmp/err"; bad "quantize --type ${v%%:*}"; }
done
"$pdit" quantize "$tmp/bfl.safetensors" "$tmp/fp8.safetensors" --type fp8 2> "$tmp/err" &&
	"$cmp" tensors "$tmp/fp8.safetensors" "$q/flux-tiny-dev-fp8_e4m3fn.safetensors" 0 --all > "$tmp/log" &&
	[ "$("$pdit" inspect "$tmp/fp8.safetensors" | grep -c F8_E4M3)" = "$("$pdit" inspect "$q/flux-tiny-dev-fp8_e4m3fn.safetensors" | grep -c F8_E4M3)" ] &&
	ok "quantize --type fp8: the fp8 file's types and values" || { cat "$tmp/err" "$tmp/log"; bad "quantize --type fp8"; }
# another type, through the forward: Q5_1 of every block weight, against
# the same run on its own dequantization (pdit quantize --type f32)
"$pdit" quantize "$tmp/bfl.safetensors" "$tmp/q51.gguf" --type q5_1 > /dev/null 2>&1 &&
	"$pdit" quantize "$tmp/q51.gguf" "$tmp/q51.safetensors" --type f32 > /dev/null 2>&1 &&
	"$pdit" forward --transformer "$tmp/q51.gguf" --config "$q/dequant-Q8_0/config.json" \
		--inputs "$q/forward-Q8_0-h64w48.safetensors" --out "$tmp/f1.safetensors" > /dev/null 2>&1 &&
	"$pdit" forward --transformer "$tmp/q51.safetensors" --config "$q/dequant-Q8_0/config.json" \
		--inputs "$q/forward-Q8_0-h64w48.safetensors" --out "$tmp/f2.safetensors" > /dev/null 2>&1 &&
	"$cmp" tensors "$tmp/f1.safetensors" "$tmp/f2.safetensors" 1e-5 --all > "$tmp/log" &&
	[ "$("$pdit" inspect "$tmp/q51.gguf" | grep -c ' q5_1 ')" = 29 ] &&
	ok "quantize --type q5_1: 29 weights, forward on it = forward on its dequantization (1e-5)" ||
	{ cat "$tmp/log"; bad "quantize --type q5_1"; }

# generate end to end: a GGUF file's latents are its dequantized folder's.
# The GGUF's weights stay in their blocks and are decoded as the products
# run: in bf16 the products see the same rounded weights (byte for byte);
# in f32 only the order of the sums differs (a panel product, a dot product
# for the modulation's rows), within 1e-5.
common=(--vae "$fg/vae-dev" --scheduler "$fg/scheduler-dev" --embeds "$fg/pipeline-dev-truecfg-h64w48.safetensors"
	--true-cfg-scale 4 -H 64 -W 48 --steps 4 -s 3 -q)
for dt in bf16 f32; do
	"$pdit" generate --dtype $dt --quant-products bf16 --diffusion-model "$q/flux-tiny-dev-Q4_K_S.gguf" \
		--config "$q/dequant-Q4_K_S/config.json" "${common[@]}" -o "$tmp/a.png" --out-latents "$tmp/a-$dt.safetensors" &&
		"$pdit" generate --dtype $dt --transformer "$q/dequant-Q4_K_S" "${common[@]}" -o "$tmp/b.png" \
			--out-latents "$tmp/b-$dt.safetensors" || bad "generate --dtype $dt on a GGUF or its folder"
done
cmp -s "$tmp/a-bf16.safetensors" "$tmp/b-bf16.safetensors" &&
	ok "generate --dtype bf16 on the Q4_K_S GGUF: the latents of its dequantized folder, byte for byte" ||
	bad "generate --dtype bf16 on a GGUF"
# int8 products (the default with bf16 on a CPU with AVX-512 VNNI; asked
# for here, so the portable kernel runs elsewhere): Q4_K's nibbles times
# inputs quantized in blocks of 256, against the decoded products' latents
# within 3e-2 (measured 1e-2 on the AVX-512 EPYC), and computed otherwise
"$pdit" generate --dtype bf16 --quant-products int8 --diffusion-model "$q/flux-tiny-dev-Q4_K_S.gguf" \
	--config "$q/dequant-Q4_K_S/config.json" "${common[@]}" -o "$tmp/a.png" --out-latents "$tmp/a-int8.safetensors" &&
	"$cmp" tensors "$tmp/a-int8.safetensors" "$tmp/b-bf16.safetensors" 3e-2 latents.final > "$tmp/log" &&
	! cmp -s "$tmp/a-int8.safetensors" "$tmp/b-bf16.safetensors" &&
	ok "generate on the Q4_K_S GGUF with int8 products: the decoded run's latents within 3e-2 ($(awk '/latents.final/ {print $3}' "$tmp/log"))" ||
	{ cat "$tmp/log"; bad "generate on a GGUF with int8 products"; }
"$cmp" tensors "$tmp/a-f32.safetensors" "$tmp/b-f32.safetensors" 1e-5 --all > "$tmp/log" &&
	! cmp -s "$tmp/a-f32.safetensors" "$tmp/b-f32.safetensors" &&
	ok "generate --dtype f32 on the Q4_K_S GGUF: its dequantized folder's latents within 1e-5 (and computed otherwise)" ||
	{ cat "$tmp/log"; bad "generate --dtype f32 on a GGUF"; }
# --quantize at load: the BF16 file encoded as it is read gives the
# picture of the GGUF pdit quantize writes from it, byte for byte; a type
# that is no quantization is refused naming the flag
qrun=(--config "$q/dequant-Q8_0/config.json" --vae "$fg/vae-dev" --scheduler "$fg/scheduler-dev"
	--embeds "$fg/pipeline-dev-truecfg-h64w48.safetensors" --true-cfg-scale 4 -H 64 -W 48 --steps 3 -s 3 -q)
# (types of 32-element blocks: K-types' rows of 64 here stay as stored at
# load, where ComfyUI-GGUF's files round them to F16)
for v in q8_0:q8_0.gguf q5_1:q51.gguf; do
	"$pdit" generate --diffusion-model "$tmp/bfl.safetensors" --quantize ${v%%:*} --dtype bf16 "${qrun[@]}" -o "$tmp/qa.png" \
		--out-latents "$tmp/qa.safetensors" &&
		"$pdit" generate --diffusion-model "$tmp/${v#*:}" --dtype bf16 "${qrun[@]}" -o "$tmp/qb.png" \
			--out-latents "$tmp/qb.safetensors" && cmp -s "$tmp/qa.safetensors" "$tmp/qb.safetensors" &&
		ok "--quantize ${v%%:*} at load: the latents of pdit quantize's GGUF, byte for byte" || bad "--quantize ${v%%:*}"
done
"$pdit" generate --diffusion-model "$tmp/bfl.safetensors" --quantize bf16 "${qrun[@]}" -o "$tmp/qc.png" 2> "$tmp/err"
[ $? -ne 0 ] && grep -q -- "--quantize bf16" "$tmp/err" && [ ! -e "$tmp/qc.png" ] && ok "--quantize bf16 refused" ||
	{ cat "$tmp/err"; bad "--quantize bf16"; }

# the other types with an int8 form (Q4_0, Q4_1, Q5_0, Q5_K, Q6_K): a FLUX
# model 256 wide (its K-type rows whole super-blocks) quantized by pdit
# quantize; int8 products against the decoded products' latents within
# 3e-2 (measured 4e-3 to 7e-3 on the AVX-512 EPYC), computed otherwise, every
# quantized layer counted in int8; the planner counts their layouts as the
# backend holds them under auto (within 8%)
"$pdit" tiny "$tmp/w256" --head-dim 64 > /dev/null 2>&1 || bad "pdit tiny --head-dim 64"
wrun=(--model "$tmp/w256" --config "$tmp/w256/transformer/config.json" --embeds "$tmp/w256/embeds.safetensors"
	-H 64 -W 48 --steps 2 -s 4 --dtype bf16)
for t in q4_0 q4_1 q5_0 q5_k q6_k; do
	"$pdit" quantize "$tmp/w256/transformer" "$tmp/w256-$t.gguf" --type $t > /dev/null 2>&1 || { bad "quantize $t"; continue; }
	for qp in int8 bf16; do
		"$pdit" generate "${wrun[@]}" --diffusion-model "$tmp/w256-$t.gguf" --quant-products $qp -o "$tmp/w.png" \
			--out-latents "$tmp/w-$qp.safetensors" 2> "$tmp/err-$qp" || { cat "$tmp/err-$qp"; bad "generate $t $qp"; }
	done
	"$cmp" tensors "$tmp/w-int8.safetensors" "$tmp/w-bf16.safetensors" 3e-2 latents.final > "$tmp/log" &&
		! cmp -s "$tmp/w-int8.safetensors" "$tmp/w-bf16.safetensors" &&
		grep -q "quantized layers multiply in int8" "$tmp/err-int8" && ! grep -q "multiply in int8" "$tmp/err-bf16" &&
		ok "$t (pdit quantize) on int8 products: the decoded products' latents within 3e-2 ($(awk '/latents.final/ {print $3}' "$tmp/log"))" ||
		{ cat "$tmp/log" "$tmp/err-int8"; bad "$t on int8 products"; }
done
plan=$("$pdit" plan --diffusion-model "$tmp/w256-q6_k.gguf" --config "$tmp/w256/transformer/config.json" --dtype bf16 \
	--devices 1 --gflops 100 -H 64 -W 48 --json | head -1 | sed 's/.*"weights_gb": \([^,]*\),.*/\1/')
held=$("$pdit" bench "${wrun[@]}" --diffusion-model "$tmp/w256-q6_k.gguf" --steps 1 --json 2> /dev/null |
	sed 's/.*"weights_mb": \([^,]*\),.*/\1/')
awk -v p="$plan" -v h="$held" 'BEGIN { d = p * 1e9 / (h * 1048576); exit !(d > 0.92 && d < 1.08) }' &&
	ok "q6_k --dtype bf16: the planner's weights ${plan} GB, the backend holds ${held} MiB" ||
	bad "q6_k --dtype bf16: planner $plan GB, held $held MiB"
# another machine's rate (--gflops): the int8 layers counted at bf16's, and
# said so, unless --int8-speed gives their speed
for s in "" 2; do
	"$pdit" plan --diffusion-model "$tmp/w256-q6_k.gguf" --config "$tmp/w256/transformer/config.json" --dtype bf16 \
		--devices 1 --gflops 100 -H 64 -W 48 --quant-products int8 ${s:+--int8-speed $s} > "$tmp/plan$s.txt" 2>&1
done
s1=$(awk '/^dp=/ {print $8; exit}' "$tmp/plan.txt") s2=$(awk '/^dp=/ {print $8; exit}' "$tmp/plan2.txt")
grep -q "on int8 products (.*) counted at a bf16 product's rate: --int8-speed X" "$tmp/plan.txt" &&
	grep -q "on int8 products (.*) run at 2.00 x a bf16 product's rate" "$tmp/plan2.txt" &&
	awk -v a="$s1" -v b="$s2" 'BEGIN { exit !(b > 0 && b < a) }' &&
	ok "plan --gflops: int8 layers counted at bf16's rate and said so (${s1} s a step), --int8-speed 2: ${s2} s" ||
	{ cat "$tmp/plan.txt" "$tmp/plan2.txt"; bad "plan --gflops on int8 layers"; }
# auto's int8 products are what the rest checks: where oneDNN's bf16
# products take AMX tiles auto decodes (faster there), so they are kept
# below AMX from here on (as the CPUs these checks stand for have them)
export ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
# a file of two types (Q5_0's double blocks, Q4_K's single blocks) where the
# CPU has 256-bit VNNI only (here: AVX-512 off): auto multiplies both in
# int8 (the latents of --quant-products int8, byte for byte, every layer
# counted), and the planner counts each type's layout (Q5_0's int8 layout
# is 1.55x its blocks, Q4_K's 1.03x; within 8%)
"$pdit" quantize "$tmp/w256/transformer" "$tmp/w256-q4_k.gguf" --type q4_k > /dev/null 2>&1 &&
	"$py" "$(dirname "$0")/../../bench/gguf_grow.py" "$tmp/w256-q5_0.gguf" "$tmp/w256-mix.gguf" \
		--take "$tmp/w256-q4_k.gguf:single_transformer_blocks." > /dev/null || bad "a file of Q5_0 and Q4_K"
if grep -q "avx512_vnni\|avx_vnni" /proc/cpuinfo && [ -z "${PDIT_NO_VNNI:-}${PDIT_NO_AVX2:-}" ]; then
	for qp in auto int8 bf16; do
		PDIT_NO_AVX512=1 "$pdit" generate "${wrun[@]}" --diffusion-model "$tmp/w256-mix.gguf" --quant-products $qp \
			-o "$tmp/w.png" --out-latents "$tmp/mix-$qp.safetensors" 2> "$tmp/err-$qp" ||
			{ cat "$tmp/err-$qp"; bad "generate mix $qp"; }
	done
	n8=$(sed -n 's/^pdit: \([0-9]*\) quantized layers multiply in int8.*/\1/p' "$tmp/err-int8")
	[ -n "$n8" ] && grep -q "^pdit: $n8 quantized layers multiply in int8" "$tmp/err-auto" &&
		cmp -s "$tmp/mix-auto.safetensors" "$tmp/mix-int8.safetensors" &&
		! cmp -s "$tmp/mix-auto.safetensors" "$tmp/mix-bf16.safetensors" &&
		ok "Q5_0 + Q4_K with 256-bit VNNI only: auto takes int8 for all $n8 quantized layers, as int8 does" ||
		{ cat "$tmp/err-auto"; bad "Q5_0 + Q4_K on auto with 256-bit VNNI"; }
	plan=$(PDIT_NO_AVX512=1 "$pdit" plan --diffusion-model "$tmp/w256-mix.gguf" --config "$tmp/w256/transformer/config.json" \
		--dtype bf16 --devices 1 --gflops 100 -H 64 -W 48 --json | head -1 | sed 's/.*"weights_gb": \([^,]*\),.*/\1/')
	held=$(PDIT_NO_AVX512=1 "$pdit" bench "${wrun[@]}" --diffusion-model "$tmp/w256-mix.gguf" --steps 1 --json 2> /dev/null |
		sed 's/.*"weights_mb": \([^,]*\),.*/\1/')
	awk -v p="$plan" -v h="$held" 'BEGIN { d = p * 1e9 / (h * 1048576); exit !(d > 0.92 && d < 1.08) }' &&
		ok "Q5_0 + Q4_K with 256-bit VNNI only: the planner's weights ${plan} GB, the backend holds ${held} MiB" ||
		bad "Q5_0 + Q4_K with 256-bit VNNI only: planner $plan GB, held $held MiB"
else
	ok "(no VNNI here: auto on a mixed file with 256-bit VNNI not tried)"
fi
# auto where the int8 layout (Q5_K's 1.57x the file's) does not fit in the
# memory available but the file's does: decoded products (the latents of
# --quant-products bf16, byte for byte), said in the log; with less, one
# refusal naming the smaller need
# (Q5_K on this CPU's VNNI; Q5_0, whose int8 layout is 1.55x its blocks,
# with 256-bit VNNI only). The planner plans it so: at a memory between the
# two layouts' needs, a mesh under auto that fits only with the file's
# blocks is marked decoded, counted as --quant-products bf16 counts it
# (memory, bytes sent, time), the others as int8
plan_fallback() {	# GB TYPE [VAR=VALUE...]: plan-{int8,bf16,auto}.json, 2 processes of GB each
	local gb=$1 t=$2
	shift 2
	for qp in int8 bf16 auto; do
		env "$@" "$pdit" plan --diffusion-model "$tmp/w256-$t.gguf" --config "$tmp/w256/transformer/config.json" \
			--dtype bf16 --devices 2 --gflops 100 --int8-speed 2 -H 64 -W 48 --json --quant-products $qp \
			--memory "$gb" > "$tmp/plan-$qp.json" 2>&1 || { cat "$tmp/plan-$qp.json"; bad "plan $t $qp"; return 1; }
	done
}
plan_check() {	# TYPE [VAR=VALUE...]: plan_fallback at a memory between a mesh's two needs
	local t=$1 mid
	shift
	plan_fallback 1000 "$t" "$@" || return
	# tensor parallel 2's need on int8 and decoded (its gathers make int8's the larger)
	mid=$("$py" -c 'import json, sys
rows = {q: {r["mesh"]: r for r in map(json.loads, open(sys.argv[1] + "/plan-" + q + ".json"))} for q in ("int8", "bf16")}
m = [k for k in rows["int8"] if "tp=2" in k][0]
a, b = rows["int8"][m]["memory_gb"], rows["bf16"][m]["memory_gb"]
print("%.9f" % ((a + b) / 2) if a > b else "")' "$tmp")
	[ -n "$mid" ] || { bad "plan $t: tensor parallel's int8 need not above its decoded one"; return; }
	plan_fallback "$mid" "$t" "$@" || return
	"$py" -c 'import json, sys
rows = {q: {r["mesh"]: r for r in map(json.loads, open(sys.argv[1] + "/plan-" + q + ".json"))} for q in ("int8", "bf16", "auto")}
keys = ("memory_gb", "weights_gb", "bytes_sent_per_rank_per_step", "seconds_per_step", "fits")
n = 0
for m, a in rows["auto"].items():
    i, d = rows["int8"][m], rows["bf16"][m]
    want = d if a["decoded"] else i
    assert all(a[k] == want[k] for k in keys), (m, a, want)
    assert a["decoded"] == (not i["fits"]), (m, a, i, d)
    assert not a["decoded"] or a["int8_speed"] == 0, a
    n += a["decoded"]
assert rows["auto"][[k for k in rows["auto"] if "tp=2" in k][0]]["decoded"]
print(n)' "$tmp" > "$tmp/n" 2>&1 &&
		ok "plan $t${*:+ ($*)} at $mid GB: auto plans $(cat "$tmp/n") mesh(es) decoded where only the file's blocks fit, as bf16 counts them, the rest as int8" ||
		{ cat "$tmp/n"; bad "plan $t${*:+ ($*)}: auto where int8's layout does not fit"; }
}
fallback() {	# TYPE [VAR=VALUE...]: on w256-TYPE.gguf, pdit run with the VARs set
	local t=$1 f=$tmp/w256-$1.gguf n8 n16 mid
	shift
	# the MB a run needs, from the memory check's refusal
	n8=$(env "$@" PDIT_MEM_AVAILABLE_MB=1 "$pdit" generate "${wrun[@]}" --diffusion-model "$f" --quant-products int8 \
		-o "$tmp/m.png" 2>&1 | sed -n 's/.*needs at least \([0-9.]*\) MB.*/\1/p')
	n16=$(env "$@" PDIT_MEM_AVAILABLE_MB=1 "$pdit" generate "${wrun[@]}" --diffusion-model "$f" --quant-products bf16 \
		-o "$tmp/m.png" 2>&1 | sed -n 's/.*needs at least \([0-9.]*\) MB.*/\1/p')
	mid=$(awk -v a="$n8" -v b="$n16" 'BEGIN { if (a > b) printf "%.3f", (a + b) / 2 }')
	if [ -z "$mid" ]; then
		bad "$t's int8 layout needs $n8 MB, decoded $n16 MB: more expected"
		return
	fi
	env "$@" "$pdit" generate "${wrun[@]}" --diffusion-model "$f" --quant-products bf16 -o "$tmp/m.png" \
		--out-latents "$tmp/m-bf16.safetensors" 2> /dev/null
	env "$@" PDIT_MEM_AVAILABLE_MB="$mid" "$pdit" generate "${wrun[@]}" --diffusion-model "$f" -o "$tmp/m.png" \
		--out-latents "$tmp/m-auto.safetensors" 2> "$tmp/err"
	cmp -s "$tmp/m-auto.safetensors" "$tmp/m-bf16.safetensors" && grep -q "int8 layout .* does not fit" "$tmp/err" &&
		ok "$t${*:+ ($*)} with $mid MB available (int8 needs $n8 MB, decoded $n16 MB): auto decodes, said in the log" ||
		{ cat "$tmp/err"; bad "$t${*:+ ($*)} auto where int8's layout does not fit"; }
	rm -f "$tmp/m2.png"
	env "$@" PDIT_MEM_AVAILABLE_MB="$(awk -v b="$n16" 'BEGIN { printf "%.3f", b * 0.9 }')" "$pdit" generate "${wrun[@]}" \
		--diffusion-model "$f" -o "$tmp/m2.png" 2> "$tmp/err"
	[ $? -ne 0 ] && [ ! -e "$tmp/m2.png" ] && [ "$(grep -c "needs at least $n16 MB" "$tmp/err")" = 1 ] &&
		ok "$t${*:+ ($*)} with less than the decoded run needs: refused, naming $n16 MB" || { cat "$tmp/err"; bad "$t${*:+ ($*)} refusal"; }
}
if ! grep -q "avx512_vnni\|avx_vnni" /proc/cpuinfo || [ -n "${PDIT_NO_VNNI:-}${PDIT_NO_AVX2:-}" ]; then
	ok "(auto decodes on this CPU without VNNI: the int8 layout's fallback not tried)"
else
	fallback q5_k
	plan_check q5_k
fi
if grep -q "avx512_vnni\|avx_vnni" /proc/cpuinfo && [ -z "${PDIT_NO_VNNI:-}${PDIT_NO_AVX2:-}" ]; then
	fallback q5_0 PDIT_NO_AVX512=1
fi

# memory: the planner counts quantized weights as the backend holds them
# (pdit bench's weights_mb, measured from the prepared layers; on a CPU with
# int8 products Q4_K in their layout, 2.8% above the file): within 8% on
# this tiny model (its f32 biases are a tenth of it), and the Q8_0 file's
# below 0.7 of its BF16 folder's
wgb() { "$pdit" plan "$@" --devices 1 --gflops 100 -H 64 -W 48 --json | head -1 | sed 's/.*"weights_gb": \([^,]*\),.*/\1/'; }
for v in Q8_0:flux-tiny-dev-Q8_0.gguf:bf16 Q8_0:flux-tiny-dev-Q8_0.gguf:f32 fp8_e4m3fn:flux-tiny-dev-fp8_e4m3fn.safetensors:bf16 \
	Q4_K_S:flux-tiny-dev-Q4_K_S.gguf:bf16; do
	IFS=: read -r name file dt <<< "$v"
	plan=$(wgb --diffusion-model "$q/$file" --config "$q/dequant-$name/config.json" --dtype "$dt")
	held=$("$pdit" bench --diffusion-model "$q/$file" --config "$q/dequant-$name/config.json" --vae "$fg/vae-dev" \
		--scheduler "$fg/scheduler-dev" --embeds "$fg/pipeline-dev-h64w48.safetensors" -H 64 -W 48 --steps 1 \
		--dtype "$dt" --json 2> /dev/null | sed 's/.*"weights_mb": \([^,]*\),.*/\1/')
	awk -v p="$plan" -v h="$held" 'BEGIN { d = p * 1e9 / (h * 1048576); exit !(d > 0.92 && d < 1.08) }' &&
		ok "$file --dtype $dt: the planner's weights ${plan} GB, the backend holds ${held} MiB" ||
		bad "$file --dtype $dt: planner $plan GB, held $held MiB"
done
bf=$(wgb --transformer "$q/dequant-Q8_0" --dtype bf16)
q8=$(wgb --diffusion-model "$q/flux-tiny-dev-Q8_0.gguf" --config "$q/dequant-Q8_0/config.json" --dtype bf16)
awk -v a="$q8" -v b="$bf" 'BEGIN { exit !(a < 0.7 * b) }' && ok "planned weights: Q8_0 $q8 GB, its BF16 folder $bf GB" ||
	bad "planned weights Q8_0 $q8 GB against BF16 $bf GB"
"$pdit" generate --diffusion-model "$q/flux-tiny-dev-Q4_K_S.gguf" "${common[@]}" -o "$tmp/c.png" 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "give the transformer folder, or" "$tmp/err" && ok "a tiny GGUF without --config: told what is missing" ||
	{ cat "$tmp/err"; bad "GGUF without --config"; }
exit $fail
