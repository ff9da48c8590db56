"""One rank of a compatibility run: ``python rank_script.py RESULTS_DIR TEST_FILE [pytest args]``.

Serves Horovod's import names from blinkflow (:mod:`import_map`), runs the file under pytest and
appends one JSON line per finished test to ``RESULTS_DIR/rank<R>.jsonl`` as it goes, so that a
job killed by the runner's timeout still tells which tests ended and which one was running
(``{"started": nodeid}`` precedes each test's record).
"""
from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import import_map  # noqa: E402


def _rank() -> int:
    for key in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    return 0


class Recorder:
    """A pytest plugin that writes each test's outcome and, for a failure, its exception."""

    def __init__(self, path: str):
        self.out = open(path, "a", buffering=1)

    def _write(self, entry) -> None:
        self.out.write(json.dumps(entry) + "\n")

    def pytest_runtest_logstart(self, nodeid, location):
        self._write({"started": nodeid})

    def pytest_runtest_logreport(self, report):
        failed_setup = report.when == "setup" and report.outcome != "passed"
        if report.when != "call" and not failed_setup and not (report.when == "teardown" and report.failed):
            return
        entry = {"test": report.nodeid, "when": report.when, "outcome": report.outcome}
        if report.skipped and isinstance(report.longrepr, tuple):
            entry["reason"] = str(report.longrepr[2])
        elif report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            entry["error"] = crash.message if crash is not None else str(report.longrepr)[-2000:]
            entry["traceback"] = str(report.longrepr)[-6000:]
        self._write(entry)


def main(argv) -> int:
    results, test_file, extra = argv[0], argv[1], argv[2:]
    import_map.install()
    sys.path.insert(0, os.path.dirname(os.path.abspath(test_file)))
    import pytest

    recorder = Recorder(os.path.join(results, f"rank{_rank()}.jsonl"))
    return pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-o", "addopts=", "--rootdir",
                        os.path.dirname(os.path.abspath(test_file)), test_file] + extra, plugins=[recorder])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
