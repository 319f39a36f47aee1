#!/usr/bin/env bash
# The installed package as another project uses it (ctest `install_consumer`):
#   consumer-test.sh BUILD_DIR CONSUMER_SOURCE_DIR
# installs BUILD_DIR into a scratch prefix, then builds CONSUMER_SOURCE_DIR's program
# with find_package(pmhash) and again with pkg-config, and runs both.
set -euo pipefail
build=$1
consumer=$2
scratch=$(mktemp -d "${TMPDIR:-/tmp}/pmhash-consumer.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

cmake --install "$build" --prefix "$scratch/prefix" >/dev/null

echo "== find_package(pmhash)"
cmake -S "$consumer" -B "$scratch/cmake-build" -G Ninja -DCMAKE_PREFIX_PATH="$scratch/prefix" \
      -Wno-dev >/dev/null
cmake --build "$scratch/cmake-build" >/dev/null
"$scratch/cmake-build/consumer" "$scratch/a.pool"

echo "== pkg-config pmhash"
pcdir=$(find "$scratch/prefix" -name pmhash.pc -printf '%h\n' | head -n 1)
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --cflags --libs pmhash)
# shellcheck disable=SC2086  # the flags are words
c++ "$consumer/main.cc" -o "$scratch/pc-consumer" $flags
"$scratch/pc-consumer" "$scratch/b.pool"
