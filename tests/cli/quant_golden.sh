#!/usr/bin/env bash
# The quantized golden files (tests/golden/quant-tiny/flux: ComfyUI-GGUF's
# Q8_0 and Q4_K_S, plain and scaled fp8), kept quantized, through pdit
# forward against diffusers run on their exactly dequantized weights: f32
# every tensor (--dump) within 1e-4 x max|ref| (the golden README's
# tolerance), bf16 products' out.sample within 2e-2. One loop for the CPU
# (cli_quant.sh), the CUDA emulation (cli_cuda_emu.sh) and a GPU
# (scripts/device-check.sh).
# usage: quant_golden.sh [-t SECONDS] [-e EPOCH] [-l LIBPATH] PDIT ST_COMPARE QUANT_GOLDEN_DIR OUTDIR [FLAGS...]
#   -t SECONDS  each program's time at most (timeout: 124 when it runs out;
#               killed 10 s after its TERM), 3 at least
#   -e EPOCH    and every program's TERM by this time (date +%s); a program
#               with under 3 seconds left is not run (125)
#   -l LIBPATH  LD_LIBRARY_PATH for pdit and st_compare (the device kit's
#               libraries), not for this script's own programs
#   FLAGS       to every pdit forward (e.g. --backend cuda)
# OUTDIR keeps NAME-DTYPE.safetensors (the outputs, for the caller's own
# checks) and NAME-DTYPE.log (pdit's and st_compare's output); one line a
# file and type, "ok" or "FAIL"; the status is 1 when any failed.
set -u
secs='' deadline='' libs=''
while getopts t:e:l: o; do
	case $o in
		t) secs=$OPTARG ;;
		e) deadline=$OPTARG ;;
		l) libs=$OPTARG ;;
		*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
if [ -n "$secs" ] && ! [ "$secs" -ge 3 ] 2> /dev/null; then
	echo "quant_golden.sh: -t $secs: give 3 seconds or more" >&2
	exit 2
fi
if [ $# -lt 4 ]; then
	echo "usage: quant_golden.sh [-t SECONDS] [-e EPOCH] [-l LIBPATH] PDIT ST_COMPARE QUANT_GOLDEN_DIR OUTDIR [FLAGS...]" >&2
	exit 2
fi
pdit=$1 cmp=$2 q=$3/flux out=$4
shift 4
mkdir -p "$out" || exit 1
fail=0

# runs a program under the time given: 125 when none is left
timed() {
	local t=$secs
	if [ -n "$deadline" ]; then
		local left=$((deadline - $(date +%s)))
		[ -z "$t" ] || [ "$left" -lt "$t" ] && t=$left
		[ "$t" -lt 3 ] && { echo "(no time left: not run)"; return 125; }
	fi
	if [ -n "$libs" ]; then
		set -- env LD_LIBRARY_PATH="$libs" "$@"
	fi
	if [ -n "$t" ]; then
		timeout -k 10 "$t" "$@"
	else
		"$@"
	fi
}
why() { case $1 in 124 | 137) echo "timed out" ;; 125) echo "no time left" ;; *) echo "exit $1" ;; esac; }

for v in Q8_0:flux-tiny-dev-Q8_0.gguf Q4_K_S:flux-tiny-dev-Q4_K_S.gguf fp8_e4m3fn:flux-tiny-dev-fp8_e4m3fn.safetensors \
	fp8_e4m3fn_scaled:flux-tiny-dev-fp8_e4m3fn_scaled.safetensors; do
	name=${v%%:*} file=${v#*:}
	for dt in f32 bf16; do
		if [ $dt = f32 ]; then tol=1e-4 which=--all; else tol=2e-2 which=out.sample; fi
		f=$out/$name-$dt.safetensors l=$out/$name-$dt.log
		timed "$pdit" forward "$@" --transformer "$q/$file" --config "$q/dequant-$name/config.json" --dtype $dt \
			--quant-products bf16 --inputs "$q/forward-$name-h64w48.safetensors" --out "$f" --dump > "$l" 2>&1 &&
			timed "$cmp" tensors "$f" "$q/forward-$name-h64w48.safetensors" $tol $which >> "$l" 2>&1
		rc=$?
		if [ $rc = 0 ]; then
			# the largest relative error and where
			echo "ok   $file, $dt: within $tol ($(tail -1 "$l"); $(awk '$1 == "ok" && $3 + 0 >= m { m = $3 + 0; n = $2 }
				END { printf "largest %.2e, %s", m, n }' "$l"))"
		else
			echo "FAIL $file, $dt ($(why $rc)):"
			tail -5 "$l"
			fail=1
		fi
	done
done
exit $fail
