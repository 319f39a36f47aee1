"""Reading `pmhash bench --json` files (bench/plot.py and scripts/bench-tables.py use it).

    from pmhash import bench
    doc = bench.load("results/main.json")
    for row in bench.rows(doc, phase="search"):
        print(row["engine"], row["threads"], row["mops"])

Pure Python: it needs no native module, so it works from the source tree
(sys.path.insert(0, "python")) as well as from an installed package.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, Optional

__all__ = ["load", "rows"]

REQUIRED = ("config", "machine", "results")


def load(path: str) -> Dict[str, Any]:
    """The result document at path: a dict with config, machine, results (one row per
    engine, thread count, phase and run; the median round's figures, with mops_range and
    samples when --repeat was above 1), floor, rounds and stability. ValueError if the
    file is not a pmhash bench --json file; OSError if it cannot be read."""
    with open(path, encoding="utf-8") as f:
        try:
            doc = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e})") from e
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a pmhash bench --json file (not an object)")
    for field in REQUIRED:
        if field not in doc:
            raise ValueError(f"{path} has no '{field}': not a pmhash bench --json file")
    return doc


def rows(doc: Dict[str, Any], engine: Optional[str] = None, phase: Optional[str] = None,
         threads: Optional[int] = None, run: Optional[str] = None) -> Iterator[Dict[str, Any]]:
    """The result rows of doc that match every filter given, in the file's order."""
    for r in doc["results"]:
        if engine is not None and r.get("engine") != engine:
            continue
        if phase is not None and r.get("phase") != phase:
            continue
        if threads is not None and r.get("threads") != threads:
            continue
        if run is not None and r.get("run") != run:
            continue
        yield r
