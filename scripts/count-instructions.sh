#!/usr/bin/env bash
# Instructions per lookup along the public path (issue 29; BENCHMARKS.md, "The path of a
# lookup"): for each engine, a positive and a negative search phase under valgrind's
# callgrind (instructions are counted, so no hardware counters are needed and the figures
# do not depend on the machine's load), split by scripts/callgrind_path.py into the
# benchmark loop, Engine::Get's own code, the key check, the operation bracket, the hash,
# the Status, the value copy and the engine's DoGet; and the same for the floor's test
# engine (floor-api, `pmhash bench --floor`'s "lookup through the API").
#
#   scripts/count-instructions.sh [-b BUILD_DIR] [-r RECORDS] [-o OPS] [ENGINE ...]
#
# BUILD_DIR (default build/release-g): a release build with -g (the split is by source
# file; -g does not change the code GCC generates), configured and built here if missing.
# Defaults: 1,000,000 keys, 200,000 lookups per phase, every registered engine. Prints a
# table (instructions per lookup) and keeps the callgrind files in $COUNT_DIR (default
# /tmp/pmhash-count). Needs valgrind (scripts/install-deps.sh valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/release-g
records=1000000
ops=200000
while getopts "b:r:o:" opt; do
  case $opt in
    b) build=$OPTARG ;;
    r) records=$OPTARG ;;
    o) ops=$OPTARG ;;
    *) echo "usage: $0 [-b BUILD_DIR] [-r RECORDS] [-o OPS] [ENGINE ...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
command -v valgrind >/dev/null || scripts/install-deps.sh valgrind
if [ ! -x "$build/pmhash" ]; then
  cmake -S . -B "$build" -G Ninja -Wno-dev -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g >/dev/null
  cmake --build "$build" --target pmhash
fi
pmhash=$build/pmhash
engines=("$@")
[ ${#engines[@]} -gt 0 ] || mapfile -t engines < <("$pmhash" bench --list-engines)
dir=${COUNT_DIR:-/tmp/pmhash-count}
mkdir -p "$dir"

common=(--records "$records" --ops "$ops" --key-size 8 --value-size 8 --persist adr
        --dist uniform --counters off --recovery off --pool dram --progress off --quiet
        --latency-sample 64)
profile() {  # OUT ARGS...: one callgrind run of `pmhash bench ARGS`
  local out=$1
  shift
  valgrind --tool=callgrind --callgrind-out-file="$out" "$pmhash" bench "$@" "${common[@]}" \
    >/dev/null 2>"$out.log" || { cat "$out.log" >&2; exit 1; }
}

printf '%-12s %-9s %8s %6s %6s %6s %6s %6s %6s %6s %6s %7s\n' engine phase lookups loop get \
  check bracket hash status copy doget total
row() {  # ENGINE PHASE RUN BASE
  local fields
  if ! fields=$(/usr/bin/python3 scripts/callgrind_path.py "$3" "$4" 2>/dev/null); then
    printf '%-12s %-9s %8s\n' "$1" "$2" "n/a (no Index::Get in this build)"
    return
  fi
  declare -A f
  for kv in $fields; do f[${kv%%=*}]=${kv#*=}; done
  printf '%-12s %-9s %8s %6s %6s %6s %6s %6s %6s %6s %6s %7s\n' "$1" "$2" "${f[gets]}" \
    "${f[loop]}" "${f[get]}" "${f[check]}" "${f[bracket]}" "${f[hash]}" "${f[status]}" \
    "${f[copy]}" "${f[doget]}" "${f[total]}"
}

for e in "${engines[@]}"; do
  profile "$dir/$e-load.cg" --engine "$e" --phases load
  for phase in search negative; do
    profile "$dir/$e-$phase.cg" --engine "$e" --phases "load,$phase"
    row "$e" "$phase" "$dir/$e-$phase.cg" "$dir/$e-load.cg"
  done
done
# The floor's api row, beside the first engine's load (its only Get calls).
e=${engines[0]}
profile "$dir/floor-api.cg" --engine "$e" --phases load --floor
row floor-api search "$dir/floor-api.cg" "$dir/$e-load.cg"
