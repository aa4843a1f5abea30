#!/usr/bin/env bash
# pdit --version names what the build has, from the options CMake was
# given (the expected lines come from the configuration, not from pdit).
# usage: cli_version.sh PDIT LINE...
set -u
pdit=$1
shift
fail=0
out=$("$pdit" --version 2>&1) || { echo "FAIL pdit --version: exit status $?"; exit 1; }
first=$(printf '%s\n' "$out" | head -1)
case $first in "pdit "[0-9]*) echo "ok   $first" ;; *) echo "FAIL first line '$first', want 'pdit VERSION'"; fail=1 ;; esac
for want in "$@"; do
	if printf '%s\n' "$out" | grep -qxF -- "$want"; then
		echo "ok   $want"
	else
		echo "FAIL no line '$want' in:"; printf '%s\n' "$out"; fail=1
	fi
done
[ "$(printf '%s\n' "$out" | grep -c '')" -eq $(($# + 1)) ] || { echo "FAIL $(printf '%s\n' "$out" | grep -c '') lines, want $(($# + 1))"; fail=1; }
exit $fail
