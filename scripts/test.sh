#!/usr/bin/env bash
# The whole test suite, twice: a normal optimised build (build/) and an
# AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

for variant in release asan; do
	if [ $variant = release ]; then
		dir=build; flags=(-DCMAKE_BUILD_TYPE=Release)
	else
		dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DPDIT_SANITIZE=ON)
	fi
	echo "=== $variant build ($dir)"
	gen=()
	# a fresh build directory gets Ninja when present; an existing one keeps its generator
	[ ! -f "$dir/CMakeCache.txt" ] && command -v ninja > /dev/null && gen=(-G Ninja)
	cmake -S . -B "$dir" "${gen[@]}" -DPDIT_WERROR=ON "${flags[@]}" > /dev/null
	cmake --build "$dir" -j "$jobs"
	echo "=== $variant tests"
	# the sanitizer and MPI settings are in each test's environment (tests/CMakeLists.txt)
	ctest --test-dir "$dir" --output-on-failure -j "$jobs"
done
echo "=== all tests passed"
