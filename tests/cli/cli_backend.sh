#!/usr/bin/env bash
# The backends as a user picks them (--backend): the staged backend (the
# CPU's kernels on memory the host cannot touch: every buffer a method hands
# MPI goes through pd_comm_staged's pinned copies) makes the same latents as
# the CPU backend on every method and file kind, one process and meshes of
# 2 and 4 under mpirun, bit for bit (the same kernels; only the path of the
# bytes differs); pdit check passes on it; bad names and devices are refused
# with one line naming the flag; CUDA without a GPU says so.
# usage: cli_backend.sh PDIT ST_COMPARE WAN_GOLDEN_DIR MPIRUN...
set -u
pdit=$1 cmp=$2 wan=$3
shift 3
mpirun=("$@")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

"$pdit" tiny "$tmp/m" --heads 4 --batch 2 > /dev/null 2>&1 || { echo "FAIL: pdit tiny"; exit 1; }
run=(--model "$tmp/m" --embeds "$tmp/m/embeds.safetensors" -H 64 -W 48 --steps 3 -s 5 -q)

# NP MESH...: the CPU's latents and the staged backend's, compared exactly
same() {
	local np=$1 tag
	shift
	tag=$(echo "$np $*" | tr -c 'a-z0-9' _)
	for b in cpu staged; do
		if [ "$np" = 1 ]; then
			"$pdit" generate "${run[@]}" "$@" --backend $b -o "$tmp/$tag-$b.png" \
				--out-latents "$tmp/$tag-$b.safetensors" 2> "$tmp/err"
		else
			"${mpirun[@]}" -np "$np" "$pdit" generate "${run[@]}" "$@" --backend $b -o "$tmp/$tag-$b.png" \
				--out-latents "$tmp/$tag-$b.safetensors" 2> "$tmp/err"
		fi || { head -5 "$tmp/err"; bad "$np processes, $* on $b"; return; }
	done
	if cmp -s "$tmp/$tag-cpu.safetensors" "$tmp/$tag-staged.safetensors" &&
		cmp -s "$tmp/$tag-cpu-0.png" "$tmp/$tag-staged-0.png"; then
		ok "staged = cpu, bit for bit: $np processes $*"
	else
		bad "staged differs from cpu: $np processes $*"
	fi
}

same 1
same 1 --fbcache-threshold 0.2 --steps 4
same 1 --quantize q8_0
same 2 --ulysses-degree 2
same 2 --ring-degree 2
same 2 --tensor-parallel-degree 2
same 2 --pipefusion-degree 2
same 2 --distrifusion-degree 2
same 2 --data-parallel-degree 2
same 2 --cfg-parallel --true-cfg-scale 2
same 4 --ulysses-degree 2 --ring-degree 2
same 4 --tensor-parallel-degree 2 --ulysses-degree 2
same 4 --pipefusion-degree 2 --ulysses-degree 2 --fbcache-threshold 0.2 --steps 4
same 4 --distrifusion-degree 2 --cfg-parallel --true-cfg-scale 2
# the banded VAE decode: 2 bands over a data-parallel group of one image
same 2 --tensor-parallel-degree 2 --vae-parallel

# Wan2.1 (its video VAE banded too) on 2 processes
wrun=(--model "$wan/model" -p "a cat" -H 32 -W 48 --frames 5 --steps 2 -q)
for b in cpu staged; do
	"${mpirun[@]}" -np 2 "$pdit" generate "${wrun[@]}" --ulysses-degree 2 --backend $b -o "$tmp/wan-$b-%02d.png" \
		2> "$tmp/err" || { head -5 "$tmp/err"; bad "Wan on $b"; }
done
if [ -s "$tmp/wan-cpu-00.png" ] && for f in "$tmp"/wan-cpu-*.png; do cmp -s "$f" "${f/-cpu-/-staged-}" || exit 1; done; then
	ok "Wan2.1 video, Ulysses 2: staged = cpu"
else
	bad "Wan2.1 video differs between staged and cpu"
fi

# pdit check runs its reference on the same backend
out=$("${mpirun[@]}" -np 2 "$pdit" check "${run[@]}" --ring-degree 2 --backend staged 2> /dev/null)
grep -q '^PASS$' <<< "$out" && ok "pdit check --backend staged: PASS" || { echo "$out"; bad "pdit check on staged"; }

# refusals: one line naming the flag, nonzero
refuse() {
	local want=$1
	shift
	if "$pdit" generate "${run[@]}" -o "$tmp/x.png" "$@" 2> "$tmp/err"; then
		bad "accepted: $*"
	elif [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q -- "$want" "$tmp/err"; then
		ok "refused: $* ($(cat "$tmp/err"))"
	else
		cat "$tmp/err"; bad "refusal of $*"
	fi
	[ ! -e "$tmp/x.png" ] || bad "$* wrote a picture"
}
refuse "--backend tpu" --backend tpu
refuse "--device" --device -1
refuse "--comm ib" --comm ib
# NCCL moves a GPU's buffers: refused on the CPU (or where pdit has no NCCL)
refuse "--comm nccl" --comm nccl --backend cpu
# without a GPU (or without CUDA in this build) CUDA is refused, and auto is the CPU
if [ "$("$pdit" generate --help | grep -c -- '--backend')" -ge 1 ]; then
	refuse "--backend cuda" --backend cuda --device 999
fi
"$pdit" generate "${run[@]/-q/-v}" --backend auto -o "$tmp/auto.png" 2> "$tmp/err" &&
	grep -q "^pdit: computing on cpu" "$tmp/err" && ok "--backend auto runs on the CPU here and says so" ||
	bad "--backend auto"

# The CUDA backend is a module (libpdit-cuda.so) loaded when asked for: the
# program links no CUDA library, so a process that computes on the CPU never
# starts cuBLASLt (measured: 0.2-0.5 s a start)
if "$pdit" --version | grep -q '^backends: cpu, cuda'; then
	if command -v readelf > /dev/null; then
		needed=$(readelf -d "$pdit" | grep -E 'NEEDED.*(cuda|cublas|nccl)')
		[ -z "$needed" ] && ok "pdit links no CUDA library" || bad "pdit links: $needed"
	fi
	# asked for, it loads (beside pdit) and runs to the device count
	refuse "no CUDA device here" --backend cuda
	printf 'not a library\n' > "$tmp/text.so"
	PDIT_CUDA_PLUGIN=$tmp/none.so refuse "$tmp/none.so: no such file (PDIT_CUDA_PLUGIN)" --backend cuda
	PDIT_CUDA_PLUGIN=$tmp/text.so refuse "$tmp/text.so: .*(PDIT_CUDA_PLUGIN)" --backend cuda
	lib=$(dirname "$pdit")/libpdit.so
	[ ! -e "$lib" ] || PDIT_CUDA_PLUGIN=$lib refuse "not pdit's CUDA module" --backend cuda
fi

exit $fail
