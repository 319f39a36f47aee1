#!/usr/bin/env bash
# make stress-test: hunts flaky tests. Runs the suites of `make test` over and over while
# the machine is loaded, so that a test whose outcome depends on scheduling or speed fails
# here rather than in CI:
#   1. release (every suite), ASan and TSan (unit + conformance; TSan without the tests
#      make test skips there, TSAN_GTEST_FILTER from the Makefile), each repeated until it
#      fails or REPEAT runs pass, beside a CPU hog (stress-ng, one worker per core);
#   2. the same once more confined to one core (taskset), where threads interleave coarsely.
# Test order is shuffled with SEED (GTEST_SHUFFLE), and SEED is also the model seed of the
# randomized suites (PMHASH_SEED): `make stress-test SEED=n` repeats a hunt exactly.
# Usage: scripts/stress-test.sh [REPEAT] [SEED]   (defaults: 10, a fresh seed, printed)
set -euo pipefail
cd "$(dirname "$0")/.."

repeat=${1:-10}
seed=${2:-$(( $(od -An -N4 -tu4 /dev/urandom) % 100000 + 1 ))}
case "$repeat" in ''|*[!0-9]*|0) echo "stress-test: REPEAT must be a positive integer, got '$repeat'" >&2; exit 2;; esac
case "$seed" in ''|*[!0-9]*) echo "stress-test: SEED must be a non-negative integer, got '$seed'" >&2; exit 2;; esac
cores=$(nproc)
echo "stress-test: REPEAT=$repeat SEED=$seed, $cores cores; repeat with: make stress-test REPEAT=$repeat SEED=$seed"

hog_pid=
stop_hog() { [ -n "$hog_pid" ] && kill "$hog_pid" 2>/dev/null && wait "$hog_pid" 2>/dev/null; hog_pid=; }
trap stop_hog EXIT
start_hog() { stress-ng --cpu "$cores" --cpu-method matrixprod --quiet --timeout 0 & hog_pid=$!; }

export GTEST_SHUFFLE=1 GTEST_RANDOM_SEED=$seed PMHASH_SEED=$seed
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 TSAN_OPTIONS=halt_on_error=1

# suite <build dir> <ctest label regex or empty> <runs> [command prefix...]
suite() {
  local dir=$1 labels=$2 runs=$3
  shift 3
  local args=(--output-on-failure -j "$cores" --repeat "until-fail:$runs")
  [ -n "$labels" ] && args+=(-L "$labels")
  local start=$SECONDS
  local log="$log_dir/$(basename "$dir")-$condition.log"
  if (cd "$dir" && "$@" ctest "${args[@]}" >"$log" 2>&1); then
    echo "stress-test: $dir ${labels:-all} ($condition): $runs clean runs ($((SECONDS - start)) s)"
  else
    echo "stress-test: $dir ${labels:-all} ($condition): FAILED within $runs runs; log: $log" >&2
    failed=1
  fi
}

log_dir=$(mktemp -d /tmp/pmhash-stress.XXXXXX)
failed=0
start_hog
condition=loaded
suite build/release "" "$repeat"
suite build/asan 'unit|tool|conformance' "$repeat"
suite build/tsan 'unit|conformance' "$repeat" env GTEST_FILTER="${TSAN_GTEST_FILTER:-*}"
stop_hog
condition=one-core
suite build/release "" 1 taskset -c 0
suite build/tsan 'unit|conformance' 1 env GTEST_FILTER="${TSAN_GTEST_FILTER:-*}" taskset -c 0
if [ "$failed" -ne 0 ]; then
  echo "stress-test: failures above (SEED=$seed); logs in $log_dir" >&2
  exit 1
fi
echo "stress-test: all clean (REPEAT=$repeat SEED=$seed)"
