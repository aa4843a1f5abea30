#!/usr/bin/env bash
# The GPU checks of the CUDA backend, in one run on a machine with one H100
# or H200 (CUDA 13 toolkit and driver, PyTorch; no Debian packages, no
# network). Made here by scripts/device-kit.sh (devkit/kit.tar.xz: the
# build and the libraries it loads), run there from the repository root:
#
#   device run: scripts/device-check.sh      (carry: devkit; about 8 minutes)
#
# Everything goes under $OUT (./device-out without it): device-check.log
# (the whole log; each part's verdict as "== PART: PASS|FAIL|SKIP (why)"),
# nvidia-smi.txt, and bench/*.json (pdit's and PyTorch's FLUX steps). The
# parts, each bounded in time so that a hang costs one part, not the run:
#   1. conformance: every backend operation on CUDA against the CPU backend,
#      and the staged (pinned) and NCCL communicators on device buffers
#   2. golden: flux-tiny, wan-tiny, quant-tiny on CUDA against diffusers
#      (f32 and bf16; the tests' own tolerances) and pictures within levels
#   3. meshes: 2 and 4 processes sharing the GPU (Ulysses, ring, tensor,
#      PipeFusion, CFG, data, DistriFusion; MPI through pinned staging)
#      against one process, as on the CPU
#   4. timing: FLUX.1-dev's sizes (19 + 38 blocks, random bf16 weights
#      written here) at 1024^2 with pdit bench, beside the same step in
#      PyTorch bf16 with scaled_dot_product_attention, and the device's bf16
#      matrix-product rate measured in the same run
# Exit status: 0 when every part that ran passed.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
out=${OUT:-$root/device-out}
mkdir -p "$out/bench"
log=$out/device-check.log
exec > >(tee "$log") 2>&1
failed=0
verdict() { echo "== $1: $2"; [ "${2%% *}" = FAIL ] && failed=1; return 0; }
t_start=$(date +%s)
elapsed() { echo $(($(date +%s) - t_start)); }

echo "pdit device check, $(date -u), commit $(cat devkit/commit 2> /dev/null || git rev-parse HEAD 2> /dev/null)"
if ! nvidia-smi > "$out/nvidia-smi.txt" 2>&1; then
	verdict device "FAIL (no GPU here: nvidia-smi says $(head -1 "$out/nvidia-smi.txt"))"
	exit 1
fi
head -15 "$out/nvidia-smi.txt"
# the host's processor: issue 39's int8 products want an AMX machine, and
# this one may be it (AMX-INT8 tiles: amx_int8 below)
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores;" \
	"flags: $(grep -m1 -o -w -E 'avx512_vnni|avx512_bf16|avx_vnni|amx_tile|amx_int8|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"

# --- the kit ------------------------------------------------------------
kit=/tmp/pdit-kit
rm -rf "$kit" && mkdir -p "$kit"
if ! tar -C "$kit" -xJf devkit/kit.tar.xz; then
	verdict kit "FAIL (no devkit/kit.tar.xz: run scripts/device-kit.sh here and carry devkit)"
	exit 1
fi
cudalibs=/usr/local/cuda/lib64
# the CUDA libraries PyTorch's wheels bring, where the toolkit's are elsewhere
py_libs=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib")))))' 2> /dev/null)
export LD_LIBRARY_PATH="$kit/lib:$kit/usr/lib/x86_64-linux-gnu/openmpi/lib:$kit/usr/lib/x86_64-linux-gnu/pmix2/lib:$cudalibs:${py_libs}:${LD_LIBRARY_PATH:-}"
export PATH="$kit/bin:$kit/usr/bin:$PATH"
export OPAL_PREFIX="$kit/usr" PMIX_INSTALL_PREFIX="$kit/usr/lib/x86_64-linux-gnu/pmix2"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# no InfiniBand or shared-memory surprises on a one-GPU machine: TCP and shared memory
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_pml=ob1
missing=$(ldd "$kit/bin/pdit" | grep "not found")
if [ -n "$missing" ]; then
	echo "$missing"
	verdict kit "FAIL (libraries missing)"
	exit 1
fi
pdit=$kit/bin/pdit
"$pdit" --version 2>&1 | head -1
verdict kit "PASS ($(du -h devkit/kit.tar.xz | cut -f1))"

# --- 1. conformance -----------------------------------------------------
echo "--- 1. conformance, $(elapsed) s"
if timeout 120 "$kit/bin/test_backend" cuda > "$out/conformance.txt" 2>&1; then
	tail -3 "$out/conformance.txt"
	verdict conformance "PASS"
else
	grep -E "FAIL|conforms|seed" "$out/conformance.txt" | head -40
	verdict conformance "FAIL"
fi

# --- 2. golden ----------------------------------------------------------
echo "--- 2. golden cases on CUDA, $(elapsed) s"
g=tests/golden
golden_ok=PASS
run_golden() {
	local name=$1
	shift
	if PDIT_TEST_BACKEND=cuda timeout 120 "$@" > "$out/golden-$name.txt" 2>&1; then
		echo "ok   $name: $(tail -2 "$out/golden-$name.txt" | head -1)"
	else
		echo "FAIL $name:"; grep -E "FAIL|limit|worst" "$out/golden-$name.txt" | head -8
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
# quantized files (GGUF, fp8) through pdit forward, which picks CUDA itself here
if command -v python3 > /dev/null && timeout 300 tests/cli/cli_quant.sh "$pdit" "$kit/bin/st_compare" $g/quant-tiny python3 \
	> "$out/golden-quant.txt" 2>&1; then
	echo "ok   quant-tiny: $(grep -c '^ok' "$out/golden-quant.txt") cases"
else
	grep -E "FAIL" "$out/golden-quant.txt" | head -10
	golden_ok=FAIL
fi
verdict golden "$golden_ok"

# --- 3. meshes on the one GPU ---------------------------------------------
echo "--- 3. meshes of 2 and 4 processes sharing the GPU, $(elapsed) s"
if ! timeout 60 mpirun -np 2 true > "$out/mpirun.txt" 2>&1; then
	cat "$out/mpirun.txt" | head -20
	verdict meshes "SKIP (Open MPI from the kit does not start here: $(head -1 "$out/mpirun.txt"))"
else
	mesh_ok=PASS
	for np in 2 4; do
		if timeout 300 mpirun -np $np -x PDIT_TEST_BACKEND=cuda -x LD_LIBRARY_PATH "$kit/bin/test_parallel" $g/flux-tiny \
			> "$out/meshes-np$np.txt" 2>&1; then
			echo "ok   np $np: $(tail -1 "$out/meshes-np$np.txt")"
		else
			grep -E "FAIL|error" "$out/meshes-np$np.txt" | head -10
			mesh_ok=FAIL
		fi
	done
	if timeout 120 mpirun -np 2 -x PDIT_TEST_BACKEND=cuda -x LD_LIBRARY_PATH "$kit/bin/test_vae_parallel" $g/flux-tiny \
		$g/wan-tiny > "$out/meshes-vae.txt" 2>&1; then
		echo "ok   banded VAE np 2: $(tail -1 "$out/meshes-vae.txt")"
	else
		grep -E "FAIL|error" "$out/meshes-vae.txt" | head -10
		mesh_ok=FAIL
	fi
	verdict meshes "$mesh_ok"
fi

# --- 4. timing ------------------------------------------------------------
echo "--- 4. FLUX.1-dev's sizes at 1024^2, $(elapsed) s"
m=/tmp/pdit-flux-dev
if timeout 240 "$pdit" tiny "$m" --flux-width --layers 19 --single-layers 38 --txt-len 512 -f > "$out/tiny.txt" 2>&1; then
	timeout 240 "$pdit" bench -m "$m" -H 1024 -W 1024 --dtype bf16 --steps 3 --warmup 1 --json \
		> "$out/bench/pdit-flux-dev-1024.json" 2> "$out/bench/pdit-flux-dev-1024.err" ||
		{ tail -5 "$out/bench/pdit-flux-dev-1024.err"; verdict timing "FAIL (pdit bench)"; }
	cat "$out/bench/pdit-flux-dev-1024.json"
else
	tail -5 "$out/tiny.txt"
	verdict timing "FAIL (could not write the FLUX.1-dev-sized model)"
fi
rm -rf "$m"
timeout 240 python3 bench/torch_flux_step.py --size 1024 --json "$out/bench/torch-flux-dev-1024.json" \
	> "$out/bench/torch.txt" 2>&1 || tail -5 "$out/bench/torch.txt"
cat "$out/bench/torch-flux-dev-1024.json" 2> /dev/null
python3 - "$out/bench" << 'EOF' || true
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
echo "--- done in $(elapsed) s"
exit $failed
