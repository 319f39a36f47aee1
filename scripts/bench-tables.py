#!/usr/bin/env python3
"""Writes BENCHMARKS.md's scenario tables from the scenarios' result JSON.

A table in BENCHMARKS.md is a block between two markers:

    <!-- table: group-fig5 -->
    ...written by this script...
    <!-- end table: group-fig5 -->

and is made from bench/results/group-fig5.json (what `pmhash bench --scenario group-fig5
--json ...` wrote) and bench/scenarios/group-fig5.json (the paper's lines, the metrics):
the command, the commit, the machine, one row per run, phase and thread count, one column
per engine, each figure the median over the rounds with its range (min-max) and, for
throughput, the per-round ratio to the first engine; then the paper's lines beside it.
Nothing in a block is typed by hand, so no figure can drift from its JSON.

    scripts/bench-tables.py               # rewrite every block whose JSON exists
    scripts/bench-tables.py --check       # exit 1 if a block differs from its JSON, or a
                                          # block's JSON is missing (a test runs this)
    scripts/bench-tables.py --one-commit  # also exit 1 if the blocks' JSON come from more
                                          # than one commit
    scripts/bench-tables.py --results DIR --doc FILE   # other places (tests)

A scenario chooses its figures with an optional "table" member:
    "table": {"metrics": ["mops", "latency_ns.mean", "flushes_per_op"],
              "phases": ["load", "search"]}
metrics: paths into a result row (default ["mops"]); phases: which phases (default all).
`make paper-figures` reruns every paper scenario into bench/results/ and then this script.
"""

import argparse
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
from pmhash import bench  # noqa: E402  (the result loader: python/pmhash/bench.py)
BLOCK = re.compile(r"<!-- table: (?P<name>[A-Za-z0-9_.-]+) -->\n(?P<body>.*?)"
                   r"<!-- end table: (?P=name) -->", re.S)

# How each metric is named in a table and printed.
LABELS = {
    "mops": ("Mops/s", "{:.2f}"),
    "latency_ns.mean": ("mean ns", "{:.0f}"),
    "latency_ns.p50": ("p50 ns", "{:.0f}"),
    "latency_ns.p99": ("p99 ns", "{:.0f}"),
    "latency_ns.p999": ("p99.9 ns", "{:.0f}"),
    "latency_ns.p9999": ("p99.99 ns", "{:.0f}"),
    "flushes_per_op": ("flushes/op", "{:.2f}"),
    "fences_per_op": ("fences/op", "{:.2f}"),
    "pm_bytes_written_per_op": ("PM bytes written/op", "{:.1f}"),
    "pm_lines_read_per_op": ("PM lines read/op", "small"),
    "pm_lines_written_per_op": ("PM lines written/op", "small"),
    "media_writes_per_op": ("media lines written/op", "small"),
    "redundant_flushes_per_op": ("redundant flushes/op", "small"),
    "redundant_fences_per_op": ("redundant fences/op", "small"),
    "media_reads_per_op": ("media lines read/op", "small"),
    "media_write_amp": ("media write amp", "{:.2f}"),
    "load_factor": ("load factor", "{:.3f}"),
    "recovery_ms": ("recovery ms", "{:.1f}"),
    "recovery_open_ms": ("Open after a crash, ms", "{:.1f}"),
    "reopen_ms": ("clean reopen ms", "{:.1f}"),
    "seconds": ("seconds", "{:.2f}"),
    "false_positive_rate": ("false-positive rate", "{:.3g}"),
    "pm_bytes_per_key": ("PM B/key", "{:.1f}"),
    "dram_bytes_per_key": ("DRAM B/key", "{:.1f}"),
    "pm_mib": ("PM MiB", "{:.1f}"),
    "dram_mib": ("DRAM MiB", "{:.2f}"),
}


# Figures computed from a row's fields: name -> (numerator, denominator, scale).
DERIVED = {
    "pm_bytes_per_key": ("pm_bytes", "count", 1),
    "dram_bytes_per_key": ("dram_bytes", "count", 1),
    "pm_mib": ("pm_bytes", None, 1 / 2**20),
    "dram_mib": ("dram_bytes", None, 1 / 2**20),
}


def lookup(row, path):
    """The value at a dotted path of a row (or a DERIVED figure), or None."""
    if path in DERIVED:
        num, den, scale = DERIVED[path]
        n = lookup(row, num)
        d = 1 if den is None else lookup(row, den)
        return None if n is None or not d else n / d * scale
    v = row
    for part in path.split("."):
        if not isinstance(v, dict) or part not in v:
            return None
        v = v[part]
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class Small:
    """Two decimals, or three significant digits below 0.01 (a rate near zero)."""

    @staticmethod
    def format(v):
        return "{:.3g}".format(v) if 0 < abs(v) < 0.01 else "{:.2f}".format(v)


def label(metric):
    name, fmt = LABELS.get(metric, (metric, "{:.3g}"))
    return name, Small if fmt == "small" else fmt


def figure(row, metric):
    """'median (min-max)' over the row's rounds, or the one value; 'n/a' for null."""
    fmt = label(metric)[1]
    samples = [lookup(s, metric) for s in row.get("samples") or []]
    samples = [s for s in samples if s is not None]
    if metric == "mops" and isinstance(row.get("mops_range"), dict):
        r = row["mops_range"]
        med, lo, hi, n = r["median"], r["min"], r["max"], len(r.get("samples") or [])
    elif len(samples) >= 2:
        samples.sort()
        med = lookup(row, metric)
        lo, hi, n = samples[0], samples[-1], len(samples)
        if med is None:
            return "n/a"
    else:
        med = lookup(row, metric)
        if med is None:
            return "n/a"
        return fmt.format(med)
    text = fmt.format(med)
    if n >= 2:
        text += " ({}-{})".format(fmt.format(lo), fmt.format(hi))
    ratio = row.get("ratio_to_first")
    if metric == "mops" and isinstance(ratio, dict) and ratio.get("median") is not None:
        text += ", {:.2f}x".format(ratio["median"])
        if ratio.get("min") is not None and ratio.get("max") is not None and \
                ratio["max"] != ratio["min"]:
            text += " ({:.2f}-{:.2f})".format(ratio["min"], ratio["max"])
    return text


def machine_line(doc):
    m = doc.get("machine", {})
    load = m.get("load_average_start")
    load_text = (" load {:.2f} at the start;".format(load[0])
                 if isinstance(load, list) and load else "")
    return ("{cpu}, {cores} cores, {kernel}; {build} build; flushes: {flush};{load} "
            "{date}").format(cpu=m.get("cpu", "?"), cores=m.get("cores", "?"),
                             kernel=m.get("kernel", "?"),
                             build=m.get("cmake_build_type", m.get("build_type", "?")),
                             flush=(m.get("flush_instructions") or "?").strip(),
                             load=load_text, date=m.get("date", "?"))


def render(name, doc, scenario):
    """The block's text for one scenario's result document."""
    table = scenario.get("table") or {}
    metrics = table.get("metrics") or ["mops"]
    phases = table.get("phases")
    rows = [r for r in doc.get("results", []) if phases is None or r.get("phase") in phases]
    engines = []
    for r in rows:
        if r["engine"] not in engines:
            engines.append(r["engine"])
    keys = []
    cells = {}
    for r in rows:
        key = (r.get("run") or "", r.get("phase_index", 0), r["phase"], r["threads"],
               r.get("batch", 1))
        if key not in keys:
            keys.append(key)
        cells[key + (r["engine"],)] = r
    rounds = doc.get("stability", {}).get("rounds") or 1
    out = []
    m = doc.get("machine", {})
    config = doc.get("config") or {}
    out.append("Written by `scripts/bench-tables.py` from `bench/results/{0}.json`: "
               "`pmhash bench --scenario {0} --json bench/results/{0}.json` at commit `{1}` "
               "({2}).".format(name, m.get("commit", "?"), machine_line(doc)))
    if config.get("scenario_args"):
        out.append("")
        out.append("Its arguments: `{}`".format(config["scenario_args"]))
        runs = [r for r in config.get("scenario_runs") or [] if r.get("args")]
        for r in runs:
            out.append("- run `{}`: `{}`".format(r.get("label", "?"), r["args"]))
    out.append("")
    if rounds >= 2:
        out.append("{} rounds; each figure is the median over the rounds (min-max){}.".format(
            rounds, "" if "mops" not in metrics or len(engines) < 2 else
            "; Mops/s also as the ratio to {} per round, median (min-max)".format(engines[0])))
    else:
        out.append("One round: each figure is that round's.")
    out.append("")
    # Rows in each run's phase order; a phase that runs more than once is numbered.
    run_order = {}
    for k in keys:
        run_order.setdefault(k[0], len(run_order))
    keys.sort(key=lambda k: (run_order[k[0]], k[1], k[3], k[4] or 1))
    repeated = {(k[0], k[2]) for k in keys
                if len({j[1] for j in keys if j[0] == k[0] and j[2] == k[2]}) > 1}
    multi_run = len({k[0] for k in keys}) > 1
    # One engine: a column per figure; several: a column per engine, a row per figure.
    by_metric = len(engines) == 1
    head = (["run"] if multi_run else []) + ["phase", "threads"]
    head += ([label(m)[0] + " (" + engines[0] + ")" for m in metrics] if by_metric
             else ["figure"] + engines)
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for key in keys:
        run, index, phase, threads, batch = key
        name = "{} {}".format(phase, index + 1) if (run, phase) in repeated else phase
        start = ([run] if multi_run else []) + [
            name if batch in (None, 1) else "{} (batch {})".format(name, batch),
            str(threads)]
        if by_metric:
            r = cells[key + (engines[0],)]
            out.append("| " + " | ".join(start + [figure(r, m) for m in metrics]) + " |")
            continue
        for metric in metrics:
            line = start + [label(metric)[0]]
            for e in engines:
                r = cells.get(key + (e,))
                line.append(figure(r, metric) if r is not None else "")
            out.append("| " + " | ".join(line) + " |")
    paper = config.get("paper") or scenario.get("paper") or []
    if isinstance(paper, str):
        paper = [paper]
    if paper:
        out.append("")
        out.append("The paper, beside it (the scenario's lines as run):")
        out.append("")
        for p in paper:
            out.append("- " + p)
    return "\n".join(out) + "\n"


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--one-commit", action="store_true")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--scenarios", default=os.path.join(ROOT, "bench", "scenarios"))
    ap.add_argument("--doc", default=os.path.join(ROOT, "BENCHMARKS.md"))
    a = ap.parse_args()

    with open(a.doc, encoding="utf-8") as f:
        text = f.read()
    problems, commits = [], {}

    def replace(match):
        name = match.group("name")
        result = os.path.join(a.results, name + ".json")
        scenario_path = os.path.join(a.scenarios, name + ".json")
        if not os.path.exists(scenario_path):
            problems.append("{}: no scenario {}".format(name, scenario_path))
            return match.group(0)
        if not os.path.exists(result):
            problems.append("{}: no result {} (run `make paper-figures`)".format(name, result))
            return match.group(0)
        try:
            doc, scenario = bench.load(result), load(scenario_path)
        except (OSError, ValueError) as e:
            problems.append("{}: {}".format(name, e))
            return match.group(0)
        commits.setdefault(doc.get("machine", {}).get("commit", "?"), []).append(name)
        body = render(name, doc, scenario)
        if a.check and body != match.group("body"):
            problems.append("{}: the table in {} differs from {} (rerun "
                            "scripts/bench-tables.py)".format(name, a.doc, result))
        return "<!-- table: {0} -->\n{1}<!-- end table: {0} -->".format(name, body)

    new_text, blocks = BLOCK.subn(replace, text)
    if a.one_commit and len(commits) > 1:
        problems.append("the tables come from {} commits: {}".format(
            len(commits), "; ".join("{}: {}".format(c, ", ".join(n)) for c, n in
                                    sorted(commits.items()))))
    if not a.check and new_text != text:
        with open(a.doc, "w", encoding="utf-8") as f:
            f.write(new_text)
    for p in problems:
        print("bench-tables: " + p, file=sys.stderr)
    print("bench-tables: {} table(s){}".format(
        blocks, "" if a.check else " written" if new_text != text else ", unchanged"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
