#!/usr/bin/env bash
# Meshes on a quantized file give the latents of one process on the same
# file, within 1e-5 (f32): on the Q4_K_S GGUF (Q4_K, F16, BF16 and F32
# tensors; tensor parallel's column slices cut through Q4_K blocks and are
# decoded for their shard) tensor parallel 2 and 4, Ulysses 2, ring 2,
# PipeFusion 2 (every step warm), CFG parallel, CFG x tensor; on the Q8_0
# GGUF (blocks kept in every shard at tensor parallel 2, whose column
# slices are whole blocks) tensor parallel 2 and data parallel over a batch
# of 2, and on int8 products (bf16) tensor parallel (alone and inside
# PipeFusion's stages), Ulysses, data parallel, PipeFusion, ring 2 and 3
# and ring 2 x Ulysses 2 (ring gathered) bit for bit; Ulysses 2 and 4 and tensor parallel 2 on a
# Q4_K file 256 wide (its layers on int8 products) and ring 2 there bit for bit, tensor
# parallel 2, Ulysses 2 and ring 2 on that model as Q8_0 (inputs in blocks of 256); tensor
# parallel 2 bit for bit on a file of Q5_0 and Q4_K layers on auto with
# 256-bit VNNI only (both types int8), and on ranks of which one has no
# VNNI (both decode).
# usage: cli_quant_mpi.sh PDIT ST_COMPARE GOLDEN_DIR MPIRUN...
set -u
pdit=$1 cmp=$2 g=$3
shift 3
mpirun=("$@")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
q=$g/../quant-tiny/flux
# Bit for bit needs products that give each row its bits whatever the
# rows a call has (tests/lib/pd_test_rows.h: oneDNN's on AVX-512); with
# oneDNN's AVX2 products an ulp moves with the split, which the next
# layer's 8-bit rounding can make a step of 1/127 (5.8e-3 seen with ring's
# merge): there, int8's 2e-2 instead of 0
tol_rows=$("$(dirname "$cmp")/rows_exact" 2e-2)
run=(--diffusion-model "$q/flux-tiny-dev-Q4_K_S.gguf" --config "$q/dequant-Q4_K_S/config.json" --vae "$g/vae-dev"
	--scheduler "$g/scheduler-dev" --embeds "$g/pipeline-dev-truecfg-h64w48.safetensors" --true-cfg-scale 4
	-H 64 -W 48 --steps 3 -s 5 -q)
tol=1e-5
check() {	# WHAT NP FLAGS... (within $tol) (run as "${run[@]}", against $tmp/one.safetensors)
	local what=$1 np=$2
	shift 2
	"${mpirun[@]}" -np "$np" "$pdit" generate "${run[@]}" "$@" -o "$tmp/m.png" --out-latents "$tmp/m.safetensors" \
		2> "$tmp/err" || { cat "$tmp/err"; bad "$what, np $np $*"; return; }
	"$cmp" tensors "$tmp/m.safetensors" "$tmp/one.safetensors" "$tol" --all > "$tmp/log" &&
		ok "$what, np $np $*: one process's latents within $tol" || { cat "$tmp/log"; bad "$what, np $np $*"; }
}
"$pdit" generate "${run[@]}" -o "$tmp/one.png" --out-latents "$tmp/one.safetensors" || bad "one process"
for m in "2:--tensor-parallel-degree 2" "4:--tensor-parallel-degree 4" "2:--ulysses-degree 2" "2:--ring-degree 2" \
	"2:--pipefusion-degree 2 --warmup-steps 3" "2:--cfg-parallel" "4:--cfg-parallel --tensor-parallel-degree 2"; do
	# shellcheck disable=SC2086
	check "Q4_K_S GGUF" "${m%%:*}" ${m#*:}
done
run=(--diffusion-model "$q/flux-tiny-dev-Q8_0.gguf" --config "$q/dequant-Q8_0/config.json" --vae "$g/vae-dev"
	--scheduler "$g/scheduler-dev" --embeds "$g/pipeline-dev-batch2-h48w64.safetensors" -H 48 -W 64 --steps 3 -s 5 -q)
"$pdit" generate "${run[@]}" -o "$tmp/one.png" --out-latents "$tmp/one.safetensors" || bad "one process, Q8_0"
check "Q8_0 GGUF, a batch of 2" 2 --tensor-parallel-degree 2
check "Q8_0 GGUF, a batch of 2" 2 --data-parallel-degree 2
# ring's gathered form asked for on f32 products (auto merges there):
# within 1e-5 (not one process's bits: the decoded products' f32 sums
# depend on the rows a rank multiplies)
check "Q8_0 GGUF, a batch of 2" 2 --ring-degree 2 --ring-attention gathered
# int8 products (bf16 compute): each input block is quantized from its own
# 32 values (256 where a Q8_0 layer is a multiple of 256 wide: this
# model's MLP output layers), so a split of the rows (sequence parallel) or of the columns
# at block boundaries (tensor parallel's column-parallel layers) quantizes
# as one process does, and where the rest of the step is the same
# arithmetic the latents are one process's bit for bit (0). Ulysses lays
# the gathered rows out in the sequence's order, so its attention sums the
# keys as one process does; tensor parallel's row-parallel layers gather
# their whole inputs and each shard computes its share of the output
# columns (pd_dit_shard.whole_inputs), so no output is a sum of shards' sums
# (with sums of shards: 5.4e-3 here). Ring attention's merged blocks differ
# from one process in the last f32 bits, as they do in f32; the next
# layer's 8-bit rounding can turn such a difference into a step of its
# input's 1/127 (5.8e-3 here), so on int8 products ring takes its gathered
# form: every chunk's K/V in the sequence's order, one attention as one
# process's, bit for bit, said in the log
run_f32=("${run[@]:0:${#run[@]}-1}")	# without its last word, -q
run+=(--dtype bf16 --quant-products int8)
"$pdit" generate "${run[@]}" -o "$tmp/one.png" --out-latents "$tmp/one.safetensors" || bad "one process, int8"
tol=$tol_rows
for m in "2:--ulysses-degree 2" "2:--data-parallel-degree 2" "2:--pipefusion-degree 2 --warmup-steps 3" \
	"2:--tensor-parallel-degree 2" "4:--tensor-parallel-degree 2 --pipefusion-degree 2 --warmup-steps 3" \
	"2:--ring-degree 2" "3:--ring-degree 3" "4:--ring-degree 2 --ulysses-degree 2"; do
	# shellcheck disable=SC2086
	check "Q8_0 GGUF on int8 products" "${m%%:*}" ${m#*:}
done
# said in the log; on f32's decoded products ring merges (its overlap and
# O(S/R) memory: within 1e-5 of one process, checked above), nothing said
for p in int8:1 f32:0; do
	flags=(--dtype bf16 --quant-products int8)
	[ "${p%:*}" = int8 ] || flags=()
	"${mpirun[@]}" -np 2 "$pdit" generate "${run_f32[@]}" "${flags[@]}" --ring-degree 2 -o "$tmp/m.png" 2> "$tmp/err" &&
		[ "$(grep -c "^pdit: ring attention gathers every chunk's keys and values" "$tmp/err")" = "${p#*:}" ] &&
		ok "ring 2 on ${p%:*} products: its gathered form said in the log ${p#*:} time(s)" ||
		{ cat "$tmp/err"; bad "ring 2 on ${p%:*} products: the log"; }
done
# the merged form asked for on int8 products: within int8's tolerance
# (5.8e-3 here), and bench's JSON names each form
tol=2e-2
check "Q8_0 GGUF on int8 products, merged" 2 --ring-degree 2 --ring-attention merged
for f in int8:auto:gathered int8:merged:merged f32:auto:merged f32:gathered:gathered; do
	flags=(--dtype bf16 --quant-products int8)
	[ "${f%%:*}" = int8 ] || flags=()
	g=${f#*:}
	"${mpirun[@]}" -np 2 "$pdit" bench "${run_f32[@]}" "${flags[@]}" --ring-degree 2 --ring-attention "${g%:*}" \
		--steps 1 --warmup 1 --json > "$tmp/bench.json" 2> "$tmp/err" &&
		grep -q "\"ring_attention\": \"${g#*:}\"" "$tmp/bench.json" &&
		ok "bench --json, --ring-attention ${g%:*} on ${f%%:*} products: \"ring_attention\": \"${g#*:}\"" ||
		{ cat "$tmp/err" "$tmp/bench.json"; bad "bench --json, --ring-attention ${g%:*} on ${f%%:*} products"; }
done
# Ulysses where the 8-bit roundings would show a different order of the
# keys: before the gathered rows took the sequence's order (each rank's text
# chunk, then its image chunk, rank after rank), this file's latents moved by
# 3e-3 at degree 2 and 4
"$pdit" tiny "$tmp/w256" --head-dim 64 > /dev/null 2>&1 && "$pdit" quantize "$tmp/w256/transformer" "$tmp/w256.gguf" \
	--type q4_k > /dev/null 2>&1 || bad "a Q4_K file 256 wide"
run=(--model "$tmp/w256" --diffusion-model "$tmp/w256.gguf" --config "$tmp/w256/transformer/config.json"
	--embeds "$tmp/w256/embeds.safetensors" -H 64 -W 48 --steps 2 -s 5 --dtype bf16 --quant-products int8 -q)
"$pdit" generate "${run[@]}" -o "$tmp/one.png" --out-latents "$tmp/one.safetensors" || bad "one process, Q4_K 256 wide"
tol=$tol_rows
# (heads 64 wide: attention by pdit's own bf16 products, where the golden
# model's take oneDNN's; ring gathered there too)
for m in "2:--ulysses-degree 2" "4:--ulysses-degree 4" "2:--tensor-parallel-degree 2" "2:--ring-degree 2"; do
	# shellcheck disable=SC2086
	check "Q4_K 256 wide on int8 products" "${m%%:*}" ${m#*:}
done
# the same model as Q8_0: its layers' inputs in blocks of 256 (a multiple
# of 256 wide), whatever the mesh
"$pdit" quantize "$tmp/w256/transformer" "$tmp/w256-q8.gguf" --type q8_0 > /dev/null 2>&1 || bad "a Q8_0 file 256 wide"
run=(--model "$tmp/w256" --diffusion-model "$tmp/w256-q8.gguf" --config "$tmp/w256/transformer/config.json"
	--embeds "$tmp/w256/embeds.safetensors" -H 64 -W 48 --steps 2 -s 5 --dtype bf16 --quant-products int8 -q)
"$pdit" generate "${run[@]}" -o "$tmp/one.png" --out-latents "$tmp/one.safetensors" || bad "one process, Q8_0 256 wide"
for m in "2:--tensor-parallel-degree 2" "2:--ulysses-degree 2" "2:--ring-degree 2"; do
	# shellcheck disable=SC2086
	check "Q8_0 256 wide on int8 products" "${m%%:*}" ${m#*:}
done
# int8-256: its weights requantized to one scale per 256 inputs at load,
# other latents than int8's (the log says so), and meshes give one
# process's (tensor parallel's shards are whole output rows: each column's
# 256s as one process has them)
cp "$tmp/one.safetensors" "$tmp/int8.safetensors"
run=("${run[@]/#int8/int8-256}")
"$pdit" generate "${run[@]:0:${#run[@]}-1}" -o "$tmp/one.png" --out-latents "$tmp/one.safetensors" 2> "$tmp/err" &&
	grep -q "requantized to one scale per 256 inputs" "$tmp/err" &&
	! "$cmp" tensors "$tmp/one.safetensors" "$tmp/int8.safetensors" 0 --all > /dev/null 2>&1 &&
	"$cmp" tensors "$tmp/one.safetensors" "$tmp/int8.safetensors" 0.05 --all > "$tmp/log" &&
	ok "one process, Q8_0 256 wide on int8-256: said in the log; within 0.05 of int8's latents, not its bits" ||
	{ cat "$tmp/err" "$tmp/log"; bad "one process, Q8_0 256 wide on int8-256"; }
for m in "2:--tensor-parallel-degree 2" "2:--ulysses-degree 2"; do
	# shellcheck disable=SC2086
	check "Q8_0 256 wide on int8-256" "${m%%:*}" ${m#*:}
done
# a rank with AMX-INT8 beside one without (rank 0's tiles emulated where the
# CPU has none, turned off where it has them): the same integers and f32
# order, one process's latents bit for bit, on int8 and on int8-256 (whose
# tiles are 64 inputs deep)
if grep -q avx512_vnni /proc/cpuinfo && [ -z "${PDIT_NO_AVX512:-}" ]; then
	# (rank 0's log names its device: the AMX one; the run without -q)
	amx="0 PDIT_AMX_EMULATE"
	grep -q amx_int8 /proc/cpuinfo && amx="1 PDIT_NO_AMX"
	mv "$tmp/one.safetensors" "$tmp/int8-256.safetensors"
	for qp in int8 int8-256; do
		timeout 120 "${mpirun[@]}" -np 2 sh -c '[ "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-}}" != "${0% *}" ] ||
			export "${0#* }=1"; exec "$@"' "$amx" "$pdit" generate "${run[@]:0:${#run[@]}-1}" \
			--quant-products $qp --tensor-parallel-degree 2 -v -o "$tmp/m.png" --out-latents "$tmp/m.safetensors" \
			2> "$tmp/err" &&
			grep -q "^pdit: rank 0 computes on cpu (.*AMX-INT8" "$tmp/err" &&
			"$cmp" tensors "$tmp/m.safetensors" "$tmp/$qp.safetensors" 0 --all > "$tmp/log" &&
			ok "tensor parallel 2 on an AMX rank and a VNNI one (Q8_0 256 wide, $qp): one process's bits" ||
			{ cat "$tmp/err" "$tmp/log"; bad "tensor parallel 2 on an AMX rank and a VNNI one, $qp"; }
	done
else
	ok "(no AVX-512 VNNI here: an AMX rank not tried)"
fi
# a file of Q5_0 and Q4_K layers on auto with 256-bit VNNI only (here:
# AVX-512 off): both types in int8 by the 256-bit kernels; tensor parallel
# gathers whole inputs, bit for bit
if grep -q "avx512_vnni\|avx_vnni" /proc/cpuinfo && [ -z "${PDIT_NO_VNNI:-}${PDIT_NO_AVX2:-}" ]; then
	# auto's int8 products are what the rest checks: where oneDNN's bf16
	# products take AMX tiles auto decodes (faster there), so they are kept
	# below AMX from here on (as the CPUs these checks stand for have them)
	export ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
	for t in q5_0 q4_k; do
		"$pdit" quantize "$tmp/w256/transformer" "$tmp/w256-$t.gguf" --type $t > /dev/null 2>&1 || bad "quantize $t"
	done
	/usr/bin/python3 "$(dirname "$0")/../../bench/gguf_grow.py" "$tmp/w256-q5_0.gguf" "$tmp/w256-mix.gguf" \
		--take "$tmp/w256-q4_k.gguf:single_transformer_blocks." > /dev/null || bad "a file of Q5_0 and Q4_K"
	run=(--model "$tmp/w256" --diffusion-model "$tmp/w256-mix.gguf" --config "$tmp/w256/transformer/config.json"
		--embeds "$tmp/w256/embeds.safetensors" -H 64 -W 48 --steps 2 -s 5 --dtype bf16)
	export PDIT_NO_AVX512=1
	"$pdit" generate "${run[@]}" -o "$tmp/one.png" --out-latents "$tmp/one.safetensors" 2> "$tmp/err" &&
		grep -q "^pdit: [1-9][0-9]* quantized layers multiply in int8" "$tmp/err" ||
		{ cat "$tmp/err"; bad "one process, Q5_0 + Q4_K on auto with AVX-512 off"; }
	run+=(-q)
	check "Q5_0 + Q4_K on auto with 256-bit VNNI" 2 --tensor-parallel-degree 2
	unset PDIT_NO_AVX512
	# ranks whose CPUs choose differently (VNNI off on rank 0 only): every
	# rank takes the lesser choice, on the Q4_K file decoded products whose
	# shards sum (a rank gathering whole inputs while the other sums would
	# not meet): the latents of both ranks with VNNI off, bit for bit
	run=(--model "$tmp/w256" --diffusion-model "$tmp/w256.gguf" --config "$tmp/w256/transformer/config.json"
		--embeds "$tmp/w256/embeds.safetensors" -H 64 -W 48 --steps 2 -s 5 --dtype bf16 -q
		--tensor-parallel-degree 2 -o "$tmp/m.png")
	timeout 120 "${mpirun[@]}" -np 2 env PDIT_NO_VNNI=1 "$pdit" generate "${run[@]}" --out-latents "$tmp/one.safetensors" ||
		bad "tensor parallel 2, Q4_K 256 wide on auto with VNNI off"
	# (one app context, so mpirun's -x options reach both ranks)
	timeout 120 "${mpirun[@]}" -np 2 sh -c '[ "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-}}" != 0 ] || export PDIT_NO_VNNI=1
		exec "$0" "$@"' "$pdit" generate "${run[@]}" --out-latents "$tmp/m.safetensors" 2> "$tmp/err" &&
		"$cmp" tensors "$tmp/m.safetensors" "$tmp/one.safetensors" 0 --all > "$tmp/log" &&
		ok "tensor parallel 2 on ranks that choose differently (Q4_K, auto): both ranks' choice, bit for bit" ||
		{ cat "$tmp/err" "$tmp/log"; bad "tensor parallel 2 on ranks that choose differently"; }
	# a rank with 512-bit VNNI beside one with 256-bit only (AVX-512 off on
	# rank 1): both multiply in int8, their kernels' integers and f32 order
	# alike (as are the elementwise kernels' and attention's of either
	# width): one process's latents on int8, bit for bit
	if grep -q avx512_vnni /proc/cpuinfo && [ -z "${PDIT_NO_AVX512:-}" ]; then
		run=(--model "$tmp/w256" --diffusion-model "$tmp/w256.gguf" --config "$tmp/w256/transformer/config.json"
			--embeds "$tmp/w256/embeds.safetensors" -H 64 -W 48 --steps 2 -s 5 --dtype bf16 -o "$tmp/m.png")
		"$pdit" generate "${run[@]}" -q --quant-products int8 --out-latents "$tmp/one.safetensors" ||
			bad "one process, Q4_K 256 wide on int8"
		timeout 120 "${mpirun[@]}" -np 2 sh -c '[ "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-}}" != 1 ] || export PDIT_NO_AVX512=1
			exec "$0" "$@"' "$pdit" generate "${run[@]}" --tensor-parallel-degree 2 --out-latents "$tmp/m.safetensors" \
			2> "$tmp/err" && grep -q "^pdit: [1-9][0-9]* quantized layers multiply in int8" "$tmp/err" &&
			"$cmp" tensors "$tmp/m.safetensors" "$tmp/one.safetensors" 0 --all > "$tmp/log" &&
			ok "tensor parallel 2 on a 512-bit and a 256-bit VNNI rank (Q4_K, auto): int8, one process's bits" ||
			{ cat "$tmp/err" "$tmp/log"; bad "tensor parallel 2 on a 512-bit and a 256-bit VNNI rank"; }
	else
		ok "(no AVX-512 VNNI here: a 512-bit rank beside a 256-bit one not tried)"
	fi
	# --parallel auto where no mesh fits with auto's int8 layout (Q5_K's,
	# 1.57x the file's blocks) but some fit with the file's: the mesh chosen
	# runs decoded on every rank, said in the log: --quant-products bf16's
	# latents on that mesh, bit for bit
	"$pdit" quantize "$tmp/w256/transformer" "$tmp/w256-q5_k.gguf" --type q5_k > /dev/null 2>&1 || bad "quantize q5_k"
	run=(--model "$tmp/w256" --diffusion-model "$tmp/w256-q5_k.gguf" --config "$tmp/w256/transformer/config.json"
		--embeds "$tmp/w256/embeds.safetensors" -H 64 -W 48 --steps 2 -s 5 --dtype bf16 -o "$tmp/m.png")
	timeout 120 "${mpirun[@]}" -np 2 env PDIT_MEM_AVAILABLE_MB=12 "$pdit" generate "${run[@]}" --parallel auto \
		--out-latents "$tmp/m.safetensors" 2> "$tmp/err" || bad "--parallel auto, Q5_K where only decoded fits"
	flags=() mesh=$(sed -n 's/.*mesh \(dp=[^(]*\) (chosen by the cost model.*/\1/p' "$tmp/err")
	for kv in $mesh; do
		case $kv in
		ring=*) flags+=(--ring-degree "${kv#*=}") ;;
		ulysses=*) flags+=(--ulysses-degree "${kv#*=}") ;;
		tp=*) flags+=(--tensor-parallel-degree "${kv#*=}") ;;
		*=1) ;;
		*) flags+=(--unexpected "$kv") ;;
		esac
	done
	timeout 120 "${mpirun[@]}" -np 2 "$pdit" generate "${run[@]}" "${flags[@]}" --quant-products bf16 -q \
		--out-latents "$tmp/one.safetensors" &&
		grep -q "int8 layout .* does not fit on the mesh chosen, the file's does" "$tmp/err" &&
		"$cmp" tensors "$tmp/m.safetensors" "$tmp/one.safetensors" 0 --all > "$tmp/log" &&
		ok "--parallel auto where only the file's blocks fit ($mesh): decoded, --quant-products bf16's bits" ||
		{ cat "$tmp/err" "$tmp/log"; bad "--parallel auto where only the file's blocks fit ($mesh)"; }
fi
exit $fail
