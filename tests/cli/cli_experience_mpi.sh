#!/usr/bin/env bash
# What a new user meets under mpirun:
#   Ctrl-C (mpirun passes it on) stops every rank: no temporary left, the
#   message once; with data parallel rank 0 reports every prompt encoded
#   and every picture written; an impossible mesh lists DistriFusion's
#   meshes too; the README's commands run as written (its first command
#   twice in a row, every scripts/mpirun command), with the paths of this
#   build.
# usage: cli_experience_mpi.sh PDIT SOURCE_DIR MPIRUN...
set -u
pdit=$1 src=$2
shift 2
mpirun=("$@")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

"$pdit" tiny "$tmp/full" --full > /dev/null 2>&1 || { echo "FAIL: pdit tiny"; exit 1; }

# 4. Ctrl-C to mpirun while rank 0 writes: every rank stops, one message, no temporary
PDIT_INJECT_FAULT=write:0:hang "${mpirun[@]}" -x PDIT_INJECT_FAULT -np 2 "$pdit" generate --model "$tmp/full" \
	-p "a fox" -H 64 -W 64 --steps 2 --ulysses-degree 2 -o "$tmp/int.png" --out-latents "$tmp/int.safetensors" \
	> /dev/null 2> "$tmp/err" &
pid=$!
for _ in $(seq 600); do [ -e "$tmp/int.safetensors.tmp" ] && break; sleep 0.1; done
[ -e "$tmp/int.safetensors.tmp" ] || bad "the write never started"
kill -INT $pid
for _ in $(seq 100); do kill -0 $pid 2> /dev/null || break; sleep 0.1; done
if kill -0 $pid 2> /dev/null; then
	kill -KILL $pid; bad "mpirun still running 10 s after Ctrl-C"
else
	wait $pid
	[ "$(grep -c "pdit: interrupted" "$tmp/err")" -eq 1 ] && [ -z "$(ls "$tmp"/int* 2> /dev/null)" ] &&
		[ -z "$(pgrep -f "$tmp/int.png")" ] && ok "Ctrl-C under mpirun: every rank stopped, 'interrupted' once" ||
		{ cat "$tmp/err"; bad "Ctrl-C under mpirun"; }
fi

# mpirun's binding counted: two processes bound to one core take one
# thread each and are told how to use the machine (they took every core's
# worth of threads each, taking turns on the one); alone under taskset, one
if [ "$(nproc)" -ge 2 ]; then
	"${mpirun[@]}" -np 2 --bind-to core --cpu-set 0 "$pdit" generate --model "$tmp/full" -p "a fox" -H 64 -W 64 \
		--steps 1 -o "$tmp/bound.png" -v > /dev/null 2> "$tmp/err"
	grep -q "may run on 1 of its $(nproc) CPUs (1 thread each).*--bind-to none" "$tmp/err" &&
		grep -q "1 thread each" "$tmp/err" && ok "two processes bound to one core: 1 thread each, the binding said" ||
		{ cat "$tmp/err"; bad "two processes bound to one core"; }
	"${mpirun[@]}" -np 2 --bind-to none "$pdit" generate --model "$tmp/full" -p "a fox" -H 64 -W 64 --steps 1 \
		-o "$tmp/unbound.png" -v > /dev/null 2> "$tmp/err"
	! grep -q "may run on" "$tmp/err" && grep -q "$(($(nproc) / 2)) threads\? each" "$tmp/err" &&
		ok "unbound: the cores divided between the two, no note" || { cat "$tmp/err"; bad "two unbound processes"; }
	taskset -c 0 "$pdit" generate --model "$tmp/full" -p "a fox" -H 64 -W 64 --steps 1 -o "$tmp/one.png" -v \
		> /dev/null 2> "$tmp/err"
	grep -q "computing on cpu.*, 1 thread$" "$tmp/err" && ok "alone under taskset -c 0: 1 thread" ||
		{ cat "$tmp/err"; bad "taskset -c 0"; }
	# OpenMP pins the main thread to its first place before main where
	# OMP_PROC_BIND is set: that one CPU is no measure of the process's
	OMP_PROC_BIND=true "$pdit" generate --model "$tmp/full" -p "a fox" -H 64 -W 64 --steps 1 -o "$tmp/bind.png" -v \
		> /dev/null 2> "$tmp/err"
	grep -q "computing on cpu.*, $(nproc) threads$" "$tmp/err" && ok "alone with OMP_PROC_BIND=true: $(nproc) threads" ||
		{ cat "$tmp/err"; bad "OMP_PROC_BIND=true"; }
fi

# 8. data parallel: rank 0 speaks for every group
printf 'a fox\na cat\na owl\n' > "$tmp/p.txt"
"${mpirun[@]}" -np 2 "$pdit" generate --model "$tmp/full" --prompts "$tmp/p.txt" -H 64 -W 64 --steps 2 \
	--data-parallel-degree 2 -o "$tmp/dp.png" > /dev/null 2> "$tmp/err" || { cat "$tmp/err"; bad "data parallel run"; }
if grep -q "encoded 3 prompts" "$tmp/err" && [ "$(grep -c "pdit: wrote $tmp/dp-[012].png" "$tmp/err")" -eq 3 ] &&
	[ -f "$tmp/dp-2.png" ]; then
	ok "data parallel: rank 0 reports 3 prompts and every picture written"
else
	cat "$tmp/err"; bad "data parallel reporting"
fi

# 9. the valid meshes include DistriFusion's
"${mpirun[@]}" -np 2 "$pdit" generate --model "$tmp/full" -p "a fox" -H 64 -W 64 --steps 2 --ulysses-degree 3 \
	> /dev/null 2> "$tmp/err"
grep -q "Valid for 2 processes: .*distrifusion" "$tmp/err" && ok "the impossible-mesh message lists DistriFusion" ||
	{ cat "$tmp/err"; bad "valid meshes without DistriFusion"; }

# README: the first command's run part twice, then every scripts/mpirun command
cd "$tmp" || exit 1
mkdir -p build scripts
ln -s "$pdit" build/pdit
ln -s "$src/scripts/mpirun" scripts/mpirun
first=$(grep -m1 '^scripts/setup.sh && ' "$src/README.md" | sed 's/^.*cmake --build build -j && //')
for i in 1 2; do
	bash -c "$first" < /dev/null > "$tmp/out$i" 2> "$tmp/err$i" && grep -q "pdit: done in" "$tmp/err$i" && [ -f build/tiny.png ] &&
		ok "README's first command, run $i: picture, progress and summary" ||
		{ cat "$tmp/err$i"; bad "README's first command, run $i"; }
done
n=0
# each scripts/mpirun command, continuation lines joined, comments dropped
while IFS= read -r cmd; do
	n=$((n + 1))
	bash -c "$cmd" < /dev/null > "$tmp/rout" 2> "$tmp/rerr" && ok "README: ${cmd:0:70}..." ||
		{ cat "$tmp/rerr"; bad "README: $cmd"; }
done < <(awk '/^```/{inb=!inb; next} inb' "$src/README.md" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' |
	grep '^scripts/mpirun ' | sed 's/  *#.*$//')
[ $n -ge 3 ] && ok "$n scripts/mpirun commands in the README" || bad "only $n scripts/mpirun commands found in the README"

exit $fail
