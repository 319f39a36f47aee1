#!/usr/bin/env bash
# Builds pmhash-slices (src/tools/slices) against another commit's library, for
# `pmhash bench ab --a-server PATH` / `--b-server PATH` (bench/README.md, "Two builds"):
# a worktree of COMMIT in DIR (added if DIR does not exist), its library built as that
# commit builds it (Release, its own flags), then this tree's slices_main.cc and
# bench/ab_slices.h compiled against that commit's public headers with the Release flags
# and linked with its library. Prints the binary's path, DIR/build/pmhash-slices.
#
#   scripts/slices-at.sh COMMIT DIR
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: scripts/slices-at.sh COMMIT DIR" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$here" rev-parse --verify "$1^{commit}")
dir=$2
[ -d "$dir" ] || git -C "$here" worktree add --detach "$dir" "$commit" >&2
at=$(git -C "$dir" rev-parse HEAD)
if [ "$at" != "$commit" ]; then
  echo "slices-at: $dir is at $at, not $commit" >&2
  exit 1
fi
cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
cmake --build "$dir/build" --target pmhash_lib >&2
"${CXX:-c++}" -std=c++20 -O3 -DNDEBUG -Wall -Wextra -I "$dir/include" -I "$here/src" \
  "$here/src/tools/slices/slices_main.cc" "$dir/build/libpmhash.a" -lxxhash -pthread \
  -o "$dir/build/pmhash-slices"
echo "$dir/build/pmhash-slices"
