#!/usr/bin/env bash
# Installs the Debian packages pmhash needs to build, test and plot (Debian 12 or later:
# CMake >= 3.25, g++ with C++20). Idempotent: silent and quick (one dpkg-query) when
# everything is already there; otherwise one `apt-get update` and one `apt-get install`
# of just what is missing, as root directly or through sudo. Packages named on the command
# line are added for targets that need more (`make stress-test` passes stress-ng).
set -euo pipefail

packages=(
  build-essential                     # g++ (with the ASan/UBSan/TSan runtimes), make
  cmake ninja-build                   # build (CMake >= 3.25, ctest)
  pkgconf                             # pkg-config, for the installed-package test
  libgtest-dev libgmock-dev           # GoogleTest
  libxxhash-dev                       # xxh3 hashing
  libcli11-dev                        # command-line parsing
  python3 python3-matplotlib          # bench/plot.py, run as /usr/bin/python3
  python3-venv python3-dev            # .venv (make venv) and the Python module's headers
  redis-tools                         # redis-cli, redis-benchmark: the serve tests' clients
  nutcracker                          # twemproxy: the serve test of two shards behind it
  maven openjdk-17-jdk-headless       # YCSB's core and the project's binding (scripts/ycsb.sh)
  "$@"
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null || true)
  case "$status" in
    *"install ok installed"*) ;;
    *) missing+=("$p") ;;
  esac
done

if [ ${#missing[@]} -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "install-deps: missing packages: ${missing[*]}; run as root (or install sudo):" >&2
      echo "  apt-get install ${missing[*]}" >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq >/dev/null
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# CMakeLists.txt needs 3.25 (Debian 12 ships 3.25.1): say so here rather than in a
# CMake error later.
version=$(cmake --version | sed -n '1s/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')
if [ -z "$version" ] || [ "$(printf '%s\n' 3.25 "$version" | sort -V | head -n1)" != 3.25 ]; then
  echo "install-deps: CMake ${version:-?} is too old: pmhash needs 3.25 or later (Debian 12)" >&2
  exit 1
fi
