#!/usr/bin/env bash
# The methods across hosts on shaped links: 4 processes on 2 hosts (2 each)
# and on 4 hosts (1 each), network namespaces joined by veth links through a
# bridge, Open MPI over TCP (tests/hosts/hosts.sh), each host's link shaped
# by tc's tbf to RATE each way. For every method: seconds per step (median of
# ROUNDS interleaved rounds), that over the same mesh on unshaped links (what
# the link costs: the hosts share this machine's 2 cores, so absolute speed
# means little), the megabytes that crossed the links per step (the links'
# counters over the whole run, divided by the steps run) and `pdit plan`'s
# prediction for the same mesh and link (--per-node, --one-machine: the hosts
# share this machine's cores, --inter-bandwidth as the rate shared by a
# host's processes, --inter-latency LATENCY_US, the product rate the bench
# run measured on its one thread times this machine's cores, what a product
# spends per weight timed by plan, the median of three). Prints a Markdown
# table. Needs root.
#
#   bench/hosts.sh [SIZE] [ROUNDS] [RATES] [MODEL_DIR]
#   bench/hosts.sh 512 1 "10gbit 1gbit"
#   LAYOUTS=2x2 METHODS="ulysses=4;pp=4" bench/hosts.sh 512 1 1gbit    a part
#
# LAYOUTS: hosts x processes (default "2x2 4x1"); METHODS: meshes separated
# by ";", each as degrees (ulysses=4, ring=4, ulysses=2,ring=2, tp=2,ulysses=2,
# tp=4, pp=4, pp=2,ulysses=2, distrifusion=4; default all of them).
#
# RATES: links as tc rates (default "25gbit 10gbit 1gbit"), each optionally
# with a one-way delay: 1gbit/0.5ms, none/0. A link with a delay goes through
# the switch program (tests/hosts/hosts_switch.c, built by cmake: this kernel
# has no netem) and is compared with "none/0", the same switch without rate
# or delay ("?" where the runs lack it); the others go through the bridge
# and tbf and are compared with "none", always run as the baseline. BASE
# sets another (BASE=none/0), or none (BASE=): runs of one link to add to
# others; join the RUNS files and make the table with FROM. Plan is told
# LATENCY_US (default 50: the links' own latency, a few tens of
# microseconds) plus the delay. Each (layout, link) pair makes its hosts once.
# RUNS=FILE keeps the runs' raw lines there (a new file: one that exists is
# not overwritten); FROM=FILE makes the table from such a file without
# running anything (plan's predictions made anew); WEIGHT_NS gives plan's
# per-weight figure instead of timing it.
set -euo pipefail
# (the files named by RUNS and FROM are where the caller is)
[ -z "${RUNS:-}" ] || RUNS=$(realpath -m "$RUNS")
if [ -n "${RUNS:-}" ] && [ -z "${FROM:-}" ] && [ -e "$RUNS" ]; then
	echo "bench/hosts.sh: RUNS=$RUNS exists: name a new file (join files with cat, then FROM=)" >&2
	exit 2
fi
[ -z "${FROM:-}" ] || FROM=$(realpath -m "$FROM")
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
size=${1:-512} rounds=${2:-1} rates="${BASE-none} ${3:-25gbit 10gbit 1gbit}" model=${4:-bench/flux-width}
lat=${LATENCY_US:-50}
bench_model "$model"
export PDIT_HOSTS_SWITCH=${PDIT_HOSTS_SWITCH:-$PWD/build/tests/hosts_switch}
[ -n "${FROM:-}" ] || tests/hosts/hosts.sh --probe > /dev/null || exit $?
[ -n "${FROM:-}" ] || [[ $rates != */* ]] || tests/hosts/hosts.sh --probe --delay 0 > /dev/null || exit $?
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# the methods of 4 processes (no batch, no true CFG: data and CFG parallel
# send nothing per step)
layouts=${LAYOUTS:-2x2 4x1}
IFS=';' read -r -a meshes <<< "${METHODS:-ulysses=4;ring=4;ulysses=2,ring=2;tp=2,ulysses=2;tp=4;pp=4;pp=2,ulysses=2;distrifusion=4}"
methods=()
for m in "${meshes[@]}"; do
	f=""
	for kv in ${m//,/ }; do
		case ${kv%%=*} in
		ulysses) f+=" --ulysses-degree ${kv#*=}" ;;
		ring) f+=" --ring-degree ${kv#*=}" ;;
		tp) f+=" --tensor-parallel-degree ${kv#*=}" ;;
		pp) f+=" --pipefusion-degree ${kv#*=}" ;;
		distrifusion) f+=" --distrifusion-degree ${kv#*=}" ;;
		*) echo "bench/hosts.sh: unknown degree '$kv' in METHODS" >&2; exit 2 ;;
		esac
	done
	methods+=("${f# }")
done
export pdit model size out
export methods_s
methods_s=$(printf '%s\n' "${methods[@]}")

cat > "$out/inner.sh" << 'EOF'
#!/usr/bin/env bash
# inner.sh TAG: every method once on the hosts made; one line per method:
# TAG|FLAGS|MESH|S/STEP|BYTES BETWEEN HOSTS PER STEP|TOKENS|MATMUL GFLOPS
set -u
# shellcheck source=bench/lib.sh
. bench/lib.sh
tag=$1
while IFS= read -r flags; do
	stale=()
	[[ $flags == *pipefusion* || $flags == *distrifusion* ]] && stale=(--warmup 2 --warmup-steps 1)
	b0=$($PDIT_HOSTS_CTL bytes) || b0=0
	# shellcheck disable=SC2086
	j=$(timeout 900 $PDIT_HOSTS_MPIRUN -np 4 "$pdit" bench --model "$model" -H "$size" -W "$size" --steps 2 \
		--dtype bf16 -t 1 --json $flags "${stale[@]}" 2> "$out/err" < /dev/null)
	rc=$?
	# a failed run is a row of its own; why is on stderr
	if [ $rc -ne 0 ] || [ -z "$(field mesh "$j")" ]; then
		echo "bench/hosts.sh: $tag $flags: exit $rc, $(printf %s "$j" | wc -c) bytes of JSON; its stderr:" >&2
		tail -20 "$out/err" >&2
		j=""
	fi
	b1=$($PDIT_HOSTS_CTL bytes) || b1=0
	steps=3
	[ ${#stale[@]} -gt 0 ] && steps=4
	echo "$tag|$flags|$(field mesh "$j")|$(field seconds_per_step "$j")|$(((b1 - b0) / steps))|$(field tokens "$j")|$(field matmul_gflops "$j")"
done <<< "$methods_s"
EOF
chmod +x "$out/inner.sh"

[ -n "${FROM:-}" ] && { cp "$FROM" "$out/runs"; rounds=0; }
for ((r = 1; r <= rounds; r++)); do
	for layout in $layouts; do
		for rate in $rates; do
			echo "round $r/$rounds: $layout hosts x processes, link $rate" >&2
			shape=()
			[ "${rate%/*}" != none ] && shape=(--rate "${rate%/*}")
			[[ $rate == */* ]] && shape+=(--delay "${rate#*/}")
			# each run's line also on stderr: the raw figures survive a failure below
			tests/hosts/hosts.sh -n "${layout%x*}" --slots "${layout#*x}" "${shape[@]}" -- \
				"$out/inner.sh" "$layout|$rate" | tee -a "$out/runs" >&2 || { echo "hosts.sh failed" >&2; exit 1; }
			[ -z "${RUNS:-}" ] || cp "$out/runs" "$RUNS"
		done
	done
done

# what a product spends per weight whatever its rows, timed by plan here
# (the median of three plans: a difference of two timings), the same for
# every prediction below
wns=${WEIGHT_NS:-$(for i in 1 2 3; do
	"$pdit" plan --model "$model" --devices 4 -H "$size" -W "$size" --matmul-gflops 100 2> /dev/null |
		sed -n 's/.* spends \([0-9.eE+-]*\) ns a weight.*/\1/p' || true
done | median)}
echo "bench/hosts.sh: a product spends ${wns:-0} ns a weight here (all cores), whatever its rows" >&2

# plan's prediction: MESH LAYOUT RATE TOKENS GFLOPS
predict() {
	local per=${2#*x} link rate=${3%/*} us=0
	# the delay in microseconds (50us, 0.5ms)
	[[ $3 == */* ]] && us=$(awk -v d="${3#*/}" 'BEGIN { print (d ~ /ms$/) ? d * 1000 : d + 0 }')
	if [ "$rate" = none ] && [ "$us" = 0 ]; then
		link=(--inter-link shm)
	elif [ "$rate" = none ]; then
		# an unshaped link with a delay: bandwidth beyond what the hosts can send
		link=(--inter-bandwidth 1000 --inter-latency "$(awk -v a="$lat" -v b="$us" 'BEGIN { print a + b }')")
	else
		link=(--inter-bandwidth "$(awk -v r="$rate" -v p="$per" 'BEGIN {
			m = 1; if (r ~ /mbit$/) m = 1e6; else if (r ~ /gbit$/) m = 1e9
			print r * m / 8 / 1e9 / p }')" --inter-latency "$(awk -v a="$lat" -v b="$us" 'BEGIN { print a + b }')")
	fi
	# the runs' processes have one thread each: plan takes the rate of all cores
	"$pdit" plan --model "$model" --devices 4 -H "$size" -W "$size" --txt-len $(($4 - (size / 16) * (size / 16))) \
		--per-node "$per" --one-machine "${link[@]}" --matmul-gflops "$(awk -v g="$5" -v c="$(nproc)" 'BEGIN { print g * c }')" \
		--weight-ns "${wns:-0}" \
		--json 2> /dev/null |
		awk -v m="$1" '!done && index($0, "\"mesh\": \"" m "\"") { sub(/.*"seconds_per_step": /, ""); sub(/,.*/, ""); print; done = 1 }'
	# (awk reads to the end: plan killed by SIGPIPE would end this script under pipefail)
}

echo "| hosts × processes | link | mesh | s/step | × unshaped | MB between hosts / step | plan s/step | plan error |"
echo "|---|---|---|---:|---:|---:|---:|---:|"
for layout in $layouts; do
	for rate in $rates; do
		while IFS= read -r flags; do
			key="$layout|$rate|$flags|"
			rows=$(grep -F "$key" "$out/runs" || true)
			mesh=$(head -1 <<< "$rows" | cut -d'|' -f4)
			[ -n "$mesh" ] || { echo "| $layout | $rate | $flags | failed | | | | |"; continue; }
			sps=$(cut -d'|' -f5 <<< "$rows" | median)
			mb=$(cut -d'|' -f6 <<< "$rows" | median)
			tokens=$(head -1 <<< "$rows" | cut -d'|' -f7)
			gf=$(cut -d'|' -f8 <<< "$rows" | median)
			# the baseline through the same switch (none/0) for a link with a delay
			bk=none
			[[ $rate == */* ]] && bk=none/0
			base=$(grep -F "$layout|$bk|$flags|" "$out/runs" | cut -d'|' -f5 | median)
			short=$(tr ' ' '\n' <<< "$mesh" | { grep -v '=1$' || true; } | tr '\n' ' ' | sed 's/ $//')
			p=$(predict "$mesh" "$layout" "$rate" "$tokens" "$gf")
			echo "$short|$sps|${p:-}" >> "$out/group"
			awk -v l="$layout" -v r="$rate" -v m="$short" -v s="$sps" -v b="$base" -v mb="$mb" -v p="$p" 'BEGIN {
				printf "| %s | %s | %s | %.2f | %s | %.1f | %s | %s |\n", l, r, m, s, (b > 0 ? sprintf("%.2f", s / b) : "?"), mb / 1e6,
					p == "" ? "?" : sprintf("%.2f", p), p == "" ? "?" : sprintf("%+.0f%%", (p - s) / s * 100) }'
		done <<< "$methods_s"
		# plan's first choice among the measured meshes against the fastest measured
		[ -s "$out/group" ] && awk -F'|' -v l="$layout" -v r="$rate" '
			{ if (best == "" || $2 < best) { best = $2; bm = $1 }
			  if ($3 != "" && (pick == "" || $3 < pick)) { pick = $3; pm = $1; ps = $2 } }
			END { if (pm != "") printf "| %s | %s | plan first: %s | %.2f | %.2f × the fastest (%s) | | | |\n", l, r, pm, ps, ps / best, bm }' \
			"$out/group"
		rm -f "$out/group"
	done
done
runs="$rounds round(s)"
[ -z "${FROM:-}" ] || runs="the runs in $FROM"
echo "(${size}², 4 processes of 1 thread on this machine's $(nproc) cores, bf16, 2 timed steps, $runs; $model)"
