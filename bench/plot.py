#!/usr/bin/python3
"""Turns `pmhash bench --json` results into one PNG of charts like the papers' figures.

    /usr/bin/python3 bench/plot.py results/main.json -o results/main.png

Panels: throughput per engine and phase (the median over --repeat rounds, with min-max
error bars); mean latency per engine and phase (the papers'
"average latency of requesting an item"); latency CDF per engine for the papers' request
types (insert, search, negative search, delete; tail on a "nines" scale, from the
`latency_cdf` field, else the p50..p99.99 points); flushes per operation; fences per
operation (or redundant flushes and fences when measured with --redundancy); PM bytes
stored per operation; PM lines read per operation; load factor (the fill phase where
there is one: the papers' space utilization); recovery and reopen time (or the filter's
false-positive rate). Null figures (an engine that cannot report one) are left out, never
drawn as zero. A phase that repeats in --phases is a category of its own (phase_index).
"""
import argparse
import math
import os
import sys

# The result loader is the Python package's (python/pmhash/bench.py: pure Python, so the
# source tree serves without the native module built).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from pmhash import bench  # noqa: E402

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover - depends on the machine
    sys.exit("plot.py: matplotlib is missing (make deps installs python3-matplotlib)")

PERCENTILES = [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999), ("p9999", 0.9999)]
# The papers' request types, in their order, for the latency CDF.
CDF_PHASES = ["load", "prefill", "search", "negative", "delete", "update", "mixed"]


def load(path):
    try:
        return bench.load(path)
    except (OSError, ValueError) as e:
        sys.exit(f"plot.py: {e}")


def engines_in_order(results):
    seen = []
    for r in results:
        if r["engine"] not in seen:
            seen.append(r["engine"])
    return seen


def key_of(r):
    # phase_index tells repeated phases apart, batch a MultiGet row from its Get row;
    # older files lack them (one row per phase then).
    return (r.get("run", ""), r["threads"], r.get("phase_index", r["phase"]), r["phase"],
            r.get("batch", 1))


def categories(results):
    """(run, threads, phase_index, phase, batch) keys in first-seen order, with short
    labels."""
    keys = []
    for r in results:
        k = key_of(r)
        if k not in keys:
            keys.append(k)
    runs = {k[0] for k in keys}
    threads = {k[1] for k in keys}
    repeated = {}
    for k in keys:
        repeated.setdefault((k[0], k[1], k[3]), set()).add(k[2])
    labels = []
    for run, t, index, phase, batch in keys:
        parts = []
        if len(runs) > 1:
            parts.append(run)
        name = phase
        if len(repeated[(run, t, phase)]) > 1 and isinstance(index, int):
            name += f" #{index + 1}"
        if batch > 1:
            name += f" (batch {batch})"
        parts.append(name)
        if len(threads) > 1:
            parts.append(f"t{t}")
        labels.append("\n".join(parts) if len(runs) > 1 else " ".join(parts))
    return keys, labels


def lookup(results, engine, key):
    for r in results:
        if r["engine"] == engine and key_of(r) == key:
            return r
    return None


def mops_range(r):
    """(min, max) of Mops/s over the rounds (--repeat), or None for one round / old files."""
    rng = r.get("mops_range")
    if not rng or len(rng.get("samples") or []) < 2:
        return None
    return rng["min"], rng["max"]


def grouped_bars(ax, results, engines, keys, labels, value, title, ylabel, log=False,
                 annotate=False, spread=None):
    """spread(r) -> (min, max) or None: drawn as an error bar around the bar's value."""
    n = len(engines)
    width = 0.8 / max(n, 1)
    drawn = False
    for i, engine in enumerate(engines):
        xs, ys, lo, hi = [], [], [], []
        for j, key in enumerate(keys):
            r = lookup(results, engine, key)
            v = value(r) if r is not None else None
            if v is not None and (not log or v > 0):
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(v)
                rng = spread(r) if spread else None
                lo.append(v - rng[0] if rng else 0)
                hi.append(rng[1] - v if rng else 0)
        if xs:
            err = [lo, hi] if any(lo) or any(hi) else None
            bars = ax.bar(xs, ys, width, label=engine, yerr=err, capsize=2 if err else 0,
                          error_kw={"elinewidth": 0.8})
            if annotate:
                ax.bar_label(bars, labels=[f"{y:.2f}" for y in ys], fontsize=6)
            drawn = True
    ax.set_xticks(range(len(keys)))
    if len(keys) <= 8:
        ax.set_xticklabels(labels, fontsize=7)
    else:  # many categories: one rotated line each
        ax.set_xticklabels([l.replace("\n", " ") for l in labels], fontsize=6, rotation=60,
                           ha="right", rotation_mode="anchor")
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=8)
    if log and drawn:
        ax.set_yscale("log")
    if not drawn:
        ax.text(0.5, 0.5, "not reported", ha="center", va="center", transform=ax.transAxes)
    ax.grid(axis="y", alpha=0.3)
    return drawn


def field(name):
    return lambda r: r.get(name)


def nines(q):
    """Quantile -> 'nines' axis: 0.9 -> 1, 0.99 -> 2, 0.999 -> 3."""
    return -math.log10(max(1.0 - q, 1e-9))


def cdf_points(r):
    cdf = r.get("latency_cdf")
    if cdf and cdf.get("quantiles"):
        pts = [(q, ns) for q, ns in zip(cdf["quantiles"], cdf["ns"]) if q < 1 and ns]
    else:
        lat = r.get("latency_ns") or {}
        pts = [(q, lat.get(name)) for name, q in PERCENTILES if lat.get(name)]
    return pts


def latency_cdf(ax, results, engines, keys):
    """One line per engine and request type (the first occurrence of each type)."""
    first = {}
    for k in keys:
        if k[3] in CDF_PHASES:
            first.setdefault(k[3], k)
    phases = [p for p in CDF_PHASES if p in first][:4]
    styles = ["-", "--", ":", "-."]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = False
    for pi, phase in enumerate(phases):
        for ei, engine in enumerate(engines):
            r = lookup(results, engine, first[phase])
            if r is None:
                continue
            pts = cdf_points(r)
            if len(pts) < 2:
                continue
            ax.plot([p[1] for p in pts], [nines(p[0]) for p in pts], styles[pi],
                    color=colors[ei % len(colors)], marker="." if len(pts) < 8 else None,
                    linewidth=1.2, label=f"{engine} {phase}")
            drawn = True
    ticks = [0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999]
    ax.set_yticks([nines(q) for q in ticks])
    ax.set_yticklabels([f"{q * 100:g}" for q in ticks], fontsize=7)
    ax.set_xlabel("latency, ns (log)", fontsize=8)
    ax.set_ylabel("percentile", fontsize=8)
    where = ""
    if phases and len({k[0] for k in keys}) > 1:
        where = f" (run {first[phases[0]][0]})"
    ax.set_title("Latency CDF, tail on a nines scale" + where, fontsize=10)
    if drawn:
        ax.set_xscale("log")
        ax.legend(fontsize=5.5, ncol=2)
    else:
        ax.text(0.5, 0.5, "no latency samples", ha="center", va="center",
                transform=ax.transAxes)
    ax.grid(alpha=0.3)


def subtitle(doc):
    """The settings every run shares, and which ones vary by run (named in the labels)."""
    cfg = doc["config"]
    machine = doc["machine"]
    runs = cfg.get("runs") or [cfg]

    def values(name):
        seen = []
        for run in runs:
            v = run.get(name, cfg.get(name))
            if isinstance(v, list):
                v = ",".join(str(x) for x in v)
            if v not in seen:
                seen.append(v)
        return seen

    parts, varying = [], []
    shown = [("persist", "persist {}"), ("flush", "flush {}"),
             ("write_latency_ns", "write latency {} ns"), ("records", "{} records"),
             ("ops", "{} ops/phase"), ("threads", "threads {}"), ("dist", "dist {}"),
             ("key_size", "key {} B"), ("value_size", "value {} B"),
             ("load_factor", "load factor {}")]
    for name, fmt in shown:
        vs = values(name)
        if len(vs) == 1:
            if vs[0] is not None:
                parts.append(fmt.format(vs[0]))
        else:
            varying.append(name)
    line1 = f"{machine.get('cpu', '?')} · {machine.get('build_type', '?')}"
    line2 = " · ".join(parts)
    if varying:
        line2 += " · per run: " + ", ".join(varying)
    return line1 + "\n" + line2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="results of pmhash bench --json")
    parser.add_argument("-o", "--output", help="PNG to write (default: JSON path with .png)")
    args = parser.parse_args()
    doc = load(args.json)
    results = doc["results"]
    if not results:
        sys.exit(f"plot.py: {args.json} holds no results")
    out = args.output or (args.json[:-5] if args.json.endswith(".json") else args.json) + ".png"
    engines = engines_in_order(results)
    keys, labels = categories(results)
    measured = [(k, l) for k, l in zip(keys, labels) if k[3] != "fill"]
    mkeys = [k for k, _ in measured] or keys
    mlabels = [l for _, l in measured] or labels
    width = max(18, min(30, 6 + 0.5 * len(mkeys) * max(1, len(engines)) / 3))

    fig, axes = plt.subplots(3, 3, figsize=(width, 14))
    cfg = doc["config"]
    title = cfg.get("scenario") or "pmhash bench"
    fig.suptitle(f"{title}\n{subtitle(doc)}", fontsize=10)

    rounds = max((r.get("rounds") or 1) for r in results)
    grouped_bars(axes[0][0], results, engines, mkeys, mlabels, field("mops"),
                 "Throughput" + (f" (median of {rounds} rounds, bars: min-max)"
                                 if rounds > 1 else ""), "Mops/s", spread=mops_range)
    grouped_bars(axes[0][1], results, engines, mkeys, mlabels,
                 lambda r: (r.get("latency_ns") or {}).get("mean"),
                 "Average latency per request", "ns", log=True)
    latency_cdf(axes[0][2], results, engines, mkeys)

    grouped_bars(axes[1][0], results, engines, mkeys, mlabels, field("flushes_per_op"),
                 "Cache-line flushes per operation", "flushes/op")
    redundancy = any(r.get("redundant_flushes_per_op") is not None for r in results)
    if redundancy:
        grouped_bars(axes[1][1], results, engines, mkeys, mlabels,
                     lambda r: (r.get("redundant_flushes_per_op") or 0) +
                     (r.get("redundant_fences_per_op") or 0)
                     if r.get("redundant_flushes_per_op") is not None else None,
                     "Redundant flushes + fences per operation (crash simulator)", "per op")
    else:
        grouped_bars(axes[1][1], results, engines, mkeys, mlabels, field("fences_per_op"),
                     "Fences per operation", "fences/op")
    grouped_bars(axes[1][2], results, engines, mkeys, mlabels, field("pm_bytes_written_per_op"),
                 "PM bytes stored per operation", "bytes/op")

    grouped_bars(axes[2][0], results, engines, mkeys, mlabels, field("pm_lines_read_per_op"),
                 "PM cache lines read per operation", "lines/op")

    # Load factor: the fill phase (space utilization) where present, else after load.
    lf_keys = [k for k in keys if k[3] == "fill"]
    lf_title = "Load factor (fill: at the first refused insert)"
    if not lf_keys:
        lf_keys = [k for k in keys if k[3] in ("prefill", "load")]
        lf_title = "Load factor after the phase"
    lf_labels = [labels[keys.index(k)] for k in lf_keys]
    grouped_bars(axes[2][1], results, engines, lf_keys, lf_labels, field("load_factor"),
                 lf_title, "keys / key slots", annotate=len(lf_keys) * len(engines) <= 24)
    axes[2][1].set_ylim(0, 1.15)

    # Recovery where measured (one figure per engine, thread count and run: the first
    # non-fill row carries it), else the filter's false-positive rate.
    rec_keys = []
    for k in keys:
        if k[3] != "fill" and not any(x[:2] == k[:2] for x in rec_keys):
            rec_keys.append(k)
    many_runs = len({k[0] for k in keys}) > 1
    many_threads = len({k[1] for k in keys}) > 1
    rec_labels = ["\n".join(([k[0]] if many_runs else []) +
                            ([f"t{k[1]}"] if many_threads else [])) or "index"
                  for k in rec_keys]
    ax = axes[2][2]
    if any(r.get("recovery_ms") is not None or r.get("reopen_ms") is not None for r in results):
        clean = any(r.get("reopen_ms") is not None for r in results)
        grouped_bars(ax, results, engines, rec_keys, rec_labels, field("recovery_ms"),
                     "Recovery after an unclean close" +
                     (" (clean reopen: hatched)" if clean else ""), "ms", log=True)
        if clean:
            n = len(engines)
            w = 0.8 / max(n, 1)
            for i, engine in enumerate(engines):
                xs, ys = [], []
                for j, k in enumerate(rec_keys):
                    r = lookup(results, engine, k)
                    if r is not None and r.get("reopen_ms"):
                        xs.append(j - 0.4 + w * (i + 0.5))
                        ys.append(r["reopen_ms"])
                if xs:
                    ax.bar(xs, ys, w * 0.5, fill=False, hatch="///", edgecolor="black")
    elif any(r.get("false_positive_rate") is not None for r in results):
        neg = [k for k in keys if k[3] == "negative"]
        grouped_bars(ax, results, engines, neg, [labels[keys.index(k)] for k in neg],
                     field("false_positive_rate"), "Filter false-positive rate (negative)",
                     "rate")
    else:
        ax.set_axis_off()
        ax.set_title("Recovery", fontsize=10)
        ax.text(0.5, 0.5, "not measured (DRAM pool or --recovery off)", ha="center",
                va="center", transform=ax.transAxes)

    handles, names = axes[0][0].get_legend_handles_labels()
    if not handles:
        handles, names = axes[2][1].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper right", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.94, 0.94))
    fig.savefig(out, dpi=100)
    print(f"plot.py: wrote {out}")


if __name__ == "__main__":
    main()
