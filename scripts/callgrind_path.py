#!/usr/bin/env python3
"""Instructions per lookup along the public path, from callgrind output files
(scripts/count-instructions.sh runs them; BENCHMARKS.md, issue 29).

  callgrind_path.py RUN.cg BASELINE.cg

RUN.cg profiles a benchmark whose only Index::Get calls are the lookups to count (a
`load,search` or `load,negative` run, or a `load` run with `--floor` for the floor-api
engine); BASELINE.cg the same benchmark without those lookups (`load` alone, without
`--floor`). Prints one line of `name=value` pairs: the lookups counted and, per lookup,
the instructions of each part of the path:

  loop     the benchmark's own per-operation work (workers.cc: key, sampling, checks):
           the self cost of the worker function in RUN minus that in BASELINE
  get      Engine::Get's own code outside the parts below (its frame, the virtual call)
  check    the key check (slot.h, inlined in Get)
  bracket  the operation bracket (Persister::BeginOp / EndOp, persist.h, inlined in Get)
  hash     HashKey (Hash64 and xxhash, in or out of line)
  status   building, moving and destroying the Status (status.h, unique_ptr.h), in the
           engine's code and in Get
  copy     copying the value into the caller's string (basic_string, char_traits,
           memcpy), wherever under Get
  doget    the rest of the engine's DoGet, inclusive: its probe, locks and counters
  total    everything from the call into Index::Get to its return (get .. doget)

Attribution is by the source file of each instruction (the binary needs -g: inlined
code keeps its file), so it needs a build with debug info; -g does not change the code
GCC generates.
"""
import re
import sys
from collections import defaultdict

# The benchmark loop: the worker lambda of RunWorkers, and the loops it calls if the
# compiler kept them out of line (workers.cc).
WORKER = re.compile(r"RunWorkers\(.*_M_invoke|bench::\(anonymous namespace\)::(Worker|Lookups|CheckLookup)\(")
GET = "pmhash::engines::Engine::Get("


def parse(path):
    """Returns (self_cost, calls): self_cost[(fn, file)] = Ir; calls[(caller, callee)] =
    [count, inclusive Ir]."""
    names = {"fn": {}, "fl": {}}
    self_cost = defaultdict(int)
    calls = defaultdict(lambda: [0, 0])
    fn = fl = cur_file = None
    pending_call = None  # (callee, count): the next cost line is its inclusive cost
    cfn = None
    npos = 1

    def name_of(kind, text):
        m = re.match(r"\((\d+)\)(?: (.*))?$", text)
        if not m:
            return text
        key, name = m.group(1), m.group(2)
        table = names["fn" if kind in ("fn", "cfn") else "fl"]
        if name is not None:
            table[key] = name
        return table.get(key, "?")

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if line.startswith("positions:"):
                npos = len(line.split()) - 1
                continue
            if "=" in line and re.match(r"^[a-z]+=", line):
                key, _, value = line.partition("=")
                if key == "fn":
                    fn = name_of("fn", value)
                    cur_file = fl
                elif key == "fl":
                    fl = name_of("fl", value)
                    cur_file = fl
                elif key in ("fi", "fe"):
                    cur_file = name_of("fl", value)
                elif key in ("cfi", "cfl"):
                    name_of("fl", value)
                elif key == "cfn":
                    cfn = name_of("cfn", value)
                elif key == "calls":
                    pending_call = (cfn, int(value.split()[0]))
                # ob, cob, jump, jcnd and the rest: not needed
                continue
            if not (line[0].isdigit() or line[0] in "+-*"):
                continue  # headers (events:, summary:, ...)
            fields = line.split()
            if len(fields) <= npos:
                continue
            cost = int(fields[npos])
            if pending_call is not None:
                callee, count = pending_call
                c = calls[(fn, callee)]
                c[0] += count
                c[1] += cost
                pending_call = None
            else:
                self_cost[(fn, cur_file)] += cost
    return self_cost, calls


def inclusive_tree(self_cost, calls, root_pred):
    """Self cost by (function, file) of everything reachable below functions matching
    root_pred, scaled by how much of each callee's cost comes from those calls. Callgrind
    keeps no per-path costs, so a callee shared with other callers (Hash64, _M_replace)
    is attributed by the share of its inclusive cost its calls from under the root
    carry."""
    fn_self = defaultdict(int)
    by_file = defaultdict(lambda: defaultdict(int))
    for (fn, file), c in self_cost.items():
        fn_self[fn] += c
        by_file[fn][file] += c
    callers = defaultdict(list)
    callees = defaultdict(list)
    for (a, b), (n, c) in calls.items():
        callees[a].append((b, n, c))
        callers[b].append((a, n, c))
    fn_incl = {}

    def incl(fn, depth=0):
        if fn in fn_incl:
            return fn_incl[fn]
        total = fn_self[fn] + sum(c for (_, _, c) in callees[fn])
        fn_incl[fn] = total
        return total

    out = defaultdict(float)  # (fn, file) -> Ir under the root

    def walk(fn, share, depth):
        if depth > 40 or share <= 0:
            return
        for file, c in by_file[fn].items():
            out[(fn, file)] += c * share
        for (callee, n, c) in callees[fn]:
            total = incl(callee)
            if total > 0:
                walk(callee, share * c / total, depth + 1)

    roots = [fn for fn in fn_self.keys() | callers.keys() if root_pred(fn)]
    for r in roots:
        # A root's whole cost counts (it is only entered through the calls counted).
        walk(r, 1.0, 0)
    return out


def classify(fn, file):
    f = file or ""
    base = f.rsplit("/", 1)[-1]
    if "Hash64" in fn or base in ("xxhash.h", "hash.h", "hash.cc", "hash_inline.h"):
        return "hash"
    if base in ("status.h", "unique_ptr.h", "status.cc"):
        return "status"
    if ("basic_string" in base or base in ("char_traits.h", "new_allocator.h", "alloc_traits.h")
            or "memcpy" in fn or "memmove" in fn or "_M_replace" in fn):
        return "copy"
    if fn.startswith(GET):
        if base == "slot.h":
            return "check"
        if base == "persist.h":
            return "bracket"
        return "get"
    return "doget"


def main():
    run_self, run_calls = parse(sys.argv[1])
    base_self, _ = parse(sys.argv[2])
    gets = sum(n for (a, b), (n, c) in run_calls.items() if b and b.startswith(GET))
    if gets == 0:
        sys.exit("callgrind_path: no Engine::Get calls in " + sys.argv[1])
    parts = defaultdict(float)
    for (fn, file), c in inclusive_tree(run_self, run_calls,
                                        lambda f: f is not None and f.startswith(GET)).items():
        parts[classify(fn, file)] += c

    def worker_self(costs):
        return sum(c for (fn, _), c in costs.items() if fn and WORKER.search(fn))

    loop = worker_self(run_self) - worker_self(base_self)
    order = ["get", "check", "bracket", "hash", "status", "copy", "doget"]
    total = sum(parts[k] for k in order)
    fields = [f"gets={gets}", f"loop={loop / gets:.1f}"]
    fields += [f"{k}={parts[k] / gets:.1f}" for k in order]
    fields.append(f"total={total / gets:.1f}")
    print(" ".join(fields))


if __name__ == "__main__":
    main()
