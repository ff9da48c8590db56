"""``python -m blinkflow.bench cross-host`` on three hosts (a bridge), one rank each, under a
200 Mbit/s limit: the limit it checked is the one the links carried, neither side's all-reduce
beats the link bound (a time below it would mean the limit did not hold for the ranks' traffic,
or the bound printed beside the figures is wrong), and the cluster it built is gone afterwards."""
import json
import os
import subprocess
import sys

import pytest

from blinkflow.bench.cluster import namespace_pid

LIMIT = 200e6


def _namespaces():
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listing.splitlines() if line.strip()}


@pytest.mark.mpi
def test_the_cross_host_bench_on_three_hosts_under_a_limit(cluster):   # the fixture: skip where no cluster can be
    before = _namespaces()
    proc = subprocess.run([sys.executable, "-m", "blinkflow.bench", "cross-host", "--hosts", "3", "--per-host", "1",
                           "--rates", "200mbit", "--sizes", "1MiB", "--rounds", "1", "--reps", "2", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    (setting,) = report["settings"]
    assert (setting["hosts"], setting["ranks_per_host"], setting["limit_bits_per_s"]) == (3, 1, LIMIT)
    assert sorted(setting["measured_bits_per_s"]) == ["bfa->bfb", "bfb->bfa"]
    for rate in setting["measured_bits_per_s"].values():
        assert LIMIT / 2 <= rate <= LIMIT * 1.15, setting
    row = setting["cases"]["1MiB"]
    assert row["bound_s"] == pytest.approx(2 * 2 / 3 * 2 ** 20 * 8 / LIMIT)
    for side in ("blinkflow", "MPI"):
        assert row[side]["median_s"] >= 0.95 * row["bound_s"], row
        assert row[side]["of_bound"] == pytest.approx(row["bound_s"] / row[side]["median_s"])
    assert row["mpi_over_blinkflow"] == pytest.approx(row["MPI"]["median_s"] / row["blinkflow"]["median_s"])
    # Left behind: namespaces that came with the run and carry a process id that is gone (the
    # bench's; another session's carry a live one).
    left = [ns for ns in _namespaces() - before
            if namespace_pid(ns) is not None and not os.path.exists(f"/proc/{namespace_pid(ns)}")]
    assert left == [], left
