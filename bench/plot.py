#!/usr/bin/python3
"""Turns `pmhash bench --json` results into one PNG of charts like the papers' figures.

    /usr/bin/python3 bench/plot.py results/main.json -o results/main.png

Panels: throughput per engine and phase; mean latency per engine and phase (the papers'
"average latency of requesting an item"); latency percentiles p50..p99.99 per engine
(log scale); flushes per operation; PM bytes stored per operation; load factor (from the
fill phase where there is one: the papers' space utilization). Null figures (an engine
that cannot report one) are left out, never drawn as zero.
"""
import argparse
import json
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # pragma: no cover - depends on the machine
    sys.exit("plot.py: matplotlib is missing (make deps installs python3-matplotlib)")

PERCENTILES = [("p50", "50"), ("p90", "90"), ("p99", "99"), ("p999", "99.9"), ("p9999", "99.99")]


def load(path):
    with open(path) as f:
        doc = json.load(f)
    for field in ("config", "machine", "results"):
        if field not in doc:
            sys.exit(f"plot.py: {path} has no '{field}': not a pmhash bench --json file")
    return doc


def engines_in_order(results):
    seen = []
    for r in results:
        if r["engine"] not in seen:
            seen.append(r["engine"])
    return seen


def categories(results):
    """(run, threads, phase) keys in first-seen order, with short labels."""
    keys = []
    for r in results:
        k = (r.get("run", ""), r["threads"], r["phase"])
        if k not in keys:
            keys.append(k)
    runs = {k[0] for k in keys}
    threads = {k[1] for k in keys}
    labels = []
    for run, t, phase in keys:
        parts = []
        if len(runs) > 1:
            parts.append(run)
        parts.append(phase)
        if len(threads) > 1:
            parts.append(f"t{t}")
        labels.append("\n".join(parts) if len(runs) > 1 else " ".join(parts))
    return keys, labels


def lookup(results, engine, key):
    for r in results:
        if r["engine"] == engine and (r.get("run", ""), r["threads"], r["phase"]) == key:
            return r
    return None


def grouped_bars(ax, results, engines, keys, labels, value, title, ylabel, log=False,
                 annotate=False):
    n = len(engines)
    width = 0.8 / max(n, 1)
    drawn = False
    for i, engine in enumerate(engines):
        xs, ys = [], []
        for j, key in enumerate(keys):
            r = lookup(results, engine, key)
            v = value(r) if r is not None else None
            if v is not None:
                xs.append(j - 0.4 + width * (i + 0.5))
                ys.append(v)
        if xs:
            bars = ax.bar(xs, ys, width, label=engine)
            if annotate:
                ax.bar_label(bars, labels=[f"{y:.2f}" for y in ys], fontsize=7)
            drawn = True
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(labels, fontsize=7, rotation=0 if len(keys) <= 8 else 60)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=8)
    if log and drawn:
        ax.set_yscale("log")
    if not drawn:
        ax.text(0.5, 0.5, "not reported", ha="center", va="center", transform=ax.transAxes)
    ax.grid(axis="y", alpha=0.3)


def per_op(field):
    return lambda r: r.get(field)


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
    measured = [(k, l) for k, l in zip(keys, labels) if k[2] != "fill"]
    mkeys = [k for k, _ in measured] or keys
    mlabels = [l for _, l in measured] or labels

    fig, axes = plt.subplots(2, 3, figsize=(18, 9.5))
    cfg = doc["config"]
    machine = doc["machine"]
    title = cfg.get("scenario") or "pmhash bench"
    sub = (f"{machine.get('cpu', '?')} · {machine.get('build_type', '?')} · persist "
           f"{cfg.get('persist', '?')} ({cfg.get('flush', '?')}), write latency "
           f"{cfg.get('write_latency_ns', 0)} ns · {cfg.get('records', '?')} records · "
           f"dist {cfg.get('dist', '?')} · key {cfg.get('key_size', '?')} B, value "
           f"{cfg.get('value_size', '?')} B")
    fig.suptitle(f"{title}\n{sub}", fontsize=11)

    grouped_bars(axes[0][0], results, engines, mkeys, mlabels, lambda r: r.get("mops"),
                 "Throughput", "Mops/s")
    grouped_bars(axes[0][1], results, engines, mkeys, mlabels,
                 lambda r: (r.get("latency_ns") or {}).get("mean"),
                 "Average latency per request", "ns", log=True)

    # Latency percentiles: one line per engine and phase (up to 4 phases, by linestyle).
    ax = axes[0][2]
    styles = ["-", "--", ":", "-."]
    phases = []
    for k in mkeys:
        if k[2] not in phases:
            phases.append(k[2])
    # The papers' three requests first (insert, query, delete), then the rest.
    preferred = [p for p in ("load", "search", "delete") if p in phases]
    phases = preferred + [p for p in phases if p not in preferred]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = False
    first_key = {}
    for k in mkeys:
        first_key.setdefault(k[2], k)
    for pi, phase in enumerate(phases[:3]):
        for ei, engine in enumerate(engines):
            r = lookup(results, engine, first_key[phase])
            if r is None:
                continue
            lat = r.get("latency_ns") or {}
            pts = [(i, lat.get(name)) for i, (name, _) in enumerate(PERCENTILES)]
            pts = [(x, y) for x, y in pts if y]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[pi],
                        color=colors[ei % len(colors)], marker="o", markersize=3,
                        label=f"{engine} {phase}")
                drawn = True
    ax.set_xticks(range(len(PERCENTILES)))
    ax.set_xticklabels([f"p{p}" for _, p in PERCENTILES], fontsize=8)
    if drawn:
        ax.set_yscale("log")
        ax.legend(fontsize=6, ncol=2)
    ax.set_title("Latency percentiles" + (f" ({first_key[phases[0]][0]})" if phases and
                                           len({k[0] for k in mkeys}) > 1 else ""),
                 fontsize=10)
    ax.set_ylabel("ns", fontsize=8)
    ax.grid(alpha=0.3)

    grouped_bars(axes[1][0], results, engines, mkeys, mlabels, per_op("flushes_per_op"),
                 "Cache-line flushes per operation", "flushes/op")
    grouped_bars(axes[1][1], results, engines, mkeys, mlabels, per_op("pm_bytes_written_per_op"),
                 "PM bytes stored per operation", "bytes/op")

    # Load factor: the fill phase (space utilization) where present, else after load.
    lf_keys = [k for k in keys if k[2] == "fill"]
    if not lf_keys:
        lf_keys = [k for k in keys if k[2] == "load"]
    lf_labels = [labels[keys.index(k)] for k in lf_keys]
    grouped_bars(axes[1][2], results, engines, lf_keys, lf_labels, per_op("load_factor"),
                 "Load factor (fill: at the first refused insert)", "keys / key slots",
                 annotate=True)
    axes[1][2].set_ylim(0, 1.12)

    handles, names = axes[0][0].get_legend_handles_labels()
    if not handles:
        handles, names = axes[1][2].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper right", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.93, 0.93))
    fig.savefig(out, dpi=110)
    print(f"plot.py: wrote {out}")


if __name__ == "__main__":
    main()
