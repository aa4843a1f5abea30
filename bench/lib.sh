# Shared by the bench/ scripts (sourced): the pdit binary, Open MPI's consent
# to run as root, the benchmark model, and helpers.
#   bench_model DIR     writes the FLUX-width model to DIR when missing
#   field KEY JSON      a scalar of a one-line JSON object
#   row MESH ROWS       the row of MESH among `pdit plan --json`'s rows
#   median              the median of numbers on stdin, one a line
#   record DIR RUN JSON  appends `pdit bench --json`'s seconds_per_step, peak_rss_mb and
#                       weights_mb to DIR/RUN.KEY, one file a key
#   med DIR RUN KEY     the median of what record appended
pdit=${PDIT:-build/pdit}	# PDIT=FILE: another build (a copy, for a long run while build/ changes)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$pdit" ] || { echo "build first: cmake -S . -B build && cmake --build build" >&2; exit 1; }

bench_model() { [ -d "$1" ] || "$pdit" tiny "$1" --flux-width >&2; }
field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"]*\)\"\{0,1\}[,}].*/\1/p" <<< "$2"; }
row() { grep -m1 -F "\"mesh\": \"$1\"" <<< "$2"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
record() { for key in seconds_per_step peak_rss_mb weights_mb; do field "$key" "$3" >> "$1/$2.$key"; done; }
med() { median < "$1/$2.$3"; }
