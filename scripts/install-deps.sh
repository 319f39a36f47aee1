#!/usr/bin/env bash
# Installs the Debian packages pmhash needs to build, test and plot. Idempotent: quiet and
# quick when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build   # toolchain
  libgtest-dev libgmock-dev           # GoogleTest
  libxxhash-dev                       # xxh3 hashing
  libcli11-dev                        # command-line parsing
  python3-matplotlib                  # bench/plot.py
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
