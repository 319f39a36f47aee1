#!/usr/bin/env bash
# make test: builds and runs each tree's tests in turn (release: every suite; ASan + UBSan
# and TSan: unit + conformance), stopping at the first failure, and ends with the wall time
# of every part it ran, so a clean clone's budget (docs/testing.md, "Time budget": 20
# minutes on 2 cores) is read off every run, CI's included.
set -uo pipefail
cd "$(dirname "$0")/.."

budget_s=1200
parts=(
  "release build:build"
  "release tests:check-release"
  "Python build:python"
  "Python tests:test-python"
  "ASan build:asan"
  "ASan tests:check-asan"
  "TSan build:tsan"
  "TSan tests:check-tsan"
)

names=()
times=()
status=0
start=$SECONDS
for part in "${parts[@]}"; do
  name=${part%%:*}
  target=${part#*:}
  t0=$SECONDS
  make --no-print-directory "$target" || status=$?
  names+=("$name")
  times+=($((SECONDS - t0)))
  [ "$status" -eq 0 ] || break
done
total=$((SECONDS - start))

echo
echo "make test: wall time per part"
for i in "${!names[@]}"; do
  printf '  %-14s %5d s\n' "${names[$i]}" "${times[$i]}"
done
printf '  %-14s %5d s (%d min %02d s; budget %d min on 2 cores from a clean clone)\n' \
  total "$total" $((total / 60)) $((total % 60)) $((budget_s / 60))
if [ "$status" -ne 0 ]; then
  echo "make test: FAILED in ${names[-1]}"
elif [ "$total" -gt "$budget_s" ]; then
  echo "make test: over its time budget (docs/testing.md, \"Time budget\")"
fi
exit "$status"
