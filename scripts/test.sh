#!/usr/bin/env bash
# The whole test suite: a normal optimised build (build/), an
# AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/), and a
# build without MPI and without the HTTP service (build-nompi/: the
# one-process tests; serve's refusal, which the GPU kit's build has too:
# one process's serve runs in the other two). About 46 minutes
# on 2 cores; `ctest --test-dir build -L unit` is the quick subset, and the
# labels unit, golden, cli, mpi, hosts and fuzz select the others. The
# sanitizer build leaves out the labels emu_long and more_meshes, the build
# without MPI emu_long and compute (tests/CMakeLists.txt says why).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# what the tests add to what building needs (Python and NumPy, Chromium, ...)
scripts/setup.sh --test
# the CPU the tests ran on (its kernels differ by what it has), for the log
echo "=== on $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores:" \
	"$(grep -o -w -E 'avx2|avx512f|avx512_bf16|avx512_vnni|avx_vnni|avx512_fp16|amx_(tile|int8|bf16)' /proc/cpuinfo | sort -u | tr '\n' ' ')"

for variant in release asan nompi; do
	case $variant in
	release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release) skip=() ;;
	# the CUDA backend is compiled and linked in the release build (where the
	# toolkit is); the other two leave it out: no GPU runs it here, and the
	# CUDA runtime's own allocations at start would read as leaks
	asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DPDIT_SANITIZE=ON -DPDIT_CUDA=OFF -DPDIT_SHARED=OFF)
		skip=(-LE 'emu_long|more_meshes') ;;
	nompi) dir=build-nompi; flags=(-DCMAKE_BUILD_TYPE=Release -DPDIT_MPI=OFF -DPDIT_SERVE=OFF -DPDIT_CUDA=OFF -DPDIT_SHARED=OFF)
		skip=(-LE 'emu_long|compute') ;;
	esac
	echo "=== $variant build ($dir)"
	gen=()
	# a fresh build directory gets Ninja when present; an existing one keeps its generator
	[ ! -f "$dir/CMakeCache.txt" ] && command -v ninja > /dev/null && gen=(-G Ninja)
	cmake -S . -B "$dir" "${gen[@]}" -DPDIT_WERROR=ON "${flags[@]}" > /dev/null
	cmake --build "$dir" -j "$jobs"
	echo "=== $variant tests"
	# the sanitizer and MPI settings are in each test's environment (tests/CMakeLists.txt)
	ctest --test-dir "$dir" --output-on-failure -j "$jobs" "${skip[@]}"
done
echo "=== all tests passed"
