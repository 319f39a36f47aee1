#!/usr/bin/env bash
# The layers of src/ and the one direction their includes may point (ctest `layers`):
#   util -> pm -> common -> engines -> bench -> serve -> tools
# A file may include its own layer and any layer to its left, and the public API
# (include/pmhash/); never a layer to its right. Tests (*_test.cc) may include anything.
# Prints every backward include and exits 1 if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
layers=(util pm common engines bench serve tools)
rank() {
  local i
  for i in "${!layers[@]}"; do
    if [ "${layers[$i]}" = "$1" ]; then echo "$i"; return; fi
  done
  echo -1
}
status=0
for dir in "${layers[@]}"; do
  own=$(rank "$dir")
  while IFS= read -r line; do
    file=${line%%:*}
    target=$(sed -n 's/.*#include "\([a-z_]*\)\/.*/\1/p' <<<"$line")
    [ -n "$target" ] || continue
    r=$(rank "$target")
    if [ "$r" -gt "$own" ]; then
      echo "backward include: $file ($dir) includes $target: ${line#*:}"
      status=1
    fi
  done < <(grep -rn --include='*.h' --include='*.cc' '#include "' "src/$dir" | grep -v '_test\.cc:')
done
[ "$status" -eq 0 ] && echo "layers: no backward include in src/ (${layers[*]})"
exit "$status"
