#!/usr/bin/env bash
# pdit under mpirun, as a user runs it:
#   pictures from meshes (USP, CFG, data parallel over an odd batch) equal the
#   single-process pictures within 1 per pixel; pdit check passes, and fails
#   when it should; an impossible mesh is refused before any weight is read;
#   a rank that fails alone stops every rank within 10 s with its message;
#   PipeFusion and DistriFusion exact with every step warm, explained when not.
# usage: cli_parallel.sh PDIT ST_COMPARE GOLDEN_DIR MPIRUN...
set -u
pdit=$1 cmp=$2 g=$3
shift 3
mpirun=("$@")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

"$pdit" tiny "$tmp/m" --heads 4 > /dev/null 2>&1 || { echo "FAIL: pdit tiny"; exit 1; }
"$pdit" tiny "$tmp/m3" --batch 3 > /dev/null 2>&1 || { echo "FAIL: pdit tiny"; exit 1; }
run=(--model "$tmp/m" --embeds "$tmp/m/embeds.safetensors" -H 80 -W 64 --steps 3 -s 9)

# USP 2 x 2 against one process
"$pdit" generate "${run[@]}" -o "$tmp/one.png" 2> /dev/null || bad "single-process generate"
"${mpirun[@]}" -np 4 "$pdit" generate "${run[@]}" --ulysses-degree 2 --ring-degree 2 -o "$tmp/usp.png" \
	2> "$tmp/err" || { cat "$tmp/err"; bad "mpirun -np 4 generate --ulysses-degree 2 --ring-degree 2"; }
"$cmp" pngs "$tmp/one.png" "$tmp/usp.png" 1 && ok "USP 2x2 picture equals the single-process picture" ||
	bad "USP picture differs"
out=$("${mpirun[@]}" -np 4 "$pdit" check "${run[@]}" --ulysses-degree 2 --ring-degree 2 2> /dev/null)
rc=$?
if [ $rc -eq 0 ] && grep -q '^PASS$' <<< "$out" && grep -q 'single.1' <<< "$out"; then
	ok "pdit check on USP 2x2: PASS"
else
	echo "$out"; bad "pdit check on USP 2x2 (exit $rc)"
fi

# --quantize: the reference holds the same quantized blocks (it loaded the file's floats and failed
# every check by 1e-2); Ulysses on int8 products is one process's bits where this CPU's products
# keep a row's bits whatever the rows of a call (tests/lib/pd_test_rows.h), else within int8's 2e-2
tol=$("$(dirname "$cmp")/rows_exact" 2e-2)
out=$("${mpirun[@]}" -np 2 "$pdit" check "${run[@]}" --ulysses-degree 2 --quantize q8_0 --dtype bf16 --tolerance "$tol" \
	2> /dev/null)
rc=$?
if [ $rc -eq 0 ] && grep -q '^PASS$' <<< "$out"; then
	ok "pdit check --quantize q8_0 on Ulysses 2: PASS at tolerance $tol"
else
	echo "$out"; bad "pdit check --quantize q8_0 (exit $rc)"
fi

# --tolerance 0 asks for equal bits (it meant the default 1e-5): tensor parallel sums its shards in
# another order than one process, so differences of ~1e-7 now fail
out=$("${mpirun[@]}" -np 2 "$pdit" check "${run[@]}" --tensor-parallel-degree 2 --tolerance 0 2> /dev/null)
rc=$?
if [ $rc -eq 1 ] && grep -q '^FAIL$' <<< "$out" && grep -q 'tolerance 0$' <<< "$out"; then
	ok "pdit check --tolerance 0 on tensor parallel 2: FAIL (equal bits asked)"
else
	echo "$out"; bad "pdit check --tolerance 0 (exit $rc)"
fi

# true CFG on a CFG pair x Ulysses 2
"$pdit" generate "${run[@]}" --true-cfg-scale 3 -o "$tmp/cfg1.png" 2> /dev/null || bad "generate with true CFG"
"${mpirun[@]}" -np 4 "$pdit" generate "${run[@]}" --true-cfg-scale 3 --cfg-parallel --ulysses-degree 2 \
	-o "$tmp/cfg4.png" 2> /dev/null || bad "mpirun CFG parallel"
"$cmp" pngs "$tmp/cfg1.png" "$tmp/cfg4.png" 1 && ok "CFG parallel picture equals one process" || bad "CFG picture differs"

# PipeFusion and DistriFusion: with every step warm, the one-process picture
# and a check that passes with every block compared (each stage its own);
# after one warm step a check that fails and says why; no warm step refused
"${mpirun[@]}" -np 2 "$pdit" generate "${run[@]}" --pipefusion-degree 2 --warmup-steps 3 -o "$tmp/pp.png" \
	2> "$tmp/err" || { cat "$tmp/err"; bad "PipeFusion generate"; }
"$cmp" pngs "$tmp/one.png" "$tmp/pp.png" 1 && ok "PipeFusion 2 stages, every step warm: the one-process picture" ||
	bad "PipeFusion picture differs"
# more patches than the image's token rows (80 pixels: 5): said once, the run goes on with 5 bands
"${mpirun[@]}" -np 2 "$pdit" generate "${run[@]}" --pipefusion-degree 2 --num-patches 64 -o "$tmp/pp64.png" \
	2> "$tmp/err" && [ "$(grep -c "num-patches 64 is more than the image's 5 token rows" "$tmp/err")" = 1 ] &&
	ok "PipeFusion --num-patches 64 on 5 token rows: said once, 5 bands" || { cat "$tmp/err"; bad "PipeFusion 64 patches"; }
out=$("${mpirun[@]}" -np 4 "$pdit" check "${run[@]}" --pipefusion-degree 2 --ulysses-degree 2 --num-patches 3 \
	--warmup-steps 3 2> /dev/null)
rc=$?
if [ $rc -eq 0 ] && grep -q '^PASS$' <<< "$out" && grep -q 'double.0' <<< "$out" && grep -q 'single.1' <<< "$out"; then
	ok "pdit check on PipeFusion 2 x Ulysses 2, every step warm: PASS, both stages' blocks compared"
else
	echo "$out"; bad "pdit check on PipeFusion (exit $rc)"
fi
out=$("${mpirun[@]}" -np 2 "$pdit" check "${run[@]}" --distrifusion-degree 2 --warmup-steps 1 2> /dev/null)
rc=$?
if [ $rc -eq 1 ] && grep -q '^FAIL$' <<< "$out" && grep -q 'one step old' <<< "$out"; then
	ok "pdit check on DistriFusion after 1 warm step: FAIL, explained"
else
	echo "$out"; bad "pdit check on stale DistriFusion (exit $rc)"
fi
"${mpirun[@]}" -np 2 "$pdit" generate "${run[@]}" --distrifusion-degree 2 --warmup-steps 0 -o "$tmp/x.png" \
	> /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "warmup-steps must be at least 1" "$tmp/err" && ok "DistriFusion without a warm step refused" ||
	{ cat "$tmp/err"; bad "DistriFusion --warmup-steps 0"; }
"${mpirun[@]}" -np 2 "$pdit" generate "${run[@]}" --pipefusion-degree 2 --fbcache-threshold 10 -o "$tmp/x.png" \
	> /dev/null 2> "$tmp/err"
[ $? -eq 0 ] && grep -q "skipped 2 of 3 transformer calls" "$tmp/err" &&
	ok "First Block Cache on PipeFusion reports its skips" || { cat "$tmp/err"; bad "First Block Cache on PipeFusion"; }

# data parallel over 3 prompts on 2 groups: every picture written once, equal
run3=(--model "$tmp/m3" --embeds "$tmp/m3/embeds.safetensors" -H 48 -W 48 --steps 2)
"$pdit" generate "${run3[@]}" -o "$tmp/b1.png" 2> /dev/null || bad "batch of 3"
"${mpirun[@]}" -np 2 "$pdit" generate "${run3[@]}" --data-parallel-degree 2 -o "$tmp/bd.png" 2> /dev/null ||
	bad "data parallel generate"
for b in 0 1 2; do
	# data parallel's latents are within about 2e-6 of one process's: its
	# ranks compute with 1 thread each here, and one process alone gives
	# the same difference between -t 1 and -t 2 (the products' and kernels'
	# sums split over threads); a pixel at a rounding boundary may move one
	# level, as for the other exact methods
	"$cmp" pngs "$tmp/b1-$b.png" "$tmp/bd-$b.png" 1 > /dev/null && ok "data parallel picture $b equal" ||
		bad "data parallel picture $b"
done

# parallel VAE decode of a large picture: equal to one process, and each
# rank's peak memory well under the single process's (the bands' activations
# are about 1/4 of the picture's)
big=(--model "$tmp/m" --embeds "$tmp/m/embeds.safetensors" -H 1536 -W 1536 --steps 1 -v)
one=$("$pdit" generate "${big[@]}" -o "$tmp/big1.png" 2>&1 | sed -n 's/.*peak resident memory (MB): //p')
four=$("${mpirun[@]}" -np 4 "$pdit" generate "${big[@]}" -o "$tmp/big4.png" 2>&1 |
	sed -n 's/.*peak resident memory (MB): //p')
"$cmp" pngs "$tmp/big1.png" "$tmp/big4.png" 1 > /dev/null && ok "1536x1536 decoded in 4 bands equals one process" ||
	bad "banded decode differs"
if [[ "${ASAN_OPTIONS:-}" == *halt_on_error* ]]; then
	# AddressSanitizer keeps up to 256 MB of freed memory poisoned in each
	# process (its quarantine): resident memory there is not pdit's
	echo "skip peak memory per rank with 4 bands under AddressSanitizer: $four MB (one process: $one MB)"
elif [ -n "$one" ] && [ -n "$four" ] && awk -v one="$one" -v four="$four" 'BEGIN { n = split(four, r, " ");
	for (i = 1; i <= n; i++) if (r[i] > 0.5 * one) exit 1; exit n == 4 ? 0 : 1 }'; then
	ok "peak memory per rank with 4 bands: $four MB (one process: $one MB)"
else
	bad "peak memory per rank with 4 bands: '$four' MB against '$one' MB for one process"
fi

# check against the golden file, and a check that must fail
f="$g/pipeline-dev-h64w48.safetensors"
gold=(--transformer "$g/transformer-dev" --scheduler "$g/scheduler-dev" --embeds "$f" -H 64 -W 48 --steps 4)
out=$("${mpirun[@]}" -np 2 "$pdit" check "${gold[@]}" -s 5301 --ring-degree 2 --golden "$f" 2> /dev/null)
[ $? -eq 0 ] && grep -q '^PASS$' <<< "$out" && ok "check --golden on ring 2: PASS" || { echo "$out"; bad "check --golden"; }
out=$("${mpirun[@]}" -np 2 "$pdit" check "${gold[@]}" -s 1 --ring-degree 2 --golden "$f" 2> /dev/null)
[ $? -ne 0 ] && grep -q '^FAIL$' <<< "$out" && ok "check --golden with the wrong seed: FAIL" ||
	{ echo "$out"; bad "check with a wrong seed did not fail"; }

# an impossible mesh: refused, with the reason and the valid choices
"${mpirun[@]}" -np 4 "$pdit" generate "${run[@]}" --ulysses-degree 3 -o "$tmp/x.png" > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "impossible mesh: .*Valid for 4 processes" "$tmp/err" && ok "impossible mesh refused" ||
	{ cat "$tmp/err"; bad "impossible mesh"; }
"${mpirun[@]}" -np 2 "$pdit" generate "${run[@]}" --tensor-parallel-degree 2 --ulysses-degree 2 \
	-o "$tmp/x.png" > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "multiply to 4, but there are 2" "$tmp/err" && ok "degrees not multiplying to the world refused" ||
	{ cat "$tmp/err"; bad "product of degrees"; }

"${mpirun[@]}" -np 5 "$pdit" generate "${run[@]}" --pipefusion-degree 5 -o "$tmp/x.png" > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "exceeds the model's 4 blocks" "$tmp/err" && ok "more stages than blocks refused" ||
	{ cat "$tmp/err"; bad "PipeFusion degree above the block count"; }
"${mpirun[@]}" -np 4 "$pdit" generate "${run[@]}" --distrifusion-degree 2 --ulysses-degree 2 -o "$tmp/x.png" \
	> /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "DistriFusion composes with CFG and data parallelism only" "$tmp/err" &&
	ok "DistriFusion with Ulysses refused" || { cat "$tmp/err"; bad "DistriFusion with Ulysses"; }

# one rank cannot read the weights: every rank stops, nonzero, within 10 s
cp -r "$tmp/m" "$tmp/bad"
rm "$tmp/bad/transformer/diffusion_pytorch_model.safetensors"
cat > "$tmp/wrap.sh" << WRAP
#!/bin/sh
m="$tmp/m"
[ "\${OMPI_COMM_WORLD_RANK:-\${PMIX_RANK:-0}}" = 1 ] && m="$tmp/bad"
exec "$pdit" generate --model "\$m" --embeds "$tmp/m/embeds.safetensors" -H 64 -W 64 --steps 2 --ring-degree 2 -o "$tmp/z.png"
WRAP
chmod +x "$tmp/wrap.sh"
start=$(date +%s)
timeout 30 "${mpirun[@]}" -np 2 "$tmp/wrap.sh" > /dev/null 2> "$tmp/err"
rc=$?
took=$(($(date +%s) - start))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 10 ] && grep -q "pdit: rank 1: .*bad/transformer" "$tmp/err"; then
	ok "a rank failing alone stops the job in ${took} s: $(grep 'pdit: rank 1' "$tmp/err")"
else
	cat "$tmp/err"; bad "failure on one rank (exit $rc after $took s)"
fi
[ -e "$tmp/z.png" ] && bad "a picture was written by a failed job"
exit $fail
