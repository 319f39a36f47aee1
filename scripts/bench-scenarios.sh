#!/usr/bin/env bash
# `make bench`: runs the paper scenarios of bench/scenarios/ (every one but `main`, which
# is `make run`), or those named as arguments, writing results/NAME.json and
# results/NAME.png for each. Scenarios take up to several minutes each on a 2-core machine
# (bench/README.md lists the estimates; those with a timing claim run 3 rounds, so the
# whole set takes about 35 minutes, estimated from single-round times).
#   scripts/bench-scenarios.sh                 # all paper scenarios
#   scripts/bench-scenarios.sh group-fig7      # one
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build/release/pmhash
if [ ! -x "$bin" ]; then
  echo "bench-scenarios: $bin is missing; run 'make bench' (it builds first)" >&2
  exit 1
fi
if [ -z "$("$bin" bench --list-engines)" ]; then
  echo "bench-scenarios: no engine is registered in this build yet; the engines come next."
  exit 0
fi

if [ $# -gt 0 ]; then
  scenarios=("$@")
else
  scenarios=()
  for f in bench/scenarios/*.json; do
    name=$(basename "$f" .json)
    [ "$name" = main ] || scenarios+=("$name")
  done
fi

mkdir -p results
failed=0
for s in "${scenarios[@]}"; do
  echo "=== scenario $s ==="
  rm -f "results/$s.png"
  if "$bin" bench --scenario "$s" --json "results/$s.json"; then
    if /usr/bin/python3 bench/plot.py "results/$s.json" -o "results/$s.png"; then
      echo "bench-scenarios: results/$s.json and results/$s.png"
    else
      echo "bench-scenarios: warning: no chart for $s (results/$s.json only)" >&2
    fi
  else
    echo "bench-scenarios: scenario $s failed" >&2
    failed=1
  fi
  echo
done
exit $failed
