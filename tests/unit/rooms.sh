#!/usr/bin/env bash
# The rooms that see a model only through the DiT interface name no FLUX
# type or function (the families do, in model/), and every source file sits
# in a room's folder, none loose in src/.
#
#   rooms.sh SRC_DIR
set -u
src=$1
fail=0
hits=$(grep -rnE '\bpd_flux_|\bPD_FLUX_|struct pd_flux\b|"pd_flux' "$src/parallel" "$src/pipeline" "$src/plan" \
	"$src/engine" 2> /dev/null)
if [ -n "$hits" ]; then
	echo "FAIL: FLUX identifiers outside model/:"
	echo "$hits"
	fail=1
fi
# the commands and the service stand on the engine's public header
hits=$(grep -rn 'pd_engine\.h' "$src/cli" "$src/serve")
if [ -n "$hits" ]; then
	echo "FAIL: the engine's private header under cli/ or serve/:"
	echo "$hits"
	fail=1
fi
hits=$(grep -rnE '\be->' "$src/cli" "$src/serve")
if [ -n "$hits" ]; then
	echo "FAIL: e-> (the engine's private struct, by its usual name) under cli/ or serve/:"
	echo "$hits"
	fail=1
fi
# ... and know no family by name: what differs between families is data
# of their records (model/*/pd_*_family.c), reached through pdit.h
fams=$(grep -ho '\.name = "[a-z0-9_]*"' "$src"/model/*/pd_*_family.c | sed 's/.*"\(.*\)"/\1/' | paste -sd'|')
[ -n "$fams" ] || { echo "FAIL: no family names found in model/*/pd_*_family.c"; fail=1; }
hits=$(grep -rnE "\"($fams)\"" "$src/cli" "$src/serve")
if [ -n "$hits" ]; then
	echo "FAIL: a family's name in code under cli/ or serve/:"
	echo "$hits"
	fail=1
fi
loose=$(find "$src" -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \))
if [ -n "$loose" ]; then
	echo "FAIL: source files outside the rooms: $loose"
	fail=1
fi
# every PDIT_* variable the code reads has its row in docs/environment.md
envs=$(grep -rhoE '(getenv|pd_env_on|pd_env_long)\("PDIT_[A-Z0-9_]+"' "$src" | grep -oE 'PDIT_[A-Z0-9_]+' | sort -u)
[ -n "$envs" ] || { echo "FAIL: no PDIT_ variable read under $src"; fail=1; }
for v in $envs; do
	grep -q "^| \`$v\`" "$src/../docs/environment.md" ||
		{ echo "FAIL: $v is read but has no row in docs/environment.md"; fail=1; }
done
# the check itself can fail: it must see a FLUX identifier where there is one
grep -qE '\bpd_flux_' "$src/model/flux/pd_flux.h" || { echo "FAIL: the pattern finds nothing in model/flux"; fail=1; }
grep -qE '\be->' "$src/engine/pd_engine_run.c" || { echo "FAIL: the e-> pattern finds nothing in engine/"; fail=1; }
[ $fail = 0 ] && echo "ok: no FLUX identifier in parallel, pipeline, plan, engine; cli/ and serve/ on pdit.h alone, naming no family ($fams); no loose source file; $(echo $envs | wc -w) PDIT_ variables documented"
exit $fail
