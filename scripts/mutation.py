#!/usr/bin/env python3
"""`make mutation`: a test of the tests.

Applies each mutation of tests/mutation/mutations.json (drop a flush, drop a fence, swap
two persists, commit before data, free before unlink, mark clean early, ...) to a scratch
copy of the source tree, builds it (release, incrementally), runs the suites the mutation
names, and reports which mutations the suites catch (red) and which stay green. A green
mutation is a blind spot of the suites unless the list documents why it is harmless.

    scripts/mutation.py                  # every mutation; table on stdout and in
                                         # build/mutation/report.md
    scripts/mutation.py --only ID[,ID]   # some
    scripts/mutation.py --jobs 1         # build with one job (default: every core)
    scripts/mutation.py --list           # the list, checked (each edit applies once)

Each build makes only the binaries the mutation's tests name, and the `pmhash` tool
(PMHASH_TOOL, which the CLI and flip-fuzz tests run).

Exit status: 0 when every mutation is caught or documented as harmless, 1 when one stays
green unexplained, a harmless one is caught (its reason is then wrong) or one does not
compile (an error in the list, not a catch), 2 on a bad list or a baseline that fails
before any mutation.

A mutation: {"id", "class", "file", "find", "replace", "what", "tests": [[binary,
gtest_filter], ...] (default: crash_tests, every test), "runs": N (optional: the tests run
up to N times, caught at the first failure; for catches that depend on thread timing),
"harmless": "why" (optional)}.
`find` must occur exactly once in `file`, so a mutation that no longer applies is an
error, never a silent pass.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join(ROOT, "tests", "mutation", "mutations.json")
WORK = os.path.join(ROOT, "build", "mutation")
TREE = os.path.join(WORK, "tree")
BUILD = os.path.join(WORK, "build")
DEFAULT_TESTS = [["crash_tests", "*"]]
TEST_SECONDS = 900


def load(path):
    try:
        with open(path) as f:
            items = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"mutation: cannot read {path}: {e}")
    ids = set()
    for m in items:
        for key in ("id", "class", "file", "find", "replace", "what"):
            if not isinstance(m.get(key), str):
                sys.exit(f"mutation: entry {m.get('id', '?')}: '{key}' missing or not text")
        if m["id"] in ids:
            sys.exit(f"mutation: id {m['id']} appears twice")
        ids.add(m["id"])
        if m["find"] == m["replace"]:
            sys.exit(f"mutation: {m['id']}: find and replace are the same")
        runs = m.get("runs", 1)
        if not isinstance(runs, int) or isinstance(runs, bool) or not 1 <= runs <= 100:
            sys.exit(f"mutation: {m['id']}: 'runs' must be a whole number from 1 to 100, "
                     f"not {runs!r}")
    return items


def check_applies(m, root):
    path = os.path.join(root, m["file"])
    try:
        text = open(path).read()
    except OSError as e:
        return f"{m['file']}: {e}"
    n = text.count(m["find"])
    if n != 1:
        return f"{m['file']}: its 'find' text occurs {n} times (must be once)"
    return ""


def sync_tree():
    """Copies the working tree (tracked and untracked, not ignored) to TREE."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, check=True, capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):
            continue  # deleted in the working tree
        dst = os.path.join(TREE, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        # Copy only what changed, so the incremental build stays incremental; with a new
        # modification time (not copy2's, the source's), or a file changed since an older
        # build but dated before its object file would not be rebuilt.
        if not os.path.exists(dst) or open(src, "rb").read() != open(dst, "rb").read():
            shutil.copy(src, dst)


def build(tests, jobs, log):
    """Builds the binaries `tests` run, and the tool; False if that fails."""
    if not os.path.exists(os.path.join(BUILD, "build.ninja")):
        subprocess.run(["cmake", "-S", TREE, "-B", BUILD, "-G", "Ninja", "-Wno-dev",
                        "-DCMAKE_BUILD_TYPE=Release"], check=True, stdout=log, stderr=log)
    targets = sorted({binary for binary, _ in tests} | {"pmhash"})
    r = subprocess.run(["cmake", "--build", BUILD, "-j", str(jobs), "--target", *targets],
                       stdout=log, stderr=log)
    return r.returncode == 0


def run_tests(tests, log, runs=1):
    """"" when every run passes, else which run failed first. `runs` rounds: a mutation
    whose catch depends on thread timing (the multi-thread crash tests) names more than
    one, so that a lucky interleaving does not pass it."""
    for _ in range(runs):
        failed = run_tests_once(tests, log)
        if failed:
            return failed
    return ""


def run_tests_once(tests, log):
    for binary, gfilter in tests:
        cmd = [os.path.join(BUILD, binary), f"--gtest_filter={gfilter}", "--gtest_brief=1"]
        try:
            r = subprocess.run(cmd, stdout=log, stderr=log, timeout=TEST_SECONDS,
                               env=dict(os.environ, PMHASH_TOOL=os.path.join(BUILD, "pmhash")))
        except subprocess.TimeoutExpired:
            return f"{binary} {gfilter}: timed out after {TEST_SECONDS} s"
        if r.returncode != 0:
            return f"{binary} {gfilter}: exit {r.returncode}"
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated mutation ids")
    ap.add_argument("--list", action="store_true", help="list and check the mutations")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2,
                    help="parallel build jobs (default: every core)")
    args = ap.parse_args()
    if args.jobs < 1:
        sys.exit("mutation: --jobs must be at least 1")
    items = load(LIST)
    if args.only:
        wanted = args.only.split(",")
        unknown = [w for w in wanted if w not in {m["id"] for m in items}]
        if unknown:
            sys.exit(f"mutation: unknown id {', '.join(unknown)}")
        items = [m for m in items if m["id"] in wanted]
    stale = [(m["id"], err) for m in items if (err := check_applies(m, ROOT))]
    if args.list or stale:
        width = max(len(m["id"]) for m in items)
        for m in items:
            err = dict(stale).get(m["id"], "")
            print(f"{m['id']:<{width}}  {m['class']:<20} {m['file']}"
                  f"{'  STALE: ' + err if err else ''}")
        if stale:
            print(f"mutation: {len(stale)} mutation(s) no longer apply", file=sys.stderr)
            return 2
        return 0

    started = time.time()
    os.makedirs(WORK, exist_ok=True)
    sync_tree()
    log_path = os.path.join(WORK, "log.txt")
    with open(log_path, "w") as log:
        print("baseline: building and running the suites unmutated ...", flush=True)
        all_tests = [list(t) for t in
                     sorted({tuple(t) for m in items for t in m.get("tests", DEFAULT_TESTS)})]
        if not build(all_tests, args.jobs, log):
            print(f"mutation: the unmutated tree does not build (see {log_path})", file=sys.stderr)
            return 2
        failed = run_tests(all_tests, log)
        if failed:
            print(f"mutation: the unmutated tree fails: {failed} (see {log_path})",
                  file=sys.stderr)
            return 2
        rows = []
        for i, m in enumerate(items, 1):
            path = os.path.join(TREE, m["file"])
            original = open(path).read()
            t0 = time.time()
            print(f"[{i}/{len(items)}] {m['id']}: {m['what']}", flush=True)
            log.write(f"\n==== {m['id']}\n")
            log.flush()
            tests = m.get("tests", DEFAULT_TESTS)
            try:
                open(path, "w").write(original.replace(m["find"], m["replace"], 1))
                if not build(tests, args.jobs, log):
                    verdict, detail = "error", "does not compile"
                else:
                    failed = run_tests(tests, log, m.get("runs", 1))
                    verdict, detail = ("caught", failed) if failed else ("green", "")
            finally:
                open(path, "w").write(original)
            expected = "green" if m.get("harmless") else "caught"
            ok = verdict == expected
            rows.append((m, verdict, detail, ok, time.time() - t0))
            print(f"    {verdict}{' (' + detail + ')' if detail else ''}"
                  f"{'' if ok else '  <-- UNEXPECTED'}", flush=True)
        build(all_tests, args.jobs, log)  # leave the scratch build unmutated

    lines = ["| mutation | class | file | what | result | s |", "|---|---|---|---|---|---|"]
    for m, verdict, detail, ok, secs in rows:
        result = f"{verdict}: {detail}" if detail else verdict
        if m.get("harmless"):
            result += f" (documented harmless: {m['harmless']})"
        if not ok:
            result = "**" + result + " (unexpected)**"
        lines.append(f"| {m['id']} | {m['class']} | `{m['file']}` | {m['what']} | {result} "
                     f"| {secs:.0f} |")
    caught = sum(1 for r in rows if r[1] == "caught")
    harmless = sum(1 for r in rows if r[1] == "green" and r[3])
    lines.append("")
    lines.append(f"{caught} of {len(rows)} caught, {harmless} green as documented, "
                 f"{sum(1 for r in rows if not r[3])} unexpected. "
                 f"`{' '.join(['scripts/mutation.py'] + sys.argv[1:])}`, "
                 f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, "
                 f"{(time.time() - started) / 60:.0f} minutes.")
    report = "\n".join(lines) + "\n"
    open(os.path.join(WORK, "report.md"), "w").write(report)
    print("\n" + report)
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
