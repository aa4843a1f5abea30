#!/usr/bin/env bash
# What a new user meets, one process:
#   pdit tiny refuses a folder with anything in it, and with --force
#   replaces it whole (nothing of the old model left, nothing beside it);
#   every output is checked before any weight is read, messages name the
#   user's path; progress on a terminal is one line rewritten with s/step
#   and the time left, plain lines otherwise, nothing with -q, and a summary;
#   broken weights files are found before anything is computed, each
#   message once; Ctrl-C during a write leaves no temporary and says
#   "interrupted" once
#   (exit 130); options: repeats, zero degrees, --out/--output, plan's
#   --devices; one process given degrees is told to use mpirun; no note
#   about a file's unused negative embeddings; a picture made from
#   encoded embeddings carries their prompt.
# usage: cli_experience.sh PDIT PYTHON3
set -u
pdit=$1 py=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
gen=(-p "a red fox" -H 64 -W 64 --steps 2)

# 1. pdit tiny: an occupied folder only with --force, replaced whole
"$pdit" tiny "$tmp/m" --full > /dev/null 2>&1 || bad "pdit tiny into a new folder"
"$pdit" tiny "$tmp/m" > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "not empty: give --force" "$tmp/err" && [ -d "$tmp/m/text_encoder" ] &&
	ok "an occupied folder is refused and left alone" || { cat "$tmp/err"; bad "tiny over an occupied folder"; }
touch "$tmp/m/stray"
"$pdit" tiny "$tmp/m" --force > /dev/null 2> "$tmp/err" || { cat "$tmp/err"; bad "tiny --force"; }
[ ! -e "$tmp/m/stray" ] && [ ! -d "$tmp/m/text_encoder" ] && [ -f "$tmp/m/model_index.json" ] &&
	[ -z "$(ls -d "$tmp"/m.* 2> /dev/null)" ] && ok "--force replaces the whole folder, nothing left beside it" ||
	{ ls -la "$tmp" "$tmp/m"; bad "tiny --force left a mixture"; }
"$pdit" generate --model "$tmp/m" --embeds "$tmp/m/embeds.safetensors" -H 32 -W 32 --steps 1 -o "$tmp/a.png" \
	> /dev/null 2>&1 && ok "the replaced model runs" || bad "generate on the replaced model"
mkdir "$tmp/empty"
"$pdit" tiny "$tmp/empty" > /dev/null 2>&1 && [ -f "$tmp/empty/model_index.json" ] &&
	ok "an empty folder is written without --force" || bad "tiny into an empty folder"
touch "$tmp/afile"
"$pdit" tiny "$tmp/afile" > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "is a file" "$tmp/err" && ok "a file in the folder's place is refused" ||
	{ cat "$tmp/err"; bad "tiny over a file"; }
"$pdit" tiny "$tmp/deep/er/m/" > /dev/null 2> "$tmp/err" && [ -f "$tmp/deep/er/m/model_index.json" ] &&
	[ "$(stat -c %a "$tmp/deep/er/m")" != 700 ] && [ -z "$(ls -d "$tmp"/deep/er/m.* 2> /dev/null)" ] &&
	ok "a new folder with a trailing slash and missing parents, the usual mode" ||
	{ cat "$tmp/err"; ls -la "$tmp/deep/er"; bad "tiny into a/new/folder/"; }

# 2. outputs checked before anything is read, named as the user gave them
check_out() {	# WHAT EXPECTED-TEXT ARGS...
	local what=$1 want=$2
	shift 2
	"$pdit" generate --model "$tmp/full" "${gen[@]}" "$@" > /dev/null 2> "$tmp/err"
	if [ $? -ne 0 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q -- "$want" "$tmp/err" &&
		! grep -q "\.tmp\|encoding\|step" "$tmp/err"; then
		ok "$what: refused before any work"
	else
		cat "$tmp/err"; bad "$what"
	fi
}
"$pdit" tiny "$tmp/full" --full > /dev/null 2>&1 || bad "tiny --full"
# its tensors drawn several at once (each from its own seed): the same bytes
# on 1 thread and on 3, small tensors and large (4 MiB: 512 wide, MLP 2048)
for n in 1 3; do
	OMP_NUM_THREADS=$n "$pdit" tiny "$tmp/full-$n" --full > /dev/null 2>&1 &&
		OMP_NUM_THREADS=$n "$pdit" tiny "$tmp/wide-$n" --heads 8 --head-dim 64 --layers 1 --single-layers 1 \
			> /dev/null 2>&1 || bad "tiny on $n thread(s)"
done
diff -r "$tmp/full-1" "$tmp/full-3" > /dev/null && diff -r "$tmp/full" "$tmp/full-3" > /dev/null &&
	diff -r "$tmp/wide-1" "$tmp/wide-3" > /dev/null && ok "tiny on 1 thread and on 3: the same bytes" ||
	bad "tiny: other bytes on other thread counts"
rm -rf "$tmp/full-1" "$tmp/full-3" "$tmp/wide-1" "$tmp/wide-3"
check_out "-o into a missing folder" "/nonexistent/dir/x.png: the folder /nonexistent/dir does not exist" -o /nonexistent/dir/x.png
check_out "-o naming a folder" "cannot write $tmp: it is a folder" -o "$tmp"
check_out "--out-latents into a missing folder" "/nonexistent/l.safetensors" -o "$tmp/x.png" --out-latents /nonexistent/l.safetensors
check_out "-o with a pattern other than %d" "single %d" -o "$tmp/x-%s.png"
"$pdit" generate --model "$tmp/full" --embeds "$tmp/full/embeds.safetensors" -H 64 -W 64 --steps 2 -o "$tmp" \
	> /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "it is a folder" "$tmp/err" && ! grep -q "step" "$tmp/err" &&
	ok "-o naming a folder with --embeds: refused before any work" || { cat "$tmp/err"; bad "-o folder with --embeds"; }
"$pdit" encode --model "$tmp/full" -p "a" --out /nonexistent/e.safetensors > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "/nonexistent/e.safetensors: the folder /nonexistent does not exist" "$tmp/err" &&
	ok "encode's --out checked first" || { cat "$tmp/err"; bad "encode --out"; }
chmod 500 "$tmp/empty"
if [ "$(id -u)" != 0 ]; then
	check_out "-o into a read-only folder" "not writable" -o "$tmp/empty/x.png"
fi
chmod 700 "$tmp/empty"

# 3. progress: a terminal, a file, -q
# a pseudo-terminal from Python's pty (util-linux's script is not everywhere)
"$py" -c 'import pty, sys; sys.exit(pty.spawn(sys.argv[1:]) >> 8)' "$pdit" generate --model "$tmp/full" \
	-p "a fox" -H 64 -W 64 --steps 3 -o "$tmp/t.png" > "$tmp/tty" 2>&1 < /dev/null
if grep -q $'\r\e\[K' "$tmp/tty" && grep -q "step 2/3 \[" "$tmp/tty" && grep -q "s left" "$tmp/tty" &&
	grep -q "pdit: done in .*load .*encode .*3 steps .*decode .*write .*peak memory" "$tmp/tty"; then
	ok "a terminal gets one line rewritten per phase (bar, s/step, time left) and the summary"
else
	cat -v "$tmp/tty"; bad "progress on a terminal"
fi
"$pdit" generate --model "$tmp/full" -p "a fox" -H 64 -W 64 --steps 3 -o "$tmp/t.png" 2> "$tmp/plain" > /dev/null
if ! grep -q $'\r' "$tmp/plain" && grep -q "^pdit: step 1/3 " "$tmp/plain" && grep -q "^pdit: step 2/3 " "$tmp/plain" &&
	grep -q "^pdit: loaded the weights in" "$tmp/plain" && grep -q "^pdit: done in" "$tmp/plain"; then
	ok "a file gets plain lines and the summary"
else
	cat -v "$tmp/plain"; bad "progress into a file"
fi
"$pdit" generate --model "$tmp/full" -p "a fox" -H 64 -W 64 --steps 3 -o "$tmp/t.png" -q > "$tmp/qo" 2> "$tmp/q"
[ $? -eq 0 ] && [ ! -s "$tmp/q" ] && [ ! -s "$tmp/qo" ] && ok "-q prints nothing" || { cat "$tmp/q"; bad "-q"; }
"$pdit" plan --model "$tmp/full" --devices 2 -H 64 -W 64 > /dev/null 2> "$tmp/err"
grep -q "timing a .* matrix product" "$tmp/err" && grep -q "timed in" "$tmp/err" &&
	ok "pdit plan says it is timing a product" || { cat "$tmp/err"; bad "plan's timing message"; }

# 4. Ctrl-C in the middle of a write: no temporary, one message, 130
PDIT_INJECT_FAULT=write:0:hang "$pdit" generate --model "$tmp/full" "${gen[@]}" -o "$tmp/int.png" \
	--out-latents "$tmp/int.safetensors" > /dev/null 2> "$tmp/err" &
pid=$!
for _ in $(seq 600); do [ -e "$tmp/int.safetensors.tmp" ] && break; sleep 0.1; done
[ -e "$tmp/int.safetensors.tmp" ] || bad "the write never started"
kill -INT $pid
wait $pid
rc=$?
if [ $rc -eq 130 ] && [ "$(grep -c interrupted "$tmp/err")" -eq 1 ] && [ -z "$(ls "$tmp"/int* 2> /dev/null)" ]; then
	ok "Ctrl-C during a write: exit 130, 'interrupted' once, no temporary left"
else
	cat "$tmp/err"; ls "$tmp"; bad "Ctrl-C during a write (exit $rc)"
fi
"$pdit" generate --model "$tmp/full" -p "a fox" -H 256 -W 256 --steps 200 -o "$tmp/int.png" > /dev/null 2> "$tmp/err" &
pid=$!
for _ in $(seq 600); do grep -q "step 1/" "$tmp/err" && break; sleep 0.1; done
grep -q "step 1/" "$tmp/err" || bad 'denoising never started'
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 130 ] && [ "$(grep -c interrupted "$tmp/err")" -eq 1 ] && [ ! -e "$tmp/int.png" ] &&
	ok "SIGTERM while denoising: exit 130, 'interrupted' once" || { cat "$tmp/err"; bad "SIGTERM (exit $rc)"; }

# 5. broken files found before any computation, each said once
for part in transformer text_encoder vae; do
	rm -rf "$tmp/broken"
	cp -r "$tmp/full" "$tmp/broken"
	f=$(ls "$tmp/broken/$part"/*.safetensors | head -1)
	truncate -s 5000 "$f"
	"$pdit" generate --model "$tmp/broken" "${gen[@]}" -o "$tmp/b.png" > /dev/null 2> "$tmp/err"
	if [ $? -ne 0 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -q "$part" "$tmp/err" && ! grep -q "encoding\|encoded" "$tmp/err"; then
		ok "a truncated $part file: one message, before the prompts are encoded"
	else
		cat "$tmp/err"; bad "truncated $part"
	fi
done

# 7. options
"$pdit" generate --model "$tmp/full" -p "a" -p "b" -o "$tmp/x.png" > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "given twice" "$tmp/err" && ok "a repeated -p is refused" || { cat "$tmp/err"; bad "repeated -p"; }
"$pdit" generate --model "$tmp/full" "${gen[@]}" --ulysses-degree 0 > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q -- "--ulysses-degree must be at least 1" "$tmp/err" && ok "a zero degree is refused" ||
	{ cat "$tmp/err"; bad "--ulysses-degree 0"; }
"$pdit" generate --model "$tmp/full" "${gen[@]}" --out "$tmp/alias.png" > /dev/null 2>&1 && [ -f "$tmp/alias.png" ] &&
	"$pdit" encode --model "$tmp/full" -p "a" --output "$tmp/alias.safetensors" > /dev/null 2>&1 &&
	[ -f "$tmp/alias.safetensors" ] && ok "--out and --output are one option" || bad "--out / --output"
"$pdit" plan --model "$tmp/full" -H 64 -W 64 > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "plan needs --devices" "$tmp/err" && ok "plan without --devices says it is required" ||
	{ cat "$tmp/err"; bad "plan without --devices"; }
"$pdit" plan --model "$tmp/full" -N 2 -H 64 -W 64 --device h100 > /dev/null 2>&1 && ok "plan -N" || bad "plan -N"
for cmd in check bench; do
	"$pdit" $cmd --help | grep -q -E "^  (-o, --output|    --out-latents|    --init-latents) " &&
		bad "$cmd --help lists outputs it does not write" || ok "$cmd --help lists no outputs"
done
"$pdit" bench --help | grep -q "pdit bench --model DIR \[-H 1024 -W 1024\] \[--steps 3\]" &&
	"$pdit" bench --help | grep -q "timed steps (default 3)" && ok "bench's usage shows its defaults" ||
	bad "bench's usage and defaults"

# help that agrees with the program: the -p/-n exception only where those flags are, a Wan example
# that runs as printed (from a scratch folder), the root note beside the mpirun examples
for cmd in quantize inspect plan tiny; do
	"$pdit" $cmd --help | grep -q -- "-p and -n" && bad "$cmd --help speaks of -p and -n" || ok "$cmd --help: no -p/-n note"
done
"$pdit" generate --help | grep -q -- "(but -p and -n: once)" && ok "generate --help keeps its -p/-n note" ||
	bad "generate's -p/-n note"
"$pdit" generate --help | grep -q -- "--allow-run-as-root" && ok "generate --help says what mpirun wants as root" ||
	bad "generate --help: mpirun as root"
mkdir -p "$tmp/helpwan"
(cd "$tmp/helpwan" && "$pdit" generate --help | sed -n 's/^  \(pdit \(tiny tiny-wan\|generate --model tiny-wan\) .*\)$/\1/p' |
	sed "s|^pdit |'$pdit' |" > cmds.sh && [ "$(grep -c '' cmds.sh)" -eq 2 ] && sh -e cmds.sh > /dev/null 2>&1 &&
	[ -s kite.mp4 ]) && ok "generate --help's Wan example runs as printed" || bad "generate --help's Wan example"
pdit_help=$("$pdit" --help)
case $pdit_help in *Wan2.1*GGUF*) ok "pdit --help names Wan2.1 and quantize's GGUF" ;; *) bad "pdit --help" ;; esac

# 9. degrees for one process: told to start them with mpirun
"$pdit" generate --model "$tmp/full" "${gen[@]}" --ulysses-degree 2 > /dev/null 2> "$tmp/err"
[ $? -ne 0 ] && grep -q "this is one process: start 2 with mpirun -np 2" "$tmp/err" && ! grep -q "1 processes" "$tmp/err" &&
	ok "degrees on one process point to mpirun" || { cat "$tmp/err"; bad "degrees on one process"; }

# 10. a file's negative embeddings, unused: no note at the default level
"$pdit" generate --model "$tmp/full" --embeds "$tmp/full/embeds.safetensors" -H 64 -W 64 --steps 2 -o "$tmp/n.png" \
	> /dev/null 2> "$tmp/err"
! grep -q "note" "$tmp/err" && ok "no note about a file's unused negative embeddings" || { cat "$tmp/err"; bad "note"; }
"$pdit" generate --model "$tmp/full" "${gen[@]}" -n "blurry" -o "$tmp/n.png" > /dev/null 2> "$tmp/err"
grep -q "true CFG is off, so the negative prompt is not used" "$tmp/err" && ok "-n without a scale: said plainly" ||
	{ cat "$tmp/err"; bad "note for -n"; }

# 11. a picture from encoded embeddings carries their prompt
"$pdit" encode --model "$tmp/full" -p "a lighthouse at dusk" --out "$tmp/e.safetensors" > /dev/null 2>&1 &&
	"$pdit" generate --model "$tmp/full" --embeds "$tmp/e.safetensors" -H 64 -W 64 --steps 2 -o "$tmp/e.png" \
		> /dev/null 2>&1 || bad "encode and generate --embeds"
"$py" - "$tmp/e.png" <<'PY' && ok "the PNG carries the embeddings' prompt" || bad "PNG parameters from --embeds"
import struct, sys
b = open(sys.argv[1], "rb").read()[8:]
while b:
    n, kind = struct.unpack(">I4s", b[:8])
    if kind == b"tEXt":
        key, text = b[8:8 + n].split(b"\0", 1)
        sys.exit(0 if key == b"parameters" and text.startswith(b"a lighthouse at dusk\n") else 1)
    b = b[12 + n:]
sys.exit(1)
PY

exit $fail
