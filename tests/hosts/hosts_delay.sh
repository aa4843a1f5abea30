#!/usr/bin/env bash
# Links with a delay (tests/hosts/hosts.sh --delay: the hosts_switch
# program, this kernel has no netem):
#   - a round trip (a TCP connection refused) takes twice the one-way delay
#     of 5 ms (10 to 18 ms), and well under it with --delay 0 (the same switch);
#   - 16 MB across a 200 Mbit/s link take at least the 0.67 s the rate
#     allows, and not over 4 times that, with and without a delay of 5 ms;
#   - Ulysses 2 on 2 hosts and PipeFusion 2 x Ulysses 2 on 4 hosts, 1 Gbit/s
#     links with 0.5 ms of delay: one process's latents within 1e-5 (the
#     PipeFusion mesh: the same mesh on one host's, within 1e-5);
#   - a malformed --delay is refused with the flag's name, `ctl link` is
#     refused with --delay, and no namespace or switch is left behind.
# Skipped (77) where namespaces or TUN devices cannot be made.
# usage: hosts_delay.sh PDIT ST_COMPARE PYTHON3 MPIRUN...
set -u
pdit=$(realpath "$1") cmp=$(realpath "$2") py=$3
shift 3
mpirun=("$@")
here=$(cd "$(dirname "$0")" && pwd)
"$here/hosts.sh" --probe -n 2 --delay 0 > /dev/null || exit $?
export PDIT_HOSTS_MPIEXEC=${mpirun[0]}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# host 1 listens (accepts, reads to the end, answers one byte); host 0
# connects and sends BYTES; prints the shortest of 5 round trips (a
# connection refused by a closed port of host 1) and the transfer's seconds
cat > "$tmp/probe.sh" << EOF
#!/usr/bin/env bash
\$PDIT_HOSTS_CTL exec 1 $py -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.77.0.2", 5000)); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.settimeout(20)
while c.recv(1 << 20): pass
c.sendall(b"k")
' &
server=\$!
\$PDIT_HOSTS_CTL exec 0 $py -c '
import socket, sys, time
trips = []
for _ in range(5):
    t = time.perf_counter()
    try: socket.create_connection(("10.77.0.2", 9), timeout=20)
    except ConnectionRefusedError: trips.append(time.perf_counter() - t)
connect = min(trips)
for _ in range(100):
    try:
        c = socket.create_connection(("10.77.0.2", 5000), timeout=20); break
    except ConnectionRefusedError:
        time.sleep(0.05)
buf = b"x" * (1 << 20); t = time.perf_counter()
for _ in range(int(sys.argv[1]) >> 20): c.sendall(buf)
c.shutdown(socket.SHUT_WR); c.recv(1)
print("%.6f %.6f" % (connect, time.perf_counter() - t))
' "\$1"
rc=\$?
wait \$server
exit \$rc
EOF
chmod +x "$tmp/probe.sh"

r=$(timeout 40 "$here/hosts.sh" -n 2 --delay 5ms -- "$tmp/probe.sh" $((1 << 20))) || bad "--delay 5ms: the probe failed"
c=${r%% *}
awk -v c="$c" 'BEGIN { exit !(c >= 0.010 && c < 0.018) }' && ok "--delay 5ms: a round trip takes ${c} s (2 x 5 ms)" ||
	bad "--delay 5ms: a round trip took '${c}' s, not 10 ms (to 18)"
r=$(timeout 40 "$here/hosts.sh" -n 2 --delay 0 -- "$tmp/probe.sh" $((1 << 20))) || bad "--delay 0: the probe failed"
c=${r%% *}
awk -v c="$c" 'BEGIN { exit !(c < 0.005) }' && ok "--delay 0: a round trip takes ${c} s" ||
	bad "--delay 0: a round trip took '${c}' s (the switch delays without --delay?)"
for d in 0 5ms; do
	r=$(timeout 40 "$here/hosts.sh" -n 2 --delay $d --rate 200mbit -- "$tmp/probe.sh" $((16 << 20))) ||
		bad "--delay $d --rate 200mbit: the probe failed"
	s=${r##* }
	awk -v s="$s" 'BEGIN { exit !(s >= 0.67 && s <= 4 * 0.671) }' &&
		ok "--delay $d --rate 200mbit: 16 MB in ${s} s (0.67 s at the rate)" ||
		bad "--delay $d --rate 200mbit: 16 MB in '${s}' s, not within 0.67 s to 4 times that"
done

# pdit across delayed links
"$pdit" tiny "$tmp/m" --heads 4 --head-dim 8 --layers 2 --single-layers 2 -s 5 > /dev/null 2>&1 ||
	{ echo "FAIL: pdit tiny"; exit 1; }
run=(--model "$tmp/m" --embeds "$tmp/m/embeds.safetensors" -H 64 -W 48 --steps 3 -s 4 -q --comm-timeout 60)
stale=(--pipefusion-degree 2 --ulysses-degree 2 --warmup-steps 1)
"$pdit" generate "${run[@]}" -o "$tmp/one.png" --out-latents "$tmp/one.safetensors" || bad "one process"
"${mpirun[@]}" -np 4 "$pdit" generate "${run[@]}" "${stale[@]}" \
	-o "$tmp/pp.png" --out-latents "$tmp/pp.safetensors" 2> "$tmp/err" || { cat "$tmp/err"; bad "PipeFusion on one host"; }
export pdit
# shellcheck disable=SC2016
"$here/hosts.sh" -n 2 --slots 1 --delay 0.5ms --rate 1gbit -- sh -c 'timeout 120 $PDIT_HOSTS_MPIRUN -np 2 "$pdit" "$@"' sh \
	generate "${run[@]}" --ulysses-degree 2 -o "$tmp/u.png" --out-latents "$tmp/u.safetensors" 2> "$tmp/err"
if [ $? -eq 0 ] && "$cmp" tensors "$tmp/u.safetensors" "$tmp/one.safetensors" 1e-5 --all > "$tmp/log"; then
	ok "2 hosts, 1 Gbit/s, 0.5 ms: Ulysses 2 gives one process's latents within 1e-5"
else
	cat "$tmp/err" "$tmp/log" 2> /dev/null
	bad "2 hosts, 1 Gbit/s, 0.5 ms: Ulysses 2"
fi
# shellcheck disable=SC2016
"$here/hosts.sh" -n 4 --slots 1 --delay 0.5ms --rate 1gbit -- sh -c 'timeout 120 $PDIT_HOSTS_MPIRUN -np 4 "$pdit" "$@"' sh \
	generate "${run[@]}" "${stale[@]}" -o "$tmp/h.png" --out-latents "$tmp/h.safetensors" 2> "$tmp/err"
if [ $? -eq 0 ] && "$cmp" tensors "$tmp/h.safetensors" "$tmp/pp.safetensors" 1e-5 --all > "$tmp/log"; then
	ok "4 hosts, 1 Gbit/s, 0.5 ms: PipeFusion 2 x Ulysses 2 gives the one-host mesh's latents within 1e-5"
else
	cat "$tmp/err" "$tmp/log" 2> /dev/null
	bad "4 hosts, 1 Gbit/s, 0.5 ms: PipeFusion 2 x Ulysses 2"
fi

# the bridge's fault control needs the bridge
# shellcheck disable=SC2016
"$here/hosts.sh" -n 2 --delay 0 -- sh -c '$PDIT_HOSTS_CTL link 1 down' 2> "$tmp/err"
rc=$?
[ $rc -ne 0 ] && grep -q "link needs the bridge" "$tmp/err" && ok "ctl link with --delay refused: $(head -1 "$tmp/err")" ||
	bad "ctl link with --delay: exit $rc, '$(head -1 "$tmp/err")'"
# nothing left: every hosts.sh above has ended
left=$(ip netns list | grep -c '^pdit-[0-9]*-' || true)
[ "$left" = 0 ] && ! pgrep -x hosts_switch > /dev/null && ok "no namespace or switch left behind" ||
	bad "left behind: $left namespaces, switch processes: $(pgrep -x hosts_switch | tr '\n' ' ')"

# a malformed delay: refused, naming the flag
"$here/hosts.sh" -n 2 --delay 5 -- true 2> "$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q -- "--delay must be like" "$tmp/err" && ok "--delay 5 (no unit) refused: $(head -1 "$tmp/err")" ||
	bad "--delay 5: exit $rc, '$(head -1 "$tmp/err")'"
[ $fail -eq 0 ] && echo "all passed"
exit $fail
