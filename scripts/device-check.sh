#!/usr/bin/env bash
# The GPU checks of the CUDA backend, in one run on a machine with one H100
# or H200 (CUDA 13 toolkit and driver, PyTorch; no Debian packages, no
# network). Made here by scripts/device-kit.sh (devkit/kit.tar.xz: the
# build and the libraries it loads), run there from the repository root:
#
#   device run: OUT=$OUT scripts/device-check.sh [PART...]   (carry: devkit; timeout_s 600)
#
# A rehearsal here, without a GPU (the same script and parts, the kit's
# programs those of the CUDA emulation; parts 1-3 pass in about 5 minutes
# on 2 cores, the timing's 24 GB would take hours):
#
#   scripts/device-kit.sh --emulated && KIT=devkit-emu scripts/device-check.sh conformance golden meshes
#
# PART: conformance, golden, meshes, timing (default: all four, in that
# order), and more (asked for by name: a second call's, after the first
# has passed). The whole run keeps within 540 s (DEADLINE_S), so that one device
# command of 600 s returns its logs: each part gets a share of what is left
# and every program in it a timeout within that share, so that a hang costs
# one part, not the run.
#   1. conformance: every backend operation on CUDA against the CPU backend,
#      and the staged (pinned) and NCCL communicators on device buffers; the
#      fused attention kernel (by 64 and by 128 query rows a block,
#      PDIT_CUDA_FLASH_ROWS) against the chunked path at FLUX.1's 4608
#      tokens, each one's time (which bf16 attention should be);
#      FLUX.1-dev's MLP product with bias and GELU through cuBLASLt and through
#      cuBLAS and a kernel (PDIT_CUDA_NO_LT), each one's time
#   2. golden: flux-tiny, wan-tiny on CUDA against diffusers (f32 and bf16;
#      the tests' own tolerances), quant-tiny's GGUF and fp8 files through
#      pdit forward (f32: every tensor within 1e-4; bf16: out.sample 2e-2)
#   3. meshes: 2 and 4 processes sharing the GPU (Ulysses, ring, tensor,
#      PipeFusion, CFG, data, DistriFusion; MPI through pinned staging)
#      against one process, as on the CPU; the banded VAE and First Block
#      Cache on 2
#   4. timing: FLUX.1-dev's sizes (19 + 38 blocks, random bf16 weights
#      written here, by pdit tiny in the background from the start: 24 GB)
#      at 1024^2 with pdit bench, beside the same step in
#      PyTorch bf16 with scaled_dot_product_attention, and the device's bf16
#      matrix-product rate measured in the same run
#   5. more: FLUX.1-dev's sizes at 2048^2 beside PyTorch's step there, at
#      1024^2 with its weights kept as Q8_0, and Wan2.1-1.3B's (30 blocks of
#      1536) at 81 frames of 480x832 with CFG
# What comes back under $OUT (./device-out without it; the device tool
# returns at most 8 files): device-check.log (the whole log; each part's
# verdict as "== PART: PASS|FAIL|SKIP (why)"), logs.tar.gz (every part's
# own output: conformance.txt, golden-*.txt, quant/*.log, meshes-*.txt,
# nvidia-smi.txt, ...) and the two timing JSONs (pdit-flux-dev-1024.json,
# torch-flux-dev-1024.json).
# Exit status: 0 when every part that ran passed.
set -u
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
out=${OUT:-$root/device-out}
work=$(mktemp -d /tmp/pdit-check.XXXXXX)
mkdir -p "$out"
log=$out/device-check.log
exec > >(tee "$log") 2>&1
tee_pid=$!
# every part's files, packed into one (the tool brings back 8 files at
# most), and the log whole before the tool collects it; a TERM (the tool's
# limit) still packs
# the timing's model writer (below) while it is at work
tiny_pid=""
# stops it at once (a TERM would wait for the file being written: pdit
# gives up a folder only between its files) and removes what it left
tiny_stop() {
	[ -n "$tiny_pid" ] || return 0
	kill -9 "$tiny_pid" 2> /dev/null
	wait "$tiny_pid" 2> /dev/null
	rm -rf /tmp/pdit-flux-dev.new-*
	tiny_pid=""
}
# (the logs first: the tool's limit may follow its TERM closely; then
# the working folder, whose files are in the pack, and the unpacked kit)
trap 'tar -C "$work" -czf "$out/logs.tar.gz" . 2> /dev/null; tiny_stop; rm -rf "$work" ${kit:+"$kit"}; exec >&- 2>&-; wait "$tee_pid"' EXIT
trap 'exit 143' TERM INT HUP
failed=0
verdict() { echo "== $1: $2"; [ "${2%% *}" = FAIL ] && failed=1; return 0; }
# adds REASON to the verdict held in the variable NAME: PASS becomes
# "FAIL (REASON)", a failure names each of its reasons
add_fail() {
	local v=${!1}
	if [ "${v%% *}" = FAIL ] && [ "$v" != FAIL ]; then v="${v%)}; $2)"; else v="FAIL ($2)"; fi
	printf -v "$1" '%s' "$v"
}
t_start=$(date +%s)
deadline=$((t_start + ${DEADLINE_S:-540}))
elapsed() { echo $(($(date +%s) - t_start)); }
left() { echo $((deadline - $(date +%s))); }
# A program's time: at most WANT seconds, ending by the part's end
# (PART_END); 0 when the part's time is up (the caller says so and skips).
within() {
	local want=$1 now
	now=$(date +%s)
	[ $((part_end - now)) -lt "$want" ] && want=$((part_end - now))
	[ "$want" -lt 3 ] && want=0
	echo "$want"
}
# runs a kit program (the kit's libraries) under a timeout of at most WANT
# seconds within the part: 124 when it ran out, 125 when no time was left
ktimed() {
	local t
	t=$(within "$1")
	shift
	[ "$t" = 0 ] && { echo "(no time left in the part: not run)"; return 125; }
	kitenv timeout -k 10 "$t" "$@"
}
# what a failed program's status means
why() { case $1 in 124 | 137) echo "timed out" ;; 125) echo "no time left" ;; *) echo "exit $1" ;; esac; }
# the part's end: its SHARE of what is left (percent), at least MIN
# seconds, leaving the timing part its RESERVE when it is to run
part_begins() {
	local share=$1 min=$2 l
	l=$(($(left) - reserve))
	[ "$l" -lt 0 ] && l=0
	part_end=$(($(date +%s) + (l * share / 100 > min ? l * share / 100 : min)))
	[ "$part_end" -gt "$deadline" ] && part_end=$deadline
	return 0
}
parts=${*:-conformance golden meshes timing}
wants() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
for p in $parts; do
	case $p in conformance | golden | meshes | timing | more) ;; *)
		echo "device-check: unknown part '$p' (conformance, golden, meshes, timing, more)"
		exit 2
		;;
	esac
done
reserve=0
wants timing && reserve=200
wants more && reserve=$((reserve + 240))
export PDIT_TEST_SEED=${PDIT_TEST_SEED:-$t_start}

# the kit's folder: devkit, or a rehearsal's (scripts/device-kit.sh
# --emulated: the CUDA emulation's programs, run here without a GPU)
kdir=${KIT:-devkit}
echo "pdit device check, $(date -u), commit $(cat "$kdir/commit" 2> /dev/null || git rev-parse HEAD 2> /dev/null)," \
	"parts: $parts, seed $PDIT_TEST_SEED (PDIT_TEST_SEED)"
echo "system: $(. /etc/os-release 2> /dev/null && echo "$PRETTY_NAME"), $(ldd --version 2> /dev/null | head -1)"
if [ -f "$kdir/emulated" ]; then
	echo "a rehearsal: $kdir holds the CUDA emulation's programs (the CPU computes); no GPU is used" \
		> "$work/nvidia-smi.txt"
elif ! timeout -k 5 30 nvidia-smi > "$work/nvidia-smi.txt" 2>&1; then
	verdict device "FAIL (no GPU here: nvidia-smi says $(head -1 "$work/nvidia-smi.txt"))"
	exit 1
fi
head -15 "$work/nvidia-smi.txt"
# the host's processor: issue 39's int8 products want an AMX machine, and
# this one may be it (AMX-INT8 tiles: amx_int8 below)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores;" \
	"flags: $(grep -o -w -E 'avx512_vnni|avx512_bf16|avx_vnni|amx_tile|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"

# --- the kit ------------------------------------------------------------
kit=/tmp/pdit-kit
rm -rf "$kit" && mkdir -p "$kit"
if [ ! -f "$kdir/kit.tar.xz" ]; then
	verdict kit "FAIL (no $kdir/kit.tar.xz: run scripts/device-kit.sh here and carry $kdir)"
	exit 1
fi
# without an xz program, Python's tarfile reads it
if ! { command -v xz > /dev/null && timeout -k 5 120 tar -C "$kit" -xJf "$kdir/kit.tar.xz"; } &&
	! timeout -k 5 120 python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
		"$kdir/kit.tar.xz" "$kit"; then
	verdict kit "FAIL ($kdir/kit.tar.xz does not unpack here)"
	exit 1
fi
cudalibs=/usr/local/cuda/lib64
# the CUDA libraries PyTorch's wheels bring (NCCL's among them: the kit
# leaves it out), where the toolkit's are elsewhere; the image's venv where
# python3 is another
py_libs=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib")))))' 2> /dev/null)
[ -n "$py_libs" ] || py_libs=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2> /dev/null | paste -sd:)
echo "CUDA libraries from PyTorch's wheels: ${py_libs:-none found}"
kit_path=$(echo "$kit/lib:$kit/usr/lib/x86_64-linux-gnu/openmpi/lib:$kit/usr/lib/x86_64-linux-gnu/pmix2/lib:$cudalibs:$py_libs:${LD_LIBRARY_PATH:-}" |
	tr -s : | sed 's/^://; s/:$//')
# the kit's Debian libraries for the kit's programs only: python3 and
# PyTorch keep the machine's own
kitenv() { LD_LIBRARY_PATH="$kit_path" "$@"; }
# orterun finds orted and its own files by OPAL_PREFIX; the kit's programs are named by path
export OPAL_PREFIX="$kit/usr"
# PMIx 4 (Debian 12's) is moved by PMIX_PREFIX; its plugins' folder is
# compiled in, so named too
px=$kit/usr/lib/x86_64-linux-gnu/pmix2
export PMIX_PREFIX=$px PMIX_DATADIR=$px/share PMIX_MCA_mca_base_component_path=$px/lib/pmix
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# no InfiniBand or shared-memory surprises on a one-GPU machine: TCP and
# shared memory, without the cross-process copies a sandbox may refuse
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# every process on this machine: no ssh or rsh to look for (there is none)
export OMPI_MCA_plm=isolated
# NCCL says why where it refuses
export NCCL_DEBUG=WARN
missing=$(for f in "$kit"/bin/* "$kit/usr/bin/orterun"; do kitenv ldd "$f" 2>&1 | grep "not found\|GLIBC" | sed "s|^|$(basename "$f"): |"; done | sort -u)
if [ -n "$missing" ]; then
	echo "$missing"
	verdict kit "FAIL (libraries missing)"
	exit 1
fi
pdit=$kit/bin/pdit
kitenv timeout -k 5 30 "$pdit" --version 2>&1 | head -5
verdict kit "PASS ($(du -h "$kdir/kit.tar.xz" | cut -f1))"
g=tests/golden

# FLUX.1-dev's sizes: 19 double and 38 single blocks at its widths (random bf16 weights, 24 GB)
flux_dev="--flux-width --layers 19 --single-layers 38 --txt-len 512"
# The timing's model, written by pdit tiny from now on, in the background:
# a minute or two of the CPU's and the disk's while the parts before use
# the GPU (at the lowest priority, on half the cores); bench_on waits for it
if wants timing || wants more; then
	rm -rf /tmp/pdit-flux-dev
	# shellcheck disable=SC2086
	LD_LIBRARY_PATH="$kit_path" OMP_NUM_THREADS=$((($(nproc) + 1) / 2)) nice -n 19 \
		"$pdit" tiny /tmp/pdit-flux-dev $flux_dev -f > "$work/tiny-pdit-flux-dev.txt" 2>&1 &
	tiny_pid=$!
	echo "writing FLUX.1-dev's sizes (24 GB) for the timing in the background: pid $tiny_pid"
fi

# --- 1. conformance -----------------------------------------------------
if wants conformance; then
	echo "--- 1. conformance, $(elapsed) s"
	part_begins 25 60
	ktimed 150 "$kit/bin/test_backend" cuda > "$work/conformance.txt" 2>&1
	rc=$?
	if [ $rc = 0 ]; then
		tail -3 "$work/conformance.txt"
		verdict conformance "PASS"
	else
		grep -E "FAIL|conforms|seed|NCCL|^attention|^linear" "$work/conformance.txt" | head -40
		tail -5 "$work/conformance.txt"
		verdict conformance "FAIL ($(why $rc))"
	fi
fi

# --- 2. golden ----------------------------------------------------------
if wants golden; then
	echo "--- 2. golden cases on CUDA, $(elapsed) s"
	part_begins 35 90
	golden_ok=PASS
	run_golden() {
		local name=$1 rc
		shift
		PDIT_TEST_BACKEND=cuda ktimed 60 "$@" > "$work/golden-$name.txt" 2>&1
		rc=$?
		if [ $rc = 0 ]; then
			echo "ok   $name: $(tail -2 "$work/golden-$name.txt" | head -1)"
		else
			echo "FAIL $name ($(why $rc)):"
			grep -E "FAIL|limit|worst" "$work/golden-$name.txt" | head -8
			tail -3 "$work/golden-$name.txt"
			golden_ok=FAIL
		fi
	}
	for dt in f32 bf16; do
		run_golden flux-$dt "$kit/bin/test_flux_golden" $g/flux-tiny $dt
		run_golden wan-$dt "$kit/bin/test_wan_golden" $g/wan-tiny $dt
		run_golden wan-pipeline-$dt "$kit/bin/test_wan_pipeline" $g/wan-tiny $dt
		run_golden wan-text-$dt "$kit/bin/test_wan_text" $g/wan-tiny $dt
	done
	run_golden flux-pipeline-f32 "$kit/bin/test_pipeline_golden" $g/flux-tiny
	run_golden flux-pipeline-bf16 "$kit/bin/test_pipeline_golden" $g/flux-tiny bf16
	run_golden wan-vae-f32 "$kit/bin/test_wan_vae" $g/wan-tiny f32
	# the quantized files as they are kept (GGUF blocks, fp8) against
	# diffusers on their dequantized weights: the loop CI runs on the CPU
	# (cli_quant) and the CUDA emulation (cli_cuda_emu), each program
	# within 60 s and the part (logs in quant/; the outputs not kept)
	tests/cli/quant_golden.sh -t 60 -e "$part_end" -l "$kit_path" "$pdit" "$kit/bin/st_compare" $g/quant-tiny \
		"$work/quant" --backend cuda || golden_ok=FAIL
	rm -f "$work"/quant/*.safetensors
	verdict golden "$golden_ok"
fi

# --- 3. meshes on the one GPU ---------------------------------------------
if wants meshes; then
	echo "--- 3. meshes of 2 and 4 processes sharing the GPU, $(elapsed) s"
	# the last part before the timing, whose reserve is kept: all the rest
	part_begins 100 90
	mpirun=$kit/usr/bin/mpirun
	ktimed 30 "$mpirun" -np 2 true > "$work/mpirun.txt" 2>&1
	rc=$?
	if [ $rc = 125 ]; then
		verdict meshes "FAIL (no time left)"
	elif [ $rc != 0 ]; then
		head -20 "$work/mpirun.txt"
		# asked for and not run: a failure of the run, not a pass
		verdict meshes "FAIL (Open MPI from the kit does not start here, $(why $rc): $(grep -v -m1 -E '^-*$' "$work/mpirun.txt"))"
	else
		mesh_ok=PASS
		# one program on NP processes sharing the GPU (log meshes-NAME.txt),
		# within WANT seconds: LABEL's line, and the part failed when it fails
		mesh_run() {
			local name=$1 label=$2 want=$3 np=$4 rc
			shift 4
			ktimed "$want" "$mpirun" -np "$np" -x PDIT_TEST_BACKEND=cuda -x LD_LIBRARY_PATH -x PDIT_TEST_SEED \
				-x NCCL_DEBUG "$@" > "$work/meshes-$name.txt" 2>&1
			rc=$?
			if [ $rc = 0 ]; then
				echo "ok   $label: $(tail -1 "$work/meshes-$name.txt")"
			else
				echo "FAIL $label ($(why $rc)):"
				grep -E "FAIL|error" "$work/meshes-$name.txt" | head -10
				tail -3 "$work/meshes-$name.txt"
				mesh_ok=FAIL
			fi
		}
		mesh_run np2 "np 2" 200 2 "$kit/bin/test_parallel" $g/flux-tiny
		mesh_run np4 "np 4" 200 4 "$kit/bin/test_parallel" $g/flux-tiny
		mesh_run vae "banded VAE np 2" 120 2 "$kit/bin/test_vae_parallel" $g/flux-tiny $g/wan-tiny
		# First Block Cache on every mesh of 2: each rank's decisions from
		# the device's sums, the same as one process's
		mesh_run fbcache "First Block Cache np 2" 120 2 "$kit/bin/test_fbcache"
		verdict meshes "$mesh_ok"
	fi
fi

# PyTorch's FLUX.1 step at SIZE^2 (STEPS timed) into $out/JSON, within
# WANT seconds of the part; 1 when it did not run through
torch_step() {
	local size=$1 steps=$2 json=$3 t
	t=$(within "$4")
	if [ "$t" = 0 ] || ! timeout -k 10 "$t" python3 bench/torch_flux_step.py --size "$size" --steps "$steps" \
		--json "$out/$json" > "$work/torch-$size.txt" 2>&1; then
		tail -5 "$work/torch-$size.txt" 2> /dev/null
		return 1
	fi
	cat "$out/$json"
}
# pdit bench on DIR into $out/JSON: DIR written first by pdit tiny with the
# arguments before -- unless it holds a model, the bench's arguments after;
# 1 with the reason in bench_why when either fails
bench_on() {
	local dir=$1 json=$2 rc a=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		a+=("$1")
		shift
	done
	shift
	# the background writer's model: its end, within the part
	if [ "$dir" = /tmp/pdit-flux-dev ] && [ -n "$tiny_pid" ]; then
		local t0 t
		t0=$(date +%s)
		t=$(within 240)
		while kill -0 "$tiny_pid" 2> /dev/null && [ $(($(date +%s) - t0)) -lt "$t" ]; do
			sleep 1
		done
		if kill -0 "$tiny_pid" 2> /dev/null; then
			rc=124
			tiny_stop
		else
			wait "$tiny_pid"
			rc=$?
			tiny_pid=""
		fi
		echo "(the background writer ended $(($(date +%s) - t0)) s into the wait, $(elapsed) s in)"
		if [ $rc != 0 ]; then
			tail -5 "$work/tiny-pdit-flux-dev.txt"
			bench_why="writing the model for $json in the background, $(why $rc)"
			return 1
		fi
	fi
	if [ ! -f "$dir/model_index.json" ]; then
		ktimed 240 "$pdit" tiny "$dir" "${a[@]}" -f > "$work/tiny-$json.txt" 2>&1
		rc=$?
		if [ $rc != 0 ]; then
			tail -5 "$work/tiny-$json.txt"
			bench_why="writing the model for $json, $(why $rc)"
			return 1
		fi
	fi
	ktimed 240 "$pdit" bench -m "$dir" --backend cuda --dtype bf16 --warmup 1 --json "$@" > "$out/$json" 2> "$work/$json.err"
	rc=$?
	cat "$out/$json"
	[ $rc = 0 ] && return 0
	tail -5 "$work/$json.err"
	bench_why="pdit bench for $json, $(why $rc)"
	return 1
}
# --- 4. timing ------------------------------------------------------------
if wants timing; then
	echo "--- 4. FLUX.1-dev's sizes at 1024^2, $(elapsed) s"
	reserve=0
	part_begins 100 60
	m=/tmp/pdit-flux-dev
	timing_ok=PASS
	# PyTorch first: it needs no model written, and its figure (with the
	# device's matrix-product rate) is what pdit's is read against
	torch_step 1024 5 torch-flux-dev-1024.json 150 || add_fail timing_ok "PyTorch's step"
	bench_on "$m" pdit-flux-dev-1024.json $flux_dev -- -H 1024 -W 1024 --steps 3 || add_fail timing_ok "$bench_why"
	# where that step's time goes: one step again with every operation
	# waited for and timed (slower than the step above: read for its
	# shares, which say what to make faster next; not part of the verdict)
	if [ -f "$m/model_index.json" ]; then
		bench_on "$m" pdit-flux-dev-1024-ops.json -- -H 1024 -W 1024 --steps 1 --op-times ||
			echo "(the operations' times: $bench_why)"
		python3 bench/op_shares.py "$out/pdit-flux-dev-1024-ops.json" || true
	fi
	# the next part writes it again (24 GB) only when this one did not run
	wants more || rm -rf "$m"
	python3 - "$out" << 'EOF' || true
import json, sys, os
d = sys.argv[1]
try:
    p = json.load(open(os.path.join(d, "pdit-flux-dev-1024.json")))
    t = json.load(open(os.path.join(d, "torch-flux-dev-1024.json")))
except Exception as e:
    print("timing: no comparison (%s)" % e)
    sys.exit(0)
step = p.get("step_s") or p.get("seconds_per_step")
print("pdit  %.3f s/step (%s)" % (step, {k: p[k] for k in p if "flop" in k or "rate" in k}))
print("torch %.3f s/step, %.0f TFLOP/s, device matmul %.0f TFLOP/s" % (t["step_s"], t["tflops"], t["matmul_tflops"]))
print("pdit / torch step time: %.2f; 28 steps projected: %.1f s" % (step / t["step_s"], 28 * step))
EOF
	verdict timing "$timing_ok"
fi

# --- 5. more sizes (by name only) ----------------------------------------
if wants more; then
	echo "--- 5. FLUX.1-dev's sizes at 2048^2 and as Q8_0, Wan2.1-1.3B's at 81 frames of 480x832, $(elapsed) s"
	reserve=0
	part_begins 100 60
	more_ok=PASS
	m=/tmp/pdit-flux-dev
	torch_step 2048 3 torch-flux-dev-2048.json 120 || add_fail more_ok "PyTorch's step at 2048^2"
	bench_on "$m" pdit-flux-dev-2048.json $flux_dev -- -H 2048 -W 2048 --steps 2 || add_fail more_ok "$bench_why"
	# the same weights kept as Q8_0 blocks, expanded a layer at a time
	# before its product: what that expansion costs a step
	bench_on "$m" pdit-flux-dev-1024-q8_0.json $flux_dev -- -H 1024 -W 1024 --steps 3 --quantize q8_0 ||
		add_fail more_ok "$bench_why"
	rm -rf "$m"
	w=/tmp/pdit-wan-1.3b
	bench_on "$w" pdit-wan-1.3b-81x480x832.json --family wan --wan-width --layers 30 -- --frames 81 -H 480 -W 832 \
		--steps 2 || add_fail more_ok "$bench_why"
	rm -rf "$w"
	verdict more "$more_ok"
fi
echo "--- done in $(elapsed) s"
exit $failed
