#!/usr/bin/env bash
# `make bench`: runs the paper scenarios of bench/scenarios/ (every one but `main`, which
# is `make run`) and the substrate's micro scenarios (bht-fig1: BHT Fig. 1 on the media
# model, `pmhash bench --micro xpline`, about a minute), or those named as arguments,
# writing results/NAME.json and results/NAME.png for each (a micro scenario: its JSON and
# printed table only). Scenarios take up to several minutes each on a 2-core machine
# (bench/README.md lists the estimates; those with a timing claim run 3 rounds).
#   scripts/bench-scenarios.sh                 # all paper scenarios
#   scripts/bench-scenarios.sh group-fig7      # one
#   scripts/bench-scenarios.sh bht-fig1        # the micro scenario alone
# RESULTS_DIR (default results/) is where they go; `make paper-figures` sets bench/results,
# the JSON BENCHMARKS.md's tables are written from (scripts/bench-tables.py).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build/release/pmhash
if [ ! -x "$bin" ]; then
  echo "bench-scenarios: $bin is missing; run 'make bench' (it builds first)" >&2
  exit 1
fi
# Micro scenarios: name -> the `pmhash bench --micro` arguments (they need no engine).
declare -A micro=([bht-fig1]="--micro xpline")

if [ $# -gt 0 ]; then
  scenarios=("$@")
else
  scenarios=("${!micro[@]}")
  if [ -z "$("$bin" bench --list-engines)" ]; then
    echo "bench-scenarios: no engine is registered in this build yet; only the micro scenarios run."
  else
    for f in bench/scenarios/*.json; do
      name=$(basename "$f" .json)
      [ "$name" = main ] || scenarios+=("$name")
    done
  fi
fi

results=${RESULTS_DIR:-results}
mkdir -p "$results"
failed=0
for s in "${scenarios[@]}"; do
  echo "=== scenario $s ==="
  rm -f "$results/$s.png"
  if [ -n "${micro[$s]:-}" ]; then
    # shellcheck disable=SC2086  # the arguments are words on purpose
    if "$bin" bench ${micro[$s]} --json "$results/$s.json"; then
      echo "bench-scenarios: $results/$s.json"
    else
      echo "bench-scenarios: scenario $s failed" >&2
      failed=1
    fi
    echo
    continue
  fi
  if "$bin" bench --scenario "$s" --json "$results/$s.json"; then
    if /usr/bin/python3 bench/plot.py "$results/$s.json" -o "$results/$s.png"; then
      echo "bench-scenarios: $results/$s.json and $results/$s.png"
    else
      echo "bench-scenarios: warning: no chart for $s ($results/$s.json only)" >&2
    fi
  else
    echo "bench-scenarios: scenario $s failed" >&2
    failed=1
  fi
  echo
done
exit $failed
