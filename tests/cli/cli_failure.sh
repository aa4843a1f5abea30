#!/usr/bin/env bash
# A rank that fails must not leave the others hanging: an error injected on
# one rank (PDIT_INJECT_FAULT, while reading weights or in the middle of the
# denoising loop, under Ulysses, ring, PipeFusion and DistriFusion) and a
# rank killed with SIGKILL mid-step each end the whole job within 10 s with
# a nonzero exit, the failing rank and its reason in the message, and no
# picture under the requested name. A rank that hangs is reported by the
# others after --comm-timeout: the operation and the ranks missing from it.
# usage: cli_failure.sh PDIT MPIRUN...
set -u
pdit=$1
shift
mpirun=("$@")
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
now() { date +%s.%N; }
within() { awk -v a="$1" -v b="$2" -v lim="$3" 'BEGIN { exit !(b - a < lim) }'; }

"$pdit" tiny "$tmp/m" --heads 4 > /dev/null 2>&1 || { echo "FAIL: pdit tiny"; exit 1; }
run=(--model "$tmp/m" --embeds "$tmp/m/embeds.safetensors" -H 128 -W 128 --steps 400)

# ends NP FAULT WANT LIMIT FLAGS...: with PDIT_INJECT_FAULT=FAULT every rank
# ends within LIMIT s, nonzero exit (not timeout's), WANT on stderr, no picture
ends() {
	local np=$1 fault=$2 want=$3 limit=$4 t0 t1 rc
	shift 4
	rm -f "$tmp/out.png"
	t0=$(now)
	PDIT_INJECT_FAULT=$fault timeout 60 "${mpirun[@]}" -x PDIT_INJECT_FAULT -np "$np" "$pdit" generate "${run[@]}" \
		"$@" -o "$tmp/out.png" > /dev/null 2> "$tmp/err"
	rc=$?
	t1=$(now)
	if [ $rc -ne 0 ] && [ $rc -ne 124 ] && within "$t0" "$t1" "$limit" && grep -q -- "$want" "$tmp/err" &&
		[ ! -e "$tmp/out.png" ]; then
		ok "$fault on $np processes ($*): '$want', every rank ended in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s, exit $rc"
	else
		cat "$tmp/err"
		bad "$fault on $np processes ($*): exit $rc after $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s, wanted '$want'"
	fi
}

# an error on one rank: its rank and reason, within 10 s
inject() {
	local np=$1 fault=$2
	shift 2
	ends "$np" "$fault" "pdit: rank ${fault##*:}: injected fault at ${fault%%:*}" 10 "$@"
}

inject 2 step:3:1 --ulysses-degree 2
inject 2 step:0:0 --ring-degree 2
inject 3 load:0:2 --ring-degree 3
inject 4 step:5:3 --pipefusion-degree 2 --ulysses-degree 2
inject 4 step:4:2 --pipefusion-degree 4
inject 2 step:3:1 --distrifusion-degree 2
inject 4 step:2:1 --tensor-parallel-degree 2 --ring-degree 2

# a rank that hangs: the others give up after --comm-timeout, name the
# operation and the rank missing from it, and end the job
hang() {
	local np=$1 fault=$2 want=$3
	shift 3
	ends "$np" "$fault" "$want" 20 --comm-timeout 2 "$@"
}

hang 2 step:3:1:hang "all-to-all #[0-9]* on 'ulysses' (2 ranks): ranks missing: 1" --ulysses-degree 2
hang 4 step:3:3:hang "not answering: 3;" --pipefusion-degree 2 --ulysses-degree 2
hang 2 step:2:0:hang "ranks missing: 0; not answering: 0;" --tensor-parallel-degree 2
hang 2 load:0:1:hang "on 'world' (2 ranks): ranks missing: 1; not answering: 1;" --tensor-parallel-degree 2

# a short deadline does not disturb a run that keeps going
"${mpirun[@]}" -np 2 "$pdit" generate --model "$tmp/m" --embeds "$tmp/m/embeds.safetensors" -H 64 -W 64 --steps 3 \
	--ring-degree 2 --comm-timeout 1 -o "$tmp/ok.png" > /dev/null 2> "$tmp/err" && [ -s "$tmp/ok.png" ] &&
	ok "--comm-timeout 1 on a healthy run: the picture" || { cat "$tmp/err"; bad "healthy run with --comm-timeout 1"; }

# one process: the message without a rank, exit 1, no picture
rm -f "$tmp/out.png"
PDIT_INJECT_FAULT=step:2 "$pdit" generate "${run[@]}" -o "$tmp/out.png" > /dev/null 2> "$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "^pdit: injected fault at step 2" "$tmp/err" && [ ! -e "$tmp/out.png" ] &&
	ok "step:2 on one process: exit 1, no picture" || { cat "$tmp/err"; bad "single-process fault (exit $rc)"; }

# SIGKILL: a rank of a Ulysses pair dies mid-step
rm -f "$tmp/out.png"
"${mpirun[@]}" -np 2 "$pdit" generate "${run[@]}" --ulysses-degree 2 -o "$tmp/out.png" > /dev/null 2> "$tmp/err" &
job=$!
for _ in $(seq 300); do
	grep -q "^pdit: step 5/" "$tmp/err" && break
	sleep 0.1
done
victim=$(pgrep -P "$job" -f "generate" | tail -1)
if [ -z "$victim" ]; then
	victim=$(pgrep -f "$tmp/m " | tail -1)
fi
t0=$(now)
[ -n "$victim" ] && kill -9 "$victim"
ended=0
for _ in $(seq 200); do
	kill -0 "$job" 2> /dev/null || { ended=1; break; }
	sleep 0.05
done
t1=$(now)
wait "$job"
rc=$?
if [ -n "$victim" ] && [ $ended -eq 1 ] && [ $rc -ne 0 ] && within "$t0" "$t1" 10 && [ ! -e "$tmp/out.png" ]; then
	ok "a rank killed with SIGKILL mid-step: the job ended in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s, exit $rc"
else
	[ $ended -eq 0 ] && kill -9 "$job" 2> /dev/null
	pkill -9 -f "$tmp/m " 2> /dev/null
	cat "$tmp/err"
	bad "SIGKILL of rank pid '$victim': ended=$ended exit $rc"
fi

[ $fail -eq 0 ] && echo "all passed"
exit $fail
