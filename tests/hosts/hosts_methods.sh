#!/usr/bin/env bash
# Every parallel method across hosts (network namespaces joined by veth
# links and a bridge, Open MPI over TCP; tests/hosts/hosts.sh): the exact
# methods (data, CFG, tensor, Ulysses, ring, USP) give one process's latents
# within 1e-5; the stale ones (PipeFusion, DistriFusion) give the latents of
# the same mesh on one host (shared memory) within 1e-5. On 2 hosts with 2
# processes each, 4 hosts with 1 each and 4 hosts with 2 each (8 processes).
# Skipped (77) where namespaces cannot be made. --quick: 2 hosts and five
# meshes (the sanitizer build, where every process is several times slower).
# usage: hosts_methods.sh [--quick] PDIT ST_COMPARE MPIRUN...
set -u
quick=0
[ "$1" = --quick ] && { quick=1; shift; }
pdit=$(realpath "$1") cmp=$(realpath "$2")
shift 2
mpirun=("$@")
here=$(cd "$(dirname "$0")" && pwd)
"$here/hosts.sh" --probe -n 4 > /dev/null || exit $?
# the MPI the build found, inside the hosts too
export PDIT_HOSTS_MPIEXEC=${mpirun[0]}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# other sizes than the golden model's: 4 heads of 8 channels, 3 + 2 blocks
"$pdit" tiny "$tmp/m" --heads 4 --head-dim 8 --layers 3 --single-layers 2 -s 3 > /dev/null 2>&1 &&
	"$pdit" tiny "$tmp/m3" --batch 3 -s 4 > /dev/null 2>&1 || { echo "FAIL: pdit tiny"; exit 1; }
base=(--model "$tmp/m" --embeds "$tmp/m/embeds.safetensors" -H 64 -W 64 --steps 3 -s 9 -q --comm-timeout 60)
cfg=(--true-cfg-scale 3)
batch=(--model "$tmp/m3" --embeds "$tmp/m3/embeds.safetensors" -H 48 -W 64 --steps 2 -q --comm-timeout 60)
stale=(--warmup-steps 1)

# the references: one process; the stale meshes on this host
ref() {	# NAME ARGS...
	local name=$1
	shift
	"$pdit" generate "$@" -o "$tmp/$name.png" --out-latents "$tmp/$name.safetensors" 2> "$tmp/err" ||
		{ cat "$tmp/err"; bad "reference $name"; }
}
ref one "${base[@]}"
ref cfg "${base[@]}" "${cfg[@]}"
ref batch "${batch[@]}"
stale_meshes=("4:--pipefusion-degree 2 --ulysses-degree 2" "4:--pipefusion-degree 4 --num-patches 2"
	"4:--distrifusion-degree 4" "8:--pipefusion-degree 2 --ulysses-degree 4")
i=0
[ $quick -eq 1 ] && stale_meshes=("${stale_meshes[@]:0:1}")
for m in "${stale_meshes[@]}"; do
	# shellcheck disable=SC2086
	"${mpirun[@]}" -np "${m%%:*}" "$pdit" generate "${base[@]}" "${stale[@]}" ${m#*:} -o "$tmp/stale$i.png" \
		--out-latents "$tmp/stale$i.safetensors" 2> "$tmp/err" || { cat "$tmp/err"; bad "one host: ${m#*:}"; }
	i=$((i + 1))
done

# across the hosts: the runs of one layout, inside hosts.sh (exported for it)
export pdit cmp tmp
export base_s="${base[*]}" cfg_s="${cfg[*]}" batch_s="${batch[*]}" stale_s="${stale[*]}"
cat > "$tmp/across.sh" << 'EOF'
#!/usr/bin/env bash
# across.sh LAYOUT REF:NP:FLAGS...: each run's latents against $tmp/REF.safetensors
set -u
layout=$1
shift
fail=0
for r in "$@"; do
	ref=${r%%:*} rest=${r#*:}
	np=${rest%%:*} flags=${rest#*:}
	case $ref in
	one) args="$base_s" ;;
	cfg) args="$base_s $cfg_s" ;;
	batch) args="$batch_s" ;;
	stale*) args="$base_s $stale_s" ;;
	esac
	rm -f "$tmp/h.safetensors"
	# shellcheck disable=SC2086
	if ! timeout 300 $PDIT_HOSTS_MPIRUN -np "$np" "$pdit" generate $args $flags -o "$tmp/h.png" \
		--out-latents "$tmp/h.safetensors" 2> "$tmp/herr"; then
		cat "$tmp/herr"
		echo "FAIL $layout, np $np $flags: the run failed"
		fail=1
	elif "$cmp" tensors "$tmp/h.safetensors" "$tmp/$ref.safetensors" 1e-5 --all > "$tmp/hlog"; then
		[ "${ref#stale}" = "$ref" ] && what="one process's latents" || what="the same mesh's on one host"
		echo "ok   $layout, np $np $flags: $what within 1e-5"
	else
		cat "$tmp/hlog"
		echo "FAIL $layout, np $np $flags: latents differ from $ref"
		fail=1
	fi
done
# the runs went over the links
sent=$($PDIT_HOSTS_CTL bytes)
if [ "$sent" -gt 100000 ]; then
	echo "ok   $layout: $sent bytes between the hosts"
else
	echo "FAIL $layout: only $sent bytes between the hosts"
	fail=1
fi
exit $fail
EOF
chmod +x "$tmp/across.sh"

two=("one:4:--ulysses-degree 2 --ring-degree 2" "one:4:--tensor-parallel-degree 2 --ring-degree 2"
	"cfg:4:--cfg-parallel --ulysses-degree 2" "batch:4:--data-parallel-degree 2 --ring-degree 2"
	"stale0:4:--pipefusion-degree 2 --ulysses-degree 2")
[ $quick -eq 0 ] && two+=("one:4:--ulysses-degree 4" "one:4:--ring-degree 4" "stale2:4:--distrifusion-degree 4")
"$here/hosts.sh" -n 2 --slots 2 -- "$tmp/across.sh" "2 hosts x 2" "${two[@]}" || fail=1
[ $quick -eq 1 ] && { [ $fail -eq 0 ] && echo "all passed (2 hosts only: --quick)"; exit $fail; }
"$here/hosts.sh" -n 4 --slots 1 -- "$tmp/across.sh" "4 hosts x 1" \
	"one:4:--tensor-parallel-degree 4" "one:4:--ring-degree 2 --ulysses-degree 2" \
	"cfg:4:--cfg-parallel --tensor-parallel-degree 2" "batch:4:--data-parallel-degree 2 --tensor-parallel-degree 2" \
	"stale1:4:--pipefusion-degree 4 --num-patches 2" || fail=1
"$here/hosts.sh" -n 4 --slots 2 -- "$tmp/across.sh" "4 hosts x 2" \
	"one:8:--ulysses-degree 4 --ring-degree 2" "stale3:8:--pipefusion-degree 2 --ulysses-degree 4" || fail=1
[ $fail -eq 0 ] && echo "all passed"
exit $fail
