#!/usr/bin/env bash
# The main job (`make run`, after the release build): every registered engine side by side
# on emulated PM (bench/scenarios/main.json: a fresh pool under /dev/shm, adr persistence,
# 3 interleaved rounds beside the machine's floor), tables on stdout, JSON in
# results/main.json and a PNG summary in results/main.png.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=build/release/pmhash
if [ ! -x "$bin" ]; then
  echo "main-job: $bin is missing; run 'make run' (it builds first)" >&2
  exit 1
fi
if [ -z "$("$bin" bench --list-engines)" ]; then
  echo "main-job: no engine is registered in this build yet; the engines come next."
  exit 0
fi

mkdir -p results
rm -f results/main.json results/main.png  # never leave old results beside new ones
status=0
"$bin" bench --scenario main --json results/main.json "$@" || status=$?
echo
if [ ! -s results/main.json ]; then
  echo "main-job: the benchmark failed (exit $status) and wrote no results" >&2
  exit "$((status == 0 ? 1 : status))"
fi
if /usr/bin/python3 bench/plot.py results/main.json -o results/main.png && [ -s results/main.png ]; then
  echo "main-job: results in results/main.json and results/main.png"
else
  echo "main-job: warning: no chart (bench/plot.py failed; 'make deps' installs matplotlib)" >&2
  echo "main-job: results in results/main.json (no chart)"
fi
if [ "$status" -ne 0 ]; then
  echo "main-job: the benchmark reported a failure (exit $status); see the messages above" >&2
fi
exit "$status"
