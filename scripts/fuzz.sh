#!/usr/bin/env bash
# Builds the fuzz targets with clang and libFuzzer (build-fuzz/, with
# AddressSanitizer and UBSan) and runs each for SECONDS (default 600) from
# its seed corpus in fuzz/corpus/. New inputs stay in build-fuzz/corpus/;
# a crash, leak, hang or sanitizer report is saved under fuzz/crashes/NAME/
# and ends that target's run: copy it into fuzz/regressions/NAME/, where
# CTest replays it, once fixed. Prints one line per target: seconds,
# executions, and whether it ended clean.
#
#   scripts/fuzz.sh [SECONDS] [NAME...]      NAME: safetensors st_index config clip_files t5_model prompt args
#                                            gguf lora png multipart qwen_files llm serve_params (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
shift || true
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(safetensors st_index config clip_files t5_model prompt args gguf lora png multipart qwen_files llm serve_params)
command -v clang > /dev/null || { echo "fuzz.sh: needs clang and libclang-rt-14-dev (scripts/setup.sh --fuzz)" >&2; exit 1; }
# configured every time: a target added since the last run is then known
CC=clang cmake -S . -B build-fuzz -DPDIT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
targets=()
for n in "${names[@]}"; do targets+=("fuzz_$n"); done
cmake --build build-fuzz --target "${targets[@]}" -j 2 > /dev/null
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
status=0
for n in "${names[@]}"; do
	mkdir -p "build-fuzz/corpus/$n" "fuzz/crashes/$n"
	log="build-fuzz/fuzz_$n.log"
	set +e
	"build-fuzz/fuzz/fuzz_$n" "build-fuzz/corpus/$n" "fuzz/corpus/$n" -max_total_time="$secs" -timeout=10 \
		-rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 -artifact_prefix="fuzz/crashes/$n/" > "$log" 2>&1
	rc=$?
	set -e
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
	if [ $rc -eq 0 ]; then
		echo "fuzz_$n: clean, ${took:-?} s, ${execs:-?} executions"
	else
		echo "fuzz_$n: FAILED (exit $rc) after ${execs:-?} executions: see $log and fuzz/crashes/$n/"
		status=1
	fi
	rmdir "fuzz/crashes/$n" 2> /dev/null || true
done
exit $status
