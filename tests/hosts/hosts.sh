#!/usr/bin/env bash
# Several hosts on this machine: each host a Linux network namespace with its
# own address on a private network (10.77.0.0/24), all joined by a switch (a
# bridge in a namespace of its own) through one veth link each; optionally
# shaped (tbf: rate) and lossy (nftables: a share of each host's packets
# dropped). With --delay the switch is tests/hosts/hosts_switch instead (a
# program: this kernel has no netem to delay packets) and each host's link a
# TUN device it serves, shaped and delayed there. Runs COMMAND in the
# caller's namespace with an mpirun that launches across the hosts over TCP,
# then removes everything it made, also when COMMAND fails or the script is
# interrupted.
#
#   tests/hosts/hosts.sh [-n HOSTS] [--slots S] [--rate RATE] [--delay D] [--loss PCT] -- COMMAND [ARG...]
#   tests/hosts/hosts.sh --probe      exit 0 if hosts can be made here, else 77 and why
#
#   -n HOSTS     2 to 8 hosts (default 2): host i is 10.77.0.(i+1)
#   --slots S    processes per host in the hostfile (default 2); ranks fill
#                host 0 first, then host 1, ...
#   --rate RATE  each host's link, both directions, in tc's units (25gbit,
#                10gbit, 1gbit, 500mbit); default: the veth as it is
#   --loss PCT   drop PCT percent of the packets each host sends (0-99)
#   --delay D    one-way latency between two hosts (50us, 0.5ms; 0 for the
#                switch program without a delay; at most 1000ms): needs
#                PDIT_HOSTS_SWITCH, the program the build made
#                (build/tests/hosts_switch); its --rate from 10mbit
#   --tcp-retries R  each host's net.ipv4.tcp_retries2 (the kernel's 15 keeps
#                a connection to an unreachable host for about 15 minutes, and
#                Open MPI has no timeout of its own: mpirun waits that long
#                for a host whose link is down; 4 gives up after about 6 s)
#
# COMMAND sees (all paths absolute):
#   PDIT_HOSTS_MPIRUN   an mpirun for the hosts: $PDIT_HOSTS_MPIRUN -np 4 pdit ...
#   PDIT_HOSTS_FILE     the hostfile (one line per host: address slots=S)
#   PDIT_HOSTS_CTL      a control command:
#                         ctl exec I CMD...   run CMD in host I's namespace
#                         ctl link I down|up  take host I's link down or up
#                                             (not with --delay)
#                         ctl loss PCT        set every host's loss now
#                         ctl bytes           bytes sent by all hosts so far
#                         ctl kill I          SIGKILL every process in host I
#   PDIT_HOSTS_N, PDIT_HOSTS_SLOTS
# PDIT_HOSTS_MPIEXEC (if set) is the mpirun to use (default: mpirun on PATH).
# The same COMMAND runs on real machines with PDIT_HOSTS_MPIRUN set to
# "mpirun --hostfile FILE" (docs/hosts.md).
#
# Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), ip, tc, and nft for --loss.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
n=2 slots=2 rate="" loss=0 delay="" probe=0 retries=""
usage() { sed -n '2,/^# Needs/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
	case $1 in
	-n) n=${2:?-n needs a count}; shift 2 ;;
	--slots) slots=${2:?--slots needs a count}; shift 2 ;;
	--rate) rate=${2:?--rate needs a rate, e.g. 1gbit}; shift 2 ;;
	--loss) loss=${2:?--loss needs a percentage}; shift 2 ;;
	--delay) delay=${2:?--delay needs a time, e.g. 0.5ms}; shift 2 ;;
	--tcp-retries) retries=${2:?--tcp-retries needs a count}; shift 2 ;;
	--probe) probe=1; shift ;;
	-h | --help) usage ;;
	--) shift; break ;;
	*) echo "hosts.sh: unknown option '$1' (--help)" >&2; exit 2 ;;
	esac
done
case $n in [2-8]) ;; *) echo "hosts.sh: -n must be 2 to 8, not '$n'" >&2; exit 2 ;; esac
case $slots in [1-9]) ;; *) echo "hosts.sh: --slots must be 1 to 9, not '$slots'" >&2; exit 2 ;; esac
case $loss in [0-9] | [0-9][0-9]) ;; *) echo "hosts.sh: --loss must be a percentage 0-99, not '$loss'" >&2; exit 2 ;; esac
case $retries in "" | [1-9] | 1[0-5]) ;; *) echo "hosts.sh: --tcp-retries must be 1 to 15, not '$retries'" >&2; exit 2 ;; esac
if [ -n "$rate" ] && ! [[ $rate =~ ^[0-9]+(\.[0-9]+)?[kmg]?bit$ ]]; then
	echo "hosts.sh: --rate must be like 25gbit, 10gbit, 1gbit or 500mbit, not '$rate'" >&2
	exit 2
fi
if [ -n "$delay" ]; then
	# microseconds for the switch
	delay_us=$(awk -v d="$delay" 'BEGIN {
		if (d ~ /^[0-9]+(\.[0-9]+)?us$/) print d + 0; else if (d ~ /^[0-9]+(\.[0-9]+)?ms$/) print d * 1000
		else if (d == "0") print 0 }')
	[ -n "$delay_us" ] && awk -v d="$delay_us" 'BEGIN { exit !(d <= 1e6) }' ||
		{ echo "hosts.sh: --delay must be like 50us, 0.5ms or 0 (at most 1000ms), not '$delay'" >&2; exit 2; }
fi
[ $probe -eq 1 ] || [ $# -gt 0 ] || { echo "hosts.sh: no command (hosts.sh [options] -- COMMAND)" >&2; exit 2; }

# namespaces named after this process: concurrent runs do not meet (the
# addresses may repeat: each set of hosts is a network of its own)
tag=pdit-$$
sw=$tag-sw
dir=$(mktemp -d /tmp/pdit-hosts.XXXXXX) || exit 1
made=()

switch=""
cleanup() {
	local rc=$? ns pid
	trap - EXIT INT TERM
	# the switch first: it holds the hosts' devices. One that stopped on its
	# own cut the hosts off: say why, and fail
	if [ -n "$switch" ]; then
		if kill -TERM "$switch" 2> /dev/null; then
			wait "$switch" 2> /dev/null
		else
			echo "hosts.sh: the switch program stopped during the run: $(head -3 "$dir/switch.err")" >&2
			[ $rc -eq 0 ] && rc=1
		fi
		[ -s "$dir/switch.err" ] && sed 's/^/hosts.sh: switch: /' "$dir/switch.err" >&2
	fi
	for ns in "${made[@]}"; do
		for pid in $(ip netns pids "$ns" 2> /dev/null); do
			kill -9 "$pid" 2> /dev/null
		done
	done
	for ns in "${made[@]}"; do
		ip netns del "$ns" 2> /dev/null
	done
	rm -rf "$dir"
	exit $rc
}
child=""
# a signal ends the command at once (bash runs traps only between
# foreground commands: the command runs in the background and is waited for)
stop() {
	[ -n "$child" ] && kill -TERM "$child" 2> /dev/null
	exit "$1"
}
trap cleanup EXIT
trap 'stop 130' INT
trap 'stop 143' TERM

# skip (77) with the reason when this machine cannot make hosts
skip() {
	echo "hosts.sh: skipped: $*" >&2
	exit 77
}
for tool in ip tc; do
	[ "$tool" = tc ] && [ -n "$delay" ] && [ "$loss" = 0 ] && continue
	command -v "$tool" > /dev/null || skip "'$tool' is not installed (Debian: iproute2)"
done
[ "$loss" = 0 ] || command -v nft > /dev/null || skip "--loss needs 'nft' (Debian: nftables)"

run_in() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# hosts left by a run that was killed outright (SIGKILL: no cleanup)
for ns in $(ip netns list 2> /dev/null | awk '/^pdit-[0-9]+-/ { print $1 }'); do
	owner=${ns#pdit-}
	owner=${owner%%-*}
	kill -0 "$owner" 2> /dev/null && continue
	for pid in $(ip netns pids "$ns" 2> /dev/null); do
		kill -9 "$pid" 2> /dev/null
	done
	ip netns del "$ns" 2> /dev/null
done
mkns() {
	ip netns add "$1" 2> "$dir/err" || skip "cannot create a network namespace ($(head -1 "$dir/err")); needs root or CAP_NET_ADMIN"
	made+=("$1")
	run_in "$1" ip link set lo up || skip "cannot configure a network namespace"
}

# tbf on one side of a link: RATE with a burst of a millisecond's bytes
# (at least 64 kB: a GSO packet) and a queue of 100 ms
shape() {
	local ns=$1 dev=$2
	run_in "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms 2> "$dir/err" ||
		skip "tc cannot shape a veth link with tbf ($(head -1 "$dir/err"))"
}
# the nftables table that drops PCT percent of a host's packets (ctl
# loss uses it too)
loss_rule() {
	printf 'table inet pdit_loss { chain out { type filter hook output priority 0; policy accept; oifname "eth0" numgen random mod 100 < %d drop; }; }\n' "$1"
}
set_loss() {
	local ns=$1 pct=$2
	run_in "$ns" nft delete table inet pdit_loss 2> /dev/null
	[ "$pct" = 0 ] && return 0
	loss_rule "$pct" | run_in "$ns" nft -f - 2> "$dir/err" || skip "nftables cannot drop packets ($(head -1 "$dir/err"))"
}

if [ -n "$rate" ]; then
	# bits per second from tc's units (the switch's), and tbf's burst: a
	# millisecond's bytes
	bps=$(awk -v r="$rate" 'BEGIN {
		m = 1; if (r ~ /kbit$/) m = 1e3; else if (r ~ /mbit$/) m = 1e6; else if (r ~ /gbit$/) m = 1e9
		printf "%.0f\n", r * m }')
	burst=$(awk -v b="$bps" 'BEGIN { b = int(b / 8 / 1000); if (b < 65536) b = 65536; print b }')
	# (the switch's packets are 65000 bytes: one must fit its queue of 100 ms)
	if [ -n "$delay" ] && ! awk -v b="$bps" 'BEGIN { exit !(b >= 1e7 && b <= 1e12) }'; then
		echo "hosts.sh: --rate with --delay must be 10mbit to 1000gbit, not '$rate'" >&2
		exit 2
	fi
fi
hostfile=$dir/hostfile
: > "$hostfile"
if [ -n "$delay" ]; then
	# the switch program makes each host's eth0 (a TUN device) and carries
	# their packets: at RATE, DELAY later
	[ -n "${PDIT_HOSTS_SWITCH:-}" ] && [ -x "$PDIT_HOSTS_SWITCH" ] ||
		skip "--delay needs PDIT_HOSTS_SWITCH, the hosts_switch program the build made (build/tests/hosts_switch)"
	[ -c /dev/net/tun ] || skip "--delay needs TUN devices (/dev/net/tun)"
	names=()
	for ((i = 0; i < n; i++)); do
		mkns "$tag-h$i"
		names+=("$tag-h$i")
	done
	sargs=(--net 10.77.0.0 --delay "$delay_us" --parent $$)
	[ -n "$rate" ] && sargs+=(--rate "$bps")
	"$PDIT_HOSTS_SWITCH" "${sargs[@]}" "${names[@]}" > "$dir/switch.out" 2> "$dir/switch.err" < /dev/null &
	switch=$!
	for _ in $(seq 50); do
		grep -q ready "$dir/switch.out" && break
		if ! kill -0 "$switch" 2> /dev/null; then
			wait "$switch"
			src=$?
			switch=""
			# 1: no TUN device here (the machine), 2: an argument (this script)
			[ $src -eq 1 ] && skip "the switch cannot make the hosts' devices ($(head -1 "$dir/switch.err"))"
			echo "hosts.sh: the switch refused its arguments: $(head -1 "$dir/switch.err")" >&2
			exit 1
		fi
		sleep 0.1
	done
	grep -q ready "$dir/switch.out" || { echo "hosts.sh: the switch did not start within 5 s" >&2; exit 1; }
fi
if [ -z "$delay" ]; then
	mkns "$sw"
	run_in "$sw" ip link add br0 type bridge || skip "cannot create a bridge"
	run_in "$sw" ip link set br0 up
fi
for ((i = 0; i < n; i++)); do
	h=$tag-h$i
	if [ -n "$delay" ]; then
		# packets of veth's GSO size (see hosts_switch.c)
		run_in "$h" ip link set eth0 mtu 65000 || { echo "hosts.sh: cannot set the MTU of host $i's device" >&2; exit 1; }
	else
		mkns "$h"
		run_in "$sw" ip link add "h$i" type veth peer name eth0 netns "$h" 2> "$dir/err" ||
			skip "cannot create a veth pair ($(head -1 "$dir/err"))"
		run_in "$sw" ip link set "h$i" master br0
		run_in "$sw" ip link set "h$i" up
	fi
	run_in "$h" ip addr add "10.77.0.$((i + 1))/24" dev eth0
	run_in "$h" ip link set eth0 up
	if [ -n "$rate" ] && [ -z "$delay" ]; then
		shape "$h" eth0
		shape "$sw" "h$i"
	fi
	set_loss "$h" "$loss"
	if [ -n "$retries" ]; then
		run_in "$h" sysctl -q -w net.ipv4.tcp_retries2="$retries" > /dev/null ||
			skip "cannot set net.ipv4.tcp_retries2 in a namespace"
	fi
	echo "10.77.0.$((i + 1)) slots=$slots" >> "$hostfile"
done
# the hosts answer each other
for ((i = 1; i < n; i++)); do
	ok=0
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		# a refused connection is an answer (no ping needed)
		[[ $(run_in "$tag-h0" timeout 2 bash -c "exec 3<> /dev/tcp/10.77.0.$((i + 1))/9" 2>&1) == *refused* ]] &&
			{ ok=1; break; }
		[ "$loss" != 0 ] && continue
		sleep 0.2
	done
	[ $ok -eq 1 ] || { echo "hosts.sh: host 0 cannot reach host $i over the switch" >&2; exit 1; }
done
if [ $probe -eq 1 ]; then
	echo "hosts.sh: $n hosts can be made here"
	exit 0
fi

# Open MPI's remote shell: the host's address names its namespace, where
# the daemon starts (and daemonizes: mpirun hears of a host only over the
# network, as it would of a real one). Each host has a temporary
# folder of its own: the hosts share /tmp and one host name, and daemons
# making their session folders under the same name at once failed
# ("File exists") in about 1 launch of 50.
for ((i = 0; i < n; i++)); do mkdir "$dir/tmp$i"; done
cat > "$dir/agent" <<- EOF
	#!/bin/sh
	host=\$1
	shift
	case \$host in
	10.77.0.[1-$n]) i=\$((\${host##*.} - 1)) ;;
	*) echo "hosts agent: unknown host \$host" >&2; exit 1 ;;
	esac
	exec ip netns exec $tag-h\$i env TMPDIR=$dir/tmp\$i sh -c "\$*"
EOF
root=""
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
# TCP only (no shared memory between the namespaces), daemons started by
# mpirun itself (no tree), nothing bound to cores (the hosts share them).
# No rtc hwloc: it shares each daemon's hardware topology through a
# mapping placed in the largest hole of the address space, and a daemon
# crashed writing it (a segfault in hwloc_shmem_topology_write) in about 1
# launch of 30 here, leaving mpirun waiting for it; it serves binding,
# which the hosts do not use.
cat > "$dir/mpirun" <<- EOF
	#!/bin/sh
	TMPDIR=$dir/tmp0 exec ip netns exec $tag-h0 ${PDIT_HOSTS_MPIEXEC:-mpirun} $root --oversubscribe --hostfile $hostfile \\
		--mca plm_rsh_agent $dir/agent --mca plm_rsh_no_tree_spawn 1 \\
		--mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_if_include 10.77.0.0/24 \\
		--mca pml ob1 --mca btl tcp,self --bind-to none --mca rtc ^hwloc "\$@"
EOF
cat > "$dir/ctl" <<- EOF
	#!/usr/bin/env bash
	# control of the hosts made by $here/hosts.sh (see there)
	set -u
	$(declare -f loss_rule)
	case \${1:-} in
	exec) i=\$2; shift 2; exec ip netns exec $tag-h\$i "\$@" ;;
	link)
		[ -z "$delay" ] || { echo "ctl: link needs the bridge (hosts.sh without --delay)" >&2; exit 2; }
		exec ip netns exec $sw ip link set "h\$2" "\$3" ;;
	loss)
		for ((i = 0; i < $n; i++)); do
			ip netns exec $tag-h\$i nft delete table inet pdit_loss 2> /dev/null
			[ "\$2" = 0 ] && continue
			loss_rule "\$2" | ip netns exec $tag-h\$i nft -f - || exit 1
		done ;;
	bytes)
		t=0
		for ((i = 0; i < $n; i++)); do
			b=\$(ip netns exec $tag-h\$i cat /sys/class/net/eth0/statistics/tx_bytes)
			t=\$((t + b))
		done
		echo \$t ;;
	kill)
		for pid in \$(ip netns pids $tag-h\$2); do
			kill -9 "\$pid" 2> /dev/null
		done ;;
	*) echo "ctl: exec I CMD | link I down|up | loss PCT | bytes | kill I" >&2; exit 2 ;;
	esac
EOF
chmod +x "$dir/agent" "$dir/mpirun" "$dir/ctl"

export PDIT_HOSTS_MPIRUN=$dir/mpirun PDIT_HOSTS_FILE=$hostfile PDIT_HOSTS_CTL=$dir/ctl
export PDIT_HOSTS_N=$n PDIT_HOSTS_SLOTS=$slots
"$@" &
child=$!
wait "$child"
