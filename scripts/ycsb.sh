#!/usr/bin/env bash
# `make ycsb`: YCSB's own core (site.ycsb:core 0.17.0: CoreWorkload, its measurements)
# against `pmhash serve`, through the project's binding (bindings/ycsb: a site.ycsb.DB over
# Jedis), built with Maven from the package registry; nothing else is downloaded.
# For each engine: a fresh pool, the load phase, then workloads A, B, C, D, F (E's range
# scans are not supported by a hash index: reported, not run), and a table of throughput
# and mean latencies.
#   scripts/ycsb.sh                                  # engines wophi,linear; 100k records
#   ENGINES=spash RECORDS=1000000 OPS=1000000 THREADS=4 scripts/ycsb.sh
#   ROUNDS=3 ENGINES=wophi,dash scripts/ycsb.sh      # rounds interleaved (every engine
#                                      # once per round, a fresh pool each time); the
#                                      # table gives the median ops/s (min-max)
#   RECORDS=1000 OPS=1000 ENGINES=wophi CHECK=1 scripts/ycsb.sh   # make test's run: also
#                                      # fails unless every operation returned OK, and
#                                      # replays the workload as a trace (TRACE=1 alone:
#                                      # the replay without the check)
# Writes results/ycsb/<engine>-<workload>.txt (YCSB's own output) and prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."
engines=${ENGINES:-wophi,linear}
records=${RECORDS:-100000}
ops=${OPS:-100000}
threads=${THREADS:-1}
workloads=${WORKLOADS:-a,b,c,d,f}
rounds=${ROUNDS:-1}
[[ $rounds =~ ^[1-9][0-9]{0,2}$ ]] || { echo "ycsb: ROUNDS must be a whole number from 1 to 999, not '$rounds'" >&2; exit 2; }
check=${CHECK:-0}
out=${OUT:-results/ycsb}
bin=${PMHASH_TOOL:-build/release/pmhash}
[ -x "$bin" ] || { echo "ycsb: $bin is missing: run make build" >&2; exit 1; }
command -v mvn >/dev/null || { echo "ycsb: Maven (mvn) is missing" >&2; exit 1; }

# The binding and its dependencies (YCSB core, Jedis) into bindings/ycsb/target.
(cd bindings/ycsb && mvn -q -B -Dstyle.color=never package -DskipTests &&
  mvn -q -B -Dstyle.color=never dependency:copy-dependencies -DoutputDirectory=target/lib) >&2
cp="bindings/ycsb/target/pmhash-ycsb-0.1.0.jar:bindings/ycsb/target/lib/*"

mkdir -p "$out"
work=$(mktemp -d /dev/shm/pmhash-ycsb.XXXXXX)
server=
cleanup() {
  if [ -n "$server" ]; then kill -9 "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

status=0
rows=()
IFS=, read -ra engine_list <<<"$engines"
IFS=, read -ra workload_list <<<"$workloads"
for round in $(seq 1 "$rounds"); do
for e in "${engine_list[@]}"; do
  rm -f "$work/$e.pool"
  "$bin" serve "$work/$e.pool" --create --engine "$e" --size 4G --port 0 >"$work/$e.log" 2>&1 &
  server=$!
  port=
  for _ in $(seq 1 1200); do  # up to 60 s: creating a 4 GiB pool on a loaded machine
    port=$(sed -n 's/.*ready on [^:]*:\([0-9]*\).*/\1/p' "$work/$e.log")
    [ -n "$port" ] && break
    sleep 0.05
  done
  [ -n "$port" ] || { echo "ycsb: pmhash serve did not start: $(cat "$work/$e.log")" >&2; exit 1; }
  for phase in load "${workload_list[@]}"; do
    w=${phase/load/a}
    mode=-t
    [ "$phase" = load ] && mode=-load
    java -cp "$cp" site.ycsb.Client "$mode" -db pmhash.ycsb.PmhashClient \
      -P "bindings/ycsb/workloads/workload$w" -p recordcount="$records" \
      -p operationcount="$ops" -p pmhash.port="$port" -threads "$threads" \
      >"$out/$e-$phase.txt" 2>"$out/$e-$phase.err" || { status=1; echo "ycsb: $e $phase failed" >&2; }
    f="$out/$e-$phase.txt"
    tput=$(sed -n 's/^\[OVERALL\], Throughput(ops\/sec), \(.*\)/\1/p' "$f")
    lat=$(sed -n 's/^\[\([A-Z-]*\)\], AverageLatency(us), \(.*\)/\1 \2/p' "$f" |
          awk '$1 != "CLEANUP" {printf "%s%s %.0f us", sep, $1, $2; sep=", "}')
    bad=$(grep -E '^\[[A-Z-]+\], Return=' "$f" | grep -v 'Return=OK' || true)
    if [ -n "$bad" ]; then
      echo "ycsb: $e $phase: operations that did not return OK:" >&2
      echo "$bad" >&2
      [ "$check" = 1 ] && status=1
    fi
    ok=$(grep -E '^\[[A-Z-]+\], Return=OK' "$f" | awk -F', ' '{n += $3} END {print n + 0}')
    rows+=("$e|$phase|${tput%.*}|$lat|$ok")
  done
  kill -TERM "$server"
  wait "$server" || { status=1; echo "ycsb: pmhash serve did not close cleanly" >&2; }
  server=
done
done

# The same workload as a trace: YCSB's basic binding prints each operation (load, then
# the first workload), and `pmhash bench --trace` replays it in process against the
# first engine, every answer checked against a model (no network).
if [ "${TRACE:-$check}" = 1 ]; then
  trace="$out/trace-${workload_list[0]}.txt"
  for mode in -load -t; do
    java -cp "$cp" site.ycsb.Client "$mode" -db site.ycsb.BasicDB \
      -P "bindings/ycsb/workloads/workload${workload_list[0]}" -p recordcount="$records" \
      -p operationcount="$ops" -p basicdb.verbose=true 2>/dev/null
  done | grep -E '^(INSERT|UPDATE|READ|DELETE|SCAN) ' >"$trace"
  "$bin" bench --trace "$trace" --engine "${engine_list[0]}" --pool-size 256 ||
    { status=1; echo "ycsb: the trace replay failed" >&2; }
  echo
fi

# One row per engine and phase: the median ops/s of the rounds (min-max when more than
# one), the latencies and OK counts of the median round.
echo "| engine | workload | ops/s | mean latency | Return=OK (per operation type) |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}" | python3 -c '
import sys
rows = {}
for line in sys.stdin:
    e, phase, tput, lat, ok = line.rstrip("\n").split("|")
    rows.setdefault((e, phase), []).append((int(tput or 0), lat, ok))
for (e, phase), runs in rows.items():
    runs.sort(key=lambda r: r[0])
    tput, lat, ok = runs[len(runs) // 2]
    span = f" ({runs[0][0]}-{runs[-1][0]})" if len(runs) > 1 else ""
    print(f"| {e} | {phase} | {tput}{span} | {lat} | {ok} |")
'
echo
echo "YCSB 0.17.0 core, $records records, $ops operations, $threads thread(s), $rounds round(s);" \
  "workload E (range scans) not run: a hash index has no key order."
exit $status
