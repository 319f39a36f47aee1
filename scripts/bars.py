#!/usr/bin/env python3
"""The performance bars of issues 30, 31 and 32, read across builds in one command.

Each bar is a ratio of one of our engines to wophi, linear or smartht as they were at
0129fda (the build the field's originals were measured beside). For every pair this runs
`pmhash bench ab` with the old engine in a pmhash-slices process built against 0129fda
(scripts/slices-at.sh) and the new one in this tree's pmhash-slices, slice by slice
(bench/README.md, "Two builds"), --rounds times at each thread count, and prints a
Markdown table: per phase the median (min-max) of the runs' ratios (new over old; above
1: the new engine faster) and, where the pair has a bar, the median as a fraction of it.

  scripts/bars.py [--rounds 3] [--threads 1,2] [--records 10000000] [--ops 2000000]
                  [--only ISSUE] [--old-slices PATH] [--json-dir DIR]

--old-slices defaults to building one at /tmp/pmhash-0129fda; a run of the script's own
test passes this tree's binary instead (both sides then the same build). A second table
gives each side's throughput (Mops/s, per run the median slice of both orders, then the
median of the runs) under a line naming the host (CPU model, L2 per core, page size):
the bars are ratios taken on another host, and how far a host's memory chain dominates
(page walks, cache sizes) moves them. Exit 0, or 1 if a run failed (its output is printed).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ["insert", "search", "negative", "delete"]

# (issue, new engine, its options, old engine, {threads: bar per phase or None}); the
# bars as the issues state them (level's: the original's figures on an earlier machine
# over wophi's on this one, BENCHMARKS.md "level on the yardstick").
PAIRS = [
    ("31", "cceh", ["segments=64"], "wophi", {1: (1.44, 0.96, 1.21, 1.28)}),
    ("31", "cceh", ["segments=64"], "linear", {1: (1.42, 1.02, 0.96, 2.7)}),
    ("31", "cceh", ["segments=64", "free_slots_first=on"], "wophi", {1: (1.44, 0.96, 1.21, 1.28)}),
    ("31", "cceh", ["segments=64", "free_slots_first=on"], "linear", {1: (1.42, 1.02, 0.96, 2.7)}),
    ("31", "cceh", ["segments=64", "dram_directory=on"], "wophi", {1: (1.44, 0.96, 1.21, 1.28)}),
    ("31", "cceh", ["segments=64", "dram_directory=on"], "linear", {1: (1.42, 1.02, 0.96, 2.7)}),
    ("32", "dash", ["segments=64"], "wophi", {1: (1.67, 1.38, 2.65, 1.52)}),
    ("32", "level", [], "wophi", {1: (0.65, 1.41, 1.45, 0.84)}),
    ("30", "spash", ["filter=on", "hint=on"], "wophi",
     {1: (2.2, 4.0, None, 2.0), 2: (2.0, 4.4, None, 1.9)}),
    ("30", "spash", ["filter=on", "hint=on"], "smartht",
     {1: (None, None, 2.4, None), 2: (None, None, 2.2, None)}),
    ("", "wophi", [], "wophi", {}),  # how far the yardstick itself has moved
]


def run_pair(args, pair, threads, json_path):
    _, new, options, old, _ = pair
    cmd = [os.path.join(args.build, "pmhash"), "bench", "ab",
           "--a-engine", old, "--a-server", args.old_slices,
           "--b-engine", new, "--b-server", os.path.join(args.build, "pmhash-slices"),
           "--records", str(args.records), "--ops", str(args.ops),
           "--slice", str(args.slice), "--phases", ",".join(PHASES),
           "--threads", str(threads), "--lookups", "get",
           "--initial-capacity", str(args.records), "--counters", "off",
           "--json", json_path]
    for o in options:
        cmd += ["--b", o]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(" ".join(cmd) + "\n" + done.stdout + done.stderr)
        return None
    with open(json_path) as f:
        phases = json.load(f)["phases"]
    got = {}
    for p in phases:
        a = [m for o in p["orders"] for m in o["a_mops"]]
        b = [m for o in p["orders"] for m in o["b_mops"]]
        got[p["phase"]] = (p["ratio"], statistics.median(a), statistics.median(b))
    return got


def host_line():
    """The CPU model (family and model numbers too: a hypervisor may show a bare
    name), its L2 per core and the page size, as Linux reports them."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first CPU's fields
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    model = "%s (family %s, model %s)" % (fields.get("model name", "unknown CPU"),
                                          fields.get("cpu family", "?"), fields.get("model", "?"))
    try:
        with open("/sys/devices/system/cpu/cpu0/cache/index2/size") as f:
            l2 = f.read().strip()
    except OSError:
        l2 = "unknown"
    return "host: %s, L2 %s a core, %d-byte pages, %d cores" % (
        model, l2, os.sysconf("SC_PAGE_SIZE"), os.cpu_count())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--ops", type=int, default=2_000_000)
    ap.add_argument("--slice", type=int, default=100_000)
    ap.add_argument("--only", help="one issue's pairs (30, 31 or 32)")
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--old-slices", help="pmhash-slices of 0129fda (default: built)")
    ap.add_argument("--json-dir", default="/tmp/pmhash-bars")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds: at least 1")
    threads = [int(t) for t in args.threads.split(",")]
    pairs = [p for p in PAIRS if args.only is None or p[0] == args.only]
    if not pairs:
        ap.error("--only: no pairs for issue %s" % args.only)
    if args.old_slices is None:
        args.old_slices = subprocess.run(
            [os.path.join(ROOT, "scripts", "slices-at.sh"), "0129fda", "/tmp/pmhash-0129fda"],
            check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    os.makedirs(args.json_dir, exist_ok=True)

    ratios = {}  # (pair index, threads) -> list of {phase: ratio}
    failed = False
    for r in range(args.rounds):
        for t in threads:
            for i, pair in enumerate(pairs):
                path = os.path.join(args.json_dir, "%d-%s-%s-t%d-r%d.json" % (i, pair[1], pair[3], t, r + 1))
                got = run_pair(args, pair, t, path)
                if got is None:
                    failed = True
                    continue
                ratios.setdefault((i, t), []).append(got)

    print("| issue | new / old (at 0129fda) | threads | runs | " + " | ".join(PHASES) + " |")
    print("|---|---|---|---|" + "---|" * len(PHASES))
    for i, pair in enumerate(pairs):
        issue, new, options, old, bars = pair
        for t in threads:
            runs = ratios.get((i, t), [])
            if not runs:
                continue
            cells = []
            for k, phase in enumerate(PHASES):
                v = [run[phase][0] for run in runs]
                cell = "%.2f (%.2f-%.2f)" % (statistics.median(v), min(v), max(v))
                bar = bars.get(t, (None,) * len(PHASES))[k]
                if bar is not None:
                    cell += ", %.2fx of %.2f" % (statistics.median(v) / bar, bar)
                cells.append(cell)
            name = new + ("" if not options else " (" + ",".join(options) + ")")
            print("| %s | %s / %s | %d | %d | %s |" % (issue or "-", name, old, t, len(runs),
                                                  " | ".join(cells)))

    print()
    print(host_line())
    print()
    print("| issue | new / old (at 0129fda) | threads | runs | " +
          " | ".join(p + " Mops/s, new / old" for p in PHASES) + " |")
    print("|---|---|---|---|" + "---|" * len(PHASES))
    for i, pair in enumerate(pairs):
        issue, new, options, old, _ = pair
        for t in threads:
            runs = ratios.get((i, t), [])
            if not runs:
                continue
            cells = ["%.2f / %.2f" % (statistics.median(run[phase][2] for run in runs),
                                      statistics.median(run[phase][1] for run in runs))
                     for phase in PHASES]
            name = new + ("" if not options else " (" + ",".join(options) + ")")
            print("| %s | %s / %s | %d | %d | %s |" % (issue or "-", name, old, t, len(runs),
                                                  " | ".join(cells)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
