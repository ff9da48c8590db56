"""Run Horovod's own TensorFlow test files on blinkflow, unchanged but for the import names.

    python tests/horovod_compat/run.py --tests HOROVOD_CHECKOUT [--np 2 3] [--files test_tensorflow.py ...]

Without ``--tests`` the files are looked for in horovod's sdist from PyPI (:mod:`sources`).
Each file runs under pytest on every rank (mpirun through ``tests/harness.py``) with Horovod's
names served by blinkflow (:mod:`import_map`), under a timeout per file. Printed per file and world
size: passed / failed / skipped units (a unit passes when every rank passed it), the unit that
was running if the job had to be killed, and each failure classified (:mod:`classify`); last the
share of applicable units that pass. ``--json F`` also writes every unit's result.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import classify  # noqa: E402
import sources  # noqa: E402
from harness import LaunchTimeout, run_ranks  # noqa: E402

FILES = ("test_tensorflow.py", "test_tensorflow2_keras.py", "test_tensorflow_keras.py")
#: A stalled collective ends the test on every rank instead of the whole file's time.
SETTINGS = {"BLINKFLOW_STALL_SHUTDOWN_TIME_SECONDS": "60", "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONWARNINGS": "ignore"}


_WORSE = {"passed": 0, "skipped": 1, "failed": 2}


def read_ranks(results: str, n: int):
    """(tests in the order the ranks started them, {test: {rank: its record}}). A test may leave
    several records on a rank (TensorFlow's graph-and-eager runs report each mode; setup and
    teardown report failures): failed wins over skipped, skipped over passed."""
    order: List[str] = []
    records: Dict[str, Dict[int, dict]] = collections.defaultdict(dict)
    for rank in range(n):
        path = os.path.join(results, f"rank{rank}.jsonl")
        if not os.path.exists(path):
            continue
        with open(path) as lines:
            for line in lines:
                entry = json.loads(line)
                if "started" in entry:
                    if entry["started"] not in order:
                        order.append(entry["started"])
                else:
                    kept = records[entry["test"]].get(rank)
                    if kept is None or _WORSE[entry["outcome"]] > _WORSE[kept["outcome"]]:
                        records[entry["test"]][rank] = entry
    return order, records


def units(results: str, n: int, killed: bool):
    """[(test, status, text)], status passed|failed|skipped|hung|not run."""
    order, records = read_ranks(results, n)
    out = []
    for test in order:
        per_rank = records.get(test, {})
        finished = [per_rank[r] for r in range(n) if r in per_rank]
        if any(e["outcome"] == "failed" for e in finished):
            text = "\n".join(f"rank {r}: {per_rank[r].get('error', '')}\n{per_rank[r].get('traceback', '')}"
                             for r in range(n) if r in per_rank and per_rank[r]["outcome"] == "failed")
            out.append((test, "failed", text))
        elif len(finished) < n:
            out.append((test, "hung" if killed else "failed", f"ranks {sorted(set(range(n)) - set(per_rank))} "
                                                              "did not finish it"))
        elif all(e["outcome"] == "skipped" for e in finished):
            out.append((test, "skipped", finished[0].get("reason", "")))
        else:
            out.append((test, "passed", ""))
    return out


def run_file(tests_dir: str, name: str, n: int, timeout: float, work: str, select=None):
    results = tempfile.mkdtemp(prefix=f"{name}-{n}-", dir=work)
    argv = ["python", os.path.join(HERE, "rank_script.py"), results, os.path.join(tests_dir, "parallel", name),
            "-o", "timeout=600"] + (["-k", select] if select else [])
    killed = False
    try:
        run_ranks(n, argv, env=SETTINGS, timeout=timeout, check=False, cwd=results)
    except LaunchTimeout:
        killed = True
    return units(results, n, killed), killed


def report(name: str, n: int, found, killed: bool, verbose: bool) -> collections.Counter:
    counts = collections.Counter(status for _, status, _ in found)
    labels = collections.Counter()
    lines = []
    for test, status, text in found:
        if status in ("failed", "hung"):
            label, why = classify.classify(test, text, n)
            labels[label] += 1
            first = next((ln for ln in text.splitlines() if ln.strip()), "")
            lines.append(f"    {status} [{label}] {test.split('::', 1)[-1]}: {why or first[:200]}")
            if verbose and label == classify.REAL:
                lines.append("      " + text[-1500:].replace("\n", "\n      "))
    print(f"{name} at {n} ranks: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
          + (f", {counts['hung']} hung (job killed at its timeout)" if killed else ""))
    for line in lines:
        print(line)
    tally = collections.Counter(passed=counts["passed"])
    tally["not_applicable"] = sum(labels[label] for label in classify.NOT_APPLICABLE)
    tally["failed_applicable"] = labels[classify.REAL]
    return tally


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", help="a Horovod 0.28.1 checkout (or its test folder); default: the PyPI sdist")
    parser.add_argument("--np", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--files", nargs="+", default=list(FILES))
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for one file at one world size")
    parser.add_argument("--json", help="write every unit's result here")
    parser.add_argument("-k", dest="select", help="only the tests pytest's -k expression selects")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the real failures' tracebacks")
    parser.add_argument("--from-json", nargs="+", help="report the units of earlier --json files instead of running")
    args = parser.parse_args(argv)
    if args.from_json:
        return summarize([u for path in args.from_json for u in json.load(open(path))], args.verbose)
    work = tempfile.mkdtemp(prefix="horovod-compat-")
    try:
        tests_dir = sources.test_dir(args.tests) if args.tests else sources.from_sdist(work)
    except sources.Unavailable as error:
        print(f"run.py: {error}", file=sys.stderr)
        return 2
    everything = []
    for name in args.files:
        for n in args.np:
            found, killed = run_file(tests_dir, name, n, args.timeout, work, args.select)
            everything += [{"file": name, "np": n, "test": t, "status": s, "text": _shortened(x), "killed": killed}
                           for t, s, x in found]
    if args.json:
        with open(args.json, "w") as out:
            json.dump(everything, out, indent=1)
    return summarize(everything, args.verbose)


def _shortened(text: str) -> str:
    """A failure's first lines (the errors) and its last (where they were raised)."""
    return text if len(text) <= 4000 else text[:1000] + "\n...\n" + text[-3000:]


def summarize(everything, verbose: bool) -> int:
    """Print each file's report and the total; 0 unless a unit hung."""
    total = collections.Counter()
    runs = collections.OrderedDict()
    for unit in everything:
        runs.setdefault((unit["file"], unit["np"]), []).append(unit)
    for (name, n), found in runs.items():
        killed = any(u.get("killed") for u in found)
        total += report(name, n, [(u["test"], u["status"], u["text"]) for u in found], killed, verbose)
        total["hung"] += sum(1 for u in found if u["status"] == "hung")
    applicable = total["passed"] + total["failed_applicable"]
    share = 100.0 * total["passed"] / applicable if applicable else 0.0
    print(f"applicable units passing: {total['passed']} of {applicable} ({share:.1f} %); "
          f"{total['not_applicable']} failures not applicable (Keras 2, Horovod internal, GPU-only, "
          "a reference Horovod fails); "
          f"{total['hung']} hung")
    return 0 if total["hung"] == 0 else 1

if __name__ == "__main__":
    sys.exit(main())
