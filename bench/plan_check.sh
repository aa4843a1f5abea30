#!/usr/bin/env bash
# pdit plan's predictions against measured steps: for each world size, the
# meshes `pdit plan` lists (at most MAX of them, a spread of methods) are run
# with `pdit bench` and the predicted seconds per step set beside the measured
# ones. Prints a Markdown table with the error of each and, per world size,
# how far plan's first choice is from the fastest measured mesh.
#
#   bench/plan_check.sh [MODEL_DIR] [SIZE] [MAX_WORLD] [MAX] [MIN_WORLD]
#   BATCH=2 CFG=2 bench/plan_check.sh ...    images per step and true CFG, so
#                                            that data and CFG parallel meshes are among them
#
# The model is written by `pdit tiny --flux-width` when missing. Processes
# beyond the cores are oversubscribed, as plan assumes. Meshes plan marks as
# not fitting in memory are skipped (they would swap or be killed).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
model=${1:-bench/flux-width}
size=${2:-512}
max_world=${3:-8}
max=${4:-6}
min_world=${5:-1}
batch=${BATCH:-1}
cfg=${CFG:-1}
bench_model "$model"
# the same work for plan and bench (bench runs BATCH copies of the model's prompt embeddings)
work=(--batch "$batch" --true-cfg-scale "$cfg")

flags() {
	# mesh string -> pdit flags
	local out=()
	for kv in $1; do
		local k=${kv%%=*} v=${kv#*=}
		[ "$v" = 1 ] && continue
		case $k in
		dp) out+=(--data-parallel-degree "$v") ;;
		cfg) out+=(--cfg-parallel) ;;
		pp) out+=(--pipefusion-degree "$v" --warmup-steps 1) ;;
		ring) out+=(--ring-degree "$v") ;;
		distrifusion) out+=(--distrifusion-degree "$v" --warmup-steps 1) ;;
		ulysses) out+=(--ulysses-degree "$v") ;;
		tp) out+=(--tensor-parallel-degree "$v") ;;
		esac
	done
	echo "${out[@]}"
}

# The prediction is made twice: as `pdit plan` makes it (a product timed
# when it runs), and at the product rate the bench run measured on its rank
# 0 (scaled to all cores): the machine is shared and its rate swings between
# runs, and the second separates the model's error from those swings.
cores=$(nproc)
echo "| processes | mesh | predicted s/step | at the run's rate | measured s/step | error |"
echo "|---:|---|---:|---:|---:|---:|"
for ((n = min_world; n <= max_world; n++)); do
	plan=$("$pdit" plan --model "$model" --devices "$n" -H "$size" -W "$size" "${work[@]}" --json 2> /dev/null |
		grep '"fits": true') || continue
	first=$(head -1 <<< "$plan")
	best_mesh="" best="" first_meas=""
	# a spread: every k-th of the ranked list, the first one included
	total=$(grep -c '' <<< "$plan")
	step=$(((total + max - 1) / max))
	i=0
	while IFS= read -r row; do
		i=$((i + 1))
		[ $(((i - 1) % step)) -eq 0 ] || continue
		mesh=$(field mesh "$row")
		pred=$(field seconds_per_step "$row")
		# shellcheck disable=SC2046
		# one process runs without mpirun: Open MPI would bind it to one core
		launch=(mpirun --oversubscribe -np "$n")
		[ "$n" = 1 ] && launch=()
		j=$("${launch[@]}" "$pdit" bench --model "$model" -H "$size" -W "$size" --steps 2 \
			--warmup 2 --dtype bf16 --json "${work[@]}" $(flags "$mesh") 2> /dev/null < /dev/null) || {
			echo "| $n | $mesh | $pred | | failed | |"
			continue
		}
		meas=$(field seconds_per_step "$j")
		rate=$(awk -v m="$(field matmul_gflops "$j")" -v c="$cores" -v t="$(field threads "$j")" \
			'BEGIN { print m * c / t }')
		again=$("$pdit" plan --model "$model" --devices "$n" -H "$size" -W "$size" "${work[@]}" --json \
			--matmul-gflops "$rate")
		again=$(row "$mesh" "$again")
		at=$(field seconds_per_step "$again")
		printf "| %d | %s | %.2f | %.2f | %.2f | %+.0f%% |\n" "$n" "$mesh" "$pred" "$at" "$meas" \
			"$(awk -v p="$at" -v m="$meas" 'BEGIN { print 100 * (p - m) / m }')"
		if [ -z "$best" ] || awk -v a="$meas" -v b="$best" 'BEGIN { exit !(a < b) }'; then
			best=$meas
			best_mesh=$mesh
		fi
		[ "$mesh" = "$(field mesh "$first")" ] && first_meas=$meas
	done <<< "$plan"
	printf "| %d | plan's first choice %s: %.2f s, the fastest measured %s: %.2f s | | | | %+.0f%% |\n" "$n" \
		"$(field mesh "$first")" "${first_meas:-0}" "$best_mesh" "$best" \
		"$(awk -v a="${first_meas:-0}" -v b="$best" 'BEGIN { print 100 * (a - b) / b }')"
done
