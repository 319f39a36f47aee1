#!/usr/bin/env bash
# `pmhash serve` against the real redis-server, both measured by redis-benchmark on this
# machine (docs/serve.md, BENCHMARKS.md "pmhash serve against Redis"):
#   - pmhash serve on a pool under /dev/shm (each write durable in the pool before its
#     reply), for each engine given;
#   - redis-server with AOF and appendfsync always (each write fsynced before its reply:
#     the durable comparison), its directory under /dev/shm like the pool (fsync of tmpfs
#     costs next to nothing: the same emulation as the pool), and again on the disk
#     (/var/tmp: what a user without PM would run);
#   - redis-server without persistence (no AOF, no snapshots).
# For each: SET, GET and MSET (10 keys), 1 and 50 clients, without pipelining and with
# -P 16; R rounds, servers interleaved in each round; the median requests/s and range.
#   scripts/serve-bench.sh                      # engines wophi,linear; 3 rounds
#   ENGINES=spash ROUNDS=5 REQUESTS=200000 scripts/serve-bench.sh
# Writes results/serve-bench.csv (every round) and prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh redis-server >/dev/null
engines=${ENGINES:-wophi,linear}
rounds=${ROUNDS:-3}
requests=${REQUESTS:-100000}
keyspace=${KEYSPACE:-100000}
bin=build/release/pmhash
[ -x "$bin" ] || { echo "serve-bench: $bin is missing: run make build" >&2; exit 1; }
work=$(mktemp -d /dev/shm/pmhash-serve-bench.XXXXXX)
disk=$(mktemp -d /var/tmp/pmhash-serve-bench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do
    kill -9 "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work" "$disk"
}
trap cleanup EXIT
mkdir -p results
csv=results/serve-bench.csv
echo "round,server,clients,pipeline,test,rps" >"$csv"

wait_port() {  # port: until it answers PING
  for _ in $(seq 1 300); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "serve-bench: nothing answers on port $1" >&2
  return 1
}

# name -> port, started once; every round runs each server's cases in a rotated order.
declare -A port
servers=()
next_port=7400
IFS=, read -ra engine_list <<<"$engines"
for e in "${engine_list[@]}"; do
  p=$((next_port++))
  "$bin" serve "$work/$e.pool" --create --engine "$e" --size 4G --port "$p" \
    >"$work/$e.log" 2>&1 &
  pids+=($!)
  port["pmhash-$e"]=$p
  servers+=("pmhash-$e")
done
p=$((next_port++))
mkdir -p "$work/aof"
redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly yes --appendfsync always \
  --dir "$work/aof" --daemonize no >"$work/redis-aof.log" 2>&1 &
pids+=($!)
port[redis-aof-always]=$p
servers+=(redis-aof-always)
p=$((next_port++))
redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly yes --appendfsync always \
  --dir "$disk" --daemonize no >"$work/redis-aof-disk.log" 2>&1 &
pids+=($!)
port[redis-aof-always-disk]=$p
servers+=(redis-aof-always-disk)
p=$((next_port++))
redis-server --port "$p" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
  >"$work/redis-volatile.log" 2>&1 &
pids+=($!)
port[redis-no-persistence]=$p
servers+=(redis-no-persistence)
for s in "${servers[@]}"; do wait_port "${port[$s]}"; done

for r in $(seq 1 "$rounds"); do
  # Rotate the order each round so no server always runs first.
  order=("${servers[@]:$(((r - 1) % ${#servers[@]}))}" "${servers[@]:0:$(((r - 1) % ${#servers[@]}))}")
  for s in "${order[@]}"; do
    for c in 1 50; do
      for P in 1 16; do
        n=$requests
        [ "$c" -eq 1 ] && [ "$P" -eq 1 ] && n=$((requests / 4))  # one client waits per request
        redis-benchmark -p "${port[$s]}" -t set,get,mset -n "$n" -r "$keyspace" -c "$c" \
          -P "$P" --csv 2>/dev/null | tail -n +2 | tr -d '"' |
          while IFS=, read -r test rps _; do
            echo "$r,$s,$c,$P,$test,$rps" >>"$csv"
          done
      done
    done
  done
  echo "serve-bench: round $r of $rounds done" >&2
done

/usr/bin/python3 - "$csv" "${servers[@]}" <<'EOF'
import csv, statistics, sys
path, servers = sys.argv[1], sys.argv[2:]
rows = list(csv.DictReader(open(path)))
cases = []
for r in rows:
    k = (r["test"], int(r["clients"]), int(r["pipeline"]))
    if k not in cases:
        cases.append(k)
print("| test | clients | pipeline | " + " | ".join(servers) + " |")
print("|---|---|---|" + "---|" * len(servers))
for test, c, p in cases:
    cells = []
    for s in servers:
        v = [float(r["rps"]) for r in rows if r["server"] == s and r["test"] == test
             and int(r["clients"]) == c and int(r["pipeline"]) == p]
        cells.append("%.0f (%.0f-%.0f)" % (statistics.median(v), min(v), max(v)) if v else "")
    print("| %s | %d | %d | %s |" % (test, c, p, " | ".join(cells)))
print()
print("requests/s, median of %d rounds (min-max)" % len({r["round"] for r in rows}))
EOF
